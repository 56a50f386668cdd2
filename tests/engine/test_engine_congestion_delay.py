"""SafeDealer's delay signal and pacing on virtual time: a round whose smallest RTT exceeds
``min_rtt`` by more than the target shrinks the window once (then a round is left alone) and
ends slow start; a delayed sample ends slow start at once; a queue that decreases do not drain
switches the window to loss only (competing) until the queue drains; loss in a congested round
is congestion; pacing holds first sends to the window's rate; the per-peer path state is in the
counters."""

from __future__ import annotations

import contextlib
import math
import random

import pytest

from fuzz import engine_targets
from nbmq import codec
from nbmq.engine import SafeDealer, sockets
from nbmq.engine.congestion import (
    ALPHA_CUBIC,
    BETA,
    COMPETE_DRAIN_DELAY,
    COMPETE_STRIKES,
    CSS_GROWTH_DIVISOR,
    CUBIC_C,
    CUBIC_SEGMENT,
    DATAGRAM,
    DELAY_BETA,
    DELAY_FLOOR,
    DRAIN_HOLD,
    FIRST_DRAIN,
    HOST_RATE,
    HOST_TARGET_MAX,
    INITIAL_WINDOW,
    MAX_WINDOW,
    MIN_RTT_WINDOW,
    MIN_WINDOW,
    PACE_MIN_BURST,
    PACE_QUANTUM,
    PACING_GAIN,
    QDELAY_TARGET,
    RATE_SPAN,
    REDRAIN_FALL,
    RENO_SEGMENT,
    SHARE_FLOOR,
    SHARE_WHOLE,
    STANDING_INTERVAL,
    VELOCITY_ROUNDS,
    VELOCITY_SHARE,
    Window,
)
from nbmq.engine.counters import PathState
from nbmq.engine.peers import Peer, PeerState
from nbmq.engine.queues import SendQueue
from nbmq.errors import WouldBlock
from nbmq.options import SocketOptions
from nbmq.testing import Link, Network, connected_pair

BASE = 0.010  # base RTT, seconds


def _round(win: Window, rtt: float, acks: int = 20, lost: int = 0) -> None:
    """One round of ``acks`` acks, every one an RTT sample of ``rtt`` seconds, ``lost`` frames
    found lost; then the round ends with the window in use (as much as it holds in flight)."""
    for _ in range(acks):
        win.sent(DATAGRAM)
        win.acked(DATAGRAM, rtt)
    win.in_flight = int(win.cwnd)
    win.round_acked = acks
    win.round_lost = lost
    win.end_round()


def _avoiding(cwnd: float = 100 * DATAGRAM) -> Window:
    """A window past slow start that has seen the base RTT."""
    win = Window(floor=0.2)
    win.cwnd = win.ssthresh = cwnd
    _round(win, BASE)
    return win


def test_a_round_within_the_target_keeps_growing():
    win = _avoiding()
    cwnd = win.cwnd
    _round(win, BASE + QDELAY_TARGET * 0.9)
    assert win.decreases == 0 and win.cwnd > cwnd
    assert win.qdelay == pytest.approx(QDELAY_TARGET * 0.9)


def test_a_standing_queue_shrinks_the_window_once_then_holds_a_round():
    win = _avoiding()
    cwnd = win.cwnd
    rtt = BASE + 3 * QDELAY_TARGET
    _round(win, rtt)
    # scaled towards min_rtt + target / 2, between DELAY_FLOOR and DELAY_BETA of itself
    scale = (BASE + QDELAY_TARGET / 2) / rtt
    assert DELAY_FLOOR < scale < DELAY_BETA
    grown = cwnd + 20 * DATAGRAM * DATAGRAM / cwnd  # (roughly: the round's acks grew it first)
    assert win.decreases == 1 and win.cwnd == pytest.approx(grown * scale, rel=0.01)
    assert win.ssthresh == win.cwnd
    after = win.cwnd
    _round(win, rtt)  # the round after a decrease shows its effect: left alone
    assert win.decreases == 1 and win.cwnd >= after
    _round(win, rtt)
    assert win.decreases == 2


def test_one_slow_round_cannot_collapse_the_window():
    win = _avoiding()
    cwnd = win.cwnd
    _round(win, BASE + 1.0)  # a stalled receiver: RTT 100x the base
    assert win.cwnd >= cwnd * DELAY_FLOOR


def test_a_delayed_sample_ends_slow_start_at_once():
    win = Window(floor=0.2)
    assert win.cwnd == INITIAL_WINDOW and win.ssthresh > win.cwnd
    win.sent(INITIAL_WINDOW)
    win.acked(DATAGRAM, BASE)
    grown = win.cwnd
    assert grown == INITIAL_WINDOW + DATAGRAM  # slow start
    win.sent(DATAGRAM)
    win.acked(DATAGRAM, BASE + 2 * QDELAY_TARGET)  # a queue is building
    assert win.ssthresh == grown and win.cwnd < grown + DATAGRAM  # avoidance from here


def test_a_queue_decreases_do_not_drain_is_not_ours_until_it_drains():
    win = _avoiding(400 * DATAGRAM)
    rtt = BASE + 10 * QDELAY_TARGET  # someone else's queue: it stays whatever we do
    for _ in range(2 * (COMPETE_STRIKES + 1)):
        _round(win, rtt)
    assert win.competing
    decreases, cwnd = win.decreases, win.cwnd
    for _ in range(4):
        _round(win, rtt)
    assert win.decreases == decreases and win.cwnd > cwnd  # loss only: delay is ignored
    _round(win, rtt, lost=1)  # a loss at a full queue is congestion
    assert win.decreases == decreases + 1
    _round(win, BASE + QDELAY_TARGET / 4)  # the queue drained: back to yielding to delay
    assert not win.competing


def test_our_own_queue_never_makes_the_window_compete():
    win = _avoiding(400 * DATAGRAM)
    bdp = 40 * DATAGRAM  # the path holds this much at the base RTT; the rest queues
    for _ in range(6 * COMPETE_STRIKES):
        _round(win, BASE + max(0.0, win.cwnd - bdp) / bdp * BASE)
    assert not win.competing and win.strikes < COMPETE_STRIKES
    assert win.qdelay <= QDELAY_TARGET  # drained to within the target


