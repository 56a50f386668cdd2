"""The compiled record walker agrees with the Python walk; batches view the capture's bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.capture import DatagramBatch, read_datagrams, write_pcap
from nbmq.capture.files import records
from nbmq.capture.files.errorlog import ErrorLog
from nbmq.capture.files.formats import parse_pcap_header
from nbmq.capture.files.records import RecordScanner

BUNDLED_PCAPS = ("dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap")

native = pytest.mark.skipif(not records.COMPILED, reason="nbmq.capture.files._records not built or disabled")

T0 = 1_795_312_315.0


def _rows(n: int, seed: int = 5) -> list[tuple]:
    rng = np.random.default_rng(seed)
    return [
        (
            T0 + i * 0.001,
            "::1" if i % 4 == 0 else "10.0.0.1",
            40000 + i % 7,
            "::2" if i % 4 == 0 else "10.0.0.2",
            47101,
            rng.bytes(int(rng.integers(0, 600))),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("w") / "s.pcap"
    write_pcap(path, _rows(300))
    return path.read_bytes()


def _walks(data: bytes, start: int = 24, stop: int | None = None) -> None:
    """Both walkers give the same offsets and the same logged errors."""
    header = parse_pcap_header(data, len(data))
    stop = len(data) if stop is None else stop
    results = []
    for use_native in (False, True):
        scanner = RecordScanner(data, len(data), header)
        log = ErrorLog()
        begin = scanner.first_boundary(start, stop)
        offs = scanner.walk(begin, stop, log, native=use_native) if begin is not None else np.empty(0, np.int64)
        results.append((offs, log.count, log.reasons))
    (po, pc, pr), (no, nc, nr) = results
    np.testing.assert_array_equal(po, no)
    assert po.dtype == no.dtype == np.int64
    assert (pc, pr) == (nc, nr)


@native
@pytest.mark.parametrize("name", BUNDLED_PCAPS)
def test_walkers_agree_bundled(captures_dir, name):
    data = (captures_dir / name).read_bytes()
    _walks(data)
    for start in range(0, len(data), max(1, len(data) // 7)):  # split starts resynchronise
        _walks(data, start, min(len(data), start + len(data) // 5))


@native
def test_walkers_agree_truncated_and_garbage(synthetic):
    data = synthetic
    for cut in list(range(24, len(data), 1009)) + [24, 25, 39, 40, 41, len(data) - 1]:
        _walks(data[:cut])
    rng = np.random.default_rng(1)
    for k in range(20):
        at = int(rng.integers(24, len(data)))
        broken = bytearray(data)
        if k % 2:
            broken[at : at + 64] = bytes(64)  # zeroed region
        else:
            broken[at:at] = rng.bytes(int(rng.integers(1, 3000)))  # inserted garbage
        _walks(bytes(broken))


@native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(24, 10**9), st.integers(0, 255)), min_size=1, max_size=8))
def test_walkers_agree_random_flips(synthetic, flips):
    data = bytearray(synthetic)
    for pos, value in flips:
        data[pos % len(data)] = value
    _walks(bytes(data))


@native
def test_walkers_agree_big_endian_and_nanosecond(tmp_path):
    rows = _rows(50)
    for kw in ({"nanosecond": True}, {"byte_order": ">"}):
        path = tmp_path / "x.pcap"
        write_pcap(path, rows, **kw)
        data = path.read_bytes()
        _walks(data)
        _walks(data[:-7])


def test_native_requested_without_extension(monkeypatch, synthetic):
    monkeypatch.setattr(records, "_walk_chain", None)
    scanner = RecordScanner(synthetic, len(synthetic), parse_pcap_header(synthetic, len(synthetic)))
    assert scanner.walk(24, len(synthetic), ErrorLog()).shape[0] == 300
    with pytest.raises(RuntimeError):
        scanner.walk(24, len(synthetic), ErrorLog(), native=True)


def test_payload_views_immutable_sources(tmp_path, synthetic):
    path = tmp_path / "v.pcap"
    path.write_bytes(synthetic)
    ref = read_datagrams(synthetic, engine="dpkt")
    assert ref.is_compact()
    for source in (path, synthetic, memoryview(synthetic)):
        batch = read_datagrams(source)
        assert batch.payload.shape[0] == len(synthetic)  # the capture itself, not a copy
        assert not batch.payload.flags.writeable
        assert batch.same_rows(ref)
        np.testing.assert_array_equal(batch.compact().payload, ref.payload)
        assert batch.payload_at(3) == ref.payload_at(3)


def test_payload_copied_from_mutable_sources(synthetic):
    ref = read_datagrams(synthetic, engine="dpkt")
    data = bytearray(synthetic)
    batch = read_datagrams(data)
    assert batch.is_compact() and batch.same_rows(ref)
    data[:] = bytes(len(data))  # the batch does not alias the caller's buffer
    data.extend(b"x")  # and holds no export of it
    assert batch.same_rows(ref)


def test_concat_compacts(synthetic):
    half = len(synthetic) // 2
    a = read_datagrams(synthetic, end=half)
    b = read_datagrams(synthetic, start=half)
    joined = DatagramBatch.concat([a, b])
    assert joined.is_compact() and joined.same_rows(read_datagrams(synthetic, engine="dpkt"))
