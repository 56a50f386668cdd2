"""TCP segments out of captures, reassembly, and BQSP / rqueue decoding (nbmq.capture.tcp.segments*)."""

from __future__ import annotations

import hashlib
import json
import socket
import struct

import dpkt
import pytest

from nbmq.capture import write_pcap_packets
from nbmq.capture.tcp.segments import ACK, FIN, RST, SYN, has_tcp_traffic, iter_tcp_segments
from nbmq.capture.tcp.streams import HalfStream, TcpStreams, decode_tcp_streams
from nbmq.examples import bundled_captures
from nbmq.examples.streams import STREAMS_DIR, streams_manifest_path

PSH = 0x08
PORT = 7701
CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", PORT)


def bqsp(data: bytes, queue: int = 1, data_type: int = 2) -> bytes:
    return struct.pack("<IHB", len(data), data_type, queue) + data


def ip_packet(src: str, dst: str, sport: int, dport: int, seq: int, flags: int, data: bytes) -> bytes:
    tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq % 2**32, flags=flags, win=65535, data=data)
    if ":" in src:
        f = socket.AF_INET6
        ip6 = dpkt.ip6.IP6(
            src=socket.inet_pton(f, src), dst=socket.inet_pton(f, dst), nxt=6, hlim=64, plen=len(bytes(tcp)), data=tcp
        )
        return bytes(ip6)
    ip = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=6, ttl=64, data=tcp)
    ip.len = 20 + len(bytes(tcp))
    return bytes(ip)


def link(linktype: int, ip: bytes) -> bytes:
    v6 = ip[0] >> 4 == 6
    et = 0x86DD if v6 else 0x0800
    if linktype == 1:
        return bytes(12) + struct.pack(">H", et) + ip
    if linktype == 113:
        return struct.pack(">HHH8sH", 0, 772, 6, bytes(8), et) + ip
    if linktype == 276:
        return struct.pack(">HHIHBB8s", et, 0, 1, 772, 0, 6, bytes(8)) + ip
    if linktype == 0:
        return struct.pack("<I", 30 if v6 else 2) + ip
    if linktype == 108:
        return struct.pack(">I", 24 if v6 else 2) + ip
    return ip  # raw IP link types


class Conv:
    """A scripted connection: packets as (direction, relative seq, flags, data)."""

    def __init__(self, isn_c: int = 1000, isn_s: int = 9000, client=CLIENT, server=SERVER) -> None:
        self.isn = {"c2s": isn_c, "s2c": isn_s}
        self.client, self.server = client, server
        self.packets: list[tuple[str, int, int, bytes]] = []

    def add(self, d: str, rel: int, data: bytes = b"", flags: int = ACK | PSH) -> Conv:
        self.packets.append((d, rel, flags, data))
        return self

    def handshake(self) -> Conv:
        self.packets += [("c2s", -1, SYN, b""), ("s2c", -1, SYN | ACK, b""), ("c2s", 0, ACK, b"")]
        return self

    def frames(self, linktype: int = 1) -> list[tuple[float, bytes]]:
        out = []
        for i, (d, rel, flags, data) in enumerate(self.packets):
            (sa, sp), (da, dp) = (self.client, self.server) if d == "c2s" else (self.server, self.client)
            seq = self.isn[d] + 1 + rel
            out.append((1_700_000_000 + i / 1000, link(linktype, ip_packet(sa, da, sp, dp, seq, flags, data))))
        return out

    def write(self, tmp_path, linktype: int = 1, name: str = "c.pcap") -> str:
        path = tmp_path / name
        write_pcap_packets(path, self.frames(linktype), linktype=linktype)
        return str(path)


def rows_of(path, codec, protocol: str = "bqsp", ports=(PORT,), **kw):
    return list(decode_tcp_streams(path, protocol, ports, codec=codec, **kw))


def good(rows):
    return [(r.direction, r.stream_offset, r.queue, r.data) for r in rows if r.error is None]


def errors(rows):
    return [r.error for r in rows if r.error is not None]


P1, P2, P3 = bqsp(b"one", 1), bqsp(b"second" * 10, 2), bqsp(b"3rd", 3)
EXPECT = [("c2s", 0, 1, b"one"), ("c2s", len(P1), 2, b"second" * 10), ("c2s", len(P1) + len(P2), 3, b"3rd")]