def test_loss_in_a_congested_round_is_congestion_whatever_the_tolerance():
    win = _avoiding()
    cwnd = win.cwnd
    _round(win, BASE, acks=40, lost=1)  # 1 of 41: random loss, tolerated
    assert win.decreases == 0
    _round(win, BASE + 3 * QDELAY_TARGET, acks=40, lost=1)  # the same with a standing queue
    assert win.decreases == 1 and win.cwnd == pytest.approx(win.ssthresh)
    assert win.cwnd <= cwnd * BETA + 2 * DATAGRAM


def test_pacing_rate_follows_window_and_rtt():
    win = Window(floor=0.2)
    assert win.pacing_rate == math.inf  # no RTT sample yet: not paced
    win.sample(0.01)
    assert win.pacing_rate == pytest.approx(2 * win.cwnd / 0.01)  # slow start
    win.ssthresh = win.cwnd
    assert win.pacing_rate == pytest.approx(PACING_GAIN * win.cwnd / 0.01)


def test_pace_bucket_drains_and_refills_at_the_rate():
    win = Window(floor=0.2)
    win.cwnd = win.ssthresh = 10 * DATAGRAM
    win.sample(0.1)  # 1.25 * 5000 B / 0.1 s = 62.5 kB/s: a datagram per 8 ms
    rate = win.pacing_rate
    assert win.pace_allow(1.0) == PACE_MIN_BURST  # the bucket starts full (and stays capped)
    win.pace_tokens -= PACE_MIN_BURST + 100  # sent past it: in debt
    assert win.pace_allow(1.0) < 0
    due = win.pace_next()
    assert due == pytest.approx(1.0 + (DATAGRAM + 100) / rate)
    assert win.pace_allow(due) == pytest.approx(DATAGRAM)


def test_take_stops_for_pacing_and_says_when_to_come_back():
    q = SendQueue(send_hwm=100, safe=True, resend_ivl=0.2, resend_limit=5, congestion=True)
    peer = Peer(7, ("h", 1), PeerState.CONNECTED, 0.0, False)
    win = q.windows[peer] = Window(0.2)
    win.cwnd = win.ssthresh = 100 * DATAGRAM  # the window has room for the whole message
    win.sample(0.1)
    q.push(codec.shard_message([b"m" * (codec.MAX_CHUNK_SIZE * 40)], 0, 1), 1)
    out: list = []
    n = q.take(1.0, 1000, out, [peer])
    burst = max(PACE_MIN_BURST, win.pacing_rate * PACE_QUANTUM)
    assert 0 < n < 40 and burst <= sum(len(d) for d, _ in out) <= burst + DATAGRAM  # one burst
    assert not q.ready(True) and q.next_send() == win.pace_next() > 1.0
    q.pace_due(q.next_send())
    assert q.ready(True) and q.next_send() is None
    assert q.take(win.pace_next(), 1000, out, [peer]) >= 1


def test_paced_engine_wakes_for_pacing_and_delivers_everything():
    opts = SocketOptions(send_hwm=100, safe_congestion=True)
    link = Link(delay=0.02)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts), seed=3, link=link)
    msgs = [[bytes([i]) * 16384] for i in range(40)]
    for m in msgs:
        client.engine.send(m, net.now)
    got: list = []
    assert net.run_until(lambda: got.extend(server.recv_all()) or client.engine.pending_messages == 0, 30.0)
    got.extend(server.recv_all())
    assert [bytes(p[0])[:1] for p in got] == [m[0][:1] for m in msgs]
    paths = client.engine.counters.paths
    assert len(paths) == 1
    path = next(iter(paths.values()))
    assert path.min_rtt == pytest.approx(0.04, abs=0.005) and path.srtt >= path.min_rtt
    assert path.transmissions >= 40 * 36 and path.resends == path.lost == 0 and path.loss_rate == 0.0
    assert path.cwnd > 0 and path.in_flight == 0 and 0 < path.pacing_rate < math.inf
    assert set(path.as_dict()) >= {"srtt", "min_rtt", "cwnd", "pacing_rate", "in_flight", "resends", "loss_rate"}
    assert "paths" not in client.engine.counters.as_dict()


def test_path_state_counts_resends_and_losses():
    opts = SocketOptions(send_hwm=100, safe_congestion=True, safe_resend_limit=30)
    link = Link(loss=0.05, delay=0.002)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts), seed=5, link=link)
    for i in range(20):
        client.engine.send([bytes([i]) * 16384], net.now)
    assert net.run_until(lambda: client.engine.pending_messages == 0, 60.0)
    path = next(iter(client.engine.counters.paths.values()))
    assert path.resends == client.engine.counters.resends > 0
    assert 0 < path.lost <= path.resends and path.loss_rate == pytest.approx(path.lost / path.transmissions)


def test_competing_slow_starts_to_the_first_loss_then_grows_at_renos_rate():
    win = _avoiding(400 * DATAGRAM)
    assert win.increase == DATAGRAM
    for _ in range(2 * (COMPETE_STRIKES + 1)):
        _round(win, BASE + 10 * QDELAY_TARGET)
    assert win.competing and win.ssthresh == MAX_WINDOW  # the queue is not ours: it ends no slow start
    cwnd = win.cwnd
    win.acked(DATAGRAM, BASE + 10 * QDELAY_TARGET)
    assert win.cwnd == cwnd + DATAGRAM / CSS_GROWTH_DIVISOR and win.ssthresh == MAX_WINDOW  # conservatively
    assert win.pacing_rate == pytest.approx(PACING_GAIN * win.cwnd / win.srtt)  # paced as it grows
    _round(win, BASE + 10 * QDELAY_TARGET, lost=3)  # the queue overflowed: slow start is over
    assert win.ssthresh < MAX_WINDOW and win.increase == pytest.approx(ALPHA_CUBIC * RENO_SEGMENT)  # (no clock)
    cwnd = win.cwnd
    win.acked(DATAGRAM, BASE + 10 * QDELAY_TARGET)
    assert win.cwnd == pytest.approx(cwnd + ALPHA_CUBIC * RENO_SEGMENT * DATAGRAM / cwnd)


QUEUE = 10 * QDELAY_TARGET  # the queue a competing window below finds, seconds


