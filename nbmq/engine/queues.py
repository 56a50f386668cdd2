"""The queueing layer: multipart messages to frames and back, sans-IO (time is an argument).

:class:`RecvQueue` turns data frames into completed messages (on :class:`codec.Reassembler
<nbmq._codec_py.Reassembler>`), holds them for ``recv()`` up to ``recv_hwm``, expires incomplete
ones, and (SafeDealer) drops repeats of messages it delivered within a dedup window that really
expires.

:class:`SendQueue` holds the socket's outgoing messages, already sharded (``codec.shard_message``)
into frames in one buffer each, hands frames out in order with a per-call cap, and (SafeDealer)
keeps each frame until it is acked, resending it every ``resend_ivl`` at most ``resend_limit``
times.

Divergences from the reference (nbmq 0.2.0), on purpose:

- ``recv_hwm`` bounds *completed* messages only; incomplete ones are bounded by bytes
  (``max_incomplete_bytes``) and by ``uncompleted_message_ttl``. The reference counts incomplete
  ones too and refuses a new message's first frame with WouldBlock (vector
  ``recv_hwm_incoming_full``). A message that completes while the queue is full is dropped and
  counted (``RECV_HWM``), as the reference discards it (``recv_hwm_complete_full``), but nothing
  is raised at the network: UDP input never blocks and never raises. In ``refuse_when_full``
  mode (SafeDealer) frames arriving while full are refused instead (``REFUSED``, not acked), so
  the sender resends them later: backpressure without loss.
- The dedup window expires (the reference compares the times the wrong way round and never
  forgets), and a frame of a message delivered within the window is dropped before it reaches
  the reassembler, so a late resend cannot start a ghost incomplete message.
- ``send_hwm`` counts messages held by the socket: queued, partly handed out, or (SafeDealer)
  awaiting acks. A message stops counting as soon as its last frame is handed out (Dealer,
  Radio) or acked / dropped (SafeDealer); the reference's count drops only on the pull *after*
  the last frame (vector ``send_queue_hwm_and_marker_accounting``).
"""

from __future__ import annotations

import heapq
import itertools
import math
import struct
import sys
from collections import deque
from collections.abc import Callable, Hashable
from enum import IntEnum
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import codec, extensions
from ..errors import DecodeError, FrameTooLarge, WouldBlock
from ..events import DropReason
from ..options import DEFAULTS
from ..wire import DataFrame
from .congestion import DUPTHRESH, RESENDS_PER_ACK, Window
from .peers import Peer, PeerState

__all__ = ["PushResult", "RecvQueue", "RecvQueueStatePy", "SendQueue", "SendQueueStatePy", "OutMessage", "hwm_count"]

_SID = struct.Struct(">Q")
_CONNECTED = PeerState.CONNECTED
_U64_MAX = 0xFFFFFFFFFFFFFFFF
Datagram = tuple[Any, Hashable]
Parts = list[np.ndarray]


class PushResult(IntEnum):
    """What :meth:`RecvQueue.push` did with a frame."""

    #: Taken; its message is not complete yet (or the chunk was an exact duplicate).
    INCOMPLETE = 0
    #: Taken; it completed its message, which is now queued for :meth:`RecvQueue.pull`.
    COMPLETE = 1
    #: A frame of a message delivered within the dedup window: dropped (a SafeDealer acks it).
    DUPLICATE = 2
    #: It completed its message but ``recv_hwm`` messages were waiting: the message is dropped.
    DROPPED = 3
    #: ``refuse_when_full`` and the queue is full: not taken (a SafeDealer does not ack it).
    REFUSED = 4
    #: It contradicts earlier frames of its message: that message is discarded.
    REJECTED = 5
    #: Its message is over ``max_message_size`` or the incomplete-bytes budget: not taken.
    TOO_LARGE = 6


#: Results after which a SafeDealer receiver acks the frame.
ACKED_RESULTS = frozenset({PushResult.INCOMPLETE, PushResult.COMPLETE, PushResult.DUPLICATE})


def hwm_count(value: int) -> int:
    """A high-water mark (messages) as the queues hold it: ``value`` capped at ``sys.maxsize``,
    a count no queue can reach (the same as no cap), so that it fits the compiled fields."""
    return min(int(value), sys.maxsize)


class SendQueueStatePy:
    """The fields of :class:`SendQueue` that compiled code reads and writes (the pure-Python
    twin of ``nbmq.engine._queue_state.SendQueueState``, which holds them as C fields):
    counts ``held``, ``send_hwm``, ``pushed``, ``frames_out``, ``bytes_out``, ``_rr`` (ints),
    flags ``safe``, ``congestion``, ``_blocked``, ``resend_ivl`` (seconds) and the containers
    ``_queue``, ``_inflight``, ``windows``. Meanings: see :class:`SendQueue`."""

    __slots__ = (
        "held",
        "send_hwm",
        "pushed",
        "frames_out",
        "bytes_out",
        "_rr",
        "safe",
        "congestion",
        "_blocked",
        "resend_ivl",
        "_queue",
        "_inflight",
        "windows",
    )


class RecvQueueStatePy:
    """The fields of :class:`RecvQueue` that compiled code reads and writes (the pure-Python
    twin of ``nbmq.engine._queue_state.RecvQueueState``): counts ``recv_hwm``, ``completed``,
    ``dropped_hwm`` (ints), the flag ``refuse_when_full``, ``dedup_ttl`` (seconds or None), and
    ``reassembler``, ``_ready`` (deque of messages), ``_dedup`` (a :data:`DedupWindow` or None). Meanings: see
    :class:`RecvQueue`."""

    __slots__ = (
        "recv_hwm",
        "completed",
        "dropped_hwm",
        "refuse_when_full",
        "dedup_ttl",
        "reassembler",
        "_ready",
        "_dedup",
    )


def _check_u64(session_id: int, message_id: int) -> None:
    if not (0 <= session_id <= _U64_MAX and 0 <= message_id <= _U64_MAX):
        raise OverflowError(f"dedup key ({session_id}, {message_id}) is outside u64")


