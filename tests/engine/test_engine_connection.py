"""The connection layer: handshake, liveness, reconnect, peer table; virtual time only."""

from __future__ import annotations

import random

import pytest
from engine_helpers import control, drain_events, kind_of, pump

from nbmq import FrameKind, codec
from nbmq.engine import Dealer, PeerState
from nbmq.events import (
    DisconnectReason,
    FrameRejected,
    PathRejected,
    PeerConnected,
    PeerDisconnected,
    PeerMoved,
    RejectReason,
)
from nbmq.options import SocketOptions
from nbmq.testing import Link, Network, connected_pair

S = ("10.0.0.1", 8000)
C = ("10.0.0.2", 40000)
C2 = ("10.0.0.3", 40001)


def test_handshake_bytes_and_states():
    rng = random.Random(5)
    expected_sample = random.Random(5).getrandbits(64)
    server = Dealer.bound(S, rng=rng)
    client = Dealer.connecting(S, 0.0)
    [(connect, to)] = client.datagrams_to_send(0.0)
    assert to == S and bytes(connect) == codec.encode_control_frame(FrameKind.CONNECT, 0)
    server.receive_datagram(connect, C, 0.0)
    [(connected, to)] = server.datagrams_to_send(0.0)
    sid = codec.session_id(expected_sample, "10.0.0.2:40000")
    assert to == C and bytes(connected) == codec.encode_control_frame(FrameKind.CONNECTED, sid)
    assert server.peers[sid].state is PeerState.HALF_OPEN
    assert server.connected_peers == []
    assert drain_events(server) == []
    client.receive_datagram(connected, S, 0.01)
    [(heartbeat, to)] = client.datagrams_to_send(0.01)
    assert bytes(heartbeat) == codec.encode_control_frame(FrameKind.HEARTBEAT, sid)
    assert drain_events(client) == [PeerConnected(sid, S)]
    assert client.peers[sid].state is PeerState.CONNECTED and client.peers[sid].outbound
    server.receive_datagram(heartbeat, C, 0.02)
    assert server.peers[sid].state is PeerState.CONNECTED
    assert drain_events(server) == [PeerConnected(sid, C)]
    assert server.datagrams_to_send(0.02) == []


def test_ipv6_session_text():
    rng = random.Random(1)
    sample = random.Random(1).getrandbits(64)
    server = Dealer.bound(("::1", 8000), rng=rng)
    server.receive_datagram(control(FrameKind.CONNECT, 0), ("::1", 5555, 0, 0), 0.0)
    [(reply, _)] = server.datagrams_to_send(0.0)
    assert codec.parse_frame(reply).session_id == codec.session_id(sample, "[::1]:5555")


def test_repeated_connect_is_idempotent():
    server = Dealer.bound(S, rng=random.Random(1))
    for t in (0.0, 0.1, 5.0):
        server.receive_datagram(control(FrameKind.CONNECT, 0), C, t)
    replies = server.datagrams_to_send(5.0)
    assert len(replies) == 3 and len({bytes(d) for d, _ in replies}) == 1
    assert len(server.peers) == 1
    # a stale duplicate Connect after the handshake keeps the session and the peer connected
    sid = next(iter(server.peers))
    server.receive_datagram(control(FrameKind.HEARTBEAT, sid), C, 5.1)
    server.receive_datagram(control(FrameKind.CONNECT, 0), C, 5.2)
    assert [bytes(d) for d, _ in server.datagrams_to_send(5.2)] == [bytes(replies[0][0])]
    assert server.peers[sid].state is PeerState.CONNECTED and len(server.peers) == 1


