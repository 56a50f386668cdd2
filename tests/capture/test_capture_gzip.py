"""gzip-compressed captures (``.pcap.gz``, ``.pcapng.gz``) read like the plain ones."""

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


def test_gzip_is_decompressed_in_flat_memory():
    # 64 MiB decompressed from 64 KiB: mapped from a temporary file, never held in Python memory
    import tracemalloc

    from nbmq.capture.files.source import OpenedCapture

    size = 64 << 20
    packed = gzip.compress(bytes(size), compresslevel=9)
    tracemalloc.start()
    try:
        with OpenedCapture(packed) as opened:
            assert opened.size == size
            assert bytes(opened.buf[size - 4 :]) == bytes(4)
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


def test_gzip_bomb_is_refused_past_the_cap(captures_dir, monkeypatch):
    plain = (captures_dir / "safe_dealer.pcap").read_bytes()
    packed = gzip.compress(plain)
    monkeypatch.setenv("NBMQ_MAX_GUNZIP_BYTES", str(len(plain) - 1))
    with pytest.raises(CaptureError, match="NBMQ_MAX_GUNZIP_BYTES"):
        read_datagrams(packed)
    monkeypatch.setenv("NBMQ_MAX_GUNZIP_BYTES", str(len(plain)))  # exactly fits
    assert len(read_datagrams(packed)) == len(read_datagrams(plain))
