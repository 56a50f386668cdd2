"""Writer -> reader round trips for every link type, and fast path == dpkt on hand-built frames."""

from __future__ import annotations

import struct

import dpkt
import numpy as np
import pytest

from nbmq.capture import (
    DatagramBatch,
    LinkType,
    read_datagrams,
    write_pcap,
    write_pcap_packets,
    write_pcapng,
)

WRITABLE = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276]
T0 = 1_795_312_315.0


def _rows(n: int = 300) -> list[tuple]:
    rows = []
    for i in range(n):
        v6 = i % 4 == 3
        src = f"fd00::{i % 5 + 1:x}" if v6 else f"127.0.0.{i % 3 + 1}"
        dst = "::1" if v6 else f"10.0.{i % 7}.1"
        payload = bytes((i * 7 + k) % 256 for k in range(i % 97))
        rows.append((T0 + i * 0.000123, src, 40000 + i % 11, dst, 47101, payload))
    return rows


ROWS = _rows()


def _check(batch: DatagramBatch, rows: list[tuple], nanosecond: bool) -> None:
    assert (len(batch), batch.errors, batch.skipped, batch.fallback_rows) == (len(rows), 0, 0, 0)
    assert [batch.payload_at(i) for i in range(len(rows))] == [r[5] for r in rows]
    assert list(batch.src_addr) == [r[1] for r in rows]
    assert list(batch.dst_addr) == [r[3] for r in rows]
    np.testing.assert_array_equal(batch.src_port, [r[2] for r in rows])
    np.testing.assert_array_equal(batch.dst_port, [r[4] for r in rows])
    tol = 1e-6 if nanosecond else 1e-6 + 5e-7
    np.testing.assert_allclose(batch.timestamp, [r[0] for r in rows], rtol=0, atol=tol)
    assert not batch.truncated.any()


@pytest.mark.parametrize("linktype", WRITABLE)
def test_pcap_roundtrip_every_linktype(tmp_path, linktype):
    for nanosecond, order in ((False, "<"), (True, ">")):
        path = tmp_path / f"lt{linktype}.pcap"
        assert write_pcap(path, ROWS, linktype, nanosecond, byte_order=order) == len(ROWS)
        fast = read_datagrams(path)
        _check(fast, ROWS, nanosecond)
        ref = read_datagrams(path, engine="dpkt")
        assert ref.engine == "dpkt" and fast.same_rows(ref)


@pytest.mark.parametrize("linktype", [1, 113, 276, 101, 0])
def test_pcapng_roundtrip(tmp_path, linktype):
    for nanosecond in (False, True):
        path = tmp_path / "x.pcapng"
        write_pcapng(path, ROWS, linktype, nanosecond)
        fast = read_datagrams(path)
        _check(fast, ROWS, nanosecond)
        assert fast.same_rows(read_datagrams(path, engine="dpkt"))
        with open(path, "rb") as f:  # dpkt's own reader accepts our files
            assert len(list(dpkt.pcapng.Reader(f))) == len(ROWS)


def test_batch_roundtrip_is_exact(tmp_path, captures_dir):
    batch = read_datagrams(captures_dir / "safe_dealer.pcap")
    for nanosecond in (False, True):
        write_pcap(tmp_path / "a.pcap", batch, nanosecond=nanosecond)
        again = read_datagrams(tmp_path / "a.pcap")
        assert again.same_rows(batch)
        write_pcapng(tmp_path / "a.pcapng", batch, nanosecond=nanosecond)
        assert read_datagrams(tmp_path / "a.pcapng").same_rows(batch)


def test_nanosecond_precision_kept(tmp_path):
    rows = [(T0, "1.2.3.4", 1, "5.6.7.8", 2, b"x")]
    write_pcap(tmp_path / "n.pcap", rows, nanosecond=True)
    batch = read_datagrams(tmp_path / "n.pcap")
    write_pcap(tmp_path / "n2.pcap", batch, nanosecond=True)
    for path in (tmp_path / "n.pcap", tmp_path / "n2.pcap"):
        b = read_datagrams(path)
        assert b.timestamp_ns[0] == batch.timestamp_ns[0] == 1_795_312_315_000_000_000
    # a hand-made timestamp with nanoseconds that float64 seconds could not hold
    raw = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 101)
    frame = bytes.fromhex("4500001c000100004011000001020304050607080001000200080000")
    raw += struct.pack("<IIII", 1_795_312_315, 123_456_789, len(frame), len(frame)) + frame
    for engine in ("fast", "dpkt"):
        b = read_datagrams(raw, engine=engine)
        assert b.timestamp_ns[0] == 1_795_312_315_123_456_789
        assert b.timestamp[0] == 1_795_312_315 + 0.123456789


