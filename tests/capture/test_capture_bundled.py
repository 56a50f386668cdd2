"""The bundled reference captures: counts from the manifest, both engines, pcap == pcapng."""

from __future__ import annotations

from collections import Counter

import dpkt
import numpy as np
import pytest

from nbmq.capture import DatagramBatch, probe_capture, read_datagrams

PCAPS = ("dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap")


@pytest.fixture(scope="module")
def batches(captures_dir) -> dict[tuple[str, str], DatagramBatch]:
    out = {}
    for name in PCAPS + ("dealer.pcapng",):
        for engine in ("fast", "dpkt"):
            out[name, engine] = read_datagrams(captures_dir / name, engine=engine)
    return out


def _entry(manifest: dict, name: str) -> dict:
    return next(c for c in manifest["captures"] if c["file"] == name)


@pytest.mark.parametrize("name", PCAPS)
@pytest.mark.parametrize("engine", ["fast", "dpkt"])
def test_counts_by_direction_match_manifest(batches, manifest, name, engine):
    entry = _entry(manifest, name)
    batch = batches[name, engine]
    assert batch.engine == engine
    assert (batch.errors, batch.skipped) == (0, 0)
    assert len(batch) == batch.packets == entry["datagrams"]["total"]
    port_name = {int(p["addr"].rsplit(":", 1)[1]): p["name"] for p in entry["peers"]}
    server = next(p for p in entry["peers"] if p["mode"] == "bind")
    server_port = int(server["addr"].rsplit(":", 1)[1])
    assert np.all((batch.src_port == server_port) | (batch.dst_port == server_port))
    got = Counter(f"{port_name[int(s)]}->{port_name[int(d)]}" for s, d in zip(batch.src_port, batch.dst_port))
    want = {k: v["total"] for k, v in entry["datagrams"]["by_direction"].items()}
    assert dict(got) == want


@pytest.mark.parametrize("name", PCAPS)
def test_columns(batches, manifest, name):
    entry = _entry(manifest, name)
    batch = batches[name, "fast"]
    n = len(batch)
    assert batch.timestamp.dtype == np.float64 and batch.timestamp_ns.dtype == np.int64
    assert batch.src_port.dtype == batch.dst_port.dtype == np.uint16
    assert batch.payload.dtype == np.uint8 and batch.payload.ndim == 1
    assert batch.offsets.dtype == np.int64 and batch.lengths.dtype == np.int32
    assert batch.frame_number.dtype == np.int64
    np.testing.assert_array_equal(batch.frame_number, np.arange(1, n + 1))
    # the fast engine views the file: payloads increasing and disjoint inside it, no copy
    assert np.all(batch.offsets[1:] >= batch.offsets[:-1] + batch.lengths[:-1])
    assert batch.payload.shape[0] >= int(batch.offsets[-1] + batch.lengths[-1])
    assert not batch.payload.flags.writeable
    compact = batch.compact()
    assert compact.is_compact() and compact.same_rows(batch)
    np.testing.assert_array_equal(compact.offsets[1:], np.cumsum(batch.lengths)[:-1])
    assert compact.payload.shape[0] == int(batch.lengths.sum())
    assert set(batch.src_addr) == set(batch.dst_addr) == {"127.0.0.1"}
    assert not batch.truncated.any()
    assert batch.timestamp[0] == pytest.approx(entry["capture"]["first_packet_unix"], abs=1e-6)
    assert batch.timestamp[-1] == pytest.approx(entry["capture"]["last_packet_unix"], abs=1e-6)
    assert np.all(batch.timestamp_ns % 1000 == 0)  # microsecond capture
    # every nbmq frame starts with version 1 and a kind in 0..5
    first = batch.payload[batch.offsets]
    assert np.all(first == 1) and np.all(batch.payload[batch.offsets + 1] <= 5)


@pytest.mark.parametrize("name", PCAPS + ("dealer.pcapng",))
def test_fast_equals_dpkt(batches, name):
    fast, ref = batches[name, "fast"], batches[name, "dpkt"]
    assert fast.same_rows(ref)
    assert fast.fallback_rows == 0
    assert ref.is_compact()
    np.testing.assert_array_equal(fast.compact().payload, ref.payload)


def test_pcap_and_pcapng_identical(batches):
    for engine in ("fast", "dpkt"):
        a, b = batches["dealer.pcap", engine], batches["dealer.pcapng", engine]
        assert a.same_rows(b)
        np.testing.assert_array_equal(a.compact().payload, b.compact().payload)
        np.testing.assert_array_equal(a.timestamp, b.timestamp)


@pytest.mark.parametrize("name", ["dealer.pcap", "dealer.pcapng"])
def test_matches_dpkt_own_readers(batches, captures_dir, name):
    # independent of our framing: dpkt's own Reader classes over the same file
    with open(captures_dir / name, "rb") as f:
        reader = dpkt.pcap.Reader(f) if name.endswith(".pcap") else dpkt.pcapng.Reader(f)
        packets = list(reader)
    batch = batches[name, "fast"]
    assert len(packets) == len(batch)
    ts = np.array([float(t) for t, _ in packets])
    np.testing.assert_allclose(ts, batch.timestamp, rtol=0, atol=1e-6)
    for i in (0, 1, len(packets) // 2, len(packets) - 1):
        udp = dpkt.ethernet.Ethernet(packets[i][1]).data.data
        assert bytes(udp.data) == batch.payload_at(i)


def test_udp_ports_filter(captures_dir, manifest):
    entry = _entry(manifest, "dealer.pcap")
    client0 = int(next(p for p in entry["peers"] if p["name"] == "client0")["addr"].rsplit(":", 1)[1])
    batch = read_datagrams(captures_dir / "dealer.pcap", udp_ports=[client0])
    by = entry["datagrams"]["by_direction"]
    assert len(batch) == by["client0->server"]["total"] + by["server->client0"]["total"]
    assert batch.skipped == entry["datagrams"]["total"] - len(batch)


def test_probe(captures_dir):
    info = probe_capture(captures_dir / "dealer.pcap")
    assert (info.format, info.linktype, info.snaplen, info.nanosecond, info.splittable) == (
        "pcap",
        1,
        262144,
        False,
        True,
    )
    info = probe_capture(captures_dir / "dealer.pcapng")
    assert (info.format, info.linktype, info.splittable) == ("pcapng", 1, False)


def test_bytes_source_equals_path(captures_dir):
    path = captures_dir / "safe_dealer.pcap"
    assert read_datagrams(path.read_bytes()).same_rows(read_datagrams(path))
    assert read_datagrams(memoryview(path.read_bytes())).same_rows(read_datagrams(str(path)))
