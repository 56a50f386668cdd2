"""Write the bundled BQSP and rqueue captures and ``streams_manifest.json`` (deterministic).

Run ``python -m nbmq.examples.streams.make_captures [OUT_DIR]`` (default: this directory).
Needs dpkt. The bytes on the wire come from the project's own engines: BQSP packets from
``nbmq.streams.bqsp.BqspConnection.send``, rqueue client messages from ``RqueueClientConnection`` and
the server's fan-out from ``RqueueBroker`` (so the notifications the subscribers get are what
our broker sends). TCP/IPv4 (and one IPv6 connection) over Ethernet, built with dpkt and written
with ``nbmq.capture.write_pcap_packets``.

``bqsp.pcap`` (server port 7701, chosen for the example; BQSP names no port):
  * connection A, IPv4, SYN handshake: 6 requests on queues 1..6, answered out of order, one
    request split over three segments, two packets in one segment; one segment retransmitted
    (identical bytes) and one pair of segments delivered out of order; FIN both ways.
  * connection B, IPv6, ISN just below 2**32 so its sequence numbers wrap: a 5000-byte upload
    in MSS-sized segments and a short answer.
``rqueue.pcap`` (server port 6567, the seed's default): two subscribers and a publisher;
  SUBSCRIBE, NOTIFICATION fanned out to both subscribers, REMOVE, DEREGISTER; the capture
  starts after subscriber 2's handshake (no SYN on that connection); one retransmission and
  one out-of-order pair on the publisher's connection.

The manifest lists, per capture, connection and direction, every packet / message sent in
stream order: stream offset, fields, payload / content length and sha256.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
from pathlib import Path

import dpkt

from nbmq.capture import write_pcap_packets
from nbmq.streams.bqsp import BqspConnection
from nbmq.streams.rqueue import RqueueBroker, RqueueClientConnection

BQSP_PORT = 7701
RQUEUE_PORT = 6567
T0_US = 1_700_000_000_000_000  # microseconds: an integer clock keeps timestamps exact
MSS = 1460
SYN, ACK, FIN, PSH = 0x02, 0x10, 0x01, 0x08


class Flow:
    """One TCP connection's packets, with sequence numbers kept per side."""

    def __init__(self, client: tuple[str, int], server: tuple[str, int], isn_c: int, isn_s: int, clock: list[int]):
        self.ends = {"c2s": (client, server), "s2c": (server, client)}
        self.seq = {"c2s": isn_c, "s2c": isn_s}
        self.v6 = ":" in client[0]
        self.clock = clock
        self.records: dict[str, list[dict]] = {"c2s": [], "s2c": []}
        self.sent = {"c2s": 0, "s2c": 0}

    def _frame(self, d: str, seq: int, flags: int, data: bytes) -> tuple[float, bytes]:
        (sa, sp), (da, dp) = self.ends[d]
        other = "s2c" if d == "c2s" else "c2s"
        tcp = dpkt.tcp.TCP(
            sport=sp, dport=dp, seq=seq % 2**32, ack=self.seq[other] % 2**32, flags=flags, win=65535, data=data
        )
        if self.v6:
            fam = socket.AF_INET6
            ip = dpkt.ip6.IP6(
                src=socket.inet_pton(fam, sa),
                dst=socket.inet_pton(fam, da),
                nxt=6,
                hlim=64,
                plen=len(bytes(tcp)),
                data=tcp,
            )
            etype = dpkt.ethernet.ETH_TYPE_IP6
        else:
            ip = dpkt.ip.IP(src=socket.inet_aton(sa), dst=socket.inet_aton(da), p=6, ttl=64, data=tcp)
            ip.len = 20 + len(bytes(tcp))
            etype = dpkt.ethernet.ETH_TYPE_IP
        eth = dpkt.ethernet.Ethernet(
            src=b"\x02\x00\x00\x00\x00\x01", dst=b"\x02\x00\x00\x00\x00\x02", type=etype, data=ip
        )
        self.clock[0] += 1000
        return self.clock[0] / 1e6, bytes(eth)

    def control(self, d: str, flags: int) -> tuple[float, bytes]:
        pkt = self._frame(d, self.seq[d], flags, b"")
        if flags & (SYN | FIN):
            self.seq[d] += 1
        return pkt

    def segments(self, d: str, data: bytes, sizes: list[int] | None = None) -> list[tuple[float, bytes]]:
        """Data in segments (``sizes``, else MSS-sized), in order."""
        out, pos = [], 0
        sizes = list(sizes or [])
        while pos < len(data):
            n = sizes.pop(0) if sizes else MSS
            out.append(self._frame(d, self.seq[d] + pos, ACK | PSH, data[pos : pos + n]))
            pos += n
        self.seq[d] += len(data)
        return out

    def note(self, d: str, wire: bytes, **fields: object) -> None:
        body = fields.pop("body")
        assert isinstance(body, bytes)
        self.records[d].append(
            {"stream_offset": self.sent[d], **fields, "length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        )
        self.sent[d] += len(wire)

    def manifest(self) -> dict:
        (ca, cp), (sa, sp) = self.ends["c2s"]
        fmt = (lambda a, p: f"[{a}]:{p}") if self.v6 else (lambda a, p: f"{a}:{p}")
        return {"client": fmt(ca, cp), "server": fmt(sa, sp), **self.records}


def _bqsp(clock: list[int]) -> tuple[list[tuple[float, bytes]], list[dict]]:
    packets: list[tuple[float, bytes]] = []
    a = Flow(("10.0.0.1", 40001), ("10.0.0.2", BQSP_PORT), 1000, 500_000, clock)
    cli, srv = BqspConnection(), BqspConnection()
    packets += [a.control("c2s", SYN), a.control("s2c", SYN | ACK), a.control("c2s", ACK)]

    def bq(conn: BqspConnection, flow: Flow, d: str, body: bytes, data_type: int, queue: int) -> bytes:
        wire = conn.send(body, data_type=data_type, queue=queue)
        flow.note(d, wire, data_type=data_type, queue_number=queue, body=body)
        return wire

    reqs = [json.dumps({"op": "get", "key": f"k{i}", "pad": "x" * (40 * i)}).encode() for i in range(1, 7)]
    w = [bq(cli, a, "c2s", r, 2, q) for q, r in enumerate(reqs, start=1)]
    packets += a.segments("c2s", w[0])  # request 1 alone
    packets += a.segments("c2s", w[1] + w[2])  # two packets in one segment
    seg = a.segments("c2s", w[3], sizes=[5, 60])  # header cut after 5 bytes, data over three segments
    packets += seg + [seg[-1]]  # ... and the last one retransmitted (identical)
    answers = {q: json.dumps({"status": "ok", "queue": q, "value": "v" * (30 * q)}).encode() for q in (3, 1, 2, 4)}
    for q, body in answers.items():  # answered out of order (BQSP queues, seed 002)
        packets += a.segments("s2c", bq(srv, a, "s2c", body, 2, q))
    pair = a.segments("c2s", w[4]) + a.segments("c2s", w[5])
    packets += [pair[1], pair[0]]  # an out-of-order pair
    for q in (6, 5):
        packets += a.segments("s2c", bq(srv, a, "s2c", b"\x00\x01binary\xff" * q, 7, q))
    packets += [a.control("c2s", FIN | ACK), a.control("s2c", FIN | ACK), a.control("c2s", ACK)]

    b = Flow(("fd00::1", 40002), ("fd00::2", BQSP_PORT), 2**32 - 3000, 77, clock)
    cli, srv = BqspConnection(), BqspConnection()
    packets += [b.control("c2s", SYN), b.control("s2c", SYN | ACK), b.control("c2s", ACK)]
    upload = bytes((i * 7 + 3) % 251 for i in range(5000))
    packets += b.segments("c2s", bq(cli, b, "c2s", upload, 9, 0))  # crosses seq 2**32
    packets += b.segments("s2c", bq(srv, b, "s2c", b"stored", 1, 0))
    packets += [b.control("c2s", FIN | ACK), b.control("s2c", FIN | ACK), b.control("c2s", ACK)]
    return packets, [a.manifest(), b.manifest()]


def _rqueue(clock: list[int]) -> tuple[list[tuple[float, bytes]], list[dict]]:
    server = ("10.0.1.1", RQUEUE_PORT)
    flows = {
        "sub1": Flow(("10.0.1.11", 50001), server, 10_000, 20_000, clock),
        "sub2": Flow(("10.0.1.12", 50002), server, 30_000, 40_000, clock),
        "pub": Flow(("10.0.1.13", 50003), server, 50_000, 60_000, clock),
    }
    clients = {name: RqueueClientConnection() for name in flows}
    broker = RqueueBroker()
    for name in flows:
        broker.connection_made(name)
    packets: list[tuple[float, bytes]] = []
    for name in ("sub1", "pub"):  # sub2's handshake happened before the capture started
        f = flows[name]
        packets += [f.control("c2s", SYN), f.control("s2c", SYN | ACK), f.control("c2s", ACK)]

    def client_sends(name: str, wire: bytes, reorder: bool = False, retransmit: bool = False) -> None:
        f = flows[name]
        topic, content, kind = _parse(wire)
        f.note("c2s", wire, message_type=kind, topic=topic.decode(), body=content)
        segs = f.segments("c2s", wire, sizes=[len(wire) // 2, len(wire)] if (reorder or retransmit) else None)
        if reorder:
            segs = [segs[1], segs[0]]
        if retransmit:
            segs = segs + [segs[0]]
        packets.extend(segs)
        broker.receive_data(name, wire)
        for conn, out in broker.data_to_send():  # the server's fan-out, message by message
            g, pos = flows[conn], 0
            while pos < len(out):
                t, c, k = _parse(out[pos:])
                n = 3 + int.from_bytes(out[pos : pos + 2], "big")
                g.note("s2c", out[pos : pos + n], message_type=k, topic=t.decode(), body=c)
                pos += n
            packets.extend(g.segments("s2c", out))

    client_sends("sub1", clients["sub1"].subscribe("news"))
    client_sends("sub2", clients["sub2"].subscribe("news"))
    client_sends("sub1", clients["sub1"].subscribe("sport"))
    client_sends("pub", clients["pub"].notify("news", b"rain expected tomorrow"))
    client_sends("pub", clients["pub"].notify("sport", b"\x00score 3:1\x00" * 20), reorder=True)
    client_sends("sub2", clients["sub2"].remove("news"))
    client_sends("pub", clients["pub"].notify("news", bytes(range(256)) * 4), retransmit=True)
    client_sends("sub1", clients["sub1"].deregister())
    client_sends("pub", clients["pub"].notify("news", b"nobody listens"))
    for f in flows.values():
        packets += [f.control("c2s", FIN | ACK), f.control("s2c", FIN | ACK), f.control("c2s", ACK)]
    return packets, [flows[n].manifest() for n in ("sub1", "sub2", "pub")]


def _parse(wire: bytes) -> tuple[bytes, bytes, int]:
    """(topic, content, type) of the rqueue message at the start of ``wire`` (seed 004 layout)."""
    size, kind = int.from_bytes(wire[:2], "big"), wire[2]
    payload = wire[3 : 3 + size]
    if kind == 7:
        return payload[1 : 1 + payload[0]], payload[1 + payload[0] :], kind
    if kind == 5:
        return b"", b"", kind
    return payload, b"", kind


def main(out_dir: str | None = None) -> dict:
    """Write ``bqsp.pcap``, ``rqueue.pcap`` and ``streams_manifest.json``; return the manifest."""
    out = Path(out_dir) if out_dir else Path(__file__).parent
    out.mkdir(parents=True, exist_ok=True)
    clock = [T0_US]
    bqsp_packets, bqsp_conns = _bqsp(clock)
    rq_packets, rq_conns = _rqueue(clock)
    write_pcap_packets(out / "bqsp.pcap", bqsp_packets)
    write_pcap_packets(out / "rqueue.pcap", rq_packets)
    manifest = {
        "bqsp_ports": [BQSP_PORT],
        "rqueue_ports": [RQUEUE_PORT],
        "captures": {
            "bqsp.pcap": {"protocol": "bqsp", "connections": bqsp_conns},
            "rqueue.pcap": {"protocol": "rqueue", "connections": rq_conns},
        },
    }
    (out / "streams_manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
