"""The frames source decodes a classic pcap range in windows: exactly the rows of a
whole-range read, in the same order, damage rows included, whatever the window and the ranges.

No Spark session: ``read_partition`` is what each task runs.
"""

from __future__ import annotations

import dataclasses
import os
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.capture import plan_splits, range_starts
from nbmq.examples import CAPTURE_DIR as CAPTURES
from nbmq.spark.datasource import CapturePartition, read_partition
from nbmq.spark.schema import frames_schema

pytest.importorskip("pyspark")

_DAMAGE = st.tuples(st.integers(24, 10**9), st.binary(min_size=1, max_size=40))


def _partitions(path: str, target: int | None) -> list[CapturePartition]:
    if target is None:
        return [CapturePartition(path)]
    ranges = plan_splits(path, target)
    return [CapturePartition(path, s, e, f, w) for (s, e), (w, f) in zip(ranges, range_starts(path, ranges))]


def _table(path: str, target: int | None, window: int) -> pa.Table:
    schema = frames_schema(payload=True)
    batches = [b for p in _partitions(path, target) for b in read_partition(p, schema, 4096, None, window)]
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize("name", ["dealer.pcap", "safe_dealer.pcap"])
@pytest.mark.parametrize("window", [3000, 65536])
@pytest.mark.parametrize("target", [None, 300_000])
def test_windows_read_the_same_rows(name, window, target):
    path = str(CAPTURES / name)
    whole = _table(path, None, 0)
    got = _table(path, target, window)
    assert got.num_rows == whole.num_rows > 0
    assert got.equals(whole)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_DAMAGE, min_size=1, max_size=4), window=st.integers(500, 50_000))
def test_windows_read_the_same_rows_under_damage(tmp_path_factory, ops, window):
    data = bytearray((CAPTURES / "dealer.pcap").read_bytes()[:200_000])
    for pos, blob in ops:
        at = 24 + pos % (len(data) - 24)
        data[at : at + len(blob)] = blob
    path = tmp_path_factory.mktemp("w") / "damaged.pcap"
    path.write_bytes(bytes(data))
    whole = _table(str(path), None, 0)
    got = _table(str(path), None, window)
    assert got.equals(whole)
    errors = whole.column("frame_number").null_count
    assert got.column("frame_number").null_count == errors  # the damage rows, last as before


def test_damage_rows_stay_last_and_whole(tmp_path):
    from nbmq.capture.files.errorlog import ErrorLog
    from nbmq.capture.files.formats import parse_pcap_header
    from nbmq.capture.files.records import RecordScanner

    data = bytearray((CAPTURES / "dealer.pcap").read_bytes()[:200_000])
    offs = RecordScanner(bytes(data), len(data), parse_pcap_header(data, len(data))).walk(24, len(data), ErrorLog())
    for k in (len(offs) // 4, len(offs) // 2):  # two headers zeroed: implausible, resynchronised
        data[int(offs[k]) : int(offs[k]) + 16] = bytes(16)
    path = tmp_path / "damaged.pcap"
    path.write_bytes(bytes(data))
    whole = _table(str(path), None, 0)
    got = _table(str(path), None, 5000)
    assert whole.column("frame_number").null_count >= 2
    assert got.equals(whole)


def test_window_option_is_read(tmp_path):
    from nbmq.spark.datasource import NbmqReader

    reader = NbmqReader({"path": str(CAPTURES / "dealer.pcap"), "window_bytes": "1234"}, frames_schema(payload=False))
    assert reader.window_bytes == 1234
    assert dataclasses.asdict(reader.partitions()[0])["path"].endswith("dealer.pcap")


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(key)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux /proc needed")
@pytest.mark.parametrize("window", [0, 2 << 20])
def test_windowed_read_keeps_memory_bounded(tmp_path, window):
    from nbmq.capture import write_pcap_packets

    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 28 + 1400, 0, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    frame = bytes(12) + b"\x08\x00" + ip + struct.pack(">HHHH", 5555, 5556, 8 + 1400, 0) + bytes(1400)
    path = str(tmp_path / "big.pcap")
    write_pcap_packets(path, ((1.0 + i * 1e-6, frame) for i in range(40_000)))  # ~58 MB of UDP datagrams
    schema = frames_schema(payload=True)
    base = _status("VmRSS")
    peak = rows = 0
    for batch in read_partition(CapturePartition(path), schema, 4096, None, window):
        rows += batch.num_rows
        peak = max(peak, _status("VmRSS") - base)
        del batch
    assert rows == 40_000
    if window:
        assert peak < 24 << 20  # about a window's payload, Arrow copy and mapped pages
    else:
        # The whole range at once (53 MiB of payload), what the windows avoid; the margin leaves room for
        # pages the kernel reclaims from the mapped capture under memory pressure.
        assert peak > 40 << 20
