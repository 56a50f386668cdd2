"""Stateless handshake cookies under a Connect flood; virtual time only."""

from __future__ import annotations

import random

import pytest
from engine_helpers import control, drain_events, kind_of, recv_all

from nbmq import FrameKind, codec
from nbmq.engine import Dealer, PeerState
from nbmq.engine.cookies import CookieJar
from nbmq.events import PeerConnected
from nbmq.options import SocketOptions
from nbmq.testing import Network

S = ("10.0.0.1", 8000)
C = ("10.0.0.2", 40000)
C2 = ("10.0.0.3", 40001)
KEEPALIVE = 10.0


class Flooder:
    """A hostile node: sends ``Connect`` to ``target`` every ``every`` seconds, never answers."""

    def __init__(self, target, every: float, start: float) -> None:
        self.target = target
        self.every = every
        self.next = start
        self.out: list = []
        self.sent = 0

    connected_peers: list = []

    def receive_datagram(self, data, addr, now) -> None:
        pass

    def next_deadline(self) -> float:
        return self.next

    def tick(self, now: float) -> None:
        if now >= self.next:
            self.out.append((control(FrameKind.CONNECT, 0), self.target))
            self.sent += 1
            self.next = now + self.every

    def datagrams_to_send(self, now: float) -> list:
        out, self.out = self.out, []
        return out

    def next_event(self) -> None:
        return None


def _full_server(max_peers: int = 2) -> Dealer:
    """A bound Dealer whose table is full of half-open peers (so the next Connect gets a cookie)."""
    server = Dealer.bound(S, SocketOptions(max_peers=max_peers, peer_keepalive=KEEPALIVE), random.Random(1))
    for i in range(max_peers):
        server.receive_datagram(control(FrameKind.CONNECT, 0), ("6.6.6.6", i), 0.0)
    server.datagrams_to_send(0.0)
    return server


def _cookie(server: Dealer, addr, now: float) -> int:
    server.receive_datagram(control(FrameKind.CONNECT, 0), addr, now)
    [(reply, to)] = server.datagrams_to_send(now)
    assert to == addr and kind_of(reply) == FrameKind.CONNECTED
    return codec.parse_frame(reply).session_id


def test_good_peer_connecting_during_a_flood_gets_in_and_delivers_everything():
    """32 addresses flood 32,000 Connects/s at a table of 4: the late client still connects (the
    old evict-the-oldest-half-open rule pushed it out before its Heartbeat arrived)."""
    net = Network(seed=1)
    server = net.add(Dealer.bound(S, SocketOptions(max_peers=4), random.Random(1)), S, "server")
    flooders = [net.add(Flooder(S, 0.001, 0.0), ("6.6.6.%d" % i, 1000 + i)) for i in range(32)]
    net.step(0.2)
    assert len(server.engine.peers) == 4 and not server.engine.connected_peers
    client = net.add(Dealer(), C, "client")
    net.connect(client, S)
    assert net.run_until(lambda: client.connected and server.connected, 0.1)
    for i in range(100):
        net.send(client, [b"good", i.to_bytes(2, "big")])
        net.step(0.002)
    net.step(0.05)
    got = server.recv_all()
    assert got == [[b"good", i.to_bytes(2, "big")] for i in range(100)]
    engine = server.engine
    [peer] = engine.connected_peers
    assert peer.addr == C and peer.state is PeerState.CONNECTED
    # the flood left no events at all (nothing for an application that never drains to pile up)
    assert server.events == [PeerConnected(peer.session_id, C)]
    c = engine.counters
    assert c.cookies_accepted == 1 and c.peers_evicted == 1  # one flooder's half-open slot
    flood = sum(f.engine.sent for f in flooders)
    assert flood > 10_000 and c.cookies_sent > 0.8 * flood  # (half-open flooders get their sid)
    assert c.unknown_session == 0 and c.events_dropped == 0
    assert len(engine.peers) == 4