def _competing(cwnd: float = 400 * DATAGRAM) -> Window:
    """A window competing with a queue of ``QUEUE`` that its decreases did not drain (no clock:
    no drain round to check with), back at ``cwnd`` bytes, its smoothed RTT the queue's."""
    win = _avoiding(cwnd)
    for _ in range(2 * (COMPETE_STRIKES + 1)):
        _round(win, BASE + QUEUE)
    assert win.competing
    win.cwnd = cwnd
    win.srtt = BASE + QUEUE
    return win


def test_a_competing_window_regrows_by_cubics_curve_from_its_last_decrease():
    win = _competing()
    srtt = BASE + QUEUE
    win.round_lost = 5  # a loss at the overflow, at t = 100 s
    win.end_round(100.0)
    wmax = 400 * DATAGRAM
    assert win.cwnd == pytest.approx(BETA * wmax)
    k = ((1 - BETA) * wmax / (CUBIC_C * CUBIC_SEGMENT)) ** (1 / 3)  # seconds back to W_max
    assert win.cubic_wmax == wmax and win.cubic_k == pytest.approx(k)
    # the next round trip follows the curve from the decrease (concave, slow near W_max)
    assert win.increase == pytest.approx(CUBIC_C * CUBIC_SEGMENT * ((srtt - k) ** 3 + k**3))
    # a round ending at 100 + k + 1 s grows the window to the curve's value a round trip later
    win.round_lost = 0
    win.end_round(100.0 + k + 1.0)
    t = 1.0 + srtt
    assert win.increase == pytest.approx(CUBIC_C * CUBIC_SEGMENT * t**3 + wmax - win.cwnd)
    win.cwnd = 100 * DATAGRAM  # far below the curve: at most half the window per round trip
    win.end_round(100.0 + k + 3.5)
    assert win.increase == pytest.approx(50 * DATAGRAM)


SLOW_LINK = 600e3  # bytes/s (4.8 Mbit/s): two floor windows alone queue past QDELAY_TARGET
FAST_LINK = 6e6  # bytes/s (48 Mbit/s): QDELAY_TARGET is the target


@pytest.mark.parametrize(
    ("path_rate", "segment"), [(0.0, RENO_SEGMENT), (FAST_LINK, RENO_SEGMENT), (SLOW_LINK, DATAGRAM)]
)
def test_a_small_competing_window_grows_at_least_as_tcp_reno_would_from_its_decrease(path_rate, segment):
    win = _competing()
    win.period_rate = path_rate
    assert (win.delay_target() > QDELAY_TARGET) == (path_rate == SLOW_LINK)
    win.cwnd = 10 * CUBIC_SEGMENT  # a short queue: CUBIC's curve is flat this near W_max
    win.round_lost = 2
    win.end_round(100.0)
    after = win.cwnd
    assert after == pytest.approx(BETA * 10 * CUBIC_SEGMENT)
    assert win.increase == pytest.approx(ALPHA_CUBIC * segment)  # (the estimate a round on)
    srtt = win.srtt
    for i in range(1, 4):  # ALPHA_CUBIC segments a round trip, the curve below that
        win.cwnd = after + i * ALPHA_CUBIC * segment
        win.end_round(100.0 + i * srtt)
        assert win.increase == pytest.approx(ALPHA_CUBIC * segment)
        curve = CUBIC_C * CUBIC_SEGMENT * ((i + 1) * srtt - win.cubic_k) ** 3 + win.cubic_wmax
        assert curve < win.cwnd + win.increase
    win.cwnd = win.cubic_west = win.cubic_wmax  # past W_max: a segment a round trip
    win.end_round(100.0 + 4 * srtt)
    assert win.increase == pytest.approx(segment)
    win.cwnd = win.cubic_west + 5 * segment  # above both: no growth
    win.end_round(100.0 + 5 * srtt)
    assert win.increase == 0.0


def test_a_window_that_peaked_lower_than_before_leaves_room_fast_convergence():
    win = _competing(100 * CUBIC_SEGMENT)
    win.round_lost = 2
    win.end_round(100.0)
    assert win.cubic_wmax == 100 * CUBIC_SEGMENT
    win.cwnd = 90 * CUBIC_SEGMENT  # the next loss comes below W_max: a new flow took a share
    win.round_lost = 2
    win.end_round(105.0)
    assert win.cubic_wmax == pytest.approx(90 * CUBIC_SEGMENT * (1 + BETA) / 2)
    assert win.cwnd == pytest.approx(BETA * 90 * CUBIC_SEGMENT)
    win.cwnd = 95 * CUBIC_SEGMENT  # past it: W_max is the window again
    win.round_lost = 2
    win.end_round(110.0)
    assert win.cubic_wmax == 95 * CUBIC_SEGMENT


def test_a_loss_episode_answered_by_a_decrease_does_not_decrease_again():
    win = _competing()
    win.tx = 1000
    for tx in (990, 991, 992):  # found lost at the overflow
        win.found_lost(tx)
    win.end_round(100.0)
    assert win.decreases == 4  # the three strikes' and this one
    after = win.cwnd
    win.tx = 1100
    for tx in (995, 996):  # frames of the same overflow, sent before the decrease
        win.found_lost(tx)
    win.end_round(100.1)
    win.end_round(100.2)
    assert win.decreases == 4 and win.cwnd >= after and win.lost == 5
    win.found_lost(1050)  # sent after it: a new congestion event
    win.end_round(100.3)
    assert win.decreases == 5


def test_a_competing_windows_timeout_starts_cubics_curve_over_from_the_window_before_it():
    win = _competing()
    win.round_lost = 5
    win.end_round(100.0)  # a loss at an overflow starts a curve...
    before = win.cwnd = 300 * DATAGRAM  # ... regrown since; then the resend timer fires
    win.timed_out(110.0)
    assert win.cwnd == pytest.approx(BETA * before) and win.decreases == 5
    wmax = before * (1 + BETA) / 2  # (below the W_max before: fast convergence)
    k = ((wmax - BETA * before) / (CUBIC_C * CUBIC_SEGMENT)) ** (1 / 3)
    assert win.cubic_epoch == 110.0 and win.cubic_wmax == pytest.approx(wmax) and win.cubic_k == pytest.approx(k)
    win.end_round(111.0)  # a round a second later grows along the new curve, not the old one's
    t = 1.0 + win.srtt - k
    assert win.increase == pytest.approx(CUBIC_C * CUBIC_SEGMENT * (t**3 + k**3))


