"""The TCP pre-scan walks a classic pcap in windows and drops the pages behind.

``has_tcp_traffic`` runs on the driver of ``nbmq pipeline`` over every capture; walked whole,
a 2.1 GB capture stayed resident (2.2 GB driver RSS). The windows must give exactly the
whole-file walk's records and damage, and resident file pages must stay bounded.
"""

from __future__ import annotations

import os
import struct

import dpkt
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_capture_ranges_damaged import _DAMAGE, _damage, head_of_dealer  # noqa: F401 (fixture)

from nbmq.capture import plan_splits, range_starts, write_pcap_packets
from nbmq.capture.files import splits
from nbmq.capture.files.errorlog import ErrorLog
from nbmq.capture.files.formats import parse_pcap_header
from nbmq.capture.files.records import RecordScanner
from nbmq.capture.files.source import OpenedCapture
from nbmq.capture.tcp import segments
from nbmq.capture.tcp.segments import has_tcp_traffic, iter_tcp_segments


def _whole_walk(data: bytes) -> tuple[np.ndarray, ErrorLog]:
    log = ErrorLog()
    scanner = RecordScanner(data, len(data), parse_pcap_header(data, len(data)))
    return scanner.walk(24, len(data), log) + scanner.hl, log


def _windowed(data: bytes, window: int, monkeypatch) -> tuple[np.ndarray, np.ndarray, ErrorLog]:
    monkeypatch.setattr(splits, "WALK_WINDOW", window)
    log = ErrorLog()
    with OpenedCapture(data) as cap:
        chunks = list(segments._records(cap, log))
    frames = np.concatenate([c[0] for c in chunks]) if chunks else np.empty(0, np.int64)
    starts = np.concatenate([c[1] for c in chunks]) if chunks else np.empty(0, np.int64)
    return frames, starts, log


@pytest.fixture(scope="module")
def dealer_bytes(head_of_dealer) -> bytes:  # noqa: F811 (the imported fixture, requested)
    return head_of_dealer  # ~40 KB cut at a record boundary


@pytest.mark.parametrize("window", [64, 4096, 1 << 20])
def test_windows_give_the_whole_walk(dealer_bytes, window, monkeypatch):
    starts, log = _whole_walk(dealer_bytes)
    frames, got, got_log = _windowed(dealer_bytes, window, monkeypatch)
    assert np.array_equal(got, starts)
    assert np.array_equal(frames, np.arange(1, starts.size + 1))
    assert got_log.count == log.count == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_DAMAGE, min_size=1, max_size=3), window=st.integers(64, 20_000))
def test_windows_give_the_whole_walk_under_damage(dealer_bytes, ops, window, monkeypatch):
    damaged = _damage(dealer_bytes, ops)
    starts, log = _whole_walk(damaged)
    frames, got, got_log = _windowed(damaged, window, monkeypatch)
    assert np.array_equal(got, starts)
    assert np.array_equal(frames, np.arange(1, starts.size + 1))
    assert got_log.count == log.count


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_DAMAGE, max_size=3), window=st.integers(64, 20_000), target=st.integers(64, 20_000))
def test_range_starts_same_through_windows(dealer_bytes, ops, window, target, monkeypatch):
    damaged = _damage(dealer_bytes, ops)
    ranges = plan_splits(damaged, target)
    whole = range_starts(damaged, ranges)  # one window: the file is smaller than the default
    monkeypatch.setattr(splits, "WALK_WINDOW", window)
    assert range_starts(damaged, ranges) == whole
    starts, _log = _whole_walk(damaged)  # the rule itself: the record before, the frame number
    for (start, _end), (record, frame) in zip(ranges, whole):
        j = int(np.searchsorted(starts - 16, start))
        assert (record, frame) == ((int(starts[j - 1]) - 16 if j else 24), j + 1)


def _udp_frame(size: int) -> bytes:
    udp = dpkt.udp.UDP(sport=5555, dport=5556, data=bytes(size))
    udp.ulen = 8 + size
    ip = dpkt.ip.IP(src=b"\x0a\x00\x00\x01", dst=b"\x0a\x00\x00\x02", p=17, ttl=64, data=udp)
    ip.len = 20 + len(bytes(udp))
    return bytes(12) + struct.pack(">H", 0x0800) + bytes(ip)


def _tcp_frame(dport: int) -> bytes:
    tcp = dpkt.tcp.TCP(sport=40000, dport=dport, seq=1, flags=0x18, win=65535, data=b"x")
    ip = dpkt.ip.IP(src=b"\x0a\x00\x00\x01", dst=b"\x0a\x00\x00\x02", p=6, ttl=64, data=tcp)
    ip.len = 20 + len(bytes(tcp))
    return bytes(12) + struct.pack(">H", 0x0800) + bytes(ip)


def _big_capture(path, records: int, last: bytes | None = None) -> str:
    """``records`` UDP records of ~1.5 KB each (written as one block: fast), then ``last``."""
    frame = _udp_frame(1400)
    head = struct.pack("<IIII", 1_700_000_000, 0, len(frame), len(frame))
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        f.write((head + frame) * records)
        if last is not None:
            f.write(struct.pack("<IIII", 1_700_000_001, 0, len(last), len(last)) + last)
    return str(path)


def test_has_tcp_traffic_unchanged_through_windows(tmp_path, monkeypatch):
    monkeypatch.setattr(splits, "WALK_WINDOW", 64 * 1024)
    udp_only = _big_capture(tmp_path / "udp.pcap", 2000)
    late_tcp = _big_capture(tmp_path / "tcp.pcap", 2000, last=_tcp_frame(6567))
    assert not has_tcp_traffic(udp_only, [6567])
    assert has_tcp_traffic(late_tcp, [6567])
    assert not has_tcp_traffic(late_tcp, [7000])
    (seg,) = iter_tcp_segments(late_tcp, [6567])
    assert seg.frame == 2001 and seg.dport == 6567
    pcap = tmp_path / "small.pcap"  # through the file writer as well
    write_pcap_packets(pcap, [(1.0, _udp_frame(10)), (2.0, _tcp_frame(6567))])
    assert has_tcp_traffic(str(pcap), [6567])


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssFile")


@pytest.mark.skipif(
    not os.path.exists("/proc/self/status") or not hasattr(__import__("mmap"), "MADV_DONTNEED"),
    reason="Linux /proc and madvise needed",
)
def test_walk_keeps_resident_pages_bounded(tmp_path, monkeypatch):
    window = 2 << 20
    monkeypatch.setattr(splits, "WALK_WINDOW", window)
    path = _big_capture(tmp_path / "big.pcap", 40_000)  # ~58 MB, pages in the page cache
    assert os.path.getsize(path) > 50 << 20
    base = _rss_file()
    peak = [0]
    candidates = segments._candidates

    def sampled(*args, **kw):
        peak[0] = max(peak[0], _rss_file() - base)
        return candidates(*args, **kw)

    monkeypatch.setattr(segments, "_candidates", sampled)
    assert not has_tcp_traffic(path, [6567])
    assert 0 < peak[0] < 8 * window  # the whole walk kept ~58 MB mapped
