"""gzip-compressed captures (``.pcap.gz``, ``.pcapng.gz``) read like the plain ones (issue 11)."""

from __future__ import annotations

import gzip

import pytest

from nbmq.capture import CaptureError, probe_capture, read_datagrams


@pytest.mark.parametrize("name", ["dealer.pcapng", "safe_dealer.pcap"])
def test_gzip_capture_reads_like_the_plain_one(captures_dir, tmp_path, name):
    plain = (captures_dir / name).read_bytes()
    path = tmp_path / f"{name}.gz"
    path.write_bytes(gzip.compress(plain, compresslevel=1))
    want = read_datagrams(plain)
    for source in (path, str(path), path.read_bytes()):  # by magic bytes, not by name
        assert read_datagrams(source).same_rows(want)
    assert probe_capture(path).size == len(plain)
    half = read_datagrams(path, start=len(plain) // 2)  # byte ranges are of the plain capture
    assert half.same_rows(read_datagrams(plain, start=len(plain) // 2))


def test_cut_gzip_keeps_what_came_before(captures_dir):
    packed = gzip.compress((captures_dir / "safe_dealer.pcap").read_bytes())
    batch = read_datagrams(packed[: len(packed) // 2])
    assert 0 < len(batch) < 3707
    assert batch.errors == 1 and "truncated record" in batch.error_reasons[0]


def test_gzip_of_nothing_is_an_error():
    with pytest.raises(CaptureError, match="gzip"):
        read_datagrams(b"\x1f\x8b" + bytes(30))
