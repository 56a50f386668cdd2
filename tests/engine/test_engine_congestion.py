"""SafeDealer congestion control on virtual time: the per-peer window
(grown on acks, halved on resend timeouts once per round trip) and the RFC 6298 resend timer
floored by ``safe_resend_ivl``."""

from __future__ import annotations

import random

import pytest

from nbmq import codec
from nbmq.engine import SafeDealer
from nbmq.engine.congestion import BETA, DATAGRAM, INITIAL_WINDOW, MIN_WINDOW, Window
from nbmq.engine.peers import Peer, PeerState
from nbmq.engine.queues import SendQueue
from nbmq.options import SocketOptions
from nbmq.testing import Link, connected_pair


def test_rto_follows_rfc6298_and_is_floored():
    win = Window(floor=0.2)
    assert win.rto == 0.2 and win.srtt is None
    win.sample(1.0)  # first sample: srtt = R, rttvar = R / 2, rto = srtt + 4 rttvar
    assert (win.srtt, win.rttvar, win.rto) == (1.0, 0.5, 3.0)
    win.sample(0.5)
    assert win.rttvar == pytest.approx(0.75 * 0.5 + 0.25 * 0.5)
    assert win.srtt == pytest.approx(0.875 * 1.0 + 0.125 * 0.5)
    assert win.rto == pytest.approx(win.srtt + 4 * win.rttvar)
    fast = Window(floor=0.2)
    for _ in range(20):
        fast.sample(0.001)
    assert fast.rto == 0.2  # a loopback RTT never resends faster than safe_resend_ivl


def test_window_grows_on_acks_and_shrinks_once_per_timeout():
    win = Window(floor=0.2)
    win.sample(0.05)
    start = win.cwnd
    win.sent(int(start))
    win.acked(DATAGRAM, None)  # slow start: one datagram per datagram acked
    assert win.cwnd == start + DATAGRAM and win.in_flight == start - DATAGRAM
    win.in_flight = 0
    win.timed_out(1.0)
    assert win.cwnd == pytest.approx((start + DATAGRAM) * BETA) and win.decreases == 1
    win.timed_out(1.0 + win.rto - 0.01)  # same loss episode (within one rto): no second cut
    assert win.decreases == 1
    before = win.cwnd
    win.acked(DATAGRAM, None)  # congestion avoidance now: about a datagram per window
    assert win.cwnd == pytest.approx(before + DATAGRAM * DATAGRAM / before)
    for i in range(100):
        win.timed_out(2.0 + i)
    assert win.cwnd == MIN_WINDOW


def test_slow_start_grows_only_a_window_in_use():
    win = Window(floor=0.2)
    win.sample(0.05)
    start = win.cwnd
    for _ in range(100):  # a sender held to a tenth of the window (send_hwm): no growth
        win.sent(int(start / 10))
        win.acked(int(start / 10), 0.05)
    assert win.cwnd == start and win.cwnd < win.ssthresh
    win.sent(int(start / 2))  # half of it in flight: slow start again
    win.acked(DATAGRAM, 0.05)
    assert win.cwnd == start + DATAGRAM


def _peer() -> Peer:
    return Peer(7, ("h", 1), PeerState.CONNECTED, 0.0, False)


def test_queue_sends_no_more_than_the_window_until_acks_open_it():
    q = SendQueue(send_hwm=100, safe=True, resend_ivl=0.2, resend_limit=5, congestion=True)
    peer = _peer()
    for mid in range(1, 11):  # 10 x 64 KiB: ~1,400 frames, far past the first window
        q.push(codec.shard_message([b"m" * 65536], 0, mid), mid)
    out: list = []
    q.take(0.0, 100_000, out, [peer])
    win = q.windows[peer]
    assert sum(len(d) for d, _ in out) == win.in_flight
    assert INITIAL_WINDOW <= win.in_flight < INITIAL_WINDOW + DATAGRAM
    assert not q.ready(True)  # blocked: the engine does not spin on a closed window
    assert q.take(0.0, 100_000, [], [peer]) == 0
    for data, _ in out[:10]:
        assert q.ack(7, codec.ack_hash(data), 0.01)
    assert win.srtt == pytest.approx(0.01) and q.ready(True)
    more: list = []
    q.take(0.01, 100_000, more, [peer])
    assert 10 <= len(more) <= 30  # what the acks opened (slow start doubled it), no more