def _heartbeat_times(engine, peer_addr, other, other_addr, until, step):
    """Tick ``engine`` every ``step`` seconds, answering nothing but keeping ``other`` fed;
    returns the times ``engine`` sent a heartbeat."""
    times = []
    t = 0.0
    for _ in range(int(until / step) + 2):
        t = round(t + step, 6)
        if t > until:
            break
        for e in (engine, other):
            e.tick(t)
        for d, to in engine.datagrams_to_send(t):
            if kind_of(d) == FrameKind.HEARTBEAT:
                times.append(t)
            other.receive_datagram(bytes(d), peer_addr, t)
        for d, to in other.datagrams_to_send(t):
            engine.receive_datagram(bytes(d), other_addr, t)
    return times


def test_heartbeat_exactly_once_per_interval_when_idle():
    """The reference heartbeats on every tick once a peer is idle; we send one per interval."""
    server = Dealer.bound(S, rng=random.Random(1))
    client = Dealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    times = _heartbeat_times(client, C, server, S, until=10.0, step=0.01)
    assert len(times) == 10
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(abs(g - 1.0) < 1e-6 for g in gaps), gaps
    assert client.counters.heartbeats_out == 11  # + the handshake's
    assert server.counters.heartbeats_out == 10


def test_no_heartbeat_while_data_flows():
    server = Dealer.bound(S, rng=random.Random(1))
    client = Dealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    before = client.counters.heartbeats_out
    t = 0.0
    for _ in range(40):  # a message every 0.5 s for 20 s, ticking every 0.1 s
        for _ in range(5):
            t = round(t + 0.1, 6)
            client.tick(t)
            server.tick(t)
            pump(client, C, server, S, t)
        client.send([b"ping"], t)
        pump(client, C, server, S, t)
    assert client.counters.heartbeats_out == before
    assert server.counters.heartbeats_out == pytest.approx(20, abs=1)
    assert len(server.connected_peers) == 1 and len(client.connected_peers) == 1


def test_tick_early_is_harmless_and_late_catches_up_once():
    server = Dealer.bound(S, rng=random.Random(1))
    client = Dealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    assert client.next_deadline() == pytest.approx(1.0)
    for t in (0.1, 0.5, 0.99, 0.5):
        client.tick(t)
        assert client.datagrams_to_send(t) == []
    client.tick(3.5)  # 2.5 intervals late: one heartbeat, not three
    out = client.datagrams_to_send(3.5)
    assert [kind_of(d) for d, _ in out] == [FrameKind.HEARTBEAT]
    assert client.next_deadline() == pytest.approx(4.5)


def test_keepalive_expiry_event_then_reconnect_every_wait():
    opts = SocketOptions(peer_keepalive=3.0, peer_heartbeat_ivl=1.0, reconnect_wait=2.0)
    net, server, client = connected_pair(Dealer(opts, random.Random(1)), Dealer(opts))
    sid = next(iter(client.engine.peers))
    start = net.now
    net.set_links(S, C, Link(loss=1.0))  # the link dies
    assert net.run_until(lambda: not client.engine.peers and not server.engine.peers, 10.0)
    for node, addr in ((client, S), (server, C)):
        [ev] = node.events_of(PeerDisconnected)
        assert ev == PeerDisconnected(sid, addr, DisconnectReason.KEEPALIVE_EXPIRED)
    assert net.now - start == pytest.approx(3.0, abs=0.01)
    connects = client.engine.counters.connects_out
    net.step(10.0)  # no peer: a Connect at once, then one every reconnect_wait
    assert client.engine.counters.connects_out - connects == pytest.approx(10.0 / 2.0 + 1, abs=1)
    net.clear_links()
    assert net.run_until(lambda: client.connected and server.connected, 3.0)
    assert next(iter(client.engine.peers)) != sid  # a new session


