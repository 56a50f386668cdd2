"""Reassemble data frames into messages, copying each chunk once into a numpy buffer per part.

Source: seed 000 ("Queueing") and the reference bugs in tests/data/VECTORS.md that we
do not copy: overlapping chunks counted twice (a part "completes" with bytes never written),
part_index past part_count, and empty parts that never complete. Here byte accounting is exact:
each part keeps its received ranges merged and sorted; a chunk wholly inside a received range is
a duplicate if its bytes match (ignored) and a conflict if not; any partial overlap is a
conflict.

Memory: a message of at most ``MESSAGE_RESERVATION`` (1 MiB) is allocated
whole on its first frame and charged ``message_size + MESSAGE_OVERHEAD``. A larger one is
*lazy*: each part is an anonymous memory map whose pages the OS commits only when a chunk is
written there, so memory follows the bytes received, not the size claimed; it is charged
``MESSAGE_OVERHEAD + max(MESSAGE_RESERVATION, received + RANGE_CHARGE * ranges)`` (a received
range touches at most two pages besides its own bytes), checked before each chunk is written.
Charges count against the socket's budget (``max_incomplete_bytes``) and the owner's
(``max_peer_incomplete_bytes``; the owner is the first item of a message's key, the session id
for the default key). When a charge does not fit, the owner's own oldest other messages are
evicted first (its budget), then the oldest message of whichever owner holds the most (the
socket's), so one peer cannot lock others out; each eviction is counted (``evicted``) and its
key is kept for :meth:`Reassembler.take_evicted`.

Interop: the reference emits no frame for an empty part, so a message is
complete once its received parts are complete and their sizes add up to ``message_size``; the
absent parts are empty. A late zero-length chunk of such a message (our own senders emit one
per empty part) is recognised for a while (``RECENT_COMPLETIONS`` keys) and counted as a
duplicate rather than starting a message that could only expire.
"""

from __future__ import annotations

import mmap
import operator
from bisect import bisect_right
from collections import deque
from collections.abc import Hashable
from typing import Any, cast

import numpy as np

from ..errors import DecodeError, FrameTooLarge
from ..options import DEFAULTS
from ..wire import MAX_MESSAGE_SIZE, MAX_PARTS, DataFrame
from .batch import check_rows
from .frames import Buffer, parse_frame

#: Bytes charged to the incomplete budget for each incomplete message besides its claimed
#: size, so a flood of tiny or empty claims is bounded too.
MESSAGE_OVERHEAD = 256
#: Largest message allocated whole on its first frame, bytes; larger ones are lazy (see above).
MESSAGE_RESERVATION = 1024 * 1024
#: Extra charge of a lazy message per received range it opens: two 4 KiB pages, bytes.
RANGE_CHARGE = 8192
#: Keys of messages completed with absent (empty) parts remembered for their late empty chunks.
RECENT_COMPLETIONS = 1024
#: Evicted keys held for take_evicted() at most (the oldest go first; ``evicted`` counts all).
MAX_EVICTED_KEYS = 4096

_EMPTY = np.empty(0, dtype=np.uint8)
_PAGE_MAP = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000  # MAP_NORESERVE (Linux): lazy pages


def _lazy_buffer(size: int) -> np.ndarray:
    """A uint8 array backed by an anonymous map: pages are committed as they are written."""
    try:
        area = mmap.mmap(-1, size, flags=_PAGE_MAP)
    except (OSError, OverflowError, ValueError):
        area = mmap.mmap(-1, size)
    return np.frombuffer(area, dtype=np.uint8)


class _Part:
    __slots__ = ("data", "starts", "ends", "received", "done")

    def __init__(self, size: int, lazy: bool) -> None:
        self.data = _lazy_buffer(size) if lazy and size else np.empty(size, dtype=np.uint8)
        self.starts: list[int] = []  # received byte ranges [start, end), sorted and merged
        self.ends: list[int] = []
        self.received = 0
        self.done = False