def test_first_frame_may_be_data():
    """The Heartbeat after Connected was lost: a data frame echoing the cookie opens the
    session as well, and its message is delivered."""
    server = _full_server()
    sid = _cookie(server, C, 0.0)
    server.receive_datagram(codec.encode_data_frame(sid, 1, 1, 0, 5, 5, 0, b"hello"), C, 0.01)
    assert recv_all(server) == [[b"hello"]]
    assert server.peers[sid].state is PeerState.CONNECTED
    assert drain_events(server) == [PeerConnected(sid, C)]


def test_repeated_connect_gets_the_same_cookie_and_no_state():
    server = _full_server()
    first = _cookie(server, C, 0.0)
    assert _cookie(server, C, 0.5) == first
    assert _cookie(server, C2, 0.5) != first
    assert len(server.peers) == 2 and server.counters.cookies_sent == 3
    assert server.next_deadline() == pytest.approx(KEEPALIVE)  # no timer per cookie


def test_forged_and_misaddressed_cookies_are_rejected_and_counted():
    server = _full_server()
    sid = _cookie(server, C, 0.0)
    server.receive_datagram(control(FrameKind.HEARTBEAT, sid ^ 1), C, 0.1)  # forged
    server.receive_datagram(control(FrameKind.HEARTBEAT, sid), C2, 0.1)  # not C2's cookie
    c = server.counters
    assert c.cookies_rejected == 2 and c.unknown_session == 2 and c.cookies_accepted == 0
    assert sid not in server.peers and len(server.peers) == 2
    # answered Disconnected, as any unknown session, so a confused client starts over
    out = server.datagrams_to_send(0.1)
    assert [kind_of(d) for d, _ in out] == [FrameKind.DISCONNECTED] * 2


def test_cookie_lives_one_to_two_keepalive_periods():
    server = _full_server()
    old = _cookie(server, C, 0.0)  # secret 1, current until 10
    mid = _cookie(server, C2, 15.0)  # rotation at 15: secret 2 current until 20, 1 previous
    # at 26 secret 3 is current (until 30) and 2 previous: C2's cookie is still good, C's is stale
    server.receive_datagram(control(FrameKind.HEARTBEAT, old), C, 26.0)
    assert server.counters.cookies_rejected == 1 and old not in server.peers
    server.receive_datagram(control(FrameKind.HEARTBEAT, mid), C2, 26.0)
    assert server.peers[mid].state is PeerState.CONNECTED and server.peers[mid].addr == C2


def test_verified_cookie_with_a_table_full_of_connected_peers_is_refused():
    server = _full_server(max_peers=2)
    sid = _cookie(server, C, 0.0)
    for i in range(2):  # the half-open flooders complete their handshakes after all
        hs = next(p for p in server.peers.values() if p.addr == ("6.6.6.6", i))
        server.receive_datagram(control(FrameKind.HEARTBEAT, hs.session_id), hs.addr, 0.1)
    server.receive_datagram(control(FrameKind.HEARTBEAT, sid), C, 0.2)
    c = server.counters
    assert c.connects_refused == 1 and c.cookies_accepted == 0 and sid not in server.peers
    assert len(server.connected_peers) == 2


def test_cookie_jar_secrets_are_independent_of_the_engine_rng():
    """Two engines with the same seeded rng issue different cookies (SystemRandom secrets), and
    the stateful handshake still draws the reference's session ids from the rng."""
    a, b = _full_server(), _full_server()
    assert _cookie(a, C, 0.0) != _cookie(b, C, 0.0)
    jar = CookieJar(1.0, 0.0)
    assert not jar.outstanding(0.0)
    cookie = jar.issue(C, 0.0)
    assert jar.outstanding(1.9) and not jar.outstanding(2.0)
    assert jar.verify(cookie, C, 1.5)
    assert not jar.verify(cookie, ("10.0.0.2", 40001), 1.5)
    assert not jar.verify(cookie, C, 2.0)
    odd = ("\ud800", 1)  # any hashable works, even text that does not encode
    assert jar.verify(jar.issue(odd, 2.0), odd, 2.0)