def test_disconnected_triggers_immediate_reconnect_after_server_restart():
    opts = SocketOptions(reconnect_wait=5.0)
    net, server, client = connected_pair(Dealer(opts, random.Random(1)), Dealer(opts))
    old = next(iter(client.engine.peers))
    net.step(0.5)
    server = net.replace(server, Dealer.bound(S, opts, random.Random(2)))
    client.engine.send([b"after restart"], net.now)  # goes to the old session
    net.flush(client)
    assert net.run_until(lambda: server.connected and client.connected, 1.0)
    new = next(iter(client.engine.peers))
    assert new != old
    assert PeerDisconnected(old, S, DisconnectReason.DISCONNECTED_BY_PEER) in client.events
    assert server.engine.counters.unknown_session >= 1
    assert any(isinstance(e, FrameRejected) and e.reason is RejectReason.UNKNOWN_SESSION for e in server.events)
    net.send(client, [b"hello again"])
    assert net.run_until(lambda: server.engine.recv_ready(), 1.0)
    assert server.recv_all() == [[b"hello again"]]


def test_server_down_longer_than_keepalive_client_recovers():
    opts = SocketOptions(peer_keepalive=2.0, reconnect_wait=1.0)
    net, server, client = connected_pair(Dealer(opts, random.Random(1)), Dealer(opts))
    net.crash(server)
    net.step(6.0)
    assert not client.engine.peers
    net.add(Dealer.bound(S, opts, random.Random(3)), S, "server2")
    assert net.run_until(lambda: client.connected, 1.5)


def test_reconnect_every_wait_with_no_server():
    net = Network()
    client = net.add(Dealer(SocketOptions(reconnect_wait=5.0)), C)
    net.connect(client, S)
    assert client.engine.next_deadline() == pytest.approx(5.0)
    net.step(16.0)
    assert client.engine.counters.connects_out == 4  # t = 0, 5, 10, 15
    assert net.undeliverable == 4


def test_unknown_session_answered_with_disconnected():
    server = Dealer.bound(S)
    for kind in (FrameKind.HEARTBEAT, FrameKind.ACK):
        server.receive_datagram(control(kind, 77, bytes(8)), C, 0.0)
    data = codec.shard_message_bytes([b"x"], 78, 1)[0]
    server.receive_datagram(data, C, 0.0)
    server.receive_datagram(data, C, 0.0)  # a second one before the flush: one answer
    out = server.datagrams_to_send(0.0)
    assert [bytes(d) for d, _ in out] == [
        control(FrameKind.DISCONNECTED, 77),
        control(FrameKind.DISCONNECTED, 78),
    ]
    assert server.counters.unknown_session == 4
    # a Disconnected for an unknown session is not answered (no ping-pong)
    server.receive_datagram(control(FrameKind.DISCONNECTED, 79), C, 0.0)
    assert server.datagrams_to_send(0.0) == []


def test_nat_rebinding_keeps_session():
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    sid = next(iter(server.engine.peers))
    net.move(client, C2)
    net.send(client, [b"from the new address"])
    assert net.run_until(lambda: server.engine.recv_ready(), 1.0)  # taken at once...
    assert server.engine.peers[sid].addr == C  # ... but the path is validated first
    assert server.engine.peers[sid].path_candidates == [C2]
    # the client's next frames from C2 (heartbeats) validate it
    assert net.run_until(lambda: server.engine.peers[sid].addr == C2, 5.0)
    assert server.engine.counters.addr_changes == 1
    assert server.events_of(PeerMoved) == [PeerMoved(sid, C, C2)]
    net.send(server, [b"reply"])
    assert net.run_until(lambda: client.engine.recv_ready(), 1.0)
    assert client.recv_all() == [[b"reply"]]
    assert next(iter(client.engine.peers)) == sid
    assert not server.events_of(PeerDisconnected)


