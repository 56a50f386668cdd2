"""SafeDealer loss detection on virtual time: a lost frame is resent about
one round trip after it went out, however much the RTT varies (RFC 8985 RACK: a frame sent a
reordering window, ``min_rtt / 4``, before an acked one is lost); a resend acked sooner than
``min_rtt`` after it went out was spurious and widens that window; a loss at the tail of a
burst is probed ``max(2 * srtt, PROBE_FLOOR)`` after the newest transmission (RACK-TLP), not
left to the resend timer."""

from __future__ import annotations

import pytest

from nbmq import codec
from nbmq.engine.congestion import PROBE_FLOOR
from nbmq.engine.peers import Peer, PeerState
from nbmq.engine.queues import SendQueue

SID = 7


def _queue(frames: int):
    q = SendQueue(send_hwm=100, safe=True, resend_ivl=0.2, resend_limit=5, congestion=True)
    peer = Peer(SID, ("h", 1), PeerState.CONNECTED, 0.0, False)
    q.push(codec.shard_message([b"m" * (codec.MAX_CHUNK_SIZE * frames)], 0, 1), 1)
    return q, peer


def _take(q: SendQueue, peer: Peer, now: float) -> bytes:
    out: list = []
    assert q.take(now, 1, out, [peer]) == 1
    return out[0][0]


def _ack(q: SendQueue, frame, now: float) -> list:
    resent: list = []
    assert q.ack(SID, codec.ack_hash(frame), now, resent)
    return [bytes(data) for data, _ in resent]


def _varied_rtt(frames: int):
    """Frames 0-2 sent at 0 s and acked after 4, 40 and 41 ms (srtt about 12 ms, rttvar about
    16 ms, min_rtt 4 ms); frames 3.. sent 1 ms apart from 50 ms on."""
    q, peer = _queue(frames)
    sent = [_take(q, peer, 0.0) for _ in range(3)]
    for frame, at in zip(sent, (0.004, 0.040, 0.041)):
        assert _ack(q, frame, at) == []
    sent += [_take(q, peer, 0.047 + i) for i in [0.001 * k for k in range(3, frames)]]
    return q, peer, sent


def test_a_loss_is_resent_one_round_trip_after_its_send_however_the_rtt_varies():
    q, peer, sent = _varied_rtt(12)
    win = q.windows[peer]
    assert win.srtt > 0.010 and win.rttvar > 0.010
    # frame 3 (sent at 50 ms) is lost; the later ones are acked 4 ms after they went out
    assert _ack(q, sent[4], 0.055) == []
    assert _ack(q, sent[5], 0.056) == []  # only two transmissions later
    # DUPTHRESH transmissions later and sent 3 ms (> min_rtt / 4) after it: lost, resent 7 ms
    # after its send (srtt + max(srtt / 4, 2 * rttvar) alone waited over 40 ms)
    assert _ack(q, sent[6], 0.057) == [bytes(sent[3])]
    assert q.fast_resends == 1 and win.round_lost == 1 and win.spurious_resends == 0
    assert win.min_rtt == pytest.approx(0.004)


def test_a_resend_acked_within_min_rtt_was_spurious_and_widens_the_reordering_window():
    q, peer, sent = _varied_rtt(12)
    win = q.windows[peer]
    assert win.reorder_window() == pytest.approx(0.001)
    _ack(q, sent[4], 0.055)
    _ack(q, sent[5], 0.056)
    assert _ack(q, sent[6], 0.057) == [bytes(sent[3])]
    # the first send of frame 3 was only reordered: its ack comes 1 ms after the resend
    assert _ack(q, sent[3], 0.058) == []
    assert win.spurious_resends == 1 and win.reo_mult == 2 and win.round_lost == 0
    assert win.reorder_window() == pytest.approx(0.002)
    for _ in range(50):  # never past srtt (RFC 8985 6.2 step 4)
        win.spurious()
    assert win.reorder_window() <= win.srtt
    assert q.fast_resends == 1


def test_a_tail_loss_is_probed_before_the_resend_timer():
    q, peer, sent = _varied_rtt(8)  # frames 3-7 sent at 50-54 ms
    win = q.windows[peer]
    for i in (3, 4, 5):
        assert _ack(q, sent[i], 0.001 * (47 + i) + 0.004) == []
    # frames 6 and 7, the last ones, are lost: no later transmission can show it. The newest
    # unacked one (7) is resent once, 2 srtt after it went out, and its ack shows 6 lost
    probe = q.next_resend()
    assert probe == pytest.approx(0.054 + max(2 * win.srtt, PROBE_FLOOR)) and probe < 0.054 + 0.2
    resent: list = []
    assert q.resend_due(probe - 0.0001, resent) == 0
    assert q.resend_due(probe, resent) == 1 and bytes(resent[0][0]) == bytes(sent[7])
    assert win.probes == 1 and win.decreases == 0 and win.round_lost == 0
    assert q.next_resend() == pytest.approx(0.053 + 0.2)  # one probe per quiet spell, then the timer
    assert _ack(q, sent[7], probe + 0.005) == [bytes(sent[6])]
    assert q.resends == 2 and win.decreases == 0 and q.in_flight == 1


def test_an_ack_resends_at_most_two_of_the_frames_it_shows_lost_the_rest_go_with_the_next_acks():
    q, peer, sent = _varied_rtt(16)
    # frames 3-11 (sent 50-58 ms) are lost together; frame 12 (sent at 59 ms) is acked first
    assert _ack(q, sent[12], 0.063) == [bytes(sent[3]), bytes(sent[4])]
    assert _ack(q, sent[13], 0.064) == [bytes(sent[5]), bytes(sent[6])]
    assert _ack(q, sent[14], 0.065) == [bytes(sent[7]), bytes(sent[8])]
    assert _ack(q, sent[15], 0.066) == [bytes(sent[9]), bytes(sent[10])]
    assert q.fast_resends == 8  # (frame 11 goes with the next ack, or its timer)