def test_a_timeout_during_a_drain_round_cuts_the_window_it_restores():
    win = _competing()
    win.drain_due = 0.0
    win._drain(None)
    win.timed_out(50.0)
    assert win.cwnd == MIN_WINDOW and win.drain_cwnd == pytest.approx(BETA * 400 * DATAGRAM)
    assert win.cubic_wmax == 400 * DATAGRAM and win.cubic_epoch == 50.0


def test_growth_speeds_up_while_rounds_find_no_queue_and_starts_over_at_one():
    win = _avoiding(400 * DATAGRAM)  # (its round is the first calm one)
    increases = []
    for _ in range(VELOCITY_ROUNDS + 3):
        _round(win, BASE)
        increases.append(win.increase)
    # one datagram per round until VELOCITY_ROUNDS calm rounds, then doubling every round
    assert increases == [DATAGRAM] * (VELOCITY_ROUNDS - 2) + [DATAGRAM << k for k in range(1, 6)]
    cwnd = win.cwnd
    win.acked(DATAGRAM, BASE)
    assert win.cwnd == pytest.approx(cwnd + 32 * DATAGRAM * DATAGRAM / cwnd)
    for _ in range(20):  # ... never past VELOCITY_SHARE of the window per round
        _round(win, BASE)
        assert win.increase <= max(VELOCITY_SHARE * win.cwnd, DATAGRAM)
    assert win.increase > 100 * DATAGRAM
    _round(win, BASE + 0.9 * QDELAY_TARGET)  # a round with a queue below the target: no decrease...
    assert win.decreases == 0 and win.velocity > 1
    _round(win, BASE + 3 * QDELAY_TARGET)  # ... a standing queue: back to one datagram
    assert win.decreases == 1 and win.velocity == 1 and win.increase == DATAGRAM


def test_a_starved_window_speeds_up_by_as_much_as_a_large_one_on_the_same_path():
    """Growth per round is capped by a share of what the path carries, not of the window
    alone: two flows on one queue then grow by the same bytes per round (additive), and the
    decreases they share converge them; capped by their own windows they kept their ratio."""
    rate = 400 * DATAGRAM / BASE  # the path carries 400 datagrams per round trip
    large, starved = _avoiding(400 * DATAGRAM), _avoiding(20 * DATAGRAM)
    increases: list[list[float]] = [[], []]
    for win, grown in zip((large, starved), increases):
        win.period_rate = rate
        for _ in range(VELOCITY_ROUNDS + 4):  # (the large window's own share is not reached)
            _round(win, BASE)
            grown.append(win.increase)
    assert increases[0] == increases[1]
    assert starved.increase > VELOCITY_SHARE * starved.cwnd
    assert starved.increase <= VELOCITY_SHARE * rate * starved.srtt


def test_a_sub_ms_round_stretched_by_a_scheduler_slice_is_not_a_standing_queue():
    sub_ms = 0.0005
    win = Window(floor=0.2)
    win.cwnd = win.ssthresh = 400 * DATAGRAM
    now = _timed_round(win, sub_ms, 1.0)
    for _ in range(5):
        now = _timed_round(win, sub_ms, now)
    cwnd = win.cwnd
    # a receiver that waited 4 ms for a core: every RTT of the next rounds is 4 ms longer
    now = _timed_round(win, sub_ms + 0.004, now + 0.004)
    now = _timed_round(win, sub_ms + 0.004, now)
    assert win.decreases == 0 and win.cwnd >= cwnd and win.velocity == 1
    # a queue that stays for STANDING_INTERVAL is standing: the window yields to it then
    start = now - 2 * (sub_ms + 0.004)
    for _ in range(100):
        now = _timed_round(win, sub_ms + 0.004, now)
        if win.decreases:
            break
    assert win.decreases == 1 and win.cwnd < cwnd
    assert STANDING_INTERVAL <= now - start <= STANDING_INTERVAL + 2 * (sub_ms + 0.004)
    assert win.qdelay == pytest.approx(0.004)


def test_a_host_bound_path_keeps_a_longer_queue_than_a_link():
    win = _avoiding()
    win.cwnd = 100 * HOST_RATE * win.srtt
    win.period_rate = HOST_RATE / 2  # a link: the target is QDELAY_TARGET
    assert win.delay_target() == QDELAY_TARGET
    win.period_rate = 3 * HOST_RATE  # loopback: the queue is a process's socket buffer
    assert win.delay_target() == pytest.approx(3 * QDELAY_TARGET)
    win.period_rate = 100 * HOST_RATE
    assert win.delay_target() == pytest.approx(HOST_TARGET_MAX * QDELAY_TARGET)
    win.period_rate = 3 * HOST_RATE
    win.cwnd = HOST_RATE / 2 * win.srtt  # a window a delay decrease cut keeps the path's target
    assert win.delay_target() == pytest.approx(3 * QDELAY_TARGET)
    cwnd = win.cwnd
    _round(win, BASE + 2 * QDELAY_TARGET)
    assert win.decreases == 0 and win.cwnd > cwnd


def test_the_path_rate_is_measured_over_spans_not_one_round_of_bunched_acks():
    sub_ms = 0.0005
    win = _avoiding()
    now = _timed_round(win, sub_ms, 1.0)
    # a descheduled receiver's acks of a whole 25 KB window arrive within one 0.1 ms round:
    # 250 MB/s for that round, on a 5 MB/s link
    now = _timed_round(win, sub_ms, now - sub_ms + 0.0001, acks=50)
    while now < 1.0 + 2 * RATE_SPAN:
        now = _timed_round(win, sub_ms, now + 0.002, acks=5)
    assert win.path_rate < HOST_RATE / 10 and win.delay_target() == QDELAY_TARGET


def test_a_window_not_in_use_does_not_speed_up():
    win = _avoiding(400 * DATAGRAM)
    for _ in range(VELOCITY_ROUNDS + 1):
        _round(win, BASE)
    assert win.velocity > 1
    win.in_flight = 0
    for _ in range(VELOCITY_ROUNDS + 3):
        for _ in range(20):
            win.sent(DATAGRAM)
            win.acked(DATAGRAM, BASE)
        win.round_acked = 20
        win.end_round()  # nothing left in flight: the sender had no more to send
    assert win.velocity == 1 and win.increase == DATAGRAM


