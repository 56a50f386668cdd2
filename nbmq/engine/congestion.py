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
"""

from __future__ import annotations

__all__ = ["Window", "DATAGRAM", "INITIAL_WINDOW", "MIN_WINDOW", "MAX_WINDOW", "BETA"]

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


class Window:
    """One peer's congestion window and round-trip estimate.

    Args:
        floor: the smallest resend timeout, seconds (``safe_resend_ivl``); also the timeout
            before the first RTT sample.

    Attributes:
        cwnd: window, bytes (float). ssthresh: slow-start threshold, bytes.
        in_flight: bytes sent and not acked (int). srtt, rttvar: seconds, None before the
            first sample. rto: the resend timeout in use, seconds. decreases: window halvings.
    """

    __slots__ = ("cwnd", "ssthresh", "in_flight", "srtt", "rttvar", "rto", "floor", "_calm_until", "decreases")

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

    def room(self) -> float:
        """Bytes that may still be sent now (may be <= 0)."""
        return self.cwnd - self.in_flight

    def sent(self, size: int) -> None:
        """``size`` bytes of data frames went out (first sends; resends are already counted)."""
        self.in_flight += size

    def acked(self, size: int, rtt: float | None) -> None:
        """An ack for a frame of ``size`` bytes; ``rtt`` seconds when it was sent only once
        (Karn's rule: a resent frame's ack gives no sample), else None."""
        self.in_flight = max(0, self.in_flight - size)
        if rtt is not None:
            self.sample(rtt)
        if self.cwnd < self.ssthresh:
            self.cwnd = min(float(MAX_WINDOW), self.cwnd + size)  # slow start
        else:
            self.cwnd = min(float(MAX_WINDOW), self.cwnd + DATAGRAM * size / self.cwnd)

    def forget(self, size: int) -> None:
        """A frame of ``size`` bytes left flight without an ack (its message was dropped)."""
        self.in_flight = max(0, self.in_flight - size)

    def timed_out(self, now: float) -> None:
        """A frame's resend timer fired: shrink the window to ``BETA`` of itself, once per
        resend timeout (``rto`` seconds)."""
        if now < self._calm_until:
            return
        self.ssthresh = max(float(MIN_WINDOW), self.cwnd * BETA)
        self.cwnd = self.ssthresh
        self.decreases += 1
        self._calm_until = now + self.rto

    def sample(self, rtt: float) -> None:
        """RFC 6298 section 2: update srtt / rttvar from one measurement and recompute rto
        (floored by ``floor``)."""
        rtt = max(0.0, rtt)
        if self.srtt is None or self.rttvar is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = max(self.floor, self.srtt + 4 * self.rttvar)