def test_full_table_answers_cookies_and_protects_connected():
    opts = SocketOptions(max_peers=3)
    server = Dealer.bound(S, opts, random.Random(1))
    # one real client completes its handshake
    client = Dealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    real = next(iter(client.peers))
    # a flood of Connects from other addresses: two take the free slots (half-open), the rest
    # get cookies and leave nothing behind; the real peer stays
    for i in range(50):
        server.receive_datagram(control(FrameKind.CONNECT, 0), ("6.6.6.6", i), 0.1)
    replies = server.datagrams_to_send(0.1)
    assert len(replies) == 50 and all(kind_of(d) == FrameKind.CONNECTED for d, _ in replies)
    assert len(server.peers) == 3
    assert server.peers[real].state is PeerState.CONNECTED
    assert server.counters.cookies_sent == 48 and server.counters.peers_evicted == 0
    half_open = [p for p in server.peers.values() if p.state is PeerState.HALF_OPEN]
    assert sorted(p.addr[1] for p in half_open) == [0, 1]  # the first ones; no one pushed out
    # a patient second real client gets a cookie; its heartbeat evicts the oldest half-open peer
    client2 = Dealer.connecting(S, 0.2)
    pump(client2, C2, server, S, 0.2)
    assert len(client2.connected_peers) == 1
    assert len(server.connected_peers) == 2
    assert server.counters.cookies_accepted == 1 and server.counters.peers_evicted == 1
    assert [p.addr for p in server.peers.values() if p.state is PeerState.HALF_OPEN] == [("6.6.6.6", 1)]
    # a table full of connected peers refuses Connects without answering
    client3 = Dealer.connecting(S, 0.3)
    pump(client3, ("10.0.0.4", 1), server, S, 0.3)
    assert len(server.connected_peers) == 3
    server.receive_datagram(control(FrameKind.CONNECT, 0), ("7.7.7.7", 1), 0.4)
    assert server.datagrams_to_send(0.4) == []
    assert server.counters.connects_refused == 1
    assert len(server.peers) == 3


def test_half_open_peers_expire_silently():
    opts = SocketOptions(peer_keepalive=2.0)
    server = Dealer.bound(S, opts, random.Random(1))
    server.receive_datagram(control(FrameKind.CONNECT, 0), C, 0.0)
    server.datagrams_to_send(0.0)
    assert server.next_deadline() == pytest.approx(2.0)
    server.tick(2.0)
    assert not server.peers
    assert server.counters.half_open_expired == 1
    assert drain_events(server) == []  # never announced, so no PeerDisconnected
    assert server.datagrams_to_send(2.0) == []  # and never heartbeated


def test_close_says_goodbye_and_peer_reconnects():
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    sid = next(iter(server.engine.peers))
    client.engine.send([b"queued"], net.now)
    client.engine.close(net.now)
    net.flush(client)
    assert client.engine.closed
    assert PeerDisconnected(sid, S, DisconnectReason.CLOSED) in client.events
    net.step(0.1)
    assert PeerDisconnected(sid, C, DisconnectReason.DISCONNECTED_BY_PEER) in server.events
    assert not server.engine.peers
    with pytest.raises(Exception, match="closed"):
        client.engine.send([b"x"], net.now)


def test_next_deadline_none_when_idle_and_unbound():
    engine = Dealer()
    assert engine.next_deadline() is None
    engine.bind(S)
    assert engine.next_deadline() is None
    engine.send([b"waits"], 0.0)  # no peer: nothing to do until one comes
    assert engine.next_deadline() is None


def test_disconnected_answers_with_connect_at_once():
    server = Dealer.bound(S, rng=random.Random(1))
    client = Dealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    sid = next(iter(client.peers))
    client.receive_datagram(control(FrameKind.DISCONNECTED, sid), S, 1.0)
    assert [bytes(d) for d, _ in client.datagrams_to_send(1.0)] == [control(FrameKind.CONNECT, 0)]
    assert not client.peers
    assert drain_events(client)[-1] == PeerDisconnected(sid, S, DisconnectReason.DISCONNECTED_BY_PEER)
    assert client.next_deadline() == pytest.approx(1.0 + 5.0)  # the next Connect
    # the server still knew the session, so its answer to the new Connect is the same session
    server.receive_datagram(control(FrameKind.CONNECT, 0), C, 1.0)
    pump(client, C, server, S, 1.0)
    assert list(client.peers) == [sid] and len(server.peers) == 1
    # a Disconnected naming another session changes nothing
    client.receive_datagram(control(FrameKind.DISCONNECTED, sid ^ 1), S, 1.1)
    assert len(client.connected_peers) == 1


