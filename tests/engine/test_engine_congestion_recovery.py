"""SafeDealer loss recovery on virtual time: a frame an ack
shows lost is resent at once (fast retransmit: DUPTHRESH later transmissions acked and older
than srtt plus a reordering allowance), at most once per round trip; reordering resends nothing;
random loss shrinks the window at most once per round and not at all within LOSS_TOLERANCE;
the resend timer is still the backstop."""

from __future__ import annotations

import random

import pytest

from nbmq import codec
from nbmq.engine import SafeDealer
from nbmq.engine.congestion import DATAGRAM, DUPTHRESH, LOSS_TOLERANCE, MIN_WINDOW, Window
from nbmq.engine.peers import Peer, PeerState
from nbmq.engine.queues import SendQueue
from nbmq.options import SocketOptions
from nbmq.testing import Link, connected_pair

SID = 7


def _sent(frames: int, spacing: float = 0.005, congestion: bool = True):
    """A safe queue that handed out one message of ``frames`` frames, frame ``i`` at
    ``i * spacing`` seconds."""
    q = SendQueue(send_hwm=100, safe=True, resend_ivl=0.2, resend_limit=5, congestion=congestion)
    peer = Peer(SID, ("h", 1), PeerState.CONNECTED, 0.0, False)
    q.push(codec.shard_message([b"m" * (codec.MAX_CHUNK_SIZE * frames)], 0, 1), 1)
    if congestion:  # a window that takes the whole message, past slow start
        win = q.windows[peer] = Window(0.2)
        win.cwnd = win.ssthresh = float(frames * DATAGRAM)
    out: list = []
    for i in range(frames):
        assert q.take(i * spacing, 1, out, [peer]) == 1
    return q, peer, [data for data, _ in out]


def _ack(q: SendQueue, frame, now: float) -> list:
    resent: list = []
    assert q.ack(SID, codec.ack_hash(frame), now, resent)
    return [bytes(data) for data, _ in resent]


def test_fast_retransmit_after_the_threshold_once_per_round_trip():
    q, peer, frames = _sent(12)  # frame i sent at 5 ms * i, acked 10 ms later unless lost
    assert _ack(q, frames[0], 0.010) == []  # srtt 10 ms
    assert _ack(q, frames[2], 0.020) == []  # frame 1 is 15 ms old: within srtt + allowance
    assert _ack(q, frames[3], 0.025) == []  # old enough, but two transmissions behind only
    assert _ack(q, frames[4], 0.030) == [bytes(frames[1])]  # DUPTHRESH behind: lost, resent
    assert q.fast_resends == 1 and q.resends == 1 and q.in_flight == 12 - 4
    for i in range(5, 9):  # at most once per round trip: its resend is newer than these
        assert _ack(q, frames[i], 0.010 + 0.005 * i) == []
    assert q.ack(SID, codec.ack_hash(frames[1]), 0.040, [])
    # frames 9-11 are never acked and nothing sent later can show them lost: 2 srtt after the
    # newest went out it is resent once (tail loss probe), and its ack shows the others lost
    win = q.windows[peer]
    probe = q.next_resend()
    assert probe == pytest.approx(0.055 + 2 * win.srtt)
    resent: list = []
    assert q.resend_due(probe, resent) == 1 and bytes(resent[0][0]) == bytes(frames[11])
    assert win.probes == 1 and q.fast_resends == 2 and win.decreases == 0
    assert q.next_resend() == pytest.approx(0.045 + 0.2)  # one probe, then frame 9's timer
    lost = _ack(q, frames[11], probe + 0.015)
    assert sorted(lost) == sorted([bytes(frames[9]), bytes(frames[10])])
    assert q.fast_resends == 4 and q.resends == 4 and win.decreases == 0


def test_no_fast_retransmit_on_reordering():
    q, _, frames = _sent(41)
    assert _ack(q, frames[0], 0.010) == []
    for i in range(1, 41, 2):  # pairs swapped: reordered by one transmission
        assert _ack(q, frames[i + 1], 0.015 + 0.005 * i) == []
        assert _ack(q, frames[i], 0.015 + 0.005 * i) == []
    # reordered by more than DUPTHRESH transmissions, within the reordering allowance
    q2, _, frames2 = _sent(10, spacing=0.0005)
    assert _ack(q2, frames2[0], 0.010) == []
    late = 1 + DUPTHRESH + 1  # frame 5 went out 2 ms after frame 1: within min_rtt / 4
    for i in range(2, late + 1):
        assert _ack(q2, frames2[i], 0.0105 + 0.0005 * i) == []
    assert _ack(q2, frames2[1], 0.0125) == []
    assert q.resends == q.fast_resends == q2.resends == 0


def test_no_fast_retransmit_without_congestion_control():
    q, _, frames = _sent(12, congestion=False)
    for i in (0, 2, 3, 4, 5, 6):
        assert _ack(q, frames[i], 0.5) == []
    assert q.resends == 0  # the reference's rule: resend on the timer only


def test_a_lossy_round_shrinks_the_window_once():
    q, peer, frames = _sent(60, spacing=0.001)
    win = q.windows[peer]
    _ack(q, frames[0], 0.010)  # ends round 0; round 1 ends with an ack of a resend
    cwnd = win.cwnd
    for i in range(2, 60, 2):  # every odd frame lost: half the round, past LOSS_TOLERANCE
        _ack(q, frames[i], 0.010 + 0.001 * i)
    assert q.fast_resends >= 25 and win.decreases == 0  # the round is not over yet
    resends = q.fast_resends
    _ack(q, frames[1], 0.08)  # the first resend's ack ends the round: one decrease
    assert win.decreases == 1 and win.cwnd < cwnd
    for f in frames[3:60:2]:
        _ack(q, f, 0.08)  # the same episode: no second decrease
    # one resend per lost frame (the last two were found lost by these acks)
    assert win.decreases == 1 and win.cwnd >= MIN_WINDOW and q.fast_resends == 30 == resends + 2