def test_snaplen_cut_marks_truncated(tmp_path):
    rows = [(T0, "1.1.1.1", 5, "2.2.2.2", 6, bytes(100)), (T0 + 1, "::1", 5, "::2", 6, bytes(10))]
    write_pcap(tmp_path / "s.pcap", rows, snaplen=14 + 28 + 50)
    for engine in ("fast", "dpkt"):
        b = read_datagrams(tmp_path / "s.pcap", engine=engine)
        assert list(b.truncated) == [True, False]
        assert list(b.lengths) == [50, 10]


def test_dpkt_writer_output_is_read(tmp_path):
    frames = []
    for i in range(5):
        data = b"hello%d" % i
        udp = dpkt.udp.UDP(sport=9, dport=10, ulen=8 + len(data), data=data)
        ip = dpkt.ip.IP(p=17, len=28 + len(data), src=b"\x01\x02\x03\x04", dst=b"\x05\x06\x07\x08", data=udp)
        frames.append(bytes(dpkt.ethernet.Ethernet(data=ip)))
    with open(tmp_path / "d.pcap", "wb") as f:
        w = dpkt.pcap.Writer(f)
        for i, fr in enumerate(frames):
            w.writepkt(fr, ts=T0 + i)
    with open(tmp_path / "d.pcapng", "wb") as f:
        w = dpkt.pcapng.Writer(f)
        for i, fr in enumerate(frames):
            w.writepkt(fr, ts=T0 + i)
    for name in ("d.pcap", "d.pcapng"):
        b = read_datagrams(tmp_path / name)
        assert [b.payload_at(i) for i in range(5)] == [b"hello%d" % i for i in range(5)]
        assert list(b.src_addr) == ["1.2.3.4"] * 5
        np.testing.assert_allclose(b.timestamp, T0 + np.arange(5), atol=1e-6)


def test_mixed_frames_fast_equals_dpkt(tmp_path, mixed_frames):
    path = tmp_path / "mixed.pcap"
    write_pcap_packets(path, [(T0 + i, f) for i, f in enumerate(mixed_frames)])
    fast = read_datagrams(path, engine="fast")
    ref = read_datagrams(path, engine="dpkt")
    assert fast.same_rows(ref)
    assert (fast.packets, fast.skipped, fast.errors) == (ref.packets, ref.skipped, ref.errors)
    assert fast.error_reasons == ref.error_reasons
    assert 0 < fast.fallback_rows < len(mixed_frames)
    assert fast.packets == len(mixed_frames) == len(fast) + fast.skipped + fast.errors
    frames = set(fast.frame_number.tolist())
    # plain, padded, VLAN, QinQ, options, IPv6 and ext header, first fragments are datagrams
    assert {1, 2, 3, 4, 5, 6, 7, 8, 9, 11} <= frames
    assert not {10, 12, 13, 14} & frames  # later fragments, TCP, ARP: skipped
    assert fast.payload_at(1) == b"" and fast.payload_at(2) == bytes(range(3))  # no padding
    trunc = dict(zip(fast.frame_number.tolist(), fast.truncated.tolist()))
    assert trunc[15] and not trunc[1] and not trunc[11]  # UDP length past the captured data
    reasons = " ".join(fast.error_reasons)
    for word in (
        "bad UDP length",
        "truncated UDP header",
        "bad IPv4 header",
        "bad IPv6 header",
        "truncated link header",
    ):
        assert word in reasons
    assert "::ffff:1.2.3.4" in set(fast.src_addr) and "255.255.255.255" in set(fast.dst_addr)