def test_in_order_split_and_coalesced(tmp_path, codec):
    data = P1 + P2 + P3
    conv = Conv().handshake().add("c2s", 0, data[:5]).add("c2s", 5, data[5:40]).add("c2s", 40, data[40:])
    conv.add("s2c", 0, bqsp(b"ok", 9)).add("c2s", len(data), flags=FIN | ACK).add("s2c", 9, flags=FIN | ACK)
    rows = rows_of(conv.write(tmp_path), codec)
    assert good(rows) == EXPECT + [("s2c", 0, 9, b"ok")]
    assert {(r.client, r.server) for r in rows} == {("10.0.0.1:40000", "10.0.0.2:7701")}
    assert rows[1].ts_ns == rows[2].ts_ns  # both completed by the same segment


def test_out_of_order_and_retransmission(tmp_path, codec):
    data = P1 + P2 + P3
    a, b = len(P1), len(P1) + len(P2)
    conv = Conv().handshake().add("c2s", a, data[a:b]).add("c2s", 0, data[:a]).add("c2s", 0, data[:a])
    conv.add("c2s", b, data[b:]).add("c2s", a, data[a:b])
    streams = TcpStreams("bqsp", [PORT], codec=codec, keep_stats=True)
    rows = list(decode_tcp_streams(conv.write(tmp_path), "bqsp", [PORT], streams=streams))
    assert good(rows) == EXPECT and not errors(rows)
    half = streams.stats[0]["c2s"]
    assert (half.out_of_order, half.duplicates, half.duplicate_bytes) == (1, 2, len(P1) + len(P2))
    # the out-of-order packet got the timestamp of the segment that completed it (the filler)
    assert rows[0].ts_ns == rows[1].ts_ns


def test_overlap_with_other_bytes_is_an_error_first_copy_kept(tmp_path, codec):
    conv = Conv().handshake().add("c2s", 0, P1 + P2).add("c2s", 3, b"XX").add("c2s", len(P1) + len(P2), P3)
    rows = rows_of(conv.write(tmp_path), codec)
    assert good(rows) == EXPECT
    assert errors(rows) == ["overlap: retransmitted bytes differ (first copy kept)"]
    assert [r.stream_offset for r in rows if r.error] == [3]


def test_gap_stops_the_direction(tmp_path, codec):
    data = P1 + P2 + P3
    conv = Conv().handshake().add("c2s", 0, data[:13]).add("c2s", 20, data[20:])  # bytes 13..20 lost
    conv.add("s2c", 0, bqsp(b"fine", 4))
    rows = rows_of(conv.write(tmp_path), codec)
    assert good(rows) == [("c2s", 0, 1, b"one"), ("s2c", 0, 4, b"fine")]
    errs = [(r.direction, r.stream_offset, r.error) for r in rows if r.error]
    assert ("c2s", 13, "gap: 7 bytes missing (never filled)") in errs
    # the decoder stopped at the start of P2: its 3 bytes before the gap plus all after it
    assert ("c2s", len(P1), f"unparsed: {3 + len(data) - 20} bytes not decoded") in errs


def test_wrap_around(tmp_path, codec):
    data = P1 + P2 + P3
    conv = Conv(isn_c=2**32 - 12).handshake().add("c2s", 0, data[:20]).add("c2s", 20, data[20:])
    rows = rows_of(conv.write(tmp_path), codec)
    assert good(rows) == EXPECT and not errors(rows)


def test_no_syn_starts_at_first_segment_and_port_picks_the_server(tmp_path, codec):
    data = P1 + P2 + P3
    # the capture starts mid-connection, and the first segment seen goes server -> client
    conv = Conv(client=("10.0.0.1", 80), server=("10.0.0.2", PORT))
    conv.add("s2c", 100, bqsp(b"hi", 5)).add("c2s", 500, data)
    rows = rows_of(conv.write(tmp_path), codec)
    assert good(rows) == [("s2c", 0, 5, b"hi")] + EXPECT
    assert rows[0].client == "10.0.0.1:80" and rows[0].server == "10.0.0.2:7701"


