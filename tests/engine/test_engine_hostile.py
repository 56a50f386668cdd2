"""Hostile input: nothing escapes an engine, everything is counted, memory stays bounded."""

from __future__ import annotations

import random
import tracemalloc

from engine_helpers import control, pump
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq import FrameKind, codec
from nbmq.engine import Dealer, Dish, Radio, SafeDealer
from nbmq.events import DropReason, FrameRejected, RejectReason
from nbmq.options import SocketOptions

S = ("10.0.0.1", 8000)
C = ("10.0.0.2", 40000)
EVIL = ("6.6.6.6", 666)


def connected(cls=SafeDealer, opts=None):
    server = cls.bound(S, opts, random.Random(1))
    client = cls.connecting(S, 0.0, opts)
    pump(client, C, server, S, 0.0)
    return server, client, next(iter(server.peers))


def test_random_bytes_are_counted_never_raised():
    server, client, sid = connected()
    rng = random.Random(0)
    for i in range(3000):
        n = rng.choice([0, 1, 2, 9, 10, 33, 34, 35, 100, 499, 500, 501, 2000])
        data = rng.randbytes(n)
        if i % 3 == 0 and n >= 2:
            data = b"\x01" + bytes([rng.randrange(6)]) + data[2:]  # plausible headers
        server.receive_datagram(data, EVIL, 0.0)
        server.datagrams_to_send(0.0)
    c = server.counters
    assert c.datagrams_in == 3000 + 2  # + the handshake's Connect and Heartbeat
    assert c.malformed > 0 and c.unknown_session > 0
    assert c.malformed + c.data_frames_in + c.control_frames_in == c.datagrams_in
    # nothing hijacked or dropped the real peer (a random Connect may add a half-open one)
    assert server.peers[sid].addr == C and server.connected_peers == [server.peers[sid]]
    events = list(iter(server.next_event, None))
    assert any(isinstance(e, FrameRejected) and e.reason is RejectReason.MALFORMED for e in events)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600), st.integers(0, 3))
def test_fuzz_receive_never_raises(data, which):
    cls = (Dealer, SafeDealer, Radio, Dish)[which]
    engine = cls.bound(S, rng=random.Random(1))
    engine.receive_datagram(data, EVIL, 0.0)
    engine.receive_datagram(memoryview(data), EVIL, 0.1)
    engine.tick(20.0)
    engine.datagrams_to_send(20.0)
    assert engine.counters.datagrams_in == 2


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 499), st.integers(0, 255)), max_size=6))
def test_fuzz_mutated_frames_of_a_live_session(mutations):
    """Valid frames of the live session with a few bytes changed: the receiver counts and
    drops what does not fit, never raises, and later good messages still arrive."""
    server, client, sid = connected(opts=SocketOptions(peer_keepalive=100.0))
    client.send([b"a" * 1200, b"b" * 10], 0.0)
    frames = [bytearray(d) for d, _ in client.datagrams_to_send(0.0)]
    for pos, value in mutations:
        f = frames[pos % len(frames)]
        f[2 + pos % (len(f) - 2)] = value  # keep the version byte
    for f in frames:
        server.receive_datagram(bytes(f), C, 0.0)
    server.tick(30.0)
    client.send([b"good"], 0.0)
    for d, _ in client.datagrams_to_send(0.0):
        server.receive_datagram(bytes(d), C, 0.0)
    msgs = []
    while server.recv_ready():
        msgs.append([bytes(p) for p in server.recv()])
    assert msgs[-1] == [b"good"]


def test_frames_for_unknown_sessions():
    server, client, sid = connected(Dealer)
    rng = random.Random(1)
    for _ in range(500):
        other = rng.getrandbits(64) or 1
        server.receive_datagram(codec.shard_message_bytes([b"x"], other, 1)[0], EVIL, 0.0)
        server.receive_datagram(control(FrameKind.HEARTBEAT, other), EVIL, 0.0)
    out = server.datagrams_to_send(0.0)
    assert len(out) == 500  # one Disconnected per (session, address) per flush
    assert all(codec.parse_frame(d).kind == FrameKind.DISCONNECTED for d, _ in out)
    assert server.counters.unknown_session == 1000
    assert list(server.peers) == [sid]


def test_acks_for_frames_never_sent():
    server, client, sid = connected()
    rng = random.Random(2)
    for _ in range(1000):
        server.receive_datagram(control(FrameKind.ACK, sid, rng.randbytes(8)), C, 0.0)
    server.receive_datagram(control(FrameKind.ACK, sid, b"short"), C, 0.0)
    server.receive_datagram(control(FrameKind.ACK, sid), C, 0.0)
    c = server.counters
    assert c.acks_in == 1002 and c.acks_unknown == 1000 and c.malformed == 2
    # a Dealer (no acks of its own) counts them as unexpected
    dserver, dclient, dsid = connected(Dealer)
    dserver.receive_datagram(control(FrameKind.ACK, dsid, bytes(8)), C, 0.0)
    assert dserver.counters.unexpected == 1


def test_connect_flood_keeps_table_and_memory_bounded():
    opts = SocketOptions(max_peers=64, max_events=1000)
    server = Dealer.bound(S, opts, random.Random(1))
    client = Dealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    real = next(iter(server.peers))
    connect = control(FrameKind.CONNECT, 0)

    def flood(start, count, now):
        for i in range(start, start + count):
            server.receive_datagram(
                connect, ("6.%d.%d.%d" % (i >> 16 & 255, i >> 8 & 255, i & 255), 1000 + i % 50000), now
            )
            if i % 1000 == 999:
                server.datagrams_to_send(now)
                server.tick(now)

    flood(0, 30_000, 0.5)  # warm up, trace 20,000, then 50,000 more untraced (speed)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    flood(30_000, 20_000, 1.0)
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert grown < 500_000, grown
    flood(50_000, 50_000, 1.0)
    assert len(server.peers) == 64
    assert len(server._timers) <= 2 * 64 + 64 + 1
    assert server.peers[real].addr == C
    assert server.counters.cookies_sent == 100_000 - 63  # 63 took the free slots
    assert server.counters.peers_evicted == 0
    # the real client is still served
    client.send([b"still here"], 1.0)
    pump(client, C, server, S, 1.0)
    assert [bytes(p) for p in server.recv()] == [b"still here"]
    assert len(server._events) == 1  # the real PeerConnected: cookies and half-open entries raise none


def test_event_queue_is_bounded_and_counts_overflow():
    opts = SocketOptions(max_events=10)
    engine = Dealer.bound(S, opts)
    for _ in range(50):
        engine.receive_datagram(b"\x02junk", EVIL, 0.0)
    assert len(list(iter(engine.next_event, None))) == 10
    assert engine.counters.events_dropped == 40


def test_oversized_and_budget_claims_allocate_nothing():
    opts = SocketOptions(max_message_size=10_000, max_incomplete_bytes=50_000)
    server, client, sid = connected(Dealer, opts)
    mid = 1
    # claims a 4 GiB message: refused at once
    big = codec.encode_data_frame(sid, mid, 1, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0, b"x")
    server.receive_datagram(big, C, 0.0)
    # many 9 KB claims: the budget holds five; each further one evicts the peer's oldest
    for m in range(20):
        server.receive_datagram(codec.encode_data_frame(sid, 100 + m, 1, 0, 9000, 9000, 0, b"y"), C, 0.0)
    assert server.incomplete_messages == 5
    assert server.counters.dropped_total == 16
    assert server.counters.dropped[DropReason.EVICTED] == 15