@pytest.mark.parametrize(
    "linktype,wrap",
    [
        (LinkType.LINUX_SLL, lambda pkt, l3, et: pkt.sll(l3, et)),
        (LinkType.LINUX_SLL2, lambda pkt, l3, et: pkt.sll2(l3, et)),
        (LinkType.RAW, lambda pkt, l3, et: l3),
        (LinkType.NULL, lambda pkt, l3, et: pkt.null(l3, 2 if et == 0x0800 else 24, "<")),
        (LinkType.NULL, lambda pkt, l3, et: pkt.null(l3, 2 if et == 0x0800 else 10, ">")),
        (LinkType.LOOP, lambda pkt, l3, et: pkt.null(l3, 2 if et == 0x0800 else 28, ">")),
    ],
)
def test_other_linktypes_fast_equals_dpkt(tmp_path, pkt, linktype, wrap):
    p = b"payload"
    frames = [
        wrap(pkt, pkt.ipv4(pkt.udp(p)), 0x0800),
        wrap(pkt, pkt.ipv6(pkt.udp(p)), 0x86DD),
        wrap(pkt, pkt.ipv4(pkt.udp(p), proto=1), 0x0800),
        wrap(pkt, pkt.ipv4(pkt.udp(p, ulen=3)), 0x0800),
        wrap(pkt, pkt.ipv4(pkt.udp(p))[:12], 0x0800),
        wrap(pkt, bytes(30), 0x0806),
        b"\x45",
        b"",
    ]
    path = tmp_path / "o.pcap"
    write_pcap_packets(path, [(T0, f) for f in frames], int(linktype))
    fast, ref = read_datagrams(path), read_datagrams(path, engine="dpkt")
    assert fast.same_rows(ref) and fast.error_reasons == ref.error_reasons
    assert (fast.skipped, fast.errors) == (ref.skipped, ref.errors)
    assert fast.payload_at(0) == fast.payload_at(1) == p
    assert list(fast.src_addr[:2]) == ["10.1.2.3", "fd00::1"]


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_multiple_interfaces(pkt, order):
    # two interfaces with different link types and timestamp resolutions, both byte orders
    ng = dpkt.pcapng
    le = order == "<"
    shb = bytes(ng.SectionHeaderBlockLE() if le else ng.SectionHeaderBlock())
    opt_cls = ng.PcapngOptionLE if le else ng.PcapngOption

    def idb(linktype: int, resol: int) -> bytes:
        opts = [opt_cls(code=9, data=bytes([resol])), opt_cls(code=0, data=b"")]
        cls = ng.InterfaceDescriptionBlockLE if le else ng.InterfaceDescriptionBlock
        return bytes(cls(linktype=linktype, snaplen=0, opts=opts))

    def epb(iface: int, ticks: int, frame: bytes) -> bytes:
        cls = ng.EnhancedPacketBlockLE if le else ng.EnhancedPacketBlock
        return bytes(
            cls(
                iface_id=iface,
                ts_high=ticks >> 32,
                ts_low=ticks & 0xFFFFFFFF,
                caplen=len(frame),
                pkt_len=len(frame),
                pkt_data=frame,
            )
        )

    spb_frame = pkt.eth(pkt.ipv4(pkt.udp(b"simple")))
    spb_len = 16 + len(spb_frame) + (-len(spb_frame)) % 4
    spb = (
        struct.pack(order + "III", 3, spb_len, len(spb_frame))
        + spb_frame
        + bytes((-len(spb_frame)) % 4)
        + struct.pack(order + "I", spb_len)
    )
    data = (
        shb
        + idb(1, 6)
        + idb(101, 9)
        + epb(0, 1_795_312_315_000_001, pkt.eth(pkt.ipv4(pkt.udp(b"eth"))))
        + epb(1, 1_795_312_315_000_000_007, pkt.ipv6(pkt.udp(b"raw")))
        + spb
    )
    for engine in ("fast", "dpkt"):
        b = read_datagrams(data, engine=engine)
        assert [b.payload_at(i) for i in range(3)] == [b"eth", b"raw", b"simple"]
        assert list(b.timestamp_ns) == [1_795_312_315_000_001_000, 1_795_312_315_000_000_007, 0]
        assert list(b.frame_number) == [1, 2, 3] and b.errors == 0


def test_modified_pcap_format(pkt):
    # Kuznetzov "modified" pcap: magic 0xa1b2cd34, 24-byte record headers
    frames = [pkt.eth(pkt.ipv4(pkt.udp(b"m%d" % i))) for i in range(3)]
    raw = struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 1)
    for i, f in enumerate(frames):
        raw += struct.pack("<IIIIIHBB", 1_795_312_315 + i, 7, len(f), len(f), 1, 0x0800, 0, 0) + f
    for engine in ("fast", "dpkt"):
        b = read_datagrams(raw, engine=engine)
        assert [b.payload_at(i) for i in range(3)] == [b"m0", b"m1", b"m2"]
        assert list(b.timestamp_ns) == [(1_795_312_315 + i) * 10**9 + 7000 for i in range(3)]