@pytest.mark.parametrize("host_bound", [True, False])
def test_a_host_bound_window_whose_acks_came_in_one_batch_still_speeds_up(host_bound):
    """On a host-bound path what a round delivered counts as in use; on a link only what is in
    flight does (acks there come spread out)."""
    win = _avoiding(400 * DATAGRAM)
    win.in_flight = 0
    win.period_rate = 2 * HOST_RATE if host_bound else HOST_RATE / 10
    for _ in range(VELOCITY_ROUNDS + 2):
        acks = int(win.cwnd // DATAGRAM)
        for _ in range(acks):
            win.sent(DATAGRAM)
        for _ in range(acks):  # the whole round's acks read in one batch, before any send
            win.acked(DATAGRAM, BASE)
        win.round_acked = acks
        win.end_round()  # nothing in flight now, but the round delivered a whole window
    assert (win.velocity > 1 and win.increase > DATAGRAM) == host_bound


def _timed_round(win: Window, rtt: float, now: float, acks: int = 20, lost: int = 0) -> float:
    """One round of ``acks`` RTT samples of ``rtt`` seconds ending at ``now``, ``lost`` frames
    found lost; returns the round's end time plus ``rtt`` (when the next one ends)."""
    for _ in range(acks):
        win.sent(DATAGRAM)
        win.acked(DATAGRAM, rtt)
    for _ in range(lost):
        win.found_lost(win.tx)
    win.round_acked = acks
    win.end_round(now)
    return now + rtt


def _through_drain(win: Window, rtt: float, now: float, acks: int = 2) -> float:
    """Rounds of ``rtt`` seconds from ``now`` until the drain round under way ends (bounded);
    returns when the next round ends."""
    for _ in range(1000):
        if not win.drain_cwnd:
            break
        now = _timed_round(win, rtt, now, acks=acks)
    assert not win.drain_cwnd
    return now


def test_a_flow_drains_once_soon_after_it_starts_and_restores_its_window():
    win = _avoiding()
    now = _timed_round(win, BASE, 1.0)  # the first round with a clock: the first drain is due
    while now < 1.0 + FIRST_DRAIN:
        now = _timed_round(win, BASE, now)
        assert not win.drain_cwnd
    cwnd = win.cwnd
    now = _timed_round(win, BASE, now)
    assert win.drain_cwnd == pytest.approx(cwnd, rel=0.05) and win.cwnd == MIN_WINDOW
    began = now - BASE
    now = _timed_round(win, BASE, now, acks=2)  # its queue is empty, but the drain is held...
    assert win.drain_cwnd and win.cwnd == MIN_WINDOW
    now = _through_drain(win, BASE, now)  # ... for max(2 * srtt, DRAIN_HOLD): the window is back
    assert win.drains == 1 and win.cwnd >= cwnd
    assert now - BASE - began >= max(2 * BASE, DRAIN_HOLD)


def _based_after_a_late_start() -> tuple[Window, float]:
    """A window that started behind another flow's standing queue and whose first drain found
    the base (the other flow yielded to it); returns it and when its next round ends."""
    win = _avoiding()  # (60 datagrams a round: the target's floor stays below QDELAY_TARGET)
    win.min_rtt = BASE + 0.008  # what a flow starting behind another's standing queue measured
    now = 1.0
    while win.drains == 0:  # ... its drain finds the queue gone (the other flow yields to it)
        now = _timed_round(win, BASE + 0.008 if not win.drain_cwnd else BASE, now, acks=60)
    assert win.min_rtt == pytest.approx(BASE)
    return win, now


def test_a_late_flow_learns_the_base_its_start_hid_and_a_grown_base_is_learnt_in_two_periods():
    win, now = _based_after_a_late_start()
    # the base grows for good, by less than twice the target (the window yields to it, and
    # does not compete); one period above it keeps the smaller, the second learns it
    grown = BASE + 1.5 * QDELAY_TARGET
    periods, end = 0, now + 4 * MIN_RTT_WINDOW
    while win.min_rtt != pytest.approx(grown) and now < end:
        began = win.period_start
        now = _timed_round(win, grown, now, acks=60)
        assert not win.competing
        if win.period_start != began:
            periods += 1
            assert periods == 2 or win.min_rtt == pytest.approx(BASE)
    assert win.min_rtt == pytest.approx(grown) and periods == 2


def test_a_competing_window_does_not_take_its_neighbours_queue_for_its_base():
    win, now = _based_after_a_late_start()
    # a queue-filling neighbour's queue stands in every round from here on: the window
    # competes, and periods whose every round found that queue do not make it the base
    queue = BASE + 0.005
    periods, end = 0, now + 4 * (MIN_RTT_WINDOW + COMPETE_DRAIN_DELAY)
    while now < end:
        began = win.period_start
        now = _timed_round(win, queue, now, acks=60)
        periods += win.period_start != began
        assert win.min_rtt == pytest.approx(BASE)
    assert win.competing and periods >= 3
    # the neighbour leaves: its rounds find the queue gone, and the window yields to delay again
    now = _timed_round(win, BASE, now, acks=60)
    assert not win.competing and win.min_rtt == pytest.approx(BASE)


def test_the_first_drain_takes_a_smaller_handshake_round_trip_for_the_base():
    # beside TCP: the handshake went through the empty link, the first frame behind the queue
    # TCP's slow start filled, and no drain empties a queue TCP keeps full
    queue = BASE + 20 * QDELAY_TARGET
    seeded, plain = Window(floor=0.2, handshake_rtt=BASE), Window(floor=0.2)
    for win in (seeded, plain):
        now = 1.0
        while win.drains == 0 and now < 1.0 + 2 * FIRST_DRAIN:
            assert win.min_rtt in (math.inf, pytest.approx(queue))  # (not the base before the drain)
            now = _timed_round(win, queue, now, acks=60)
    assert seeded.drains == plain.drains == 1
    assert seeded.min_rtt == pytest.approx(BASE) and seeded.competing  # the queue outlasted its drain
    assert plain.min_rtt == pytest.approx(queue) and not plain.competing


def test_a_drain_that_finds_the_base_well_lower_drains_again_soon():
    win = Window(floor=0.2)
    win.cwnd = win.ssthresh = 60.0 * DATAGRAM
    first, found, then = 2 * BASE, 1.2 * BASE, 1.1 * BASE  # the base each drain finds
    assert found < REDRAIN_FALL * first and then > REDRAIN_FALL * found
    now, ends = 1.0, []
    while len(ends) < 3 and now < 1.0 + FIRST_DRAIN + 3 * MIN_RTT_WINDOW:
        draining = bool(win.drain_cwnd)
        rtt = (found if win.drains == 0 else then) if draining else first if win.drains == 0 else found
        now = _timed_round(win, rtt, now, acks=60)  # every round sees min_rtt again
        if draining and not win.drain_cwnd:
            ends.append(now)
    assert win.min_rtt == pytest.approx(then)
    # the second drain does not wait for min_rtt to go unseen (it starts FIRST_DRAIN after the
    # first ends and is held DRAIN_HOLD); the third, which found no lower base, does
    assert ends[1] - ends[0] == pytest.approx(FIRST_DRAIN + DRAIN_HOLD, abs=3 * found)
    assert len(ends) == 2 or ends[2] - ends[1] > MIN_RTT_WINDOW


@pytest.mark.parametrize(
    "neighbour, floor_bound", [("loss-based", True), ("delay-based", True), ("none", True), ("any", False)]
)
def test_decreases_that_do_not_drain_a_queue_start_a_drain_that_decides(neighbour, floor_bound):
    win = _avoiding(400 * DATAGRAM)
    before = win.cwnd
    now = 1.0
    # 20 acks a 20 ms round: floor windows set the target (4 ms, as 5 Mbit/s sets 3.2 ms);
    # 100 acks a 16 ms round: the path's rate leaves it at QDELAY_TARGET
    acks, queue = (20, BASE + 0.010) if floor_bound else (100, BASE + 3 * QDELAY_TARGET)
    lost = 1 if neighbour == "loss-based" else 0  # (the neighbour overflowed the queue once)
    while not win.drain_cwnd and now < 1.0 + FIRST_DRAIN:  # (before the first drain is due)
        now = _timed_round(win, queue, now, acks=acks, lost=lost)
        lost = 0
    assert win.drain_cwnd and win.strikes >= COMPETE_STRIKES and not win.competing
    first = win.strike_start
    now = _through_drain(win, BASE if neighbour == "none" else queue, now)
    target = win.delay_target()
    assert target > QDELAY_TARGET if floor_bound else target == QDELAY_TARGET
    # a queue that outlasted this window's drain is not ours: compete, with what the decreases
    # gave up given back; where floor windows set the target, only if it overflowed or stood
    # past the most a SafeDealer keeps (target / SHARE_FLOOR): a delay-based flow's, or one
    # that went with the drain: yield to delay
    outlasted = neighbour in ("loss-based", "any")
    assert win.competing == outlasted and win.drains == 1
    # (what the delay decreases gave up comes back; the overflow's loss decrease stays)
    given_back = before * BETA if neighbour == "loss-based" else before
    assert win.cwnd >= given_back if outlasted else win.strikes == 0
    if neighbour != "none":
        assert 2 * target < win.qdelay < target / SHARE_FLOOR
    # the drain was held until its first strike was FIRST_DRAIN old
    assert now > first + FIRST_DRAIN


@pytest.mark.parametrize("neighbour", ["delay-based", "none"])
def test_a_drain_that_finds_no_loss_based_neighbour_is_not_repeated_for_a_period(neighbour):
    # two SafeDealers on a slow link: their windows alone stand past twice the target, and
    # each check holds the window at its floor for FIRST_DRAIN; checked at every third strike,
    # both spent most of their time in checks
    win = _avoiding(400 * DATAGRAM)
    now = 1.0
    queue = BASE + 0.010
    while not win.drain_cwnd and now < 1.0 + FIRST_DRAIN:
        now = _timed_round(win, queue, now)
    assert win.drain_cwnd and win.strikes >= COMPETE_STRIKES
    now = _through_drain(win, BASE if neighbour == "none" else queue, now)
    checked, cwnd = now, win.cwnd
    assert not win.competing and win.strikes == 0
    while now < checked + MIN_RTT_WINDOW - 2 * queue:  # the queue stands again
        now = _timed_round(win, queue, now)
        assert not win.drain_cwnd and win.strikes == 0 and not win.competing
    assert win.cwnd < cwnd  # (yielding to it all along: delay decreases)
    while not win.drain_cwnd and now < checked + 2 * MIN_RTT_WINDOW:  # a period later: checked again
        now = _timed_round(win, queue, now)
    assert win.drain_cwnd and now >= checked + MIN_RTT_WINDOW - 2 * queue


def test_a_newcomers_queue_gone_while_the_drain_is_held_is_not_a_neighbours():
    # another SafeDealer started behind this window's queue and took its own first burst's
    # queue for its base: it keeps that much standing until its first drain, FIRST_DRAIN after
    # its start; this window's drain is held until then, and sees it go
    win = _avoiding(400 * DATAGRAM)
    now = 1.0
    queue = BASE + 10 * QDELAY_TARGET
    while not win.drain_cwnd and now < 1.0 + FIRST_DRAIN:
        now = _timed_round(win, queue, now)
    assert win.drain_cwnd and not win.competing
    gone = win.strike_start + FIRST_DRAIN - 5 * queue  # the newcomer's first drain
    while now < gone:
        now = _timed_round(win, queue, now, acks=2)
        assert win.drain_cwnd  # (judged after one round, this window competed here)
    now = _through_drain(win, BASE, now)
    assert not win.competing and win.drains == 1 and win.strikes == 0


def _window(client) -> Window:  # type: ignore[no-untyped-def]
    (win,) = client.engine._sendq.windows.values()
    return win  # type: ignore[no-any-return]


def _send_until(net, server, client, burst: int, done) -> None:  # type: ignore[no-untyped-def]
    """Queue up to ``burst`` messages of 400 B a step of 5 ms (fewer at ``send_hwm``) and deliver,
    until ``done()`` or 400 steps."""
    for _ in range(400):  # bounded: 400 steps of 5 ms
        for _ in range(burst):
            try:
                client.engine.send([b"m" * 400], net.now)
            except WouldBlock:
                break
        net.flush(client)
        net.step(0.005)
        server.recv_all()
        if done():
            return


@pytest.mark.parametrize("compiled", [True, False])
def test_a_dialled_peers_handshake_round_trip_is_its_windows_first_base(compiled):
    if compiled and sockets._fast is None:
        pytest.skip("nbmq.engine._fast is not built")
    opts = SocketOptions(send_hwm=2000, safe_congestion=True)
    with contextlib.nullcontext() if compiled else engine_targets._python_engine():
        net, server, client = connected_pair(
            SafeDealer(opts, random.Random(1)), SafeDealer(opts), link=Link(delay=0.002)
        )
        (dialled,) = client.engine.peers.values()
        (dialling,) = server.engine.peers.values()
        assert dialled.handshake_rtt == pytest.approx(0.004) and dialling.handshake_rtt == math.inf
        net.set_links(server.addr, client.addr, Link(delay=0.010))  # a neighbour's queue, both ways
        _send_until(net, server, client, burst=20, done=lambda: _window(client).drains > 0)
        win = _window(client)
    assert win.drains == 1 and win.min_rtt == pytest.approx(0.004)


def test_only_a_single_connect_times_the_handshake():
    # a reply to one of several Connects could answer any of them (Karn's rule)
    opts = SocketOptions(reconnect_wait=0.05)
    net = Network(link=Link(delay=0.002))
    server_engine = SafeDealer(opts)
    server_engine.bind(("10.0.0.1", 8000))
    client = net.add(SafeDealer(opts), ("10.0.0.2", 40000), "client")
    net.connect(client, ("10.0.0.1", 8000))
    net.step(0.2)  # nobody bound there yet: the Connect is dialled again
    server = net.add(server_engine, ("10.0.0.1", 8000), "server")
    assert net.run_until(lambda: server.connected and client.connected, 5.0)
    assert client.engine.counters.connects_out > 1
    (peer,) = client.engine.peers.values()
    assert peer.handshake_rtt == math.inf


def test_competing_ends_when_a_drain_finds_the_queue_was_ours():
    win = _avoiding(400 * DATAGRAM)
    now = 1.0
    queue = BASE + 10 * QDELAY_TARGET
    lost = 1  # a queue that the decreases do not drain, and that overflowed
    while not win.competing and now < 10.0:
        now = _timed_round(win, queue, now, lost=lost)
        lost = 0
    while not win.drain_cwnd and now < 10.0:
        now = _timed_round(win, queue, now)
    now = _timed_round(win, queue, now)  # the other flow's queue is still there
    assert win.competing and win.drains == 1
    while not win.drain_cwnd and now < 20.0:
        now = _timed_round(win, queue, now)
    now = _through_drain(win, BASE, now, acks=20)  # this time the drain emptied it: it was ours
    assert win.drains == 2 and not win.competing


def test_competing_gives_back_what_the_decreases_that_did_not_drain_took():
    win = _avoiding(400 * DATAGRAM)
    before = win.cwnd
    for _ in range(4 * COMPETE_STRIKES):
        if win.competing:
            break
        _round(win, BASE + 10 * QDELAY_TARGET)
        assert win.cwnd < before or win.competing
    assert win.cwnd >= before and win.decreases == COMPETE_STRIKES


def test_a_queue_within_twice_the_target_never_makes_the_window_compete():
    win = _avoiding(4 * DATAGRAM)  # a window so small that its own queue stays near the target
    for _ in range(8 * COMPETE_STRIKES):
        _round(win, BASE + 1.5 * QDELAY_TARGET)
    assert not win.competing and win.decreases > COMPETE_STRIKES


def test_a_starved_window_still_sees_the_queue_that_starves_it():
    win = _avoiding(100 * DATAGRAM)
    now = _timed_round(win, BASE, 1.0)
    for _ in range(2):  # 100 datagrams in each 10 ms round: the path's rate
        now = _timed_round(win, BASE, now, acks=100)
    assert win.path_rate == pytest.approx(100 * DATAGRAM / BASE)
    win.cwnd = win.ssthresh = float(2 * MIN_WINDOW)  # squeezed by a queue-filling neighbour
    queue = BASE + 5 * QDELAY_TARGET
    for _ in range(2 * (COMPETE_STRIKES + 1)):
        now = _timed_round(win, queue, now, acks=4)
    now = _through_drain(win, queue, now, acks=4)
    # its own rate (two datagrams a round) would put the target past the queue; the path's
    # does not, nor does its small share (it tolerates 1 / SHARE_FLOOR times the target)
    assert 2 * MIN_WINDOW * queue / (2 * MIN_WINDOW) > 5 * QDELAY_TARGET
    assert win.share() == SHARE_FLOOR and QDELAY_TARGET / SHARE_FLOOR < 5 * QDELAY_TARGET
    assert win.delay_target() == QDELAY_TARGET and win.competing


def test_path_state_shows_drains_and_the_path_rate():
    win = _avoiding()
    now = _timed_round(win, BASE, 1.0)
    while win.drains == 0 and now < 2.0:
        now = _timed_round(win, BASE, now)
    path = PathState.of(win)
    assert path.drains == 1 and path.path_rate == win.path_rate > 0
    assert path.as_dict()["drains"] == 1


def test_a_drain_round_holds_the_window_while_its_queue_empties():
    win = _avoiding()
    now = _timed_round(win, BASE, 1.0)
    while not win.drain_cwnd and now < 3.0:
        now = _timed_round(win, BASE, now)
    ssthresh = win.ssthresh
    assert win.drain_cwnd and win.cwnd == MIN_WINDOW
    for _ in range(40):  # the frames sent before it are acked, their samples delayed by the queue
        win.acked(DATAGRAM, BASE + 5 * QDELAY_TARGET)
    assert win.cwnd == MIN_WINDOW and win.ssthresh == ssthresh  # neither grown nor out of slow start


def test_a_drain_round_ends_with_its_queue_empty_in_the_engine(monkeypatch):
    # the engine's ack path (compiled when built, the twin otherwise) holds the window too: the
    # drain round ends with at most the floor window in flight, not what was there before it
    ends: list[int] = []
    drained = Window._drained

    def record(win: Window, now: float | None) -> None:
        ends.append(win.in_flight)
        drained(win, now)

    monkeypatch.setattr(Window, "_drained", record)
    opts = SocketOptions(send_hwm=2000, safe_congestion=True)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts), seed=3)
    _send_until(net, server, client, burst=100, done=lambda: bool(ends))
    win = _window(client)
    assert ends and ends[0] <= MIN_WINDOW + DATAGRAM and win.drains == 1
    assert win.cwnd > 10 * MIN_WINDOW  # restored


