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
one burst share a send time); the queue resends it at once (fast retransmit), at most
``RESENDS_PER_ACK`` of them an ack (the rest with the acks after it). Before any RTT sample the
ack of a resend marks the frames sent before it lost (as a TCP timeout marks its window lost):
a first window lost in a full queue is resent as the resends' acks clock it out, not one frame
per backed-off timeout. So a lost frame is
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

A queue filling up is the loss a real bottleneck makes, and it shows before the loss: the
round-trip time grows. Each round keeps its smallest RTT sample (``round_min_rtt``: the
smallest filters out a slow ack or a descheduled receiver); what the smallest of the rounds that
ended in the last ``STANDING_INTERVAL`` (at least this round's) exceeds ``min_rtt`` by is the
standing queue the round found (``qdelay``; CoDel's interval: on a sub-ms path a process waiting
a scheduler slice for a core stretches whole rounds, and one round read that as a queue). Past :meth:`Window.delay_target` (``QDELAY_TARGET``,
or the time two ``MIN_WINDOW`` take at the path's rate if longer) the round is congested: the
window is scaled so that the next round's RTT comes back to ``min_rtt`` plus half the target
(between ``DELAY_FLOOR`` and ``DELAY_BETA`` of itself: a multiplicative decrease, so flows
sharing the queue converge, as AIMD's do), and the round after the decrease is left to show its
effect. Growth is a datagram per round trip until ``VELOCITY_ROUNDS`` rounds in a row grew the
window with no round found above the target; then it doubles every round (Copa's velocity), up to
``VELOCITY_SHARE`` per round of the window or of what the path carries in a round trip
(``path_rate * srtt``), whichever is larger (the same for every flow on a path: flows sharing a
queue grow by the same bytes and converge), and starts over at one datagram on the first such
round, a decrease or a drain: a sub-ms path (600 rounds a second on loopback) regrows a cut
window in tens of milliseconds, not a second. A congested round also ends slow start (HyStart's delay signal), and a loss in a
congested round is congestion whatever ``LOSS_TOLERANCE`` says. A flow that only fills queues
(TCP) does not let the queue drain: when ``COMPETE_STRIKES`` delay decreases in a row leave it at
least half as long as it was, the window drains (below) to check, once the first of them is
``FIRST_DRAIN`` old, that drain held until then (a SafeDealer that started behind this
window's queue took its own first burst's queue for its base and keeps it standing until its
first drain, ``FIRST_DRAIN`` after its start: this window is drained while it looks; judged
sooner, two SafeDealers took each other for TCP within 0.1-0.3 s of the second's start and
both filled a 100 ms queue); a drain round that still finds
more than twice the target standing (this one, or one after which the base fell below
``REDRAIN_FALL`` of what it was) shows a queue that outlasted this window, not ours; where
floor windows set the target (below about 8 Mbit/s), a
loss-based flow's only if it overflowed (this window lost a frame since its last drain) or stands
past ``1 / SHARE_FLOOR`` times the target (a SafeDealer keeps at most that over its base and
overflows nothing: at 5 Mbit/s, where two floor windows alone fill the link, a newcomer's
base holds the older flow's floor window, and its queue outlasted the older flow's drains by
2-3 times the target; the two took each other for TCP in a third of the runs; faster, BBR
neither overflows the queue nor yields, and waiting for either starved the window). A check
that makes the window compete with nothing is not repeated for ``MIN_RTT_WINDOW`` (each holds
the window at its floor; two SafeDealers at 5 Mbit/s, whose windows alone stand past twice the
target, spent most of their time in checks). Then the window stops yielding to delay (``competing``), reacts to loss only,
slow-starts until its first loss (as a TCP flow joining a full queue does: that queue's delay
is not its own and ends no slow start) and then grows as TCP CUBIC would from its last decrease
(``CUBIC_C``, and at least as TCP Reno would, ``ALPHA_CUBIC`` segments per round trip, of
``RENO_SEGMENT`` or, on a slow link, ``DATAGRAM``; fast convergence), until a round finds the queue below half the target again (Copa's
competitive mode). The decreases that did not drain
it are given back, since they yielded to a queue that was not ours. Twice the target: a floor
window's own queue on a slow link sits near the target.

``min_rtt`` is re-measured (LEDBAT++'s slowdowns, BBR's ProbeRTT): a *drain round* drops the
window to ``MIN_WINDOW`` until the frames in flight are acked and one more went through the
emptied queue, and ``max(2 * srtt, DRAIN_HOLD)`` has passed, then restores it. A drain finds
the base only if the other flows on the queue drain with it, so a window also drains when a
round shows another flow's drain (the queue, above the target, halved in a round without a
cut of its own; not while ``competing``, nor within ``FIRST_DRAIN`` of its own last drain):
without that, a flow that started behind another's standing queue kept part of it as its
base, and of two SafeDealers the one with the lower base yielded the link to the other. A flow drains ``FIRST_DRAIN`` after it starts (one that
started behind another flow's standing queue took that queue for its base, and the other
flow yields to it: its drain finds the true base), again ``FIRST_DRAIN`` after a drain that
left the base below ``REDRAIN_FALL`` of what it was (the other flow may have yielded more
since), then whenever no round came within half the
target of ``min_rtt`` for ``MIN_RTT_WINDOW`` seconds (``COMPETE_DRAIN_DELAY`` later while
``competing``: a drain gives the neighbour that fills the queue this window's share for a round
trip). The drain round's acks do not grow the window. The dialling side's handshake round trip
counts in the first period: beside TCP the first frame already waits behind the queue TCP's
slow start filled, and only the handshake went through the empty link. ``min_rtt`` is the smallest RTT of the
last two periods between drains (a period lasts ``MIN_RTT_WINDOW`` at least; a drain within
one only lowers it), so a base that grew for good is learnt within two periods; a competing
window's base only falls (every round it sees has the neighbour's queue in it: beside TCP
CUBIC two periods of 10 s made that queue its base, and the window stopped competing). A
competing window whose drain finds the queue gone (it was ours after all) yields to delay
again. The delay target's floor uses the path's rate (the fastest delivery over ``RATE_SPAN`` in
those two periods), not the window's own: a window starved next to TCP must still see TCP's
queue. Above ``HOST_RATE`` the path is host-bound (a process's CPU is the bottleneck, its
socket buffer the queue) and the target grows with the rate. A window tolerates the target
over its share of the path (:meth:`Window.share`; Copa's target rate, inversely proportional
to the queueing delay): flows whose bases differ by a little then still converge, where with
one target for all the flow that measured the lower base found every round congested.

The pacing rate (:attr:`Window.pacing_rate`) spreads a window over the smoothed RTT:
``PACING_GAIN`` times ``cwnd / srtt`` (twice that in slow start, but not in a competing
window's conservative slow start), as Linux paces TCP.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from .. import extensions

__all__ = [
    "Window",
    "DATAGRAM",
    "INITIAL_WINDOW",
    "MIN_WINDOW",
    "MAX_WINDOW",
    "BETA",
    "DUPTHRESH",
    "RESENDS_PER_ACK",
    "LOSS_TOLERANCE",
    "PROBE_FLOOR",
    "QDELAY_TARGET",
    "DELAY_BETA",
    "DELAY_FLOOR",
    "COMPETE_STRIKES",
    "ALPHA_CUBIC",
    "CSS_GROWTH_DIVISOR",
    "MIN_RTT_WINDOW",
    "COMPETE_DRAIN_DELAY",
    "FIRST_DRAIN",
    "REDRAIN_FALL",
    "DRAIN_HOLD",
    "PACING_GAIN",
    "PACE_QUANTUM",
    "PACE_MIN_BURST",
    "VELOCITY_ROUNDS",
    "SHARE_FLOOR",
    "SHARE_WHOLE",
    "VELOCITY_SHARE",
    "STANDING_INTERVAL",
    "HOST_RATE",
    "HOST_TARGET_MAX",
    "RATE_SPAN",
]

#: Bytes of one full nbmq datagram: the window's unit of growth.
DATAGRAM = 500
#: First window, bytes: about TCP's ten segments (RFC 6928); a larger one overflows a small
#: queue on a slow link before the first RTT sample.
INITIAL_WINDOW = 32 * DATAGRAM
#: The window never shrinks below this, bytes: two datagrams, as TCP's two segments (a larger
#: floor alone overfills a small queue on a slow link).
MIN_WINDOW = 2 * DATAGRAM
#: The window after a timeout, as a fraction of the window before (CUBIC's beta).
BETA = 0.7
#: Nor grows past this, bytes (bounds what one peer's resends can cost).
MAX_WINDOW = 32 * 1024 * 1024
#: A timeout doubles ``backoff`` (RFC 6298 5.5), the factor on the timer of frames not yet
#: resent by the timer, up to this; the next RTT sample resets it to 1.
MAX_BACKOFF = 8.0
#: A frame is lost once a transmission this many later (to the same peer) is acked.
DUPTHRESH = 3
#: An ack resends at most this many of the frames it shows lost, the rest going with the acks
#: after it: a lost window's resends are clocked out by the acks, not sent as one burst into
#: the queue that lost it (RFC 6937's slow-start reduction bound: one more than it delivered).
RESENDS_PER_ACK = 2
#: A round losing at most this fraction of its frames keeps the window (random loss).
LOSS_TOLERANCE = 0.25
#: The tail loss probe waits ``2 * srtt``, at least this, seconds (Linux's floor for it).
PROBE_FLOOR = 0.010
#: Transmissions looked at, newest first, for the one to probe (acked ones are skipped).
PROBE_SCAN = 8
#: A round whose smallest RTT exceeds ``min_rtt`` by more than this (seconds) found a
#: standing queue: congested (see :meth:`Window.delay_target`).
QDELAY_TARGET = 0.002
#: A congested round shrinks the window to at most this fraction of itself...
DELAY_BETA = 0.9
#: ... and at least this fraction (one slow round must not collapse it).
DELAY_FLOOR = 0.25
#: Delay decreases in a row that left the queue at least half as long as before (the queue is
#: not ours: a queue-filling flow shares the bottleneck) after which the window reacts to loss
#: only.
COMPETE_STRIKES = 3
#: While ``competing`` the window grows at least as fast as TCP Reno would have from the last
#: decrease (RFC 9438 section 4.3, the Reno-friendly region): this many segments per round
#: trip, ``3 * (1 - BETA) / (1 + BETA)`` (Reno's share at CUBIC's decrease), and one segment
#: once that estimate is past ``W_max``. A fixed 1000 bytes per round trip outgrew TCP CUBIC
#: on a short queue, where its curve is flat and this rate is all either window grows by.
ALPHA_CUBIC = 3 * (1 - BETA) / (1 + BETA)
#: A window that starts competing slow-starts by this fraction of slow start's growth
#: (RFC 9406's conservative slow start: a quarter, 1.25 times a round trip), so the round
#: trip it takes to see the neighbour's queue overflow loses a quarter of its window, not
#: half (two SafeDealers at 5 Mbit/s on a 100 ms queue resent a fifth of their frames).
CSS_GROWTH_DIVISOR = 4
#: While ``competing`` the window grows as TCP CUBIC's does (RFC 9438 section 4.2:
#: ``W(t) = C * (t - K)**3 + W_max``, ``t`` the seconds since the last decrease, ``W_max`` the
#: window before it, ``K`` the seconds back to it), ``C`` in segments per second cubed...
CUBIC_C = 0.4
#: ... of this many bytes (TCP's segment on Ethernet). Behind a router CUBIC outgrew a fixed
#: 1000 bytes per round trip on a long path (at 50 Mbit/s with a 100 ms queue this window grew
#: from 37 KB to 134 KB in 13 s beside CUBIC's 480 KB, and got 0.11-0.19 of the link), and a
#: cut before the queue overflowed (it was cut near its largest when this window's growth had
#: refilled it) left CUBIC the queue on a short one (0.32-0.37 at 50 Mbit/s, 10 ms).
CUBIC_SEGMENT = 1448
#: The Reno-friendly estimate's segment, bytes (``ALPHA_CUBIC`` of them a round trip: on a short
#: queue all a competing window grows by), where floor windows do not set the delay target: the
#: geometric mean of TCP's segment and our datagram. Where they do (a link below about
#: 8 Mbit/s) the segment is our datagram (RFC 9438's segment for this flow): near the top of a
#: byte-limited queue a small paced datagram finds room where a full segment does not (TCP
#: resent about four times as much per byte), and in this segment the window left CUBIC
#: 0.28-0.36 of a 5 Mbit/s link with the 10 ms queue. In our datagram at 50 Mbit/s it got
#: 0.32-0.35 itself, where the queue's overflows hit both flows alike.
RENO_SEGMENT = round(math.sqrt(CUBIC_SEGMENT * DATAGRAM))
#: ``min_rtt`` not seen again (no round within half the delay target of it) for this many
#: seconds is re-measured by a drain round (BBR's ProbeRTT interval is 10 s; a flow that joins
#: late must not keep another flow's queue as its base for that long).
MIN_RTT_WINDOW = 2.5
#: A competing window drains this many seconds later than ``MIN_RTT_WINDOW`` says (every 10 s,
#: BBR's ProbeRTT interval): each drain hands the queue-filling neighbour the window for a round
#: trip of its queue (every 2.5 s took half of a SafeDealer's share beside CUBIC on a long queue).
COMPETE_DRAIN_DELAY = 7.5
#: A flow's first drain comes this many seconds after its first RTT sample: a flow that started
#: behind another's standing queue measured that queue into its ``min_rtt``.
FIRST_DRAIN = 0.5
#: A drain after which ``min_rtt`` is below this fraction of what it was (the drain round's
#: samples, or the handshake's round trip at the first drain) is followed by another
#: ``FIRST_DRAIN`` later, whether or not ``min_rtt`` is seen again in between: a flow that
#: started behind another flow's standing queue finds part of it at its first drain, and
#: more once the other flow has yielded to it. Then a queue past twice the target that
#: outlasted the drain is not ours (the rounds before were measured against that queue).
REDRAIN_FALL = 0.75
#: A window's share of the path is taken as at least this (:meth:`Window.share`): it
#: tolerates at most ``1 / SHARE_FLOOR`` times the delay target (two flows sharing a path meet
#: at twice it).
SHARE_FLOOR = 0.25
#: ... and as whole from this fraction of the path rate on: the path rate is the fastest span
#: of two periods, and a flow alone delivers less over most spans. Taken at its word, a lone
#: flow at 5 Mbit/s kept 0.45-0.66 of the 10 ms queue (four runs; 0.33-0.45 before the
#: target scaled with the share); whole from 0.8 on, and leaving drains' spans out, 0.37-0.44.
SHARE_WHOLE = 0.8
#: A drain round lasts at least this many seconds, and twice ``srtt``: flows that drain
#: together must overlap for each to find the queue without the others (BBR's ProbeRTT lasts
#: 200 ms for the same reason), and one that joins another's drain is a round or two late.
DRAIN_HOLD = 0.05
#: Rounds in a row that grew the window and found no standing queue after which the growth per
#: round doubles, every round (Copa's velocity): one datagram per round took a sub-ms path
#: (loopback: 600 rounds a second, each found 1-1.5 ms of its receiver's processing) a second
#: to regrow the window a noisy round had cut.
VELOCITY_ROUNDS = 3
#: ... up to this fraction per round of the window, or of the path's rate times ``srtt`` if
#: larger (HyStart++'s conservative slow start grows by a quarter of slow start's rate).
VELOCITY_SHARE = 0.25
#: Above this path rate (bytes per second, 240 Mbit/s; measured over ``RATE_SPAN``) the
#: bottleneck is a process's CPU (on loopback the sender runs a whole core at 100-200 MB/s, a
#: relay process forwarding a lossy path's datagrams 30-60 MB/s), not a link, and its queue is
#: a socket buffer its reader drains in batches (the deeper, the cheaper per datagram): the
#: delay target grows with the rate (``QDELAY_TARGET * rate / HOST_RATE``). With 2 ms there the
#: window idled the sender a third of the time (16 KiB messages: 0.65 of the throughput a 2 MiB
#: window had). A 200 Mbit/s link measures at most 26.6 MB/s over a span.
HOST_RATE = 30e6
#: ... up to this many times ``QDELAY_TARGET`` (16 ms: 64 KiB messages on loopback at 200 MB/s
#: keep 2-4 MB in flight, the 2 MiB the tree before congestion control kept).
HOST_TARGET_MAX = 8.0
#: A queue is standing when the smallest RTT of the rounds that ended in the last this many
#: seconds (at least the last round) finds it (CoDel's interval, scaled to a shared host): a
#: sender or receiver waiting a scheduler time slice (3-6 ms) for a core stretches every RTT
#: of a sub-ms round, and one round's minimum read that as a queue.
STANDING_INTERVAL = 0.010
#: The path's rate is measured over spans of rounds at least this many seconds long: the acks
#: of a window that a descheduled receiver bunched into one sub-ms round deliver at many times
#: the link's rate, a span of 20 ms at most the link's rate plus its burst (tbf's 32 KB: 1.6
#: MB/s more).
RATE_SPAN = 0.020
#: Rounds kept for that minimum (bounds the work per round on a path of very short rounds).
STANDING_ROUNDS = 16
#: Pacing rate over ``cwnd / srtt`` in congestion avoidance (twice it in slow start).
PACING_GAIN = 1.25
#: Pacing lets this many seconds of the pacing rate go at once (one wake-up's worth: a
#: process sharing its CPU wakes late, and a 2 ms bucket lost a third of a 200 Mbit/s link
#: under load)...
PACE_QUANTUM = 0.01
#: ... and never fewer bytes than this.
PACE_MIN_BURST = 4 * DATAGRAM


_compiled_state = extensions.load("nbmq.engine._queue_state")
#: A window's transmission order: the compiled ring of ``(tx, flight)`` C records, or its
#: twin, a plain deque of pairs (the same methods, each taking or giving a pair).
TransmissionOrder: type[deque[tuple[int, Any]]] = (
    deque if _compiled_state is None else _compiled_state.TransmissionOrder
)


class Window:
    """One peer's congestion window and round-trip estimate.

    Args:
        floor: the smallest resend timeout, seconds (``safe_resend_ivl``); also the timeout
            before the first RTT sample.
        handshake_rtt: the round trip of the handshake that connected the peer, seconds
            (``inf``: none, e.g. on the bound side or after a repeated ``Connect``); it counts
            in the first period between drains (``period_min``), so the first drain takes it
            for the base if no data sample was smaller. A flow that starts beside TCP sends
            its first frame behind the queue TCP's slow start filled, and no drain empties a
            queue TCP keeps full; its handshake went through the empty link. Not the base at
            once: a sender whose data round trips include its receiver's late reads would see
            a queue and hold frames behind its window until it is stepped again.

    Attributes:
        cwnd: window, bytes (float). ssthresh: slow-start threshold, bytes.
        in_flight: bytes sent and not acked (int). srtt, rttvar: seconds, None before the
            first sample. min_rtt: the smallest RTT sample, seconds (``inf`` before the first).
            reo_mult: the reordering window in quarters of ``min_rtt`` (grows by one per
            spurious fast resend). spurious_resends: fast resends found spurious.
        probed_tx: the transmission number of the last tail loss probe (-1: none); probe: the
            frame (``_Flight``) it resent; probes: tail loss probes sent. rto: the resend timeout in use, seconds. decreases: window decreases
            (timeouts and lossy rounds). backoff: the timer's factor after timeouts (1..
            ``MAX_BACKOFF``) for frames the timer has not resent yet. tx: the next transmission number. order: the ``(tx, flight)`` pairs in transmission
            order (a :data:`TransmissionOrder`; stale entries skipped by the queue).
        round_end: the transmission number that ends the current round; round_acked,
            round_lost: frames acked and found lost in it (only those sent from
            ``recovery_tx`` on: see :meth:`found_lost`); round_min_rtt: its smallest RTT
            sample, seconds (``inf`` before one). recovery_tx: the transmission number at the
            last decrease for loss or a resend timeout.
        qdelay: the standing queue the last round found, seconds (``round_min_rtt -
            min_rtt``). competing: True while a queue-filling flow holds the queue (the window
            then reacts to loss only); strikes: delay decreases in a row that did not drain
            the queue; streak_qdelay: ``qdelay`` at the last of them. hold: rounds to leave
            alone after a decrease. cubic_epoch, cubic_wmax, cubic_k, cubic_west: a competing
            window's CUBIC curve: when it started (seconds; -1: at the next round), ``W_max``
            (bytes; 0 before a first decrease), ``K`` (seconds) and the Reno-friendly estimate
            ``W_est`` (bytes).
        resends: frames sent again (timer, fast resend, probe). lost: frames found lost
            (fast resends on loss detection, timeouts).
        pace_tokens, pace_stamp: the pacing bucket (bytes, may be negative by less than a
            frame) as of ``pace_stamp`` seconds (see :meth:`pace_allow`).
        increase: growth per window of acks in congestion avoidance, bytes (``DATAGRAM``
            times ``velocity``, at most :meth:`_velocity_cap`; CUBIC's curve while
            ``competing``, :meth:`_cubic_increase`). velocity: that factor (1, doubled each round once
            ``VELOCITY_ROUNDS`` rounds in a row grew the window with no standing queue; back
            to 1 on a decrease, a congested round or a drain); calm_rounds: those rounds.
        drain_due: when (seconds) the next drain round is due (-1 before the first round
            with an RTT sample and a time); drain_cwnd: the window to restore after the drain
            round under way (0.0: none under way); drain_until: it goes on until then at
            least (seconds; -1: one round), drain_min: the smallest RTT of its rounds so
            far (seconds); drains: drain rounds done. drain_base:
            ``min_rtt`` when the last drain round began, seconds; drain_soon: that drain left
            ``min_rtt`` below ``REDRAIN_FALL`` of it, and the next drain is due ``FIRST_DRAIN``
            after it, whether ``min_rtt`` is seen again or not.
        period_min, last_period_min: the smallest RTT of the rounds since the last drain and
            of those between the two before, seconds (``min_rtt`` is re-measured as the
            smaller of the two). streak_cwnd: the window before the first delay decrease of
            the current streak (restored when the streak ends in ``competing``);
            strike_start: when its first strike came (seconds; read while ``strikes``).
            checked_until: no strikes count until then (seconds; -1: none): the last drain
            that checked a queue outlasting the window's decreases made it compete with
            nothing (the queue went with it, or was a SafeDealer's).
            drain_at: when the last drain round began; cut_at: when the window was last cut
            (a decrease for loss, delay or a timeout); round_q: the queue the last round found
            (``rtt - min_rtt``); period_start: when the current period between drains began
            (seconds; -inf before the first drain).
        span_start, span_acked: when the current span of rounds began (seconds; -1: no
            clock yet) and the frames acked in its rounds so far; span_rate: the delivery of
            the last span outside a drain, bytes per second (a drain's spans, and the one it
            ended in, count in neither: tbf's bucket fills while the window drains, and the
            burst after it is not the path's rate); drain_end: when the last drain ended
            (seconds; -1: none); drain_lost: ``lost`` when it ended (a queue that outlasts the
            next drain is a loss-based flow's if frames were lost since); period_rate,
            last_period_rate: the fastest span's delivery in this and the previous period
            between drains, bytes per second (see :attr:`path_rate`).
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
        "recovery_tx",
        "round_min_rtt",
        "qdelay",
        "competing",
        "cubic_epoch",
        "cubic_wmax",
        "cubic_k",
        "cubic_west",
        "strikes",
        "streak_qdelay",
        "hold",
        "resends",
        "lost",
        "pace_tokens",
        "pace_stamp",
        "increase",
        "velocity",
        "calm_rounds",
        "recent",
        "drain_due",
        "drain_cwnd",
        "drains",
        "drain_soon",
        "drain_base",
        "drain_until",
        "drain_min",
        "drain_at",
        "drain_end",
        "drain_lost",
        "period_start",
        "cut_at",
        "round_q",
        "period_min",
        "last_period_min",
        "streak_cwnd",
        "strike_start",
        "checked_until",
        "span_start",
        "span_acked",
        "span_rate",
        "period_rate",
        "last_period_rate",
    )

    def __init__(self, floor: float, handshake_rtt: float = math.inf) -> None:
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
        self.order: deque[tuple[int, Any]] = TransmissionOrder()  # (transmission, flight) in send order
        self.round_end = 0
        self.round_acked = 0
        self.round_lost = 0
        self.recovery_tx = 0
        self.round_min_rtt = math.inf
        self.qdelay = 0.0
        self.competing = False
        self.cubic_epoch = -1.0
        self.cubic_wmax = 0.0
        self.cubic_k = 0.0
        self.cubic_west = 0.0
        self.strikes = 0
        self.streak_qdelay = math.inf
        self.hold = 0
        self.resends = 0
        self.lost = 0
        self.pace_tokens = float(PACE_MIN_BURST)
        self.pace_stamp = 0.0
        self.increase = float(DATAGRAM)
        self.velocity = 1
        self.calm_rounds = 0
        self.recent: deque[tuple[float, float]] = deque(maxlen=STANDING_ROUNDS)
        self.drain_due = -1.0
        self.drain_cwnd = 0.0
        self.drains = 0
        self.drain_soon = False
        self.drain_base = math.inf
        self.drain_until = -1.0
        self.drain_min = math.inf
        self.drain_at = -1.0
        self.drain_end = -1.0
        self.drain_lost = 0
        self.period_start = -math.inf
        self.cut_at = -1.0
        self.round_q = 0.0
        self.period_min = handshake_rtt  # (the first drain makes it the base if nothing was smaller)
        self.last_period_min = math.inf
        self.streak_cwnd = 0.0
        self.strike_start = -1.0
        self.checked_until = -1.0
        self.span_start = -1.0
        self.span_acked = 0
        self.span_rate = 0.0
        self.period_rate = 0.0
        self.last_period_rate = 0.0

    def room(self) -> float:
        """Bytes that may still be sent now (may be <= 0)."""
        return self.cwnd - self.in_flight

    def sent(self, size: int) -> None:
        """``size`` bytes of data frames went out (first sends; resends are already counted)."""
        self.in_flight += size

    def acked(self, size: int, rtt: float | None) -> None:
        """An ack for a frame of ``size`` bytes; ``rtt`` seconds when it was sent only once
        (Karn's rule: a resent frame's ack gives no sample), else None. Grows the window (slow
        start below ``ssthresh``, else about a datagram per window); a sample more than
        ``QDELAY_TARGET`` above ``min_rtt`` ends slow start at once (HyStart's delay
        increase: a queue-filling burst must not wait for the round's end), unless ``competing``. A drain round
        (``drain_cwnd`` set) holds the window at ``MIN_WINDOW``: growing it by the bytes acked
        would keep as much in flight as before, and the queue would never empty. Slow start
        grows only a window in use (at least half of it in flight before the ack: RFC 7661,
        Linux's ``tcp_is_cwnd_limited``); a sender held back by ``send_hwm`` never finds a
        queue to end it, and its window would double to ``MAX_WINDOW`` and burst once the
        sender has more to send."""
        used = self.in_flight
        in_flight = used - size
        self.in_flight = in_flight if in_flight > 0 else 0
        cwnd = self.cwnd
        if rtt is not None:
            self.sample(rtt)
        if self.drain_cwnd:
            return  # (nor end slow start on the samples of the queue it drains)
        if rtt is not None:
            if cwnd < self.ssthresh and rtt - self.min_rtt > QDELAY_TARGET and not self.competing:
                self.ssthresh = cwnd  # a queue is building: slow start is over (HyStart)
        if cwnd < MAX_WINDOW:
            if cwnd < self.ssthresh:
                if 2 * used >= cwnd:  # (slow start grows only a window in use)
                    cwnd += size if not self.competing else size / CSS_GROWTH_DIVISOR
            else:
                cwnd += self.increase * size / cwnd  # AIMD
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
        if self.lost:
            self.lost -= 1
        if self.round_lost:
            self.round_lost -= 1

    def found_lost(self, tx: int) -> None:
        """A frame sent as transmission number ``tx`` was found lost (an ack showed it,
        RACK): counted in ``lost``, and in the round's losses only if it was sent at or after
        ``recovery_tx``. A loss of a frame sent before the last decrease belongs to the
        congestion event that decrease answered: one decrease per event, as TCP makes one per
        recovery episode (RFC 5681 section 3.2, RFC 6675 section 5); without it one overflow
        cut the window in two or three rounds in a row."""
        self.lost += 1
        if tx >= self.recovery_tx:
            self.round_lost += 1

    def delay_target(self) -> float:
        """The standing queue a round may find before it counts as congested, seconds:
        ``QDELAY_TARGET`` (times ``rate / HOST_RATE`` on a path faster than ``HOST_RATE``, at
        most ``HOST_TARGET_MAX`` times: a host-bound path), or the time ``2 * MIN_WINDOW`` take
        at the path's rate if longer (the floor window alone queues that long). The path's
        rate is the fastest delivery over a span of at least ``RATE_SPAN`` in the last two
        periods between drains (:attr:`path_rate`; a window cut by a decrease or starved by a
        neighbour keeps it: its own rate would hide the queue that starves it, and drop a
        host-bound path's target back to a link's), else ``cwnd / round_min_rtt``."""
        rate = self.path_rate
        if rate <= 0.0:
            rtt = self.round_min_rtt
            if rtt == math.inf or rtt <= 0.0:
                return QDELAY_TARGET
            rate = self.cwnd / rtt
        floor = 2 * MIN_WINDOW / rate
        if rate > HOST_RATE:
            scale = rate / HOST_RATE
            return QDELAY_TARGET * (scale if scale < HOST_TARGET_MAX else HOST_TARGET_MAX)
        return floor if floor > QDELAY_TARGET else QDELAY_TARGET

    def _floor_bound(self, target: float) -> bool:
        """Whether floor windows set ``target`` (the :meth:`delay_target`, seconds) on a link:
        past ``QDELAY_TARGET`` on a path measured at most ``HOST_RATE`` (below about 8 Mbit/s two
        ``MIN_WINDOW`` alone queue that long)."""
        return target > QDELAY_TARGET and 0.0 < self.path_rate <= HOST_RATE

    def share(self) -> float:
        """This window's share of the path: its delivery over the last span of rounds
        outside a drain (``span_rate``) over ``SHARE_WHOLE`` of :attr:`path_rate`, between
        ``SHARE_FLOOR`` and 1 (1 before a span). A round is congested when its queue
        passes :meth:`delay_target` over this share (Copa's target rate, inversely
        proportional to the queueing delay): flows sharing a queue measure its delay against
        bases that differ by what stood in the queue when each measured its own (a SafeDealer
        that starts behind another's queue, a receiver's scheduling), and with one target for
        all, the flow that measured the lower base found every round congested and yielded
        the link (two SafeDealers at 50 Mbit/s: 0.13 and 0.72 of it). A starved flow tolerates
        more delay and grows until the shares meet."""
        rate = self.path_rate
        if rate <= 0.0 or self.span_rate <= 0.0:
            return 1.0
        share = self.span_rate / (rate * SHARE_WHOLE)
        return SHARE_FLOOR if share < SHARE_FLOOR else 1.0 if share > 1.0 else share

    @property
    def path_rate(self) -> float:
        """The fastest delivery over a span of rounds at least ``RATE_SPAN`` long (datagrams
        acked over the span's seconds) in this and the previous period between drains, bytes
        per second (0.0 before a timed span). Frames count as full datagrams."""
        rate = self.period_rate
        last = self.last_period_rate
        return rate if rate > last else last

    def end_round(self, now: float | None = None) -> None:
        """An ack for a transmission at or after ``round_end`` arrived at ``now`` (seconds;
        None: no clock, no drain rounds): the round is over.

        Loss: shrink the window to ``BETA`` of itself when more than ``LOSS_TOLERANCE`` of the
        round's frames were lost, or any while the round was congested (once per round;
        losses of frames sent before the last decrease do not count, :meth:`found_lost`).
        Delay: a congested round (``qdelay``, of the smallest RTT of the rounds in the last
        ``STANDING_INTERVAL``, past :meth:`delay_target`) scales the window
        towards ``min_rtt`` plus half the target (between ``DELAY_FLOOR`` and ``DELAY_BETA`` of
        itself) and ends slow start, unless ``competing``; then the next round is left alone.
        ``COMPETE_STRIKES`` decreases that do not drain the queue start a drain round once the
        first of them is ``FIRST_DRAIN`` old (not within ``MIN_RTT_WINDOW`` of such a check that
        made the window compete with nothing: ``checked_until``); if the queue outlasts it, they give the window back
        what they took (``streak_cwnd``) and make it compete. Growth: ``increase`` is ``DATAGRAM``
        times ``velocity``, which doubles each round once ``VELOCITY_ROUNDS`` rounds in a row
        grew the window with no round above the target (at most :meth:`_velocity_cap`;
        CUBIC's curve from the last decrease while ``competing``, :meth:`_cubic_increase`),
        the window in use (it held, or on a
        host-bound path the round delivered, at least half of it). A span of rounds ``RATE_SPAN`` long or longer
        gives the path's rate (:attr:`path_rate`).
        ``min_rtt`` not seen again for ``MIN_RTT_WINDOW`` seconds (``FIRST_DRAIN`` after the
        first round; ``COMPETE_DRAIN_DELAY`` more while ``competing``) starts a drain round (:meth:`_drain`; BBR's ProbeRTT), and so does
        a round that shows another flow's drain (:meth:`_echoes_a_drain`); the drain round's
        end is :meth:`_drained`. Then start the next round (it ends with the transmissions
        sent so far)."""
        rtt = self.round_min_rtt
        if rtt < self.period_min:
            self.period_min = rtt
        if now is not None:
            start = self.span_start
            if start < 0.0:
                self.span_start = now
            else:
                self.span_acked += self.round_acked
                if now - start >= RATE_SPAN:
                    rate = self.span_acked * DATAGRAM / (now - start)
                    # (not a drain's span, nor the burst after it: tbf's bucket filled)
                    if not self.drain_cwnd and self.drain_end < start:
                        self.span_rate = rate
                        if rate > self.period_rate:
                            self.period_rate = rate
                    self.span_start = now
                    self.span_acked = 0
        before = self.cwnd
        if self.drain_cwnd:
            if now is not None and now < self.drain_until and not self._base_fell():
                if rtt < self.drain_min:
                    self.drain_min = rtt  # (the drain goes on: it is held until drain_until)
            else:
                self._drained(now)
        else:
            self._judge(rtt, self._standing(rtt, now), now)
            if self._echoes_a_drain(rtt, now):
                self._drain(now)  # another flow drains: drain with it, so both find the base
            if now is not None and self.competing and self.cubic_epoch < 0.0:
                self._cubic_epoch(now, before, self.cwnd)  # (competing from this round on)
            if now is not None and rtt != math.inf:
                if self.drain_due < 0.0:
                    self.drain_due = now + FIRST_DRAIN
                elif self.drains and not self.drain_soon and rtt - self.min_rtt <= QDELAY_TARGET / 2:
                    if self.drain_due < now + MIN_RTT_WINDOW:
                        self.drain_due = now + MIN_RTT_WINDOW  # min_rtt seen again
                elif now >= self.drain_due + (COMPETE_DRAIN_DELAY if self.competing else 0.0):
                    self._drain(now)
        if self.competing:
            self.increase = self._cubic_increase(now)
        else:
            self.increase = float(min(DATAGRAM * self.velocity, max(self._velocity_cap(), DATAGRAM)))
        self.round_acked = self.round_lost = 0
        self.round_min_rtt = math.inf
        self.round_end = self.tx

    def _cubic_epoch(self, now: float, before: float, after: float) -> None:
        """A competing window's decrease (or the start of competing) at ``now`` (seconds) from
        ``before`` to ``after`` (bytes) starts CUBIC's curve over: ``W_max`` is ``before``, or
        less if the window peaked lower than at the decrease before (RFC 9438 section 4.7's
        fast convergence: ``before * (1 + BETA) / 2``, to leave a newer flow room), ``K`` the
        seconds it takes from ``after`` back to it, and the Reno-friendly estimate starts at
        ``after``."""
        wmax = before * (1.0 + BETA) / 2.0 if before < self.cubic_wmax else before
        self.cubic_epoch = now
        self.cubic_wmax = wmax
        self.cubic_west = after
        gap = (wmax - after) / (CUBIC_C * CUBIC_SEGMENT)
        self.cubic_k = gap ** (1.0 / 3.0) if gap > 0.0 else 0.0

    def _cubic_increase(self, now: float | None) -> float:
        """A competing window's growth over the next round, bytes: to the larger of CUBIC's
        curve a smoothed round trip from ``now`` and the Reno-friendly estimate a round on
        (RFC 9438 sections 4.2-4.3: ``ALPHA_CUBIC`` segments per round until it passes
        ``W_max``, then one; a segment is ``DATAGRAM`` where :meth:`_floor_bound`, else
        ``RENO_SEGMENT``), none if the window is past both, at most half the window (RFC 9438's
        target bound). Before the curve starts (no clock or RTT yet): the Reno-friendly rate,
        ``ALPHA_CUBIC`` segments. It advances ``cubic_west`` by one round: called once per round,
        by :meth:`end_round`."""
        srtt = self.srtt
        segment = DATAGRAM if self._floor_bound(self.delay_target()) else RENO_SEGMENT
        if now is None or self.cubic_epoch < 0.0 or not srtt:
            return ALPHA_CUBIC * segment
        west = self.cubic_west
        west += (ALPHA_CUBIC if west < self.cubic_wmax else 1.0) * segment
        self.cubic_west = west
        t = now + srtt - self.cubic_epoch - self.cubic_k
        target = CUBIC_C * CUBIC_SEGMENT * t * t * t + self.cubic_wmax
        if target < west:
            target = west
        grow = target - self.cwnd
        if grow <= 0.0:
            return 0.0
        return grow if grow < self.cwnd / 2 else self.cwnd / 2

    def _velocity_cap(self) -> float:
        """The most the window grows by per round, bytes: ``VELOCITY_SHARE`` of the larger of
        the window and what the path carries in a smoothed round trip (:attr:`path_rate` times
        ``srtt``). Not of the window alone: flows sharing a queue then grow by shares of their own
        windows, keep the ratio of their windows, and a starved flow never catches up; the
        path's window is about the same for every flow on it, so their growth is additive and
        their decreases (the same factor for all) converge them (AIMD)."""
        srtt = self.srtt
        path = self.path_rate * srtt if srtt else 0.0
        cwnd = self.cwnd
        return VELOCITY_SHARE * (cwnd if cwnd > path else path)

    def _standing(self, rtt: float, now: float | None) -> float:
        """The smallest RTT (seconds) of the rounds that ended in the last
        ``STANDING_INTERVAL`` seconds up to ``now``, this one's (``rtt``) included; ``rtt``
        without a clock or a sample."""
        if now is None or rtt == math.inf:
            return rtt
        recent = self.recent
        recent.append((now, rtt))
        while recent[0][0] <= now - STANDING_INTERVAL:
            recent.popleft()
        return min(r for _, r in recent)

    def _judge(self, rtt: float, standing: float, now: float | None) -> None:
        """The window's reaction to a round (not a drain) ending at ``now`` (seconds; None:
        no clock) whose smallest RTT was ``rtt`` seconds (``inf``: no sample), ``standing``
        the smallest of the last ``STANDING_INTERVAL`` (:meth:`_standing`): see
        :meth:`end_round`."""
        congested = False
        if rtt != math.inf:
            self.qdelay = qdelay = standing - self.min_rtt
            target = self.delay_target()
            tolerated = target / self.share()
            congested = qdelay > tolerated
            if rtt - self.min_rtt > tolerated:
                self.velocity = 1  # this round found a queue, standing or not: stop speeding up
                self.calm_rounds = 0
            if not congested:
                self.strikes = 0
                self.streak_qdelay = math.inf
                if qdelay < target / 2:
                    self.competing = False
        lost = self.round_lost
        if congested or self.competing or self.cwnd < self.ssthresh:
            self.velocity = 1  # (slow start grows faster; a queue or a neighbour: one datagram)
            self.calm_rounds = 0
        if lost and (congested or lost > LOSS_TOLERANCE * (lost + self.round_acked)):
            self._decrease(now)
            self.hold = 1
            self.velocity = 1
            self.calm_rounds = 0
        elif self.hold:
            self.hold -= 1
        elif not congested:
            in_use = self.in_flight
            if self.path_rate > HOST_RATE:
                # host-bound: a receiver's acks of a whole window come in one batch, all counted
                # before the sender refills, so what the round delivered was in use too (on a
                # link acks come spread out, and counting them made a window beside TCP overshoot)
                in_use = max(in_use, self.round_acked * DATAGRAM)
            if 2 * in_use < self.cwnd:
                self.velocity = 1  # the sender has less to send than the window holds
                self.calm_rounds = 0
            elif rtt != math.inf and self.cwnd >= self.ssthresh and not self.competing:
                self.calm_rounds += 1  # the window, in use, grew and found no standing queue
                if self.calm_rounds >= VELOCITY_ROUNDS and DATAGRAM * self.velocity < self._velocity_cap():
                    self.velocity *= 2
        elif not self.competing:
            if self.streak_qdelay == math.inf:
                self.streak_cwnd = self.cwnd  # the first decrease of a streak
            elif qdelay > self.streak_qdelay / 2 and qdelay > 2 * target and (now is None or now >= self.checked_until):
                if not self.strikes and now is not None:
                    self.strike_start = now
                self.strikes += 1  # the last decrease did not drain it: not ours
            if self.strikes >= COMPETE_STRIKES:
                if self.drain_due < 0.0:
                    self._compete()  # (no clock, no drain rounds to check with)
                    return
                # the queue is not ours if it outlasts this window and a SafeDealer newcomer's
                # first drain, FIRST_DRAIN after its start
                self._drain(now, self.strike_start + FIRST_DRAIN + (self.srtt or 0.0))
                return
            self.streak_qdelay = qdelay
            scale = (self.min_rtt + tolerated / 2) / standing
            scale = DELAY_FLOOR if scale < DELAY_FLOOR else DELAY_BETA if scale > DELAY_BETA else scale
            self.cwnd = max(float(MIN_WINDOW), self.cwnd * scale)
            self.ssthresh = self.cwnd
            self.decreases += 1
            self.hold = 1
            self.cut_at = -1.0 if now is None else now

    def _base_fell(self) -> bool:
        """The drain under way has already found a base below ``REDRAIN_FALL`` of the one it
        started with (this or the last period's smallest RTT, the handshake's included): it
        need not be held. A flow that started behind TCP's queue learns it at once, as
        before drains were held (held 0.5 s, it gave CUBIC's slow start the queue at
        50 Mbit/s, and got 0.29-0.33 of the link where it had 0.38-0.40)."""
        period = self.period_min
        last = self.last_period_min
        return (period if period < last else last) < self.drain_base * REDRAIN_FALL

    def _echoes_a_drain(self, rtt: float, now: float | None) -> bool:
        """This round (smallest RTT ``rtt`` seconds, ending at ``now``) shows another flow's
        drain: the queue it found (``rtt - min_rtt``, kept in ``round_q``) is less than half the
        last round's, which was past :meth:`delay_target`, and this window did not cut in the
        last ``2 * srtt`` (``cut_at``). Not while ``competing`` (a loss-based neighbour's
        decrease looks the same), before this window's first drain, or within ``FIRST_DRAIN``
        of its last (``drain_at``: two windows must not echo each other's drains)."""
        if rtt == math.inf:
            return False
        last = self.round_q
        self.round_q = queue = rtt - self.min_rtt
        return (
            now is not None
            and self.drains > 0
            and not self.competing
            and not self.drain_cwnd
            and queue < last / 2
            and last > self.delay_target()
            and now - self.drain_at >= FIRST_DRAIN
            and now - self.cut_at >= 2 * (self.srtt or 0.0)
        )

    def _streak_aged(self, now: float | None) -> bool:
        """The first strike of the streak under way (a delay decrease that left the queue at
        least half as long) came ``FIRST_DRAIN`` seconds or more before ``now`` (or there is
        no clock to tell). A SafeDealer that started behind this window's queue took its own
        first burst's queue for its base and keeps that much standing until its first drain,
        ``FIRST_DRAIN`` after its start; a queue that outlasts this window only after that is
        not a SafeDealer newcomer's."""
        return now is None or (self.strikes > 0 and now - self.strike_start >= FIRST_DRAIN)

    def _decrease(self, now: float | None) -> None:
        """A loss episode's decrease at ``now`` (seconds; None: no clock), for a lossy round
        or a resend timeout alike: the window to ``BETA`` of itself (at least ``MIN_WINDOW``),
        the end of slow start, and a new episode from the next transmission on
        (``recovery_tx``). A competing window starts CUBIC's curve over from the window before
        it (RFC 9438 section 4.6): a timeout too, or the window regrew from it up to half
        itself per round trip along the curve of the decrease before. During a drain round
        the window it restores is cut (the frames that timed out were sent from it)."""
        draining = self.drain_cwnd
        before = draining if draining else self.cwnd
        self.ssthresh = after = max(float(MIN_WINDOW), before * BETA)
        if draining:
            self.drain_cwnd = after
        else:
            self.cwnd = after
        self.decreases += 1
        self.recovery_tx = self.tx
        self.cut_at = -1.0 if now is None else now
        if self.competing and now is not None:
            self._cubic_epoch(now, before, after)

    def _compete(self) -> None:
        """The queue is not ours: react to loss only (``competing``), take back what the
        decreases of the streak under way gave up (they yielded to it), and slow-start until
        the first loss. Growing from the window the delay left it, by CUBIC's curve, took more
        than 10 s beside TCP CUBIC's full 100 ms queue at 50 Mbit/s (0.17-0.31 of the link);
        slow start takes a few round trips (0.42-0.43 in the same runs)."""
        self.competing = True
        self.cubic_epoch = -1.0  # (the next competing round starts CUBIC's curve)
        self.cubic_wmax = 0.0
        if self.streak_qdelay != math.inf and self.cwnd < self.streak_cwnd:
            self.cwnd = self.streak_cwnd
        self.ssthresh = float(MAX_WINDOW)

    def _drain(self, now: float | None, hold: float = -1.0) -> None:
        """Start a drain round at ``now`` (seconds; None: no clock, one round): the window
        drops to ``MIN_WINDOW`` until the round is over (the frames in flight are acked and
        one more goes out into the emptied queue) and ``max(2 * srtt, DRAIN_HOLD)`` has
        passed, so that its RTT samples find the queue without this flow's share of it, nor
        the share of another flow draining with it (one round of a small window ended before
        a larger window's share had left), and until ``hold`` (seconds) if later."""
        self.drain_cwnd = self.cwnd
        self.drain_base = self.min_rtt
        self.drain_min = math.inf
        srtt = self.srtt
        until = now + max(2 * srtt, DRAIN_HOLD) if now is not None and srtt else -1.0
        self.drain_until = until if until > hold or now is None else hold
        if now is not None:
            self.drain_at = now
        self.cwnd = float(MIN_WINDOW)

    def _drained(self, now: float | None) -> None:
        """The drain round is over: restore the window and read the queue the round found.
        Competing, a queue below :meth:`delay_target` was ours: back to yielding to delay.
        ``min_rtt`` becomes the smallest RTT of this and the previous period between drains
        (a filter over about two ``MIN_RTT_WINDOW``: a base that grew for good is learnt; one
        flow's drain against another's passing queue is not), or stays if that is larger and
        the window is ``competing`` (the neighbour's queue stood in every round of both
        periods; a base that grew far enough to make the window compete leaves it competing,
        as TCP on that path); a drain less than ``MIN_RTT_WINDOW`` into the period only
        lowers it (drains that echo other flows' come more often). A queue that outlasted the
        drain makes the window compete only if it is a loss-based flow's (where floor windows
        set the target, on a link they fill alone: a frame lost since the last drain, or past
        ``1 / SHARE_FLOOR`` times the target) and the base fell (the queue this flow started
        behind) or the strikes that started the drain are
        ``FIRST_DRAIN`` old (:meth:`_streak_aged`). The next round is left alone (the window comes back at once;
        pacing spreads it)."""
        if self.cwnd < self.drain_cwnd:
            self.cwnd = self.drain_cwnd
        self.drain_cwnd = 0.0
        if now is not None:
            self.drain_end = now
        self.drains += 1
        self.hold = 1
        self.velocity = 1
        self.calm_rounds = 0
        self.recent.clear()  # (rounds measured against the old base)
        self.drain_soon = False
        rtt = self.round_min_rtt
        if self.drain_min < rtt:
            rtt = self.drain_min  # (the drain's earlier rounds)
        if rtt != math.inf:
            period = self.period_min
            last = self.last_period_min
            rotate = now is None or now - self.period_start >= MIN_RTT_WINDOW
            if rotate:  # (a period is MIN_RTT_WINDOW at least, however often drains come)
                base = period if period < last else last
                if base < self.min_rtt or not self.competing:
                    self.min_rtt = base  # (competing, every round saw the neighbour's queue)
                self.last_period_min = period
                self.period_min = math.inf
                if now is not None:
                    self.period_start = now
            elif period < self.min_rtt:
                self.min_rtt = period
            self.qdelay = rtt - self.min_rtt
            target = self.delay_target()
            # the base fell well below the one the rounds before were measured against (the
            # queue this flow started behind was in it): their streak says nothing
            fell = self.min_rtt < self.drain_base * REDRAIN_FALL
            if self.competing:
                if self.qdelay < target:
                    self.competing = False
                    self.strikes = 0
                    self.streak_qdelay = math.inf
            elif (
                self.qdelay > 2 * target
                and (fell or self.streak_qdelay != math.inf)
                # where floor windows set the target (on a link, a target past QDELAY_TARGET is
                # theirs: they alone fill it), a SafeDealer newcomer's base holds another
                # flow's floor window and it keeps up to target / SHARE_FLOOR over it,
                # overflowing nothing; a loss-based flow fills the queue until it overflows.
                # Above that rate the queue says enough (BBR neither overflows it nor yields:
                # waiting for either starved the window)
                and (not self._floor_bound(target) or self.lost > self.drain_lost or self.qdelay > target / SHARE_FLOOR)
            ):
                if fell or self._streak_aged(now):
                    self._compete()  # a queue that outlasted this window is not ours
                # (else a young streak: a newcomer may not have drained to its base yet)
            else:
                # what the decreases could not drain went with this window, or is a
                # SafeDealer's: go on yielding to delay (its share grows what it tolerates),
                # and check again a period later, not at the next three strikes: each check
                # holds the window at its floor for FIRST_DRAIN, and two SafeDealers on a slow
                # link, whose windows alone stand past twice the target, spent most of their
                # time in checks
                if self.strikes >= COMPETE_STRIKES and now is not None:
                    self.checked_until = now + MIN_RTT_WINDOW
                self.strikes = 0
                self.streak_qdelay = math.inf
            if rotate:
                self.last_period_rate = self.period_rate
                self.period_rate = 0.0
            # and a flow that started behind another's queue, which may have yielded to it
            # since, looks again soon: the base may be lower still
            self.drain_soon = fell
        self.drain_lost = self.lost
        if now is not None:
            self.drain_due = now + (FIRST_DRAIN if self.drain_soon else MIN_RTT_WINDOW)

    def pace_allow(self, now: float) -> float:
        """Bytes of first sends pacing allows at ``now`` (seconds): a token bucket filled at
        :attr:`pacing_rate` up to ``PACE_QUANTUM`` of it (at least ``PACE_MIN_BURST``);
        ``inf`` before an RTT sample. May be <= 0: wait until :meth:`pace_next`. Take what
        was sent off ``pace_tokens``."""
        rate = self.pacing_rate
        if rate == math.inf:
            self.pace_stamp = now
            return math.inf
        burst = rate * PACE_QUANTUM
        if burst < PACE_MIN_BURST:
            burst = PACE_MIN_BURST
        elapsed = now - self.pace_stamp
        tokens = self.pace_tokens + (elapsed if elapsed > 0.0 else 0.0) * rate
        self.pace_tokens = tokens = tokens if tokens < burst else burst
        self.pace_stamp = now
        return tokens

    def pace_next(self) -> float:
        """When (seconds) the pacing bucket next holds a full datagram's tokens."""
        rate = self.pacing_rate
        if rate == math.inf or self.pace_tokens >= DATAGRAM:
            return self.pace_stamp
        return self.pace_stamp + (DATAGRAM - self.pace_tokens) / rate

    @property
    def pacing_rate(self) -> float:
        """Bytes per second to send at: ``PACING_GAIN * cwnd / srtt`` (twice ``cwnd / srtt``
        in slow start, which doubles the window a round trip; not in a competing window's
        conservative slow start, which grows it 1.25x); ``inf`` before an RTT sample or for
        a zero RTT."""
        srtt = self.srtt
        if not srtt:
            return math.inf
        fast = self.cwnd < self.ssthresh and not self.competing
        return (2.0 if fast else PACING_GAIN) * self.cwnd / srtt

    def forget(self, size: int) -> None:
        """A frame of ``size`` bytes left flight without an ack (its message was dropped)."""
        self.in_flight = max(0, self.in_flight - size)

    def timed_out(self, now: float) -> None:
        """A frame's resend timer fired: shrink the window to ``BETA`` of itself (:meth:`_decrease`) and double
        ``backoff`` (RFC 6298 section 5.5, at most ``MAX_BACKOFF``; the next RTT sample resets
        it), once per resend timeout. The frames sent with the timed-out one then wait
        ``rto * backoff``, so a stall (a receiver or a path starved of CPU) resends the oldest
        frame, not the whole window; if it was loss, the resend's ack shows the others lost
        (fast retransmit). A frame the timer already resent keeps ``rto`` (floored by
        ``safe_resend_ivl``), so ``safe_resend_limit`` drops a message on a dead path about
        as soon as the reference does."""
        if now < self._calm_until:
            return
        self._decrease(now)
        self.backoff = min(2 * self.backoff, MAX_BACKOFF)
        self._calm_until = now + self.rto * self.backoff

    def sample(self, rtt: float) -> None:
        """RFC 6298 section 2: update srtt / rttvar from one measurement and recompute rto
        (floored by ``floor``); keep the smallest sample in ``min_rtt`` and the round's in
        ``round_min_rtt``."""
        rtt = max(0.0, rtt)
        self.backoff = 1.0
        if rtt < self.min_rtt:
            self.min_rtt = rtt
        if rtt < self.round_min_rtt:
            self.round_min_rtt = rtt
        if self.srtt is None or self.rttvar is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = max(self.floor, self.srtt + 4 * self.rttvar)
