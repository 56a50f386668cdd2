"""Byte-range splits: their union is the whole file, each record once; resync finds boundaries."""

from __future__ import annotations

import numpy as np
import pytest

from nbmq.capture import DatagramBatch, first_frames, plan_splits, read_datagrams, write_pcap
from nbmq.capture.files.errorlog import ErrorLog
from nbmq.capture.files.formats import parse_pcap_header
from nbmq.capture.files.records import RecordScanner


def _union(path, splits, engine="fast", with_bases=False) -> DatagramBatch:
    bases = first_frames(path, splits) if with_bases else [None] * len(splits)
    parts = [read_datagrams(path, start=s, end=e, engine=engine, first_frame=b) for (s, e), b in zip(splits, bases)]
    return DatagramBatch.concat(parts)


def _check_splits(splits, size):
    assert splits[0][0] == 0 and splits[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(splits, splits[1:]))


@pytest.mark.parametrize("target", [50_000, 262_144, 1_000_000, 10_000_000])
def test_union_of_splits_is_the_file(captures_dir, target):
    path = captures_dir / "dealer.pcap"
    whole = read_datagrams(path)
    splits = plan_splits(path, target)
    _check_splits(splits, path.stat().st_size)
    assert len(splits) == -(-path.stat().st_size // target)
    for with_bases in (False, True):
        union = _union(path, splits, with_bases=with_bases)
        np.testing.assert_array_equal(union.frame_number, whole.frame_number)  # no loss, no duplicate
        assert union.same_rows(whole)
        assert union.errors == 0 and union.packets == whole.packets


def test_splits_synthetic_nanosecond_big_endian_ipv6(tmp_path):
    rng = np.random.default_rng(5)
    rows = []
    for i in range(3000):
        v6 = i % 3 == 0
        n = int(rng.integers(0, 700))
        rows.append(
            (
                1.7e9 + i * 1e-4,
                "2001:db8::1" if v6 else "192.0.2.1",
                1000 + i % 9,
                "2001:db8::2" if v6 else "192.0.2.2",
                2000,
                rng.bytes(n),
            )
        )
    path = tmp_path / "s.pcap"
    write_pcap(path, rows, linktype=276, nanosecond=True, byte_order=">")
    whole = read_datagrams(path)
    assert len(whole) == 3000
    for target in (7_777, 100_003):
        splits = plan_splits(path, target)
        union = _union(path, splits)
        np.testing.assert_array_equal(union.frame_number, whole.frame_number)
        assert union.same_rows(whole)
    splits = plan_splits(path, 150_001)
    assert _union(path, splits, engine="dpkt", with_bases=True).same_rows(whole)


def test_resync_finds_the_next_boundary(captures_dir):
    data = (captures_dir / "radio_dish.pcap").read_bytes()
    header = parse_pcap_header(data, len(data))
    scanner = RecordScanner(data, len(data), header)
    offsets = scanner.walk(24, len(data), ErrorLog())
    rng = np.random.default_rng(1)
    for start in rng.integers(25, len(data), 400).tolist() + (offsets[:50] + 1).tolist():
        j = int(np.searchsorted(offsets, start))
        want = int(offsets[j]) if j < offsets.size else None
        assert scanner.first_boundary(start, len(data)) == want


def test_ranges_own_records_by_header_start(captures_dir):
    path = captures_dir / "safe_dealer.pcap"
    whole = read_datagrams(path)
    data = path.read_bytes()
    scanner = RecordScanner(data, len(data), parse_pcap_header(data, len(data)))
    offsets = scanner.walk(24, len(data), ErrorLog())
    a, b = int(offsets[100]), int(offsets[200])
    part = read_datagrams(path, start=a, end=b)
    np.testing.assert_array_equal(part.frame_number, np.arange(101, 201))
    part = read_datagrams(path, start=a + 1, end=b + 1)  # mid-record start and end
    np.testing.assert_array_equal(part.frame_number, np.arange(102, 202))
    assert read_datagrams(path, start=a + 1, end=a + 2).packets == 0
    assert len(read_datagrams(path, start=len(data))) == 0
    assert whole.frame_number[100] == 101


def test_pcapng_is_one_split_but_ranges_work(captures_dir):
    path = captures_dir / "dealer.pcapng"
    assert plan_splits(path, 1000) == [(0, path.stat().st_size)]
    whole = read_datagrams(path)
    cut = path.stat().st_size // 3
    halves = [(0, cut), (cut, path.stat().st_size)]
    for with_bases in (False, True):
        assert _union(path, halves, with_bases=with_bases).same_rows(whole)


def test_plan_splits_arguments(captures_dir):
    path = captures_dir / "dealer.pcap"
    assert plan_splits(path, 10**9) == [(0, path.stat().st_size)]
    with pytest.raises(ValueError):
        plan_splits(path, 0)