class _Owner:
    """Who a message is charged to (a peer): bytes charged and its messages, oldest first."""

    __slots__ = ("key", "used", "messages")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.used = 0
        self.messages: dict[Hashable, _Message] = {}


class _Message:
    __slots__ = (
        "part_count",
        "message_size",
        "parts",
        "parts_done",
        "parts_seen",
        "sizes_seen",
        "first_seen",
        "lazy",
        "received",
        "charge",
        "owner",
    )

    def __init__(self, part_count: int, message_size: int, now: float, owner: _Owner) -> None:
        self.part_count = part_count
        self.message_size = message_size
        self.parts: list[_Part | None] = [None] * part_count
        self.parts_done = 0
        self.parts_seen = 0
        self.sizes_seen = 0
        self.first_seen = now
        self.lazy = message_size > MESSAGE_RESERVATION
        self.received = 0  # lazy: bytes received plus RANGE_CHARGE per range opened
        self.charge = MESSAGE_OVERHEAD + (MESSAGE_RESERVATION if self.lazy else message_size)
        self.owner = owner


def _owner_of(key: Hashable) -> Hashable:
    return key[0] if type(key) is tuple and key else key


class Reassembler:
    """Turns data frames back into messages.

    Messages are keyed by ``(session_id, message_id)`` unless a ``key`` is given to :meth:`add`.
    Counters (ints, read-only by convention): ``frames`` accepted, ``duplicates`` ignored,
    ``rejected`` frames (each drops its message), ``completed`` messages, ``expired`` messages,
    ``dropped_too_large`` frames refused by the size caps, ``malformed`` datagrams that
    :meth:`add_datagram` / :meth:`add_datagrams` refused because they are not a valid data frame.
    ``evicted`` messages pushed out to make room for another (see the module docstring).
    ``incomplete_bytes`` is the budget in use, bytes.

    Args:
        max_message_size: largest ``message_size`` accepted, bytes (default and cap 2**32-1).
        max_incomplete_bytes: budget for all incomplete messages together, bytes; a message of
            at most ``MESSAGE_RESERVATION`` (1 MiB) is charged ``message_size`` plus
            ``MESSAGE_OVERHEAD`` (256) on its first frame, a larger one ``MESSAGE_OVERHEAD``
            plus the larger of 1 MiB and its received bytes (plus ``RANGE_CHARGE`` per
            received range), growing as chunks arrive (default 64 MiB).
        max_peer_incomplete_bytes: budget of one owner (the first item of the key: the
            session id by default), bytes; None (default) means no budget besides the
            socket's.

    Raises:
        ValueError: a limit is negative or ``max_message_size`` is over 2**32-1.
        TypeError: a limit is not an int (or None for ``max_peer_incomplete_bytes``).
    """

    def __init__(
        self,
        max_message_size: int = MAX_MESSAGE_SIZE,
        max_incomplete_bytes: int = int(DEFAULTS["max_incomplete_bytes"]),
        max_peer_incomplete_bytes: int | None = None,
    ) -> None:
        max_message_size = operator.index(max_message_size)
        max_incomplete_bytes = operator.index(max_incomplete_bytes)
        if max_peer_incomplete_bytes is not None:
            max_peer_incomplete_bytes = operator.index(max_peer_incomplete_bytes)
            if max_peer_incomplete_bytes < 0:
                raise ValueError("max_peer_incomplete_bytes must be >= 0")
        if not 0 <= max_message_size <= MAX_MESSAGE_SIZE:
            raise ValueError("max_message_size must be 0..2**32-1")
        if max_incomplete_bytes < 0:
            raise ValueError("max_incomplete_bytes must be >= 0")
        self.max_message_size = max_message_size
        self.max_incomplete_bytes = max_incomplete_bytes
        self.max_peer_incomplete_bytes = max_peer_incomplete_bytes
        self.incomplete_bytes = 0
        self.evicted = 0
        self._owners: dict[Hashable, _Owner] = {}
        self._evicted_keys: deque[Hashable] = deque(maxlen=MAX_EVICTED_KEYS)
        self._recent: dict[Hashable, int] = {}
        self.frames = 0
        self.duplicates = 0
        self.rejected = 0
        self.completed = 0
        self.expired = 0
        self.dropped_too_large = 0
        self.malformed = 0
        self._messages: dict[Hashable, _Message] = {}

    def __len__(self) -> int:
        """Number of incomplete messages held."""
        return len(self._messages)

    def _reject(self, key: Hashable, offset: int, reason: str) -> DecodeError:
        self.rejected += 1
        self.drop(key)
        return DecodeError(offset, reason)

    def add(self, frame: DataFrame, now: float = 0.0, key: Hashable = None) -> list[np.ndarray] | None:
        """Add one data frame; copy its chunk once, straight to its offset in its part.

        Args:
            frame: a parsed :class:`~nbmq.wire.DataFrame` (as ``parse_frame`` returns). ``chunk``
                is any C-contiguous buffer (a frame from the wire carries at most 466 bytes).
            now: time the frame arrived, seconds (any monotonic clock); stamps a new message
                for :meth:`expire`.
            key: the message's identity; default ``(frame.session_id, frame.message_id)``.

        Returns:
            The message's parts once complete: a list of ``part_count`` uint8 arrays of shape
            ``(part_size,)`` that own their memory (no second copy; the reassembler keeps no
            reference; a lazy message's parts are backed by their own anonymous maps, held as
            ``part.base``); parts that never arrived, once the others add up to
            ``message_size``, are empty arrays. Otherwise None (incomplete, or an exact duplicate chunk, which is
            counted in ``duplicates`` and ignored). Mutates the reassembler's state and
            counters.

        Raises:
            FrameTooLarge: the first frame of a message claims more than ``max_message_size``,
                or its charge (or a lazy message's growth) does not fit the budgets even after
                evicting other messages (then a held message is dropped); nothing is allocated
                (``dropped_too_large`` counts it).
            DecodeError: a field outside what the wire allows (part_count not 1..255 at 18,
                part_index >= part_count at 19, message_size / part_size / chunk_offset not a
                u32 at 20 / 24 / 30: frames from ``parse_frame`` never do this); the frame
                disagrees with earlier frames of its message (part_count, message_size or
                part_size; offset of that field), overlaps received bytes of its part
                differently (offset 30), or its part sizes do not add up to message_size
                (offset 24). The message, if held, is dropped and ``rejected`` counts.
            TypeError: a header field is not an int, ``chunk`` is not a buffer, or ``now`` is
                not a number.
        """
        now = float(now)
        if key is None:
            key = (frame.session_id, frame.message_id)
        part_count, part_index, message_size, part_size, chunk_offset = map(
            operator.index,
            (frame.part_count, frame.part_index, frame.message_size, frame.part_size, frame.chunk_offset),
        )
        chunk = memoryview(frame.chunk).cast("B")
        # The single-frame rules parse_frame enforces, for frames built by hand: every field
        # within its wire type, so no claim can index past the parts or go negative.
        if not 0 < part_count <= MAX_PARTS:
            raise self._reject(key, 18, "part_count not in 1..255")
        if not 0 <= part_index < part_count:
            raise self._reject(key, 19, "part_index >= part_count")
        if not 0 <= message_size <= MAX_MESSAGE_SIZE:
            raise self._reject(key, 20, "message_size not a u32")
        if not 0 <= part_size <= MAX_MESSAGE_SIZE:
            raise self._reject(key, 24, "part_size not a u32")
        if not 0 <= chunk_offset <= MAX_MESSAGE_SIZE:
            raise self._reject(key, 30, "chunk_offset not a u32")
        message = self._messages.get(key)
        if message is None:
            if message_size > self.max_message_size:
                self.dropped_too_large += 1
                raise FrameTooLarge(20, "message over max_message_size")
            if not part_size and not len(chunk) and self._recent.get(key) == message_size:
                self.duplicates += 1  # a late empty part of a message completed without it
                return None
            owner_key = _owner_of(key)
            owner = self._owners.get(owner_key)
            charge = MESSAGE_OVERHEAD + min(message_size, MESSAGE_RESERVATION)
            reason = self._make_room(owner, charge, None)
            if reason is not None:
                self.dropped_too_large += 1
                raise FrameTooLarge(20, reason)
            if owner is not None and owner_key not in self._owners:
                owner = None  # evicting its last message forgot it
            if owner is None:
                owner = self._owners[owner_key] = _Owner(owner_key)
            message = _Message(part_count, message_size, now, owner)
            self._messages[key] = message
            owner.messages[key] = message
            owner.used += charge
            self.incomplete_bytes += charge
        elif part_count != message.part_count:
            raise self._reject(key, 18, "part_count differs from earlier frames")
        elif message_size != message.message_size:
            raise self._reject(key, 20, "message_size differs from earlier frames")
        part = message.parts[part_index]
        if part is None:
            message.sizes_seen += part_size
            if message.sizes_seen > message.message_size:
                raise self._reject(key, 24, "part sizes exceed message_size")
            try:
                part = _Part(part_size, message.lazy)
            except (OSError, MemoryError, ValueError):  # the OS refused the map (strict overcommit)
                self.dropped_too_large += 1
                self.drop(key)
                raise FrameTooLarge(20, "cannot reserve memory for the message") from None
            message.parts[part_index] = part
            message.parts_seen += 1
        elif part_size != len(part.data):
            raise self._reject(key, 24, "part_size differs from earlier frames")
        size = len(chunk)
        start = chunk_offset
        end = start + size
        if end > len(part.data):
            raise self._reject(key, 30, "chunk past its part")
        if size == 0:
            # Only an empty part needs its (single, empty) chunk; anywhere else it carries nothing.
            if part.done or len(part.data):
                self.duplicates += 1
                return None
        else:
            starts = part.starts
            ends = part.ends
            # Received ranges are disjoint, sorted and merged: only the neighbours can overlap.
            i = bisect_right(starts, start)
            if i and ends[i - 1] > start:
                if end <= ends[i - 1] and bytes(part.data[start:end]) == bytes(chunk):
                    self.duplicates += 1
                    return None
                raise self._reject(key, 30, "chunk overlaps received bytes differently")
            if i < len(starts) and starts[i] < end:
                raise self._reject(key, 30, "chunk overlaps received bytes differently")
            before = i > 0 and ends[i - 1] == start
            after = i < len(starts) and starts[i] == end
            if message.lazy:
                self._grow(key, message, size if before or after else size + RANGE_CHARGE)
            part.data[start:end] = chunk
            if before:
                if after:
                    ends[i - 1] = ends[i]
                    del starts[i], ends[i]
                else:
                    ends[i - 1] = end
            elif after:
                starts[i] = start
            else:
                starts.insert(i, start)
                ends.insert(i, end)
            part.received += size
        self.frames += 1
        if part.received < len(part.data):
            return None
        part.done = True
        message.parts_done += 1
        if message.parts_done < message.part_count:
            if message.parts_done < message.parts_seen or message.sizes_seen != message.message_size:
                return None
            # Every part received is whole and their sizes add up: the absent parts are empty
            # (the reference sends no frame for them). Remember the key for their late chunks.
            recent = self._recent
            if len(recent) >= RECENT_COMPLETIONS:
                del recent[next(iter(recent))]
            recent[key] = message_size
        elif message.sizes_seen != message.message_size:
            raise self._reject(key, 24, "part sizes do not add up to message_size")
        self._release(key, message)
        self.completed += 1
        return [np.empty(0, dtype=np.uint8) if p is None else p.data for p in message.parts]

    def _grow(self, key: Hashable, message: _Message, more: int) -> None:
        """Charge a lazy message for ``more`` received bytes; drop it if they cannot fit."""
        grown = message.received + more
        charge = MESSAGE_OVERHEAD + min(message.message_size, max(MESSAGE_RESERVATION, grown))
        delta = charge - message.charge
        if delta > 0:
            reason = self._make_room(message.owner, delta, message)
            if reason is not None:
                self.dropped_too_large += 1
                self.drop(key)
                raise FrameTooLarge(20, reason)
            message.charge = charge
            message.owner.used += delta
            self.incomplete_bytes += delta
        message.received = grown

    def _make_room(self, owner: _Owner | None, need: int, current: _Message | None) -> str | None:
        """Evict messages until ``need`` more bytes fit ``owner``'s and the socket's budgets.

        The owner's own oldest messages go first; for the socket's budget, the oldest message
        of another owner that would still hold more than ``owner`` does, else the owner's own
        oldest. ``current`` (the message being charged) is never evicted. Returns None when
        the bytes fit, else why they cannot.
        """
        own = 0 if current is None else current.charge
        if own + need > self.max_incomplete_bytes:
            return "incomplete-bytes budget exhausted"
        cap = self.max_peer_incomplete_bytes
        if cap is not None:
            if own + need > cap:
                return "peer's incomplete-bytes budget exhausted"
            while owner is not None and owner.used + need > cap:
                self._evict(owner, current)  # it holds another message: own + need fits
        while self.incomplete_bytes + need > self.max_incomplete_bytes:
            mine = need if owner is None else owner.used + need
            victim = None
            for other in self._owners.values():
                if other is not owner and (victim is None or other.used > victim.used):
                    victim = other
            if victim is not None and victim.used > mine:
                self._evict(victim, current)
            elif owner is not None and len(owner.messages) > (current is not None):
                self._evict(owner, current)
            else:
                return "incomplete-bytes budget exhausted"
        return None

    def _evict(self, owner: _Owner, current: _Message | None) -> None:
        for key, message in owner.messages.items():  # noqa: B007 (the loop leaves key set)
            if message is not current:
                break
        self._release(key, message)
        self.evicted += 1
        self._evicted_keys.append(key)

    def _release(self, key: Hashable, message: _Message) -> None:
        del self._messages[key]
        owner = message.owner
        del owner.messages[key]
        owner.used -= message.charge
        if not owner.messages and len(self._owners) > len(self._messages) + 64:
            self._sweep_owners()
        self.incomplete_bytes -= message.charge

    def _sweep_owners(self) -> None:
        # idle owners stay for their next message; sweep them once they pile up
        self._owners = {k: o for k, o in self._owners.items() if o.messages}

    def note_owner(self, owner: Hashable) -> bool:
        """What :meth:`add` leaves in the owner table for a message of ``owner`` completed by
        its one frame while no message is held: its entry appended when absent, then the idle
        owners swept once they pile up. The compiled engine (``nbmq.engine._fast``) completes
        such messages itself and calls this, so the table's order, which picks the victim of
        an eviction on a tie, is the one ``add`` would leave. Returns True when the entry stays
        (a sweep may take it at once)."""
        if owner in self._owners:
            return True
        self._owners[owner] = _Owner(owner)
        if len(self._owners) > len(self._messages) + 64:
            self._sweep_owners()
        return owner in self._owners

    def drop_owner(self, owner: Hashable) -> list[Hashable]:
        """Forget every incomplete message charged to ``owner`` and release its budget.

        The engine calls it when a peer is removed: a new session has a new id, so the old
        session's incomplete messages can never complete and would hold budget until their TTL.

        Args:
            owner: the first item of the messages' keys (the engine's: the session id).

        Returns:
            Their keys, oldest first (empty when ``owner`` holds none). Not counted in
            ``expired`` or ``evicted``: the caller reports why.
        """
        found = self._owners.get(owner)
        if found is None:
            return []
        keys = list(found.messages)
        for key in keys:
            self.drop(key)
        return keys

    def take_evicted(self) -> list[Hashable]:
        """The keys of the messages evicted since the last call, oldest first (at most
        ``MAX_EVICTED_KEYS``; ``evicted`` counts every one). Clears them."""
        keys = list(self._evicted_keys)
        self._evicted_keys.clear()
        return keys

    def owner_bytes(self, owner: Hashable) -> int:
        """Bytes charged to ``owner`` (the first item of its messages' keys), 0 if none."""
        found = self._owners.get(owner)
        return 0 if found is None else found.used

    def add_datagram(self, datagram: Buffer, now: float = 0.0, key: Hashable = None) -> list[np.ndarray] | None:
        """Parse one datagram and add it: ``add(parse_frame(datagram), now, key)`` in one call.

        The fast path of the receive loop: no frame object is built and the chunk is copied
        straight from ``datagram``.

        Args:
            datagram: one UDP payload, any C-contiguous buffer.
            now, key: as :meth:`add`.

        Returns:
            As :meth:`add`.

        Raises:
            DecodeError, FrameTooLarge: as ``parse_frame`` (then ``malformed`` counts it), a
                control frame (offset 1, "not a data frame"; ``malformed`` counts it), or as
                :meth:`add`.
            TypeError: ``datagram`` is not a C-contiguous buffer.
        """
        try:
            frame = parse_frame(datagram)
        except DecodeError:
            self.malformed += 1
            raise
        if type(frame) is not DataFrame:
            self.malformed += 1
            raise DecodeError(1, "not a data frame")
        return self.add(frame, now, key)

    def add_datagrams(
        self, buffer: np.ndarray | bytes, offsets: np.ndarray, lengths: np.ndarray, now: float = 0.0
    ) -> list[tuple[tuple[int, int], list[np.ndarray]]]:
        """Add many datagrams, laid out as for ``parse_frames``, in row order; never raises for
        a bad row.

        Each row is ``add_datagram(buffer[offsets[i] : offsets[i] + lengths[i]], now)``, keyed
        by ``(session_id, message_id)``. A row that raises DecodeError there is skipped (and
        counted as that method counts it); a row outside ``buffer`` is skipped and counted in
        ``malformed``. Feed it data frames only (``parse_frames`` tells which rows are): a
        control frame counts as malformed.

        Args:
            buffer: the datagrams, a uint8 array or any C-contiguous buffer.
            offsets, lengths: integer arrays, shape ``(n,)``: where each datagram starts and
                its size, bytes.
            now: as :meth:`add`.

        Returns:
            ``(key, parts)`` for every message completed, in completion order; ``parts`` as
            :meth:`add` returns them.

        Raises:
            ValueError: ``offsets`` and ``lengths`` differ in shape or are not 1-D.
            TypeError: ``offsets`` or ``lengths`` is not an integer array, ``buffer`` is not a
                C-contiguous buffer, or ``now`` is not a number.
        """
        offsets, lengths = check_rows(offsets, lengths)
        view = memoryview(cast(Any, buffer)).cast("B")
        now = float(now)
        total = len(view)
        done = []
        for start, length in zip(offsets.tolist(), lengths.tolist()):
            if start < 0 or length < 0 or start + length > total:
                self.malformed += 1
                continue
            try:
                frame = parse_frame(view[start : start + length])
            except DecodeError:
                self.malformed += 1
                continue
            if type(frame) is not DataFrame:
                self.malformed += 1
                continue
            try:
                parts = self.add(frame, now)
            except DecodeError:
                continue
            if parts is not None:
                done.append(((frame.session_id, frame.message_id), parts))
        return done

    def drop(self, key: Hashable) -> bool:
        """Forget an incomplete message and release its budget.

        Returns:
            True if it was held.
        """
        message = self._messages.get(key)
        if message is None:
            return False
        self._release(key, message)
        return True

    def expire(self, before: float) -> list[Hashable]:
        """Drop every incomplete message first seen before ``before`` (seconds).

        Returns:
            The keys dropped, oldest first; ``expired`` counts them.
        """
        old = [k for k, m in self._messages.items() if m.first_seen < before]
        for key in old:
            self.drop(key)
        self.expired += len(old)
        return old

    def oldest(self) -> float | None:
        """When the oldest incomplete message was first seen (seconds), or None if none."""
        if not self._messages:
            return None
        return min(m.first_seen for m in self._messages.values())