# -- path validation ----------------------------------------------------------

EVIL = ("6.6.6.6", 666)


def _bound_peer():
    """A bound Dealer with one connected peer at C (virtual time, no simulator)."""
    server = Dealer.bound(S, rng=random.Random(1))
    client = Dealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    sid = next(iter(server.peers))
    server.datagrams_to_send(0.0)
    drain_events(server)
    return server, sid


def test_path_is_challenged_then_validated_by_two_more_frames():
    server, sid = _bound_peer()
    hb = control(FrameKind.HEARTBEAT, sid)
    server.receive_datagram(hb, C2, 1.0)
    # the challenge: a Heartbeat to the candidate; the peer stays where it was
    assert [(bytes(d), a) for d, a in server.datagrams_to_send(1.0)] == [(hb, C2)]
    assert server.peers[sid].addr == C and server.counters.path_challenges == 1
    server.receive_datagram(hb, C2, 1.1)
    assert server.peers[sid].addr == C  # one frame after the challenge is not enough
    server.receive_datagram(codec.shard_message_bytes([b"d"], sid, 9)[0], C2, 1.2)
    assert server.peers[sid].addr == C2 and server.peers[sid].path_candidates == []
    assert drain_events(server) == [PeerMoved(sid, C, C2)]
    assert server.counters.addr_changes == 1 and server.counters.paths_rejected == 0
    assert [[bytes(p) for p in server.recv()]] == [[b"d"]]  # data from the candidate was taken
    server.send([b"reply"], 1.3)
    assert [a for _, a in server.datagrams_to_send(1.3)] == [C2]


def test_spoofed_frames_do_not_move_a_live_peer():
    server, sid = _bound_peer()
    hb = control(FrameKind.HEARTBEAT, sid)
    for t in (1.0, 1.01):  # a spoofer that knows the session id: two frames
        server.receive_datagram(hb, EVIL, t)
    server.receive_datagram(hb, C, 1.02)  # the real peer is still there: candidates cancelled
    assert server.peers[sid].addr == C and server.peers[sid].path_candidates == []
    assert drain_events(server) == [PathRejected(sid, EVIL, "old path alive")]
    server.receive_datagram(hb, EVIL, 1.03)  # starts over: challenged again, not moved
    server.receive_datagram(hb, EVIL, 1.04)
    assert server.peers[sid].addr == C and server.counters.path_challenges == 2
    server.send([b"private"], 1.1)
    assert {a for _, a in server.datagrams_to_send(1.1) if codec.parse_frame(_).kind == 0} == {C}


def test_path_candidates_are_bounded_and_expire():
    server, sid = _bound_peer()
    hb = control(FrameKind.HEARTBEAT, sid)
    for i in range(10):
        server.receive_datagram(hb, ("7.7.7.7", i), 1.0)
    peer = server.peers[sid]
    assert peer.path_candidates == [("7.7.7.7", i) for i in range(6, 10)]
    assert server.counters.path_challenges == 10 and server.counters.paths_rejected == 6
    rejected = [e for e in drain_events(server) if isinstance(e, PathRejected)]
    assert [e.reason for e in rejected] == ["too many candidates"] * 6
    # a candidate older than peer_keepalive starts over (a fresh challenge, count from zero)
    later = 1.0 + server.options.peer_keepalive
    server.receive_datagram(hb, ("7.7.7.7", 9), later)
    server.receive_datagram(hb, ("7.7.7.7", 9), later)
    assert peer.addr == C and server.counters.path_challenges == 11
    assert drain_events(server)[0] == PathRejected(sid, ("7.7.7.7", 9), "expired")