def test_a_competing_window_drains_a_quarter_as_often():
    win = _avoiding(400 * DATAGRAM)
    now = _timed_round(win, BASE, 1.0)
    queue = BASE + 10 * QDELAY_TARGET  # a neighbour's queue, never drained
    starts: list[float] = []  # drains started while competing, and when each ended
    ends: list[float] = []
    while len(starts) < 2 and now < 1.0 + FIRST_DRAIN + 3 * (MIN_RTT_WINDOW + COMPETE_DRAIN_DELAY):
        draining, competing = bool(win.drain_cwnd), win.competing
        now = _timed_round(win, queue, now)
        if win.drain_cwnd and not draining and competing:
            starts.append(now)
        if draining and not win.drain_cwnd and starts:
            ends.append(now)
    assert len(starts) == 2
    assert starts[1] - ends[0] == pytest.approx(MIN_RTT_WINDOW + COMPETE_DRAIN_DELAY, abs=2 * queue)


def test_a_window_with_a_small_share_of_the_path_tolerates_a_longer_queue():
    # flows on one queue measure its delay against bases that differ a little: with one target
    # for all, the one with the lower base finds every round congested and yields the link
    queue = BASE + 2 * QDELAY_TARGET  # twice the target
    cut = {}
    for share in (1.0, 0.4):
        win = _avoiding()
        win.period_rate = 100 * DATAGRAM / BASE
        win.span_rate = share * SHARE_WHOLE * win.period_rate  # its last span's delivery
        assert win.share() == pytest.approx(share) and win.delay_target() == QDELAY_TARGET
        decreases = win.decreases
        _round(win, queue)
        cut[share] = win.decreases - decreases
    assert cut == {1.0: 1, 0.4: 0}  # the target over the share: 2 and 5 ms
    win.span_rate = 0.01 * win.period_rate
    assert win.share() == SHARE_FLOOR