def test_losses_sent_before_a_decrease_do_not_shrink_the_window_again():
    win = Window(0.2)
    win.cwnd = win.ssthresh = 100 * DATAGRAM

    def round_trip(lost: range) -> None:
        """Twenty transmissions go out and are acked (10 ms RTT); then ``lost`` are found lost."""
        for _ in range(20):
            win.acked(DATAGRAM, 0.010)
        win.tx += 20
        for tx in lost:
            win.found_lost(tx)
        win.round_acked = 20
        win.end_round()

    round_trip(range(0))
    round_trip(range(20, 30))  # a third of the round lost: past LOSS_TOLERANCE
    assert win.decreases == 1 and win.recovery_tx == win.tx == 40
    cwnd = win.cwnd
    round_trip(range(30, 40))  # found now, sent before the decrease: the same congestion event
    assert win.decreases == 1 and win.cwnd >= cwnd and win.lost == 20
    round_trip(range(45, 55))  # sent after it: a new event
    assert win.decreases == 2 and win.cwnd < cwnd and win.lost == 30


def test_random_loss_within_tolerance_keeps_the_window():
    q, peer, frames = _sent(90, spacing=0.001)
    win = q.windows[peer]
    _ack(q, frames[0], 0.010)
    cwnd = win.cwnd
    lost = set(range(5, 80, 20))  # 5% of the round
    assert len(lost) / 89 < LOSS_TOLERANCE
    for i in range(1, 90):
        if i not in lost:
            _ack(q, frames[i], 0.010 + 0.001 * i)
    assert q.fast_resends == len(lost)
    for i in sorted(lost):
        _ack(q, frames[i], 0.11)  # the resends' acks end the round
    assert win.decreases == 0 and win.cwnd > cwnd


def test_the_timer_is_still_the_backstop_for_a_tail_loss():
    q, peer, frames = _sent(6)
    for i in range(5):  # the last frame is lost: nothing after it can be acked
        assert _ack(q, frames[i], 0.005 * i + 0.004) == []  # srtt 4 ms
    resent: list = []
    assert q.resend_due(0.034, resent) == 0  # sent at 25 ms: probed 10 ms later (PROBE_FLOOR)
    assert q.resend_due(0.035, resent) == 1 and bytes(resent[0][0]) == bytes(frames[5])
    assert q.fast_resends == 1 and q.windows[peer].decreases == 0
    # the probe is lost too: the timer, 225 ms after it went out, no second probe
    assert q.resend_due(0.234, resent) == 0
    assert q.resend_due(0.2351, resent) == 1 and bytes(resent[1][0]) == bytes(frames[5])
    assert q.fast_resends == 1 and q.windows[peer].decreases == 1


@pytest.mark.parametrize("jitter", [0.0, 0.0005, 0.001])
def test_lossy_link_recovers_fast_with_few_resends(jitter):
    # 5% loss each way: nearly every 64 KiB message loses a frame. Every message arrives once,
    # resends stay within 2x the datagrams the link lost, and recovery does not wait for the
    # resend timer (RTO-only recovery took 0.83 s of virtual time here).
    opts = SocketOptions(send_hwm=1000, safe_congestion=True, safe_resend_limit=30)
    link = Link(loss=0.05, delay=0.002, jitter=jitter)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts), seed=11, link=link)
    msgs = [[bytes([i % 251]) * 65536] for i in range(60)]
    start = net.now
    for m in msgs:
        client.engine.send(m, net.now)
    got: list = []
    done = net.run_until(lambda: got.extend(server.recv_all()) or client.engine.pending_messages == 0, 120.0)
    got.extend(server.recv_all())
    assert done and len(got) == 60
    assert sorted(bytes(p[0]) for p in got) == sorted(m[0] for m in msgs)
    sendq = client.engine._sendq
    c = client.engine.counters
    assert net.lost > 500 and c.resends <= 2 * net.lost
    assert sendq.fast_resends >= 0.9 * c.resends
    assert net.now - start < 0.25  # virtual seconds: no message waited for its timer
    assert sum(c.dropped.values()) == 0 and sum(server.engine.counters.dropped.values()) == 0


def test_a_stall_resends_the_oldest_frame_not_the_window():
    # acks held up past the resend timer (a receiver starved of CPU): one resend, the timer
    # backs off for the rest (RFC 6298 5.5), and the next RTT sample resets it
    q, peer, frames = _sent(40, spacing=0.0001)
    win = q.windows[peer]
    resent: list = []
    assert q.resend_due(0.2, resent) == 1 and bytes(resent[0][0]) == bytes(frames[0])
    assert win.backoff == 2 and q.next_resend() == pytest.approx(0.4001)  # frame 1: 0.2 s backed off
    assert q.resend_due(0.39, resent) == 0  # frame 0 again at 0.4 (the timer resent it: no backoff)
    for i in range(1, 40):  # the stall ends: nothing more is resent
        assert _ack(q, frames[i], 0.3) == []
    assert win.backoff == 1  # reset by the first new sample
    assert _ack(q, frames[0], 0.31) == []
    assert q.in_flight == 0 and q.resends == 1