class DedupWindowPy:
    """The messages a receive queue delivered lately: ``(session_id, message_id)`` (u64 ints)
    -> until when a repeat is a duplicate (float seconds), forgotten oldest-put first by
    :meth:`expire` (the pure-Python twin of ``nbmq.engine._queue_state.DedupWindow``, a C
    table; same methods and results). One dict in put order: a key put again moves to the
    end, so the dict's order is the expiry order and no second structure is needed."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until: dict[tuple[int, int], float] = {}

    def get(self, session_id: int, message_id: int) -> float | None:
        """``until`` (seconds) of the key, or None when it is not remembered. Raises
        OverflowError for a key outside u64 (as the C table)."""
        _check_u64(session_id, message_id)
        return self._until.get((session_id, message_id))

    def put(self, session_id: int, message_id: int, until: float) -> None:
        """Remember the key until ``until`` (seconds) as the newest entry (a key put again
        moves to the end of the expiry order). Raises OverflowError for a key outside u64."""
        _check_u64(session_id, message_id)
        key = (session_id, message_id)
        entries = self._until
        entries.pop(key, None)
        entries[key] = float(until)

    def expire(self, now: float) -> int:
        """Forget entries oldest-put first while their until is <= ``now`` (seconds), up to
        the first that is not; returns how many were forgotten."""
        entries = self._until
        expired = []
        for key, until in entries.items():
            if until > now:
                break
            expired.append(key)
        for key in expired:
            del entries[key]
        return len(expired)

    def __len__(self) -> int:
        return len(self._until)

    def __repr__(self) -> str:
        return f"DedupWindowPy({len(self._until)} remembered)"


_compiled_state = extensions.load("nbmq.engine._queue_state")
#: True when the queues' fields are the compiled ``SendQueueState`` / ``RecvQueueState`` C fields.
COMPILED = _compiled_state is not None
if TYPE_CHECKING:
    _SendQueueState = SendQueueStatePy
    _RecvQueueState = RecvQueueStatePy
else:  # one module chooses: the compiled fields, or the twins' slots
    _SendQueueState = SendQueueStatePy if _compiled_state is None else _compiled_state.SendQueueState
    _RecvQueueState = RecvQueueStatePy if _compiled_state is None else _compiled_state.RecvQueueState
#: The dedup window of a receive queue: the compiled C table, or its twin.
DedupWindow: type[DedupWindowPy] = DedupWindowPy if _compiled_state is None else _compiled_state.DedupWindow
#: The completed messages of a receive queue: the compiled ``ReadyQueue`` (whole one-frame
#: messages as bytes in one arena), or its twin, a plain deque of part lists.
ReadyQueue: type[deque[Any]] = deque if _compiled_state is None else _compiled_state.ReadyQueue
#: The frames a safe send queue awaits acks for, by ack hash: the compiled C table, or its
#: twin, a plain dict (the same methods and order).
InflightTable: type[dict[int, Any]] = dict if _compiled_state is None else _compiled_state.InflightTable


class RecvQueue(_RecvQueueState):
    """Completed messages in arrival order, built on ``codec.Reassembler``.

    Args:
        recv_hwm: most completed messages held for :meth:`pull` (>= 1).
        uncompleted_message_ttl: seconds an incomplete message is kept after its first frame.
        queue_maint_ivl: seconds between expiry runs (:meth:`maintain`).
        dedup_ttl: seconds a delivered message's ``(session_id, message_id)`` is remembered
            (a repeat in the window's second half renews it: resends never outlive it);
            None turns de-duplication off (Dealer, Dish: the reference's ``pull``).
        max_message_size: largest message accepted, bytes.
        max_incomplete_bytes: budget for all incomplete messages, bytes.
        refuse_when_full: refuse frames while ``recv_hwm`` messages wait (SafeDealer), rather
            than dropping messages that complete while full.
        max_peer_incomplete_bytes: budget for one session's incomplete messages, bytes (None:
            only the socket's). How messages are charged and who is evicted when a budget is
            full: the codec's Reassembler (one peer cannot lock others out).
        on_drop: called ``(session_id, message_id, DropReason.EVICTED)`` for every incomplete
            message evicted to make room; the engine turns it into an event and a counter.

    Counters (ints): ``completed`` (queued), ``pulled`` (a property), ``dropped_hwm`` (messages),
    ``refused`` (frames), ``duplicates`` (frames of recently delivered messages), ``expired``,
    ``evicted`` (incomplete messages pushed out by the budgets), ``peer_gone`` (incomplete
    messages of a removed peer, see :meth:`drop_session`),
    ``rejected`` and ``too_large`` (messages or frames, as the reassembler counts them);
    ``reassembler`` exposes the codec's own counters (``duplicates`` there counts repeated
    chunks of incomplete messages).

    Nothing here raises on network input; only :meth:`pull` raises (WouldBlock).
    """

    __slots__ = (  # (and those of RecvQueueStatePy)
        "ttl",
        "maint_ivl",
        "_dedup_half",
        "_next_maint",
        "_cleared",
        "refused",
        "duplicates",
        "expired",
        "rejected",
        "too_large",
        "evicted",
        "peer_gone",
        "on_drop",
    )

    def __init__(
        self,
        recv_hwm: int = cast(int, DEFAULTS["recv_hwm"]),
        uncompleted_message_ttl: float = DEFAULTS["uncompleted_message_ttl"],
        queue_maint_ivl: float = DEFAULTS["queue_maint_ivl"],
        dedup_ttl: float | None = None,
        max_message_size: int = cast(int, DEFAULTS["max_message_size"]),
        max_incomplete_bytes: int = cast(int, DEFAULTS["max_incomplete_bytes"]),
        refuse_when_full: bool = False,
        max_peer_incomplete_bytes: int | None = None,
        on_drop: DropCallback | None = None,
    ) -> None:
        self.recv_hwm = hwm_count(recv_hwm)
        self.ttl = uncompleted_message_ttl
        self.maint_ivl = queue_maint_ivl
        self.dedup_ttl = dedup_ttl
        self._dedup_half = 0.0 if dedup_ttl is None else dedup_ttl / 2
        self.refuse_when_full = refuse_when_full
        self.reassembler = codec.Reassembler(max_message_size, max_incomplete_bytes, max_peer_incomplete_bytes)
        self.on_drop = on_drop
        self._ready: deque[Parts] = ReadyQueue()
        self._dedup: DedupWindowPy | None = None if dedup_ttl is None else DedupWindow()
        self._next_maint = 0.0
        self.completed = 0
        self._cleared = 0
        self.dropped_hwm = 0
        self.refused = 0
        self.duplicates = 0
        self.expired = 0
        self.rejected = 0
        self.too_large = 0
        self.evicted = 0
        self.peer_gone = 0

    def __len__(self) -> int:
        """Completed messages waiting for :meth:`pull`."""
        return len(self._ready)

    @property
    def incomplete(self) -> int:
        """Incomplete messages held by the reassembler."""
        return len(self.reassembler)

    @property
    def remembered(self) -> int:
        """Entries in the dedup window (0 when de-duplication is off)."""
        return 0 if self._dedup is None else len(self._dedup)

    def push(self, frame: DataFrame, now: float) -> PushResult:
        """Take one data frame; its chunk is copied once (into the reassembler's part buffer).

        Args:
            frame: a parsed :class:`~nbmq.wire.DataFrame`; ``chunk`` may be a view into a buffer
                the caller reuses afterwards (nothing keeps a reference to it).
            now: arrival time, seconds.

        Returns:
            A :class:`PushResult`. Mutates the queue and its counters; never raises on bad
            frames (they are counted).
        """
        key = (frame.session_id, frame.message_id)
        dedup = self._dedup
        if dedup is not None:
            until = dedup.get(*key)
            if until is not None and until > now:
                self.duplicates += 1
                if until - now < self._dedup_half:  # a repeat renews the window: a resend
                    # later than the ttl after delivery would otherwise be delivered twice
                    dedup.put(*key, now + cast(float, self.dedup_ttl))
                return PushResult.DUPLICATE
        ready = self._ready
        if self.refuse_when_full and len(ready) >= self.recv_hwm:
            self.refused += 1
            return PushResult.REFUSED
        reassembler = self.reassembler
        evicted = reassembler.evicted
        try:
            parts = reassembler.add(frame, now, key)
        except DecodeError as exc:
            return self.push_failed(exc, evicted)
        if reassembler.evicted != evicted:
            self.report_evicted()
        if parts is None:
            return PushResult.INCOMPLETE
        if len(ready) >= self.recv_hwm:
            self.dropped_hwm += 1
            return PushResult.DROPPED
        ready.append(parts)
        self.completed += 1
        if dedup is not None:
            dedup.put(*key, now + self.dedup_ttl)  # type: ignore[operator]
        return PushResult.COMPLETE

    def push_failed(self, exc: DecodeError, evicted: int) -> PushResult:
        """Count a frame the reassembler refused with ``exc`` (``evicted``: its ``evicted``
        counter before the call, since making room may have evicted messages first).
        Returns TOO_LARGE for ``FrameTooLarge``, else REJECTED (an engine that inlines
        :meth:`push` calls this for the failures)."""
        if isinstance(exc, FrameTooLarge):
            self.too_large += 1
            if self.reassembler.evicted != evicted:
                self.report_evicted()
            return PushResult.TOO_LARGE
        self.rejected += 1
        return PushResult.REJECTED

    def report_evicted(self) -> None:
        """Count the messages the reassembler evicted since the last call (``evicted``) and
        report each to ``on_drop`` as ``DropReason.EVICTED``. Called after every batch of frames
        added, by this queue and by the engines (Python and compiled) that add frames themselves."""
        keys = self.reassembler.take_evicted()
        self.evicted += len(keys)
        on_drop = self.on_drop
        if on_drop is not None:
            for session_id, message_id in cast(list[tuple[int, int]], keys):
                on_drop(session_id, message_id, DropReason.EVICTED)

    def pull(self) -> Parts:
        """The oldest completed message.

        Returns:
            Its parts: a list of uint8 numpy arrays, shape ``(part_size,)``, that own their
            memory (the reassembler's single copy; the queue keeps no reference).

        Raises:
            WouldBlock: no message is ready.
        """
        try:
            return self._ready.popleft()
        except IndexError:
            raise WouldBlock("no message ready") from None

    def maintain(self, now: float) -> list[tuple[int, int]]:
        """Expiry, at most once per ``queue_maint_ivl`` (an early call does nothing).

        Drops incomplete messages first seen more than ``uncompleted_message_ttl`` seconds
        before ``now`` and forgets dedup entries whose window has passed.

        Returns:
            The ``(session_id, message_id)`` keys of the incomplete messages dropped.
        """
        if now < self._next_maint:
            return []
        self._next_maint = now + self.maint_ivl
        dropped = cast("list[tuple[int, int]]", self.reassembler.expire(now - self.ttl))
        self.expired += len(dropped)
        if self._dedup:
            self._dedup.expire(now)
        return dropped

    def drop_session(self, session_id: int) -> list[tuple[int, int]]:
        """Forget the incomplete messages of one session (its peer was removed: a reconnect
        gets a new session id, so they can never complete) and release their budget now,
        not at their TTL.

        Args:
            session_id: the removed peer's session id.

        Returns:
            The ``(session_id, message_id)`` keys dropped, oldest first; ``peer_gone`` counts
            them. Completed messages already queued stay for :meth:`pull`.
        """
        dropped = cast("list[tuple[int, int]]", self.reassembler.drop_owner(session_id))
        self.peer_gone += len(dropped)
        return dropped

    def next_deadline(self) -> float | None:
        """When :meth:`maintain` next has work (seconds), or None when nothing can expire."""
        if len(self.reassembler) or self._dedup:
            return self._next_maint
        return None

    @property
    def pulled(self) -> int:
        """Messages taken by :meth:`pull` (or by an engine's inlined ``recv``)."""
        return self.completed - len(self._ready) - self._cleared

    def clear(self) -> int:
        """Drop every completed and incomplete message; returns how many were dropped."""
        n = len(self._ready) + len(self.reassembler)
        self._cleared += len(self._ready)
        self._ready.clear()
        old = self.reassembler
        self.reassembler = codec.Reassembler(
            old.max_message_size, old.max_incomplete_bytes, old.max_peer_incomplete_bytes
        )
        return n


DropCallback = Callable[[int, int, DropReason], None]


class _Group:
    """The user message several Radio copies belong to: counted once against send_hwm."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class OutMessage:
    """One outgoing message (one copy, for Radio), as held by :class:`SendQueue`.

    Attributes:
        sharded: the codec's ``ShardedMessage`` (frames back to back in one uint8 buffer), or
            None for a small message (one part of at most 466 bytes, held as ``small``).
        small: the single part of a small message (immutable ``bytes``); its one frame is
            encoded (``codec.encode_data_frame``) when it is handed out, with the session of
            the peer it goes to.
        message_id: u64 id written into its frames.
        peer: the peer it goes to, fixed when its first frame is handed out (or at push).
        frames: the frames once handing out started (memoryviews into ``sharded.buffer``, or
            the small message's one ``bytes`` frame).
        sent: frames handed out so far. unacked: frames handed out and not acked (SafeDealer).
        dropped: True once dropped (its remaining frames are discarded as they come up).
    """

    __slots__ = ("sharded", "small", "message_id", "peer", "frames", "sent", "unacked", "dropped", "group")

    def __init__(
        self,
        sharded: Any,
        message_id: int,
        peer: Peer | None,
        group: _Group | None,
        small: bytes | None = None,
    ) -> None:
        self.sharded = sharded
        self.small = small
        self.message_id = message_id
        self.peer = peer
        self.frames: list[Any] | None = None
        self.sent = 0
        self.unacked = 0
        self.dropped = False
        self.group = group


class _Flight:
    """One SafeDealer frame awaiting its ack (``sent_at``: first send, seconds; ``win``: its
    peer's congestion :class:`~.congestion.Window`, or None; ``tx``: its latest transmission's
    number in ``win.order``)."""

    __slots__ = ("hash", "view", "msg", "due", "resends", "sent_at", "win", "tx", "last_sent", "fast")

    def __init__(
        self, h: int, view: Any, msg: OutMessage, due: float, sent_at: float = 0.0, win: Window | None = None
    ) -> None:
        self.hash = h
        self.view = view
        self.msg = msg
        self.due = due
        self.resends = 0
        self.sent_at = sent_at
        self.win = win
        self.tx = -1
        self.last_sent = sent_at
        self.fast = 0  # fast resends (``resends`` counts the timer's, which resend_limit bounds)

    def forget(self) -> None:
        if self.win is not None:
            self.win.forget(len(self.view))
            self.win = None


def _frames_of(sharded: Any, session_id: int | None) -> list[memoryview]:
    """Memoryviews of each frame in ``sharded.buffer``; the session id written into each when
    ``session_id`` is not None."""
    view = memoryview(sharded.buffer)
    lengths = sharded.lengths
    if len(lengths) == 1:
        frames = [view]
    else:
        frames = [view[o : o + n] for o, n in zip(sharded.offsets.tolist(), lengths.tolist())]
    if session_id is not None:
        pack = _SID.pack_into
        for frame in frames:
            pack(frame, 2, session_id)
    return frames


class SendQueue(_SendQueueState):
    """The socket's one send queue (per socket, not per peer: the OMQ lesson).

    Args:
        send_hwm: most messages held (queued, partly sent, or awaiting acks); >= 1.
        safe: keep each frame until acked, resending it (SafeDealer).
        resend_ivl: seconds between sends of an unacked frame.
        resend_limit: resends of one frame before its message is dropped.
        on_drop: called ``(session_id, message_id, reason)`` for every message dropped here;
            the engine turns it into a ``MessageDropped`` event and a counter.
        congestion: safe queues only: a congestion window per peer (see below).

    Counters (ints): ``pushed``, ``frames_out`` (first sends), ``bytes_out`` (first sends),
    ``resends``, ``resend_bytes``, ``acked`` (frames), ``acks_unknown``, ``dropped`` (messages),
    ``fast_resends`` (the part of ``resends`` sent on loss detection, before the timer).

    Congestion control (safe queues with ``congestion``): each peer has a :class:`~.congestion.Window` (in
    ``windows``) bounding its bytes in flight; :meth:`take` stops at the first frame whose
    peer's window is full (the queue's order is kept) until an ack or a timeout opens it. A
    frame's resend timer is its peer's RFC 6298 ``rto`` (floored by ``resend_ivl``). An ack
    given an output list (:meth:`ack`'s ``out``) also resends at once the frames it shows lost
    (fast retransmit: see :mod:`~.congestion`); the timer stays the backstop.
    """

    __slots__ = (  # (and those of SendQueueStatePy)
        "resend_limit",
        "on_drop",
        "_resend",
        "_seq",
        "resends",
        "resend_bytes",
        "acked",
        "acks_unknown",
        "dropped",
        "fast_resends",
        "_paced_until",
    )

    def __init__(
        self,
        send_hwm: int = cast(int, DEFAULTS["send_hwm"]),
        safe: bool = False,
        resend_ivl: float = DEFAULTS["safe_resend_ivl"],
        resend_limit: int = cast(int, DEFAULTS["safe_resend_limit"]),
        on_drop: DropCallback | None = None,
        congestion: bool = False,
    ) -> None:
        self.send_hwm = hwm_count(send_hwm)
        self.congestion = congestion
        self.safe = safe
        self.resend_ivl = resend_ivl
        self.resend_limit = resend_limit
        self.on_drop = on_drop
        self.held = 0
        self._queue: deque[OutMessage] = deque()
        self._inflight: dict[int, _Flight] = InflightTable()
        # (due, seq, flight) heap: resend timers differ per peer (each peer's rto)
        self._resend: list[tuple[float, int, _Flight]] = []
        self._seq = itertools.count()
        self._rr = 0
        self.pushed = 0
        self.frames_out = 0
        self.bytes_out = 0
        self.resends = 0
        self.resend_bytes = 0
        self.acked = 0
        self.acks_unknown = 0
        self.dropped = 0
        self.fast_resends = 0
        self.windows: dict[Any, Window] = {}
        self._blocked = False  # take() stopped at a full window: not ready until it opens
        self._paced_until = -math.inf  # take() stopped for pacing: not ready until then

    def took(self, rr: int, frames: int, nbytes: int, released: int) -> None:
        """Record what one :meth:`take` handed out (its Python and compiled code alike).

        Args:
            rr: index into the ring of the peer the next message goes to (round robin).
            frames: frames handed out. nbytes: their bytes, headers included.
            released: messages that left the queue for good (no longer held against
                ``send_hwm``).
        """
        self._rr = rr
        self.held -= released
        self.frames_out += frames
        self.bytes_out += nbytes

    def window_full(self) -> None:
        """Record that a :meth:`take` stopped at a peer's full congestion window: not
        :meth:`ready` until an ack or a timeout opens it (:meth:`window_opened`)."""
        self._blocked = True

    def window_opened(self) -> None:
        """Record that a frame left a peer's congestion window (acked, dropped or given up):
        a :meth:`take` stopped at a full window may run again (:meth:`ready`)."""
        self._blocked = False

    def __len__(self) -> int:
        """Messages held (the number ``send_hwm`` bounds)."""
        return self.held

    @property
    def queued(self) -> int:
        """Messages (copies) with frames not yet handed out."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Frames awaiting an ack (SafeDealer)."""
        return len(self._inflight)

    def full(self) -> bool:
        """True when ``send_hwm`` messages are held: the one "queue full" rule (a push, and a
        socket's send, raise WouldBlock then; a transport waits for room)."""
        return self.held >= self.send_hwm

    def check_room(self) -> None:
        """Raise WouldBlock when :meth:`full`; nothing changes."""
        if self.full():
            raise WouldBlock(f"send_hwm ({self.send_hwm}) messages held")

    def push(self, sharded: Any, message_id: int, peer: Peer | None = None) -> None:
        """Queue one sharded message.

        Args:
            sharded: ``codec.shard_message(parts, session_id, message_id)``; when ``peer`` is
                None the session id in its frames is rewritten when they are handed out.
            message_id: its u64 id.
            peer: a fixed destination (already written into the frames), or None for "the
                next peer in turn when the first frame goes out".

        Raises:
            WouldBlock: ``send_hwm`` messages are held already; nothing is queued.
        """
        self.check_room()
        self._queue.append(OutMessage(sharded, message_id, peer, None))
        self.held += 1
        self.pushed += 1

    def push_small(self, part: bytes, message_id: int) -> None:
        """Queue a one-part message of at most 466 bytes, held as the (immutable) ``part``; its
        one frame is encoded when it is handed out. Same contract as :meth:`push`."""
        self.check_room()
        self._queue.append(OutMessage(None, message_id, None, None, part))
        self.held += 1
        self.pushed += 1

    def push_group(self, copies: list[tuple[Any, int, Peer]]) -> None:
        """Queue several copies of one message, each to its own peer (Radio); they count once
        against ``send_hwm``.

        Raises:
            WouldBlock: ``send_hwm`` messages are held already; nothing is queued.
        """
        self.check_room()
        if not copies:
            return
        group = _Group(len(copies))
        append = self._queue.append
        for sharded, message_id, peer in copies:
            append(OutMessage(sharded, message_id, peer, group))
        self.held += 1
        self.pushed += 1

    def release_message(self, msg: OutMessage) -> None:
        """``msg`` no longer counts against the queue's held messages (``held``, the
        high-water mark's count): acked, dropped or given up. A message sent to several peers
        (a ``group``) is released when its last copy is."""
        group = msg.group
        if group is None:
            self.held -= 1
        else:
            group.left -= 1
            if group.left == 0:
                self.held -= 1

    def _drop(self, msg: OutMessage, reason: DropReason) -> None:
        if msg.dropped:
            return
        msg.dropped = True
        self.dropped += 1
        self.release_message(msg)
        if self.on_drop is not None:
            peer = msg.peer
            self.on_drop(0 if peer is None else peer._sid, msg.message_id, reason)

    def ready(self, have_peer: bool) -> bool:
        """True when :meth:`take` would hand out a frame (or drop a message whose peer left):
        frames are queued and either ``have_peer`` or the first message has a fixed peer."""
        queue = self._queue
        return (
            bool(queue)
            and not self._blocked
            and self._paced_until == -math.inf
            and (have_peer or queue[0].peer is not None)
        )

    def pace_due(self, now: float) -> None:
        """Let :meth:`take` run again once the pacing wait it stopped at is over (``now``:
        seconds)."""
        if now >= self._paced_until:
            self._paced_until = -math.inf

    def take(self, now: float, limit: int, out: list[Datagram], ring: list[Peer]) -> int:
        """Hand out up to ``limit`` new frames, in order, appending ``(frame, addr)`` to ``out``.

        A message without a fixed peer goes to the next peer of ``ring`` in turn (round-robin
        per message) when its first frame goes out; with an empty ring it waits. Frames of a
        message whose peer is no longer connected are dropped (``PEER_GONE``). Each frame is a
        memoryview into its message's buffer (or a ``bytes`` for a small message), never
        reused by the queue. On a safe queue each frame is kept until :meth:`ack`.

        Returns:
            Frames handed out. Mutates the queue; sets ``peer.last_sent``.
        """
        if self.safe:
            return self._take_safe(now, limit, out, ring)
        queue = self._queue
        n = 0
        nbytes = 0
        released = 0
        encode = codec.encode_data_frame
        rr = self._rr
        nring = len(ring)
        sent_to: Peer | None = None  # the peer last recorded sent to
        while queue and n < limit:
            msg = queue[0]
            if msg.dropped:
                queue.popleft()
                continue
            frames = msg.frames
            peer = msg.peer
            if frames is None:
                if peer is None:
                    if not nring:
                        break
                    if rr >= nring:
                        rr = 0
                    peer = ring[rr]
                    rr += 1
                    msg.peer = peer
                    small = msg.small
                    if small is not None:
                        size = len(small)
                        frame = encode(peer._sid, msg.message_id, 1, 0, size, size, 0, small)
                        out.append((frame, peer._addr))  # the common case, in full: one frame
                        nbytes += size + 34
                        n += 1
                        if peer is not sent_to:  # (once per peer: now is one value for the call)
                            peer.sent(now)
                            sent_to = peer
                        queue.popleft()
                        released += 1
                        continue
                    else:
                        frames = _frames_of(msg.sharded, peer._sid)
                else:
                    frames = _frames_of(msg.sharded, None)
                msg.frames = frames
            assert peer is not None
            if peer._state is not _CONNECTED:
                queue.popleft()
                self._drop(msg, DropReason.PEER_GONE)
                self.windows.pop(peer, None)
                continue
            addr = peer._addr
            i = msg.sent
            total = len(frames)
            end = min(total, i + limit - n)
            for j in range(i, end):
                view = frames[j]
                out.append((view, addr))
                nbytes += len(view)
            n += end - i
            msg.sent = end
            if peer is not sent_to:  # (once per peer: now is one value for the call)
                peer.sent(now)
                sent_to = peer
            if end == total:
                queue.popleft()
                if msg.group is None:
                    released += 1
                else:
                    self.release_message(msg)
        self.took(rr, n, nbytes, released)
        return n

    def _take_safe(self, now: float, limit: int, out: list[Datagram], ring: list[Peer]) -> int:
        """:meth:`take` of a safe queue: each frame handed out is kept until :meth:`ack`, with
        its resend timer (and, with congestion control, its place in its peer's transmission
        order, within the peer's window: ``take`` stops at the first frame whose peer's window
        is full until an ack or a timeout opens it). Per-peer state is looked up once per run
        of messages to the same peer (the SafeDealer 100 B path). With congestion
        control this is the pure-Python twin of ``nbmq.engine._fast.take_safe`` (small and
        sharded messages; tests/engine/test_engine_safe_receive_fast.py)."""
        queue = self._queue
        n = 0
        nbytes = 0
        encode = codec.encode_data_frame
        ack_hash = codec.ack_hash
        heappush = heapq.heappush
        inflight = self._inflight
        rq = self._resend
        seq = self._seq
        windows = self.windows
        congestion = self.congestion
        ivl = self.resend_ivl
        rr = self._rr
        nring = len(ring)
        sent_to: Peer | None = None  # the peer last recorded sent to
        last: Peer | None = None  # the peer of the previous message, and its state:
        win: Window | None = None
        order: Any = None
        addr: Hashable = None
        due = now + ivl
        while queue and n < limit:
            msg = queue[0]
            if msg.dropped:
                queue.popleft()
                continue
            frames = msg.frames
            peer = msg.peer
            if frames is None:
                if peer is None:
                    if not nring:
                        break
                    if rr >= nring:
                        rr = 0
                    peer = ring[rr]
                    rr += 1
                    msg.peer = peer
                    small = msg.small
                    if small is not None:
                        size = len(small)
                        frames = [encode(peer._sid, msg.message_id, 1, 0, size, size, 0, small)]
                    else:
                        frames = _frames_of(msg.sharded, peer._sid)
                else:
                    frames = _frames_of(msg.sharded, None)
                msg.frames = frames
            assert peer is not None
            if peer._state is not _CONNECTED:
                queue.popleft()
                self._drop(msg, DropReason.PEER_GONE)  # (its window goes once its frames are)
                last = None
                continue
            if peer is not last:
                last = peer
                addr = peer._addr
                if congestion:
                    win = windows.get(peer)
                    if win is None:
                        win = windows[peer] = Window(ivl, peer._handshake_rtt)
                    order = win.order
                    due = now + max(win.rto, ivl)
            i = msg.sent
            total = len(frames)
            end = min(total, i + limit - n)
            j = i
            if win is None:  # no congestion control: no window
                for j in range(i, end):
                    view = frames[j]
                    out.append((view, addr))
                    nbytes += len(view)
                    h = ack_hash(view)
                    flight = inflight[h] = _Flight(h, view, msg, due, now, None)
                    heappush(rq, (due, next(seq), flight))
                j = end
            else:
                room = win.cwnd - win.in_flight
                if room <= 0 and win.in_flight > 0:
                    self.window_full()
                    break
                pace = win.pace_allow(now)
                if pace <= 0:
                    self._paced_until = win.pace_next()  # the window has room: pacing waits
                    break
                if pace < room:
                    room = pace
                sent_bytes = win.in_flight
                tx = win.tx
                while j < end and (room > 0 or j == i):
                    view = frames[j]
                    size = len(view)
                    out.append((view, addr))
                    nbytes += size
                    room -= size
                    win.in_flight += size
                    h = ack_hash(view)
                    flight = inflight[h] = _Flight(h, view, msg, due, now, win)
                    flight.tx = tx  # transmission order: loss detection and the timer
                    order.append((tx, flight))
                    tx += 1
                    j += 1
                win.tx = tx
                win.pace_tokens -= win.in_flight - sent_bytes
            msg.unacked += j - i
            n += j - i
            msg.sent = j
            if peer is not sent_to:  # (once per peer: now is one value for the call)
                peer.sent(now)
                sent_to = peer
            if j == total:
                queue.popleft()
        self.took(rr, n, nbytes, 0)
        return n

    def ack(self, session_id: int, h: int, now: float | None = None, out: list[Datagram] | None = None) -> bool:
        """An Ack for the frame whose ``codec.ack_hash`` is ``h`` arrived from ``session_id``
        at ``now`` (seconds; None: no RTT sample). It opens the peer's window.

        With congestion control, ``now`` and an output list ``out``, the frames this ack shows
        lost (still unacked, last sent ``DUPTHRESH`` or more transmissions before the acked
        one and ``Window.reorder_window()`` seconds or more before it, or longer than
        ``Window.reorder_wait()`` seconds ago; before any RTT sample, the ack of a resend shows
        the frames sent before it lost; see :mod:`~.congestion`) are resent at once, at most
        ``RESENDS_PER_ACK`` of them (the rest with the next acks), appended as ``(frame, addr)`` to ``out`` (counted in
        ``resends`` and ``fast_resends``; a frame at its resend limit, or whose message was
        dropped or whose peer left, is left to :meth:`resend_due`).

        Returns:
            True if it acked a frame in flight; False (counted in ``acks_unknown``) for a hash
            never sent, already acked, or sent to another session.
        """
        flight = self._inflight.pop(h, None)
        if flight is None:
            self.acks_unknown += 1
            return False
        msg = flight.msg
        peer = msg.peer
        if peer is None or peer._sid != session_id:
            self._inflight[h] = flight
            self.acks_unknown += 1
            return False
        flight.due = -1.0  # marks its resend-queue entries stale
        win = flight.win
        if win is not None:
            rtt = now - flight.sent_at if now is not None and flight.resends == 0 and flight.fast == 0 else None
            win.acked(len(flight.view), rtt)
            if (
                rtt is None
                and flight.fast
                and flight is not win.probe
                and now is not None
                and now - flight.last_sent < win.min_rtt
            ):
                win.spurious()  # its first send arrived: reordering, not loss
            flight.win = None
            self.window_opened()
            win.round_acked += 1
            tx = flight.tx
            if tx >= win.round_end:
                win.end_round(now)
            order = win.order
            limit = -1
            sent_before = None
            if (
                out is not None
                and now is not None
                and win.srtt is not None
                and (rtt is not None or now - flight.last_sent >= win.min_rtt)
            ):
                # (an ack sooner than min_rtt after a resend: the first send's; a tail loss
                # probe's ack shows every older frame lost, as none was sent after it)
                limit = tx - (1 if flight is win.probe else DUPTHRESH)
            elif out is not None and now is not None and win.srtt is None and (flight.resends or flight.fast):
                # a resend acked before any RTT sample (Karn's rule gave none): what went out
                # before it and is still unacked had longer than its round trip (a TCP timeout
                # marks the window lost); resent two an ack, below
                limit = tx - DUPTHRESH
                sent_before = flight.last_sent
            resent = 0
            while order:  # oldest transmissions first: skip the acked, resend the lost
                otx, other = order[0]
                if other.tx != otx or other.win is None:
                    order.popleft()
                elif otx <= limit:
                    if sent_before is None:  # (most acks find no candidate: computed once seen)
                        sent_before = max(flight.last_sent - win.reorder_window(), now - win.reorder_wait())  # type: ignore[operator]
                    if other.last_sent > sent_before:
                        break
                    order.popleft()
                    if not self.fast_resend(other, win, now, out):  # type: ignore[arg-type]
                        order.appendleft((otx, other))  # left to its timer
                        break
                    resent += 1
                    if resent >= RESENDS_PER_ACK:
                        break  # the rest on the next acks (ack-clocked, as PRR's bound)
                else:
                    break
        if msg.dropped:
            return True
        self.acked += 1
        msg.unacked -= 1
        if msg.unacked == 0 and msg.frames is not None and msg.sent == len(msg.frames):
            self.release_message(msg)
        return True

    def fast_resend(self, flight: _Flight, win: Window, now: float, out: list[Datagram], lost: bool = True) -> bool:
        """Resend ``flight``, found lost by an ack, now (see :meth:`ack`); or forget it when
        its message was dropped, or drop its message when its peer is gone, as its timer
        would. False: not resent, left to its timer (it had ``resend_limit`` fast resends;
        only the timer's resends count against the limit, so that spurious fast resends on a
        reordering path cannot drop a message early). ``lost``: False for a tail loss probe
        (not counted in the round's losses)."""
        msg = flight.msg
        peer = msg.peer
        if msg.dropped or peer is None or peer._state is not _CONNECTED:
            self._inflight.pop(flight.hash, None)
            flight.forget()
            self.window_opened()
            if not msg.dropped:
                self._drop(msg, DropReason.PEER_GONE)
            return True
        if flight.fast >= self.resend_limit:
            return False
        if lost:
            win.found_lost(flight.tx)
        win.resends += 1
        flight.fast += 1
        flight.due = now + max(win.rto, self.resend_ivl)  # its timer: its place in win.order
        flight.tx = tx = win.tx
        win.tx = tx + 1
        win.order.append((tx, flight))
        flight.last_sent = now
        view = flight.view
        out.append((view, peer._addr))
        self.resends += 1
        self.fast_resends += 1
        self.resend_bytes += len(view)
        peer.sent(now)
        return True

    def resend_due(self, now: float, out: list[Datagram]) -> int:
        """Resend every frame whose ack is overdue, appending ``(frame, addr)`` to ``out``.

        A frame already resent ``resend_limit`` times drops its message (``RESEND_LIMIT``);
        a frame whose peer is no longer connected drops its message (``PEER_GONE``). Called
        late it resends each overdue frame once.

        With congestion control a frame's timer is its place in its peer's transmission order
        (``Window.order``: the oldest transmission first), due at its last send plus the
        peer's current ``rto`` (times ``Window.backoff`` for a frame the timer has not resent
        yet; floored by ``resend_ivl``); a timeout shrinks the window and backs the timer off
        (``Window.timed_out``), so the frames sent with the timed-out one wait longer. Acked frames
        leave that order as soon as they reach its front, so nothing holds them for an RTO
        (a resend heap of acked frames was most of the garbage collector's work at 100k
        messages/s).

        Returns:
            Frames resent. Mutates the queue; sets ``peer.last_sent``.
        """
        rq = self._resend
        inflight = self._inflight
        n = self._resend_due_windows(now, out) if self.windows else 0
        ivl = self.resend_ivl
        limit = self.resend_limit
        heappop, heappush, seq = heapq.heappop, heapq.heappush, self._seq
        while rq and rq[0][0] <= now:
            due, _, flight = heappop(rq)
            if flight.due != due:
                continue  # acked, or re-queued with a later due time
            msg = flight.msg
            if msg.dropped:
                inflight.pop(flight.hash, None)
                flight.forget()
                self.window_opened()
                continue
            peer = msg.peer
            assert peer is not None
            if peer._state is not _CONNECTED:
                inflight.pop(flight.hash, None)
                flight.forget()
                self.window_opened()
                self._drop(msg, DropReason.PEER_GONE)
                continue
            if flight.resends >= limit:
                inflight.pop(flight.hash, None)
                flight.forget()
                self.window_opened()
                self._drop(msg, DropReason.RESEND_LIMIT)
                continue
            flight.resends += 1
            flight.due = due = now + ivl
            heappush(rq, (due, next(seq), flight))
            view = flight.view
            out.append((view, peer._addr))
            self.resend_bytes += len(view)
            peer.sent(now)
            n += 1
        self.resends += n
        return n

    def _resend_due_windows(self, now: float, out: list[Datagram]) -> int:
        """:meth:`resend_due` for the frames timed by their window's transmission order;
        forgets the window of a peer gone once none of its frames is left. Returns frames
        resent (not yet added to ``resends``)."""
        n = 0
        inflight = self._inflight
        ivl = self.resend_ivl
        limit = self.resend_limit
        windows = self.windows
        for peer, win in list(windows.items()):
            order = win.order
            while order:
                tx, flight = order[0]
                if flight.tx != tx or flight.win is None:
                    order.popleft()  # acked, dropped, or sent again since
                    continue
                wait = win.rto if flight.resends else win.rto * win.backoff
                if flight.last_sent + (wait if wait > ivl else ivl) > now:
                    break  # (the timer in use now: a timeout may just have backed it off)
                order.popleft()
                msg = flight.msg
                if not msg.dropped and peer._state is _CONNECTED and flight.resends < limit:
                    win.timed_out(now)  # a loss episode: shrink the window, back off the timer
                    win.resends += 1
                    win.lost += 1
                    flight.resends += 1
                    flight.due = now + max(win.rto, ivl)
                    flight.tx = tx = win.tx  # its new place in the transmission order
                    win.tx = tx + 1
                    order.append((tx, flight))
                    flight.last_sent = now
                    view = flight.view
                    out.append((view, peer._addr))
                    self.resend_bytes += len(view)
                    peer.sent(now)
                    n += 1
                    continue
                inflight.pop(flight.hash, None)
                flight.forget()
                self.window_opened()
                if not msg.dropped:
                    gone = peer._state is not _CONNECTED
                    self._drop(msg, DropReason.PEER_GONE if gone else DropReason.RESEND_LIMIT)
            probe = win.probe_candidate() if order else None
            if probe is not None and probe[0] <= now:
                flight = probe[1]
                n0 = len(out)
                resent = self.fast_resend(flight, win, now, out, lost=False) and len(out) > n0
                win.probed_tx = flight.tx  # one probe per quiet spell, then the timer
                if resent:
                    win.probe = flight
                    win.probes += 1
                    self.resends -= 1  # (fast_resend counted it; counted below with the rest)
                    n += 1
            if not order and peer._state is not _CONNECTED:
                del windows[peer]
        return n

    def next_send(self) -> float | None:
        """When :meth:`take`, stopped by a peer's pacing, may hand out frames again
        (seconds), or None when it did not stop for pacing."""
        paced = self._paced_until
        return None if paced == -math.inf else paced

    def next_resend(self) -> float | None:
        """When :meth:`resend_due` next has work (seconds), or None."""
        rq = self._resend
        while rq and rq[0][2].due != rq[0][0]:
            heapq.heappop(rq)
        best = rq[0][0] if rq else None
        for win in self.windows.values():
            order = win.order
            while order and (order[0][1].tx != order[0][0] or order[0][1].win is None):
                order.popleft()
            if order:
                flight = order[0][1]
                wait = win.rto if flight.resends else win.rto * win.backoff
                due = flight.last_sent + max(wait, self.resend_ivl)
                if best is None or due < best:
                    best = due
                probe = win.probe_candidate()
                if probe is not None and (best is None or probe[0] < best):
                    best = probe[0]
        return best

    def clear(self, reason: DropReason) -> int:
        """Drop every held message (each reported to ``on_drop``); returns how many."""
        before = self.dropped
        for msg in self._queue:
            self._drop(msg, reason)
        for flight in self._inflight.values():
            self._drop(flight.msg, reason)
        self._queue.clear()
        self._inflight.clear()
        self._resend.clear()
        self._break_cycles()
        self.windows.clear()
        self.window_opened()
        return self.dropped - before

    def _break_cycles(self) -> None:
        """Empty every window's transmission order: a compiled flight (``nbmq.engine._fast.
        Flight``) is not tracked by the cycle collector, so window -> order -> flight -> window
        is broken here, not by the collector."""
        for win in self.windows.values():
            win.order.clear()

    def __del__(self) -> None:
        if getattr(self, "windows", None) is not None:  # (not when __init__ failed before it)
            self._break_cycles()  # also when a forgotten engine's cycle is collected
