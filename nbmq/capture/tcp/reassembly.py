"""One direction of a TCP connection reassembled into an in-order byte stream (see :mod:`.streams`).

Sequence numbers are unwrapped (mod 2**32) around the highest byte seen; identical overlaps are
duplicates, different ones are ``overlap`` problems (the first copy is kept, as the receiving
TCP delivered it); out-of-order segments wait in a heap capped at ``max_buffered`` bytes (plus
``SEGMENT_OVERHEAD`` per segment); a hole never filled becomes a ``gap`` problem.
"""

from __future__ import annotations

import heapq

from .segments import FIN, RST, SYN

__all__ = ["HalfStream", "DEFAULT_MAX_BUFFERED", "SEGMENT_OVERHEAD", "RETRANSMIT_WINDOW"]

DEFAULT_MAX_BUFFERED = 16 << 20  # out-of-order bytes held per direction
SEGMENT_OVERHEAD = 64  # charged per held segment, so tiny segments cannot dodge the cap
RETRANSMIT_WINDOW = 64 << 10  # delivered bytes kept per direction to check retransmissions
_MOD, _HALF = 1 << 32, 1 << 31


class HalfStream:
    """Reassembly of one direction of a TCP connection into an in-order byte stream.

    Args:
        max_buffered: cap on out-of-order bytes held (bytes, plus ``SEGMENT_OVERHEAD`` each).

    Counters (ints): ``segments`` (with payload), ``duplicates`` / ``duplicate_bytes``
    (retransmitted bytes already held), ``out_of_order``, ``conflicts`` (overlap with other
    bytes), ``before_start`` (segments wholly before the first one seen). ``offset`` is the
    number of in-order bytes delivered; ``gap_at`` / ``missing`` say where a gap stopped it and
    how many bytes were missing (None: no gap); ``unparsed`` counts bytes seen past the gap.
    ``problems`` collects ``(stream offset, reason)`` for the caller to turn into rows.
    """

    def __init__(self, max_buffered: int = DEFAULT_MAX_BUFFERED) -> None:
        self.max_buffered = max_buffered
        self.started = self.midstream = self.closed = False
        self.offset = 0
        self._ref_seq = self._ref_off = 0  # the highest byte seen: sequence number <-> offset
        self._heap: list[tuple[int, int, bytes]] = []
        self._pushes = 0
        self.buffered = 0
        self._tail = bytearray()  # the last delivered bytes, from stream offset _tail_start
        self._tail_start = 0
        self.fin_end: int | None = None
        self.gap_at: int | None = None
        self.missing: int | None = None
        self.unparsed = 0
        self._beyond = 0
        self.segments = self.duplicates = self.duplicate_bytes = 0
        self.out_of_order = self.conflicts = self.before_start = 0
        self.problems: list[tuple[int, str]] = []

    @property
    def done(self) -> bool:
        """True after a FIN whose sequence number was reached, or a gap (nothing more to give)."""
        return self.closed and (self.gap_at is not None or self.fin_end is None or self.offset >= self.fin_end)

    def add(self, seq: int, flags: int, data: bytes) -> list[bytes]:
        """Take one segment; return the stream bytes it makes available in order (maybe none).

        Args:
            seq: the segment's sequence number (u32). flags: TCP flags. data: its payload.

        Returns:
            Chunks of newly in-order bytes (owned), in stream order. Never raises.
        """
        if flags & RST:  # a reset's payload is a diagnostic, not stream data
            self.closed = True
            return []
        if flags & SYN:
            seq = (seq + 1) % _MOD  # the SYN takes one sequence number; its data follows
            if not self.started:
                self.started, self._ref_seq = True, seq
        elif not self.started:
            self.started = self.midstream = True
            self._ref_seq = seq
        o = self._ref_off + ((seq - self._ref_seq + _HALF) % _MOD) - _HALF
        end = o + len(data)
        if flags & FIN:
            self.closed = True
            self.fin_end = end
        if not data:
            return []
        self.segments += 1
        if end > self._ref_off:
            self._ref_off, self._ref_seq = end, (seq + len(data)) % _MOD
        if o < 0:
            if end <= 0:
                self.before_start += 1
                return []
            data, o = data[-o:], 0
        if self.gap_at is not None:
            self.unparsed += max(0, end - max(o, self._beyond))
            self._beyond = max(self._beyond, end)
            return []
        if o > self.offset:
            self.out_of_order += 1
            cost = len(data) + SEGMENT_OVERHEAD
            if self.buffered + cost > self.max_buffered:
                self._gap([(o, data)], "out-of-order buffer full")
                return []
            heapq.heappush(self._heap, (o, self._pushes, data))
            self._pushes += 1
            self.buffered += cost
            return []
        out = [] if (new := self._deliver(o, data)) is None else [new]
        while self._heap and self._heap[0][0] <= self.offset:
            start, _n, held = heapq.heappop(self._heap)
            self.buffered -= len(held) + SEGMENT_OVERHEAD
            if (new := self._deliver(start, held)) is not None:
                out.append(new)
        return out

    def finish(self) -> None:
        """End of the capture: a hole before held segments or before the FIN becomes a gap."""
        if self.gap_at is None and self._heap:
            self._gap([], "never filled")
        elif self.gap_at is None and self.fin_end is not None and self.fin_end > self.offset:
            self.gap_at, self.missing = self.offset, self.fin_end - self.offset
            self.problems.append((self.offset, f"gap: {self.missing} bytes missing before the FIN"))

    def _deliver(self, o: int, data: bytes) -> bytes | None:
        skip = self.offset - o
        if skip > 0:
            self._compare(o, data[:skip])
            if skip >= len(data):
                return None
            data = data[skip:]
        self.offset += len(data)
        self._tail += data
        if len(self._tail) > 2 * RETRANSMIT_WINDOW:
            cut = len(self._tail) - RETRANSMIT_WINDOW
            del self._tail[:cut]
            self._tail_start += cut
        return data

    def _compare(self, o: int, old: bytes) -> None:
        self.duplicates += 1
        self.duplicate_bytes += len(old)
        lo = max(o, self._tail_start)  # older bytes are no longer held: taken as duplicates
        a, b = old[lo - o :], self._tail[lo - self._tail_start : lo - self._tail_start + len(old) - (lo - o)]
        if a != b:
            self.conflicts += 1
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), 0)
            self.problems.append((lo + first, "overlap: retransmitted bytes differ (first copy kept)"))

    def _gap(self, extra: list[tuple[int, bytes]], why: str) -> None:
        spans = sorted([(s, s + len(d)) for s, _n, d in self._heap] + [(s, s + len(d)) for s, d in extra])
        self.gap_at, self.missing = self.offset, spans[0][0] - self.offset
        covered, reach = 0, spans[0][0]
        for s, e in spans:  # distinct bytes held past the gap
            if e > reach:
                covered += e - max(s, reach)
                reach = e
        self.unparsed, self._beyond = covered, reach
        self._heap.clear()
        self.buffered = 0
        self.problems.append((self.offset, f"gap: {self.missing} bytes missing ({why})"))