def test_buffer_cap_declares_a_gap(tmp_path, codec):
    chunk = bqsp(b"z" * 100, 1)
    conv = Conv().handshake().add("c2s", 0, chunk)
    for k in range(2, 8):  # everything after the 2nd packet, which never arrives
        conv.add("c2s", k * len(chunk), chunk)
    rows = rows_of(conv.write(tmp_path), codec, max_buffered=3 * (len(chunk) + 64))
    assert len(good(rows)) == 1
    errs = errors(rows)
    assert errs[0] == f"gap: {len(chunk)} bytes missing (out-of-order buffer full)"
    assert errs[-1] == f"unparsed: {6 * len(chunk)} bytes not decoded"


def test_half_stream_cap_bounds_tiny_segments():
    half = HalfStream(max_buffered=10_000)
    half.add(0, SYN, b"")
    for k in range(2, 1000):  # one-byte segments after a hole
        half.add(1 + k, ACK, b"x")
        assert half.buffered <= 10_000
    assert half.gap_at == 0


def test_rst_and_fin_close_and_port_reuse(tmp_path, codec):
    conv = Conv().handshake().add("c2s", 0, P1).add("c2s", len(P1), flags=RST)
    conv.add("c2s", len(P1), P2)  # a straggler after the reset: ignored
    conv.packets.append(("c2s", 5000, SYN, b""))  # the same ports, a new connection
    conv.packets.append(("c2s", 5001, ACK | PSH, P3))
    rows = rows_of(conv.write(tmp_path), codec)
    assert good(rows) == [("c2s", 0, 1, b"one"), ("c2s", 0, 3, b"3rd")]


def test_decode_error_row_and_truncated_tail(tmp_path, codec):
    garbage = b"\x00\x10\x09" + b"junk" * 5  # rqueue type 9 does not exist (seed 004)
    conv = Conv(server=("10.0.0.2", 6567)).handshake().add("c2s", 0, garbage)
    conv.add("s2c", 0, b"\x00\x05\x01new")  # SUBSCRIBE "new" cut short: 2 bytes missing at the end
    rows = rows_of(conv.write(tmp_path), codec, protocol="rqueue", ports=(6567,))
    errs = [(r.direction, r.stream_offset, r.error) for r in rows if r.error]
    assert errs == [
        ("c2s", 2, "decode: unknown type"),
        ("c2s", 2, f"unparsed: {len(garbage) - 2} bytes not decoded"),
        ("s2c", 0, "truncated: 6 bytes of an incomplete record at the end of the stream"),
    ]


def test_bqsp_claimed_size_is_not_allocated(tmp_path, codec):
    conv = Conv().handshake().add("c2s", 0, struct.pack("<IHB", 0xFFFFFFFF, 1, 1) + b"abc")
    rows = rows_of(conv.write(tmp_path), codec)
    assert errors(rows)[0] == "decode: packet over max_packet_size"


@pytest.mark.parametrize("linktype", [1, 113, 276, 101, 12, 14, 228, 0, 108])
@pytest.mark.parametrize("v6", [False, True])
def test_link_types(tmp_path, linktype, v6):
    if linktype == 228 and v6:
        linktype = 229
    ends = (("fd00::1", 40000), ("fd00::2", PORT)) if v6 else (CLIENT, SERVER)
    conv = Conv(client=ends[0], server=ends[1]).handshake().add("c2s", 0, P1 + P2 + P3)
    rows = list(decode_tcp_streams(conv.write(tmp_path, linktype), "bqsp", [PORT]))
    assert good(rows) == EXPECT
    assert rows[0].client == ("[fd00::1]:40000" if v6 else "10.0.0.1:40000")


def test_pcapng_and_vlan(tmp_path):
    conv = Conv().handshake().add("c2s", 0, P1 + P2 + P3)
    path = tmp_path / "c.pcapng"
    with open(path, "wb") as f:
        w = dpkt.pcapng.Writer(f, linktype=1)
        for ts, frame in conv.frames(1):
            tagged = frame[:12] + b"\x81\x00\x00\x07" + frame[12:]  # one 802.1Q tag
            w.writepkt(tagged, ts=ts)
    assert good(list(decode_tcp_streams(path, "bqsp", [PORT]))) == EXPECT