def test_a_window_drains_with_another_flow_whose_drain_it_sees():
    # a drain finds the base only if the other flows on the queue drain too
    win = _avoiding()
    now = _timed_round(win, BASE, 1.0, acks=50)
    while win.drains == 0 and now < 3.0:  # its first drain; the path carries 50 datagrams a round
        now = _timed_round(win, BASE, now, acks=50)
    queue = BASE + 1.5 * QDELAY_TARGET  # another flow's queue: past the target, not past 1 / share
    for _ in range(int(FIRST_DRAIN / queue) + 2):
        now = _timed_round(win, queue, now, acks=20)
    assert not win.drain_cwnd and win.share() < 0.5
    decreases = win.decreases
    now = _timed_round(win, BASE + 0.5 * QDELAY_TARGET, now, acks=20)  # the other flow drains
    assert win.drain_cwnd and win.decreases == decreases
    now = _through_drain(win, BASE, now, acks=2)
    # within FIRST_DRAIN of its own drain it does not echo (two windows would echo each other)
    now = _timed_round(win, queue, now, acks=20)
    now = _timed_round(win, BASE + 0.5 * QDELAY_TARGET, now, acks=20)
    assert not win.drain_cwnd and win.drains == 2


def test_a_competing_window_does_not_take_a_neighbours_decrease_for_a_drain():
    win = _avoiding()
    now = _timed_round(win, BASE, 1.0, acks=50)
    while win.drains == 0 and now < 3.0:
        now = _timed_round(win, BASE, now, acks=50)
    win.competing = True  # beside TCP: its decrease halves the queue, and nothing drains
    now = _timed_round(win, BASE + 1.5 * QDELAY_TARGET, now + FIRST_DRAIN, acks=20)
    now = _timed_round(win, BASE + 0.6 * QDELAY_TARGET, now, acks=20)  # (above half the target)
    assert win.competing and not win.drain_cwnd and win.drains == 1


