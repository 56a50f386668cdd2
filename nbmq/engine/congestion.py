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

Loss recovery without waiting for the timer (issue 15): every transmission of a frame (first
send or resend) takes the next number of its peer's transmission order (``order``). An ack for
transmission ``S`` marks as lost every frame still unacked whose latest transmission is at most
``S - DUPTHRESH`` (TCP's duplicate-ack threshold of 3) and went out more than
:meth:`Window.reorder_wait` (``srtt`` plus a reordering allowance, RFC 8985 RACK) before the
ack; the queue resends it at once (fast retransmit). A frame is so resent at most once per round
trip, since its resend is newer than anything acked when it went out. Acks reordered by fewer
than ``DUPTHRESH`` transmissions, or within the reordering allowance, resend nothing.

Random loss is not congestion: the window shrinks after a round trip (a *round*: until an ack for
a frame sent after the round began) only when more than ``LOSS_TOLERANCE`` of that round's frames
were lost, and then once (one decrease per round, as NewReno decreases once per recovery
episode). Halving on every lossy round collapsed the window to ``MIN_WINDOW`` on a 5%-lossy path
(each lost ack looks like a lost frame too: about 10% apparent loss); loss from a full buffer
comes in bursts and passes the tolerance. The resend timer stays the backstop (tail losses, a
peer that went quiet).
"""

from __future__ import annotations

from collections import deque

__all__ = [
    "Window", "DATAGRAM", "INITIAL_WINDOW", "MIN_WINDOW", "MAX_WINDOW", "BETA", "DUPTHRESH",
    "LOSS_TOLERANCE",
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


class Window:
    """One peer's congestion window and round-trip estimate.

    Args:
        floor: the smallest resend timeout, seconds (``safe_resend_ivl``); also the timeout
            before the first RTT sample.

    Attributes:
        cwnd: window, bytes (float). ssthresh: slow-start threshold, bytes.
        in_flight: bytes sent and not acked (int). srtt, rttvar: seconds, None before the
            first sample. rto: the resend timeout in use, seconds. decreases: window decreases
            (timeouts and lossy rounds). backoff: the timer's factor after timeouts (1..
            ``MAX_BACKOFF``) for frames the timer has not resent yet. tx: the next transmission number. order: a deque of
            ``(tx, flight)`` in transmission order (stale entries skipped by the queue).
        round_end: the transmission number that ends the current round; round_acked,
            round_lost: frames acked and found lost in it.
    """

    __slots__ = (
        "cwnd", "ssthresh", "in_flight", "srtt", "rttvar", "rto", "floor", "_calm_until",
        "decreases", "tx", "order", "backoff", "round_end", "round_acked", "round_lost",
    )

    def __init__(self, floor: float) -> None:
        self.cwnd = float(INITIAL_WINDOW)
        self.ssthresh = float(MAX_WINDOW)
        self.in_flight = 0
        self.srtt: float | None = None
        self.rttvar: float | None = None
        self.floor = floor
        self.rto = floor
        self._calm_until = -1.0
        self.decreases = 0
        self.tx = 0
        self.backoff = 1.0
        self.order: deque = deque()
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
        lost: ``srtt + max(srtt / 4, 2 * rttvar)`` (RACK's ``min_rtt / 4`` reordering
        window, widened by the measured variation). Call only after an RTT sample."""
        srtt = self.srtt
        return srtt + max(srtt / 4, 2 * self.rttvar)  # type: ignore[operator]

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
        (floored by ``floor``)."""
        rtt = max(0.0, rtt)
        self.backoff = 1.0
        if self.srtt is None or self.rttvar is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = max(self.floor, self.srtt + 4 * self.rttvar)