def test_other_ports_and_udp_are_ignored(tmp_path):
    conv = Conv().handshake().add("c2s", 0, P1)
    path = conv.write(tmp_path)
    assert list(decode_tcp_streams(path, "bqsp", [1234])) == []
    assert has_tcp_traffic(path, [PORT]) and not has_tcp_traffic(path, [1234])
    for capture in bundled_captures(pcapng=True):  # nbmq over UDP only
        assert not has_tcp_traffic(capture, None)
    assert not has_tcp_traffic(tmp_path, None)  # not a capture at all


def test_truncated_and_corrupt_captures_never_raise(tmp_path):
    conv = Conv().handshake().add("c2s", 0, P1).add("c2s", len(P1), P2).add("c2s", len(P1) + len(P2), P3)
    raw = open(conv.write(tmp_path), "rb").read()
    cut = raw[:-10]  # the last record cut short
    rows = list(decode_tcp_streams(cut, "bqsp", [PORT]))
    assert good(rows) == EXPECT[:2]
    assert errors(rows)[-1].startswith("capture: offset") and "truncated record" in errors(rows)[-1]
    # a record header smashed in the middle: reading resynchronises on the next record
    bad = bytearray(raw)
    pos = len(raw) - len(P3) - 54 - 16 - len(P2) - 54 - 16
    bad[pos + 8 : pos + 12] = b"\xff\xff\xff\x7f"
    rows = list(decode_tcp_streams(bytes(bad), "bqsp", [PORT]))
    assert any(e.startswith("capture:") for e in errors(rows))
    for n in range(24, len(raw), 7):  # every prefix: rows and errors, never an exception
        list(decode_tcp_streams(raw[:n], "bqsp", [PORT]))
    # a TCP header cut by the snaplen is logged, not raised
    short = [(ts, f[: 14 + 20 + 10]) for ts, f in conv.frames()]
    write_pcap_packets(tmp_path / "s.pcap", short)
    assert errors(list(decode_tcp_streams(tmp_path / "s.pcap", "bqsp", None)))[0].endswith("truncated TCP header")


def test_truncated_segment_leaves_a_gap(tmp_path):
    conv = Conv().handshake().add("c2s", 0, P1 + P2).add("c2s", len(P1) + len(P2), P3)
    frames = conv.frames()
    frames[3] = (frames[3][0], frames[3][1][:-20])  # snaplen cut: the segment's tail not captured
    write_pcap_packets(tmp_path / "t.pcap", frames)
    segs = list(iter_tcp_segments(tmp_path / "t.pcap", [PORT]))
    assert segs[3].truncated and not segs[4].truncated
    rows = list(decode_tcp_streams(tmp_path / "t.pcap", "bqsp", [PORT]))
    assert good(rows) == EXPECT[:1]
    assert "gap: 20 bytes missing (never filled)" in errors(rows)


def _manifest_rows(cap):
    want = {}
    for c in cap["connections"]:
        for d in ("c2s", "s2c"):
            want[(c["client"], c["server"], d)] = [(r["stream_offset"], r["length"], r["sha256"]) for r in c[d]]
    return want


def test_bundled_stream_captures_match_the_manifest(codec):
    manifest = json.loads(streams_manifest_path().read_text())
    for name, cap in manifest["captures"].items():
        proto = cap["protocol"]
        rows = list(decode_tcp_streams(STREAMS_DIR / name, proto, manifest[f"{proto}_ports"], codec=codec))
        assert not errors(rows)
        got: dict = {}
        for r in rows:
            got.setdefault((r.client, r.server, r.direction), []).append(
                (r.stream_offset, r.length, hashlib.sha256(r.data).hexdigest())
            )
        want = {k: v for k, v in _manifest_rows(cap).items() if v}
        assert got == want


def test_make_captures_is_deterministic(tmp_path):
    from nbmq.examples.streams.make_captures import main

    main(str(tmp_path))
    for name in ("bqsp.pcap", "rqueue.pcap", "streams_manifest.json"):
        assert (tmp_path / name).read_bytes() == (STREAMS_DIR / name).read_bytes(), name