def test_a_drain_that_finds_the_base_well_lower_at_once_is_not_held():
    # beside TCP from the start: the handshake went through the empty link, and the first
    # drain's first round shows the queue stood before this flow came; held, the drain gave
    # CUBIC's slow start the queue
    win = Window(floor=0.2, handshake_rtt=BASE)
    queue = BASE + 20 * QDELAY_TARGET
    now = 1.0
    while not win.drain_cwnd and now < 1.0 + 2 * FIRST_DRAIN:
        now = _timed_round(win, queue, now, acks=60)
    assert win.drain_cwnd and max(2 * win.srtt, DRAIN_HOLD) > queue
    now = _timed_round(win, queue, now, acks=2)
    assert not win.drain_cwnd and win.competing and win.min_rtt == pytest.approx(BASE)


def test_a_lone_window_reads_its_share_whole_and_a_drain_leaves_it_as_it_was():
    win = _avoiding()
    win.period_rate = 100 * DATAGRAM / BASE  # the fastest span of the two periods
    win.span_rate = 0.85 * win.period_rate  # a lone flow's spans deliver less than the fastest
    assert win.share() == 1.0
    win.drain_cwnd, win.drain_until, win.drain_base = win.cwnd, math.inf, win.min_rtt
    win.span_start, win.span_acked, win.round_acked = 1.0, 0, 2
    win.end_round(1.0 + 2 * RATE_SPAN)  # a drain's span: two datagrams in 40 ms
    assert win.drain_cwnd and win.span_rate == 0.85 * win.period_rate
    assert win.period_rate == 100 * DATAGRAM / BASE


def test_the_span_a_drain_ended_in_is_not_the_paths_rate():
    # tbf's bucket fills while the window drains: the burst after it is not the path's rate
    win = _avoiding()
    fastest = 100 * DATAGRAM / BASE
    win.period_rate, win.span_rate = fastest, 0.85 * fastest
    start, end = 1.0, 1.0 + RATE_SPAN / 2
    win.drain_cwnd, win.drain_until, win.drain_base = win.cwnd, end, win.min_rtt
    win.span_start, win.span_acked, win.round_acked = start, 0, 2
    win.end_round(end)  # the drain ends within the span
    assert not win.drain_cwnd and win.drain_end == end
    win.round_acked = 400  # the refilled bucket's burst
    burst_end = start + 1.5 * RATE_SPAN
    win.end_round(burst_end)
    assert win.span_rate == 0.85 * fastest and win.period_rate == fastest
    win.round_acked = 60  # the next span's rounds deliver at the path's rate again
    later = burst_end + 1.5 * RATE_SPAN
    win.end_round(later)
    assert win.span_rate == pytest.approx(60 * DATAGRAM / (later - burst_end))
    assert win.period_rate == fastest