def test_resends_follow_the_measured_rto_and_shrink_the_window():
    q = SendQueue(send_hwm=10, safe=True, resend_ivl=0.05, resend_limit=5, congestion=True)
    peer = _peer()
    q.push(codec.shard_message([b"a" * 5000], 0, 1), 1)
    q.push(codec.shard_message([b"b" * 5000], 0, 2), 2)
    out: list = []
    q.take(0.0, 1000, out, [peer])
    win = q.windows[peer]
    for data, _ in out[:11]:  # the first message's frames, acked after 0.3 s
        q.ack(7, codec.ack_hash(data), 0.3)
    # eleven samples of 0.3 s: srtt 0.3, rttvar 0.15 shrinking by 3/4 with each later one
    assert win.rto == pytest.approx(0.3 + 4 * 0.15 * 0.75**10)
    cwnd = win.cwnd
    rto = win.rto
    resent: list = []
    assert q.resend_due(0.04, resent) == 0
    assert q.resend_due(0.3, resent) == 0  # sent at 0: due at 0 + the rto in use now
    assert q.next_resend() == pytest.approx(rto)
    assert q.resend_due(rto, resent) == 1  # the oldest; the timer backs off (RFC 6298 5.5)
    assert win.cwnd == pytest.approx(cwnd * BETA) and win.decreases == 1
    assert win.backoff == 2 and win.rto == rto
    assert q.next_resend() == pytest.approx(2 * rto)  # the other ten, sent at 0, wait for it
    assert q.resend_due(2 * rto - 0.01, []) == 0
    # the ten, and the resent one again (the timer resent it: no backoff for it)
    assert q.resend_due(2 * rto, resent) == 11 and win.decreases == 1  # the same episode


def test_safe_dealer_with_congestion_window_is_exactly_once_without_a_resend_storm():
    # 64 KiB messages with a large send_hwm over a lossy link: every message exactly once,
    # and the resends stay within 2x the frames the link lost.
    opts = SocketOptions(send_hwm=1000, safe_congestion=True, safe_resend_limit=30)
    link = Link(loss=0.05, delay=0.002, jitter=0.001)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts), seed=11, link=link)
    msgs = [[bytes([i % 251]) * 65536] for i in range(60)]
    for m in msgs:
        client.engine.send(m, net.now)
    got: list = []
    done = net.run_until(lambda: got.extend(server.recv_all()) or client.engine.pending_messages == 0, 120.0)
    got.extend(server.recv_all())
    assert done
    assert sorted(bytes(p[0])[:1] for p in got) == sorted(m[0][:1] for m in msgs) and len(got) == 60
    sc = client.engine.counters
    assert net.lost > 0 and sc.resends <= 2 * net.lost
    assert client.engine._sendq.windows  # the window was in use


def test_a_lost_first_window_is_resent_once_the_timers_resend_is_acked():
    # a neighbour's slow start filled the queue: the first window is lost before any RTT
    # sample, so neither RACK nor the tail loss probe can act; the ack of the timer's resend
    # (no sample: Karn's rule) shows the rest lost, not one frame per backed-off timeout
    opts = SocketOptions(send_hwm=100, safe_congestion=True, safe_resend_ivl=0.2, safe_resend_limit=30)
    link = Link(delay=0.005)
    net, server, client = connected_pair(SafeDealer(opts), SafeDealer(opts, random.Random(1)), link=link)
    net.set_link(client.addr, server.addr, Link(loss=1.0, delay=0.005))
    for i in range(4):
        client.engine.send([bytes([i]) * 4000], net.now)
    start = net.now
    net.step(0.1)
    net.set_link(client.addr, server.addr, link)
    got: list = []
    assert net.run_until(lambda: got.extend(server.recv_all()) or client.engine.pending_messages == 0, 10.0)
    assert len(got) == 4
    assert net.now - start < 0.2 + 10 * 0.01  # the timer, then a few round trips (backed off: 0.42 s)
