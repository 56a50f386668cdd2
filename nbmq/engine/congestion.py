"""SafeDealer congestion control: an ack-clocked window per peer and the resend timer.

One :class:`Window` per peer bounds the bytes of data frames sent and not yet acked. It grows
on acks (slow start below ``ssthresh``, then about one datagram per window of acks: AIMD as in
RFC 5681) and shrinks to ``BETA`` of itself on a resend timeout, at most once per resend
timeout (the frames lost in one episode time out together: one decrease), never below
``MIN_WINDOW``. Timeouts are the only loss signal the reference's wire gives (no duplicate
acks), so the decrease is CUBIC's gentler 0.7, not 0.5. The round-trip time comes from acks of frames sent once
(Karn's rule), and the resend timer from it as RFC 6298 computes it
(``srtt + 4 * rttvar``), floored by ``safe_resend_ivl``. The reference's wire has one Ack per
data frame and no batched acks, so every ack clocks the window. Time is an argument.

Loss recovery without waiting for the timer: every transmission of a frame (first
send or resend) takes the next number of its peer's transmission order (``order``). An ack for
transmission ``S``, sent at ``t``, marks as lost every frame still unacked whose latest
transmission is at most ``S - DUPTHRESH`` (TCP's duplicate-ack threshold of 3) and that went out
either at or before ``t - reorder_window()`` (RFC 8985 RACK: a frame sent a reordering window,
``min_rtt / 4``, before one that arrived should have arrived too) or longer than
:meth:`Window.reorder_wait` (``srtt`` plus a reordering allowance) before the ack (the frames of
one burst share a send time); the queue resends it at once (fast retransmit). So a lost frame is
resent about one round trip after it went out, however much the round-trip time varies
(with the second rule alone, a queue or a CPU-starved peer stretched the wait to
several round trips, each holding the frame's message under ``send_hwm``). A frame is so resent
at most once per round trip, since its resend is newer than anything acked when it went out; an
ack that comes sooner than ``min_rtt`` after a frame's resend may be the first send's and shows
nothing lost (RFC 8985 6.2 step 2), and shows the resend spurious: the reordering window widens
(:meth:`Window.spurious`). Acks reordered by fewer than ``DUPTHRESH`` transmissions, or within
the reordering window, resend nothing. A lost frame near the end of a burst has no later
transmission to be acked: ``max(2 * srtt, PROBE_FLOOR)`` after the newest transmission still
unacked went out, that frame is resent once (a tail loss probe, RFC 8985 section 7) and its ack
shows the older ones lost (sent a reordering window before it; no ``DUPTHRESH`` here); the resend timer (``rto``, at least ``safe_resend_ivl``) is not
needed for them.

Random loss is not congestion: the window shrinks after a round trip (a *round*: until an ack for
a frame sent after the round began) only when more than ``LOSS_TOLERANCE`` of that round's frames
were lost, and then once (one decrease per round, as NewReno decreases once per recovery
episode). Halving on every lossy round collapsed the window to ``MIN_WINDOW`` on a 5%-lossy path
(each lost ack looks like a lost frame too: about 10% apparent loss); loss from a full buffer
comes in bursts and passes the tolerance. The resend timer stays the backstop (tail losses, a
peer that went quiet).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

__all__ = [
    "Window",
    "DATAGRAM",
    "INITIAL_WINDOW",
    "MIN_WINDOW",
    "MAX_WINDOW",
    "BETA",
    "DUPTHRESH",
    "LOSS_TOLERANCE",
    "PROBE_FLOOR",
]

#: Bytes of one full nbmq datagram: the window's unit of growth.
DATAGRAM = 500
#: First window, bytes: one 64 KiB message and some (a loopback or LAN peer starts fast).
INITIAL_WINDOW = 96 * DATAGRAM
#: The window never shrinks below this (random loss must not stall the peer), bytes.
MIN_WINDOW = 16 * DATAGRAM
#: The window after a timeout, as a fraction of the window before (CUBIC's beta).
BETA = 0.7
#: Nor grows past this, bytes (bounds what one peer's resends can cost).
MAX_WINDOW = 32 * 1024 * 1024
#: A timeout doubles ``backoff`` (RFC 6298 5.5), the factor on the timer of frames not yet
#: resent by the timer, up to this; the next RTT sample resets it to 1.
MAX_BACKOFF = 8.0
#: A frame is lost once a transmission this many later (to the same peer) is acked.
DUPTHRESH = 3
#: A round losing at most this fraction of its frames keeps the window (random loss).
LOSS_TOLERANCE = 0.25
#: The tail loss probe waits ``2 * srtt``, at least this, seconds (Linux's floor for it).
PROBE_FLOOR = 0.010
#: Transmissions looked at, newest first, for the one to probe (acked ones are skipped).
PROBE_SCAN = 8


class Window:
    """One peer's congestion window and round-trip estimate.

    Args:
        floor: the smallest resend timeout, seconds (``safe_resend_ivl``); also the timeout
            before the first RTT sample.

    Attributes:
        cwnd: window, bytes (float). ssthresh: slow-start threshold, bytes.
        in_flight: bytes sent and not acked (int). srtt, rttvar: seconds, None before the
            first sample. min_rtt: the smallest RTT sample, seconds (``inf`` before the first).
            reo_mult: the reordering window in quarters of ``min_rtt`` (grows by one per
            spurious fast resend). spurious_resends: fast resends found spurious.
        probed_tx: the transmission number of the last tail loss probe (-1: none); probe: the
            frame (``_Flight``) it resent; probes: tail loss probes sent. rto: the resend timeout in use, seconds. decreases: window decreases
            (timeouts and lossy rounds). backoff: the timer's factor after timeouts (1..
            ``MAX_BACKOFF``) for frames the timer has not resent yet. tx: the next transmission number. order: a deque of
            ``(tx, flight)`` in transmission order (stale entries skipped by the queue).
        round_end: the transmission number that ends the current round; round_acked,
            round_lost: frames acked and found lost in it.
    """

    __slots__ = (
        "cwnd",
        "ssthresh",
        "in_flight",
        "srtt",
        "rttvar",
        "min_rtt",
        "reo_mult",
        "spurious_resends",
        "rto",
        "floor",
        "_calm_until",
        "probed_tx",
        "probe",
        "probes",
        "decreases",
        "tx",
        "order",
        "backoff",
        "round_end",
        "round_acked",
        "round_lost",
    )

    def __init__(self, floor: float) -> None:
        self.cwnd = float(INITIAL_WINDOW)
        self.ssthresh = float(MAX_WINDOW)
        self.in_flight = 0
        self.srtt: float | None = None
        self.rttvar: float | None = None
        self.min_rtt = math.inf
        self.reo_mult = 1
        self.spurious_resends = 0
        self.probed_tx = -1
        self.probe: Any = None
        self.probes = 0
        self.floor = floor
        self.rto = floor
        self._calm_until = -1.0
        self.decreases = 0
        self.tx = 0
        self.backoff = 1.0
        self.order: deque[tuple[int, Any]] = deque()  # (transmission, flight) in send order
        self.round_end = 0
        self.round_acked = 0
        self.round_lost = 0

    def room(self) -> float:
        """Bytes that may still be sent now (may be <= 0)."""
        return self.cwnd - self.in_flight

    def sent(self, size: int) -> None:
        """``size`` bytes of data frames went out (first sends; resends are already counted)."""
        self.in_flight += size

    def acked(self, size: int, rtt: float | None) -> None:
        """An ack for a frame of ``size`` bytes; ``rtt`` seconds when it was sent only once
        (Karn's rule: a resent frame's ack gives no sample), else None."""
        in_flight = self.in_flight - size
        self.in_flight = in_flight if in_flight > 0 else 0
        if rtt is not None:
            self.sample(rtt)
        cwnd = self.cwnd
        if cwnd < MAX_WINDOW:
            cwnd += size if cwnd < self.ssthresh else DATAGRAM * size / cwnd  # slow start, AIMD
            self.cwnd = cwnd if cwnd < MAX_WINDOW else float(MAX_WINDOW)

    def reorder_wait(self) -> float:
        """Seconds a frame stays unacked, after a later one was acked, before it counts as
        lost however close to the acked one it was sent: ``srtt + max(srtt / 4, 2 *
        rttvar)`` (the frames of one burst share a send time; RACK would arm a timer). Call
        only after an RTT sample."""
        srtt = self.srtt
        return srtt + max(srtt / 4, 2 * self.rttvar)  # type: ignore[operator]

    def reorder_window(self) -> float:
        """Seconds by which a frame must have been sent before an acked one to count as lost:
        ``reo_mult * min_rtt / 4``, at most ``srtt`` (RFC 8985 RACK's reordering window, 6.2
        step 4; ``inf`` before an RTT sample)."""
        window = self.reo_mult * self.min_rtt / 4
        srtt = self.srtt
        return window if srtt is None or window < srtt else srtt

    def probe_candidate(self) -> tuple[float, Any] | None:
        """The tail loss probe due next (RFC 8985 section 7, RACK-TLP): ``(when, flight)``,
        the newest transmission still unacked (among the ``PROBE_SCAN`` newest) and the time
        ``max(2 * srtt, PROBE_FLOOR)`` seconds after it went out; None before an RTT sample,
        when none is unacked, or when that transmission is the last probe (one probe per
        quiet spell: then the resend timer)."""
        srtt = self.srtt
        if srtt is None:
            return None
        order = self.order
        for i in range(1, min(PROBE_SCAN, len(order)) + 1):
            tx, flight = order[-i]
            if flight.tx == tx and flight.win is not None:
                if tx == self.probed_tx:
                    return None
                pto = 2 * srtt
                return flight.last_sent + (pto if pto > PROBE_FLOOR else PROBE_FLOOR), flight
        return None

    def spurious(self) -> None:
        """A frame resent on loss detection was acked sooner than ``min_rtt`` after its resend:
        its first send arrived, reordered (RACK learns this from DSACK, RFC 8985 6.2 step 4).
        Widen the reordering window by ``min_rtt / 4`` (``reo_mult``; ``reorder_window``
        stays at most ``srtt``) and take the frame back out of the round's losses."""
        if self.srtt is not None and self.reo_mult * self.min_rtt / 4 < self.srtt:
            self.reo_mult += 1
        self.spurious_resends += 1
        if self.round_lost:
            self.round_lost -= 1

    def end_round(self) -> None:
        """An ack for a transmission at or after ``round_end`` arrived: the round is over.
        Shrink the window to ``BETA`` of itself when more than ``LOSS_TOLERANCE`` of the
        round's frames were lost (once per round), then start the next round (it ends with
        the transmissions sent so far)."""
        lost = self.round_lost
        if lost and lost > LOSS_TOLERANCE * (lost + self.round_acked):
            self.ssthresh = max(float(MIN_WINDOW), self.cwnd * BETA)
            self.cwnd = self.ssthresh
            self.decreases += 1
        self.round_acked = self.round_lost = 0
        self.round_end = self.tx

    def forget(self, size: int) -> None:
        """A frame of ``size`` bytes left flight without an ack (its message was dropped)."""
        self.in_flight = max(0, self.in_flight - size)

    def timed_out(self, now: float) -> None:
        """A frame's resend timer fired: shrink the window to ``BETA`` of itself and double
        ``backoff`` (RFC 6298 section 5.5, at most ``MAX_BACKOFF``; the next RTT sample resets
        it), once per resend timeout. The frames sent with the timed-out one then wait
        ``rto * backoff``, so a stall (a receiver or a path starved of CPU) resends the oldest
        frame, not the whole window; if it was loss, the resend's ack shows the others lost
        (fast retransmit). A frame the timer already resent keeps ``rto`` (floored by
        ``safe_resend_ivl``), so ``safe_resend_limit`` drops a message on a dead path about
        as soon as the reference does."""
        if now < self._calm_until:
            return
        self.ssthresh = max(float(MIN_WINDOW), self.cwnd * BETA)
        self.cwnd = self.ssthresh
        self.decreases += 1
        self.backoff = min(2 * self.backoff, MAX_BACKOFF)
        self._calm_until = now + self.rto * self.backoff

    def sample(self, rtt: float) -> None:
        """RFC 6298 section 2: update srtt / rttvar from one measurement and recompute rto
        (floored by ``floor``); keep the smallest sample in ``min_rtt``."""
        rtt = max(0.0, rtt)
        self.backoff = 1.0
        if rtt < self.min_rtt:
            self.min_rtt = rtt
        if self.srtt is None or self.rttvar is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = max(self.floor, self.srtt + 4 * self.rttvar)
