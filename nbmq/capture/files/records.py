"""Finding the packet records of a classic pcap file: walking the chain and resynchronising.

Walking: from a known record boundary, each header's ``incl_len`` gives the next boundary. A
header is accepted while reading when ``incl_len <= max_incl_len`` (the larger of the snaplen
and 262144, like Wireshark) and its seconds are not before ``min_sec`` (one day before the
file's first record; this catches zero-filled damage). A header failing that is an error
("implausible record header") owned by the record before it, and reading resynchronises from
that record's payload on (a record cut short, e.g. by a deleted byte, hides the next real
header inside its claimed length).

Resynchronising (damage, or a byte range's reader finding its way in): scan forward for a
byte position whose 16 bytes pass the *strict* test -- fraction field < 1e6 (1e9 for
nanosecond files), seconds >= ``min_sec``, ``incl_len <= max_incl_len``, ``1, incl_len <=
orig_len <= 16 MiB`` -- and confirm it by following the chain: ``CONFIRM_HEADERS`` (8)
consecutive headers must all pass the strict test, or the chain must reach the end of the
file. Random bytes pass one strict test with probability ~1e-13 (microsecond files), so a
false boundary needs bytes that mimic a *sequence* of eight records whose lengths point
exactly at each other; that is only found in adversarial data such as a pcap file carried
verbatim inside one packet. Eight keeps the confirmation cost at a few cache lines while
making chance matches in real traffic (structured payloads, counters, timestamps inside
payloads) astronomically unlikely.

Byte ranges (``walk_range``): a range owns the whole-file walk's records whose header starts
in it and the errors they own. The walk is memoryless, so a range reader walks from any
confirmed boundary at or before its start (``anchor``, looking back) and drops what lies
before the range: the ranges of a file add up to the whole read, damage included.
"""

from __future__ import annotations

import struct

import numpy as np

from ... import extensions
from .errorlog import ErrorLog
from .formats import PCAP_FILE_HEADER_LEN, PcapHeader

__all__ = [
    "RecordScanner",
    "CONFIRM_HEADERS",
    "TRUNCATED_HEADER",
    "TRUNCATED_RECORD",
    "IMPLAUSIBLE_HEADER",
]

_compiled = extensions.load("nbmq.capture.files._records")
_walk_chain = None if _compiled is None else _compiled.walk_chain
_walk_fields = None if _compiled is None else _compiled.walk_fields

#: True when ``RecordScanner.walk`` uses the compiled record walker by default.
COMPILED = _compiled is not None

CONFIRM_HEADERS = 8
MAX_ORIG_LEN = 16 << 20
MIN_SEC_SLACK = 86400  # clocks may step back a little during a capture; a day is generous
_SCAN_WINDOW = 1 << 16
_LOOKBACK = 1 << 16  # first look-back of a range reader; grows fourfold

TRUNCATED_HEADER = "truncated record header"
TRUNCATED_RECORD = "truncated record"
IMPLAUSIBLE_HEADER = "implausible record header"


class RecordScanner:
    """Record-boundary logic for one classic pcap buffer (shared by both read engines).

    Args:
        buf: the capture's bytes (mmap, bytes or memoryview).
        size: length of ``buf`` in bytes.
        header: the parsed file header.
    """

    __slots__ = ("buf", "size", "header", "hl", "min_sec", "max_incl", "_fps", "_hdr4", "_incl", "_u32")

    def __init__(self, buf: object, size: int, header: PcapHeader) -> None:
        self.buf = buf
        self.size = size
        self.header = header
        self.hl = header.record_header_len
        self.max_incl = header.max_incl_len
        self._fps = header.frac_per_second
        self._hdr4 = struct.Struct(header.byte_order + "IIII").unpack_from
        self._incl = struct.Struct(header.byte_order + "I").unpack_from
        # uint32 at every byte position (1-byte stride): gathers header fields of many records
        self._u32 = np.ndarray(  # type: ignore[call-overload]
            (max(size - 3, 1),), header.byte_order + "u4", buffer=buf if size >= 4 else bytes(4), strides=(1,)
        )
        self.min_sec = 0
        first = PCAP_FILE_HEADER_LEN
        if first + self.hl <= size:
            sec, frac, incl, orig = self.header_at(first)
            if self._strict(sec, frac, incl, orig):
                self.min_sec = max(sec - MIN_SEC_SLACK, 0)

    # -- per-record tests -------------------------------------------------------------------

    def _strict(self, sec: int, frac: int, incl: int, orig: int) -> bool:
        return (
            sec >= self.min_sec and frac < self._fps and incl <= self.max_incl and max(incl, 1) <= orig <= MAX_ORIG_LEN
        )

    def header_at(self, pos: int) -> tuple[int, int, int, int]:
        """Return (seconds, fraction, incl_len, orig_len) of the record header at ``pos``."""
        return self._hdr4(self.buf, pos)  # type: ignore[arg-type, no-any-return]

    def strict_chain(self, pos: int) -> bool:
        """True when the chain of headers from ``pos`` confirms a record boundary there."""
        hl, size = self.hl, self.size
        for _ in range(CONFIRM_HEADERS):
            if pos + hl > size:  # end of file (or a header cut by it): nothing left to refute
                return True
            sec, frac, incl, orig = self.header_at(pos)
            if not self._strict(sec, frac, incl, orig):
                return False
            pos += hl + incl
        return True

    def fields(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gather (seconds, fraction, incl_len) as int64 arrays for records at ``offsets``."""
        if _walk_fields is not None and offsets.dtype == np.int64 and self.size >= 4:
            return _walk_fields(self.buf, np.ascontiguousarray(offsets), self.header.byte_order == ">")  # type: ignore[no-any-return]
        u32 = self._u32
        return (
            u32[offsets].astype(np.int64),
            u32[offsets + 4].astype(np.int64),
            u32[offsets + 8].astype(np.int64),
        )

    # -- resynchronisation -------------------------------------------------------------------

    def resync(self, pos: int, limit: int) -> int | None:
        """Find the first confirmed record boundary in ``[pos, limit)``.

        Args:
            pos: first candidate byte offset.
            limit: candidates must lie below this byte offset.

        Returns:
            The boundary's byte offset, or None when there is none below ``limit``.
        """
        pos = max(pos, PCAP_FILE_HEADER_LEN)
        limit = min(limit, self.size - self.hl + 1)
        u32 = self._u32
        while pos < limit:
            n = min(_SCAN_WINDOW, limit - pos)
            sec, frac, incl, orig = (u32[pos + 4 * k : pos + 4 * k + n] for k in range(4))
            cand = (sec >= self.min_sec) & (frac < self._fps) & (incl <= self.max_incl)
            cand &= (orig >= incl) & (orig >= 1) & (orig <= MAX_ORIG_LEN)
            for c in np.flatnonzero(cand).tolist():
                if self.strict_chain(pos + c):
                    return pos + c
            pos += n
        return None

    def first_boundary(self, start: int, limit: int) -> int | None:
        """The first confirmed record boundary at or after ``start`` (None: none below limit).

        Offsets up to the first record (byte 24) need no search; later ones resynchronise.
        Near damage this can skip records the whole-file walk reads (they do not confirm):
        range readers use ``walk_range`` instead.
        """
        if start <= PCAP_FILE_HEADER_LEN:
            return PCAP_FILE_HEADER_LEN if PCAP_FILE_HEADER_LEN < limit else None
        return self.resync(start, limit)

    def anchor(self, start: int) -> int:
        """A confirmed record boundary at or before ``start`` to begin a range's walk from.

        Looks back from ``start`` (64 KiB, then four times further each time) for the first
        confirmed boundary (``resync``) not after ``start``; byte 24 when none is found. A
        boundary found *after* ``start`` is not used: the records just before damage do not
        confirm (their chain meets the bad header within ``CONFIRM_HEADERS``), yet the
        whole-file walk reads them, so the range must reach them from further back.

        Returns:
            Byte offset of a record boundary, <= ``max(start, 24)``.
        """
        if start <= PCAP_FILE_HEADER_LEN:
            return PCAP_FILE_HEADER_LEN
        back = _LOOKBACK
        while start - back > PCAP_FILE_HEADER_LEN:
            found = self.resync(start - back, start + 1)
            if found is not None:
                return found
            back *= 4
        return PCAP_FILE_HEADER_LEN

    def walk_range(
        self,
        start: int,
        stop: int,
        log: ErrorLog,
        *,
        exact: bool = True,
        begin: int | None = None,
        native: bool | None = None,
    ) -> tuple[np.ndarray, int]:
        """The whole-file walk's records whose header starts in ``[start, stop)``.

        The one rule that makes byte ranges add up to the whole file: a range owns the records
        of the whole-file walk (``walk`` from byte 24) whose header starts in it, and the
        framing errors those records own (see ``walk``). The walk is memoryless -- where it
        goes next depends only on where it is -- so walking from any boundary the whole-file
        walk passes gives the same records and errors from there on.

        Args:
            start: first byte of the range.
            stop: end of the range (exclusive), in bytes.
            log: receives the range's framing errors; its ``floor`` is raised to ``start``.
            exact: walk from byte 24 (the whole-file walk itself: exact, and it yields the
                frame numbers; touches every record header before ``start``); False: walk
                from ``anchor(start)`` (touches only the bytes near the range).
            begin: walk from this record offset instead (a record of the whole-file walk at or
                before the range's first record, as ``range_starts`` gives it: exact and
                local); overrides ``exact``.
            native: as for ``walk``.

        Returns:
            ``(offsets, before)``: int64 (n,) record offsets in ``[start, stop)``; ``before``
            is the number of records the walk passed before ``start`` (with ``exact``: the
            frame number of the range's first record minus one).
        """
        log.floor = max(log.floor, start)
        if begin is None:
            begin = PCAP_FILE_HEADER_LEN if exact else self.anchor(start)
        offs = self.walk(begin, stop, log, native)
        before = int(np.searchsorted(offs, start))
        return offs[before:], before

    # -- walking -----------------------------------------------------------------------------

    def walk(self, pos: int, stop: int, log: ErrorLog, native: bool | None = None) -> np.ndarray:
        """Collect the offsets of all records whose header starts in ``[pos, stop)``.

        ``pos`` must be a record boundary. A header failing the reading test is an error owned
        by the record before it (whose length pointed there; it is checked even when it lies
        at or past ``stop``, so the range holding that record counts it). Reading then
        resynchronises from that record's payload (a record cut short by damage, e.g. a
        deleted byte, leaves the next real header inside its claimed length). A record cut by
        the end of the file is an error it owns; a header cut by it, an error of the record
        before. Either ends the walk.

        Args:
            pos: byte offset of a record header.
            stop: records must start below this byte offset.
            log: receives framing errors.
            native: follow the chain with the compiled walker (``nbmq.capture.files._records``;
                True requires it) or the Python loop (False); None: the compiled one when
                built and ``NBMQ_NO_EXTENSIONS`` is not set. Both give identical results.

        Returns:
            int64 (n,) array of record header offsets, increasing.
        """
        if native is None:
            native = _walk_chain is not None
        elif native and _walk_chain is None:
            raise RuntimeError("nbmq.capture.files._records is not built")
        chain = self._chain_native if native else self._chain_python
        hl, size = self.hl, self.size
        chunks: list[np.ndarray] = []
        while True:
            offs, p, bad = chain(pos, min(stop, size - hl + 1))
            prev = int(offs[-1]) if offs.size else None
            owner = pos if prev is None else prev
            if not bad:
                if prev is not None and prev + hl + int(self._incl(self.buf, prev + 8)[0]) > size:  # type: ignore[arg-type]
                    chunks.append(offs[:-1])
                    log.at_offset(prev, TRUNCATED_RECORD)
                    break
                chunks.append(offs)
                if p + hl > size:  # fewer bytes than a record header left
                    if p < size and (prev is not None or p < stop):
                        log.at_offset(p, TRUNCATED_HEADER, owner)
                    break
                if prev is None or self._readable(p):  # the chain left the range intact
                    break
            else:
                chunks.append(offs)
            log.at_offset(p, IMPLAUSIBLE_HEADER, owner)
            nxt = self.resync(p + 1 if prev is None else prev + hl, stop)
            if nxt is None:
                break
            pos = nxt
        return np.concatenate(chunks) if chunks else np.empty(0, np.int64)

    def _readable(self, pos: int) -> bool:
        """The reading test for the header at ``pos`` (which must fit in the buffer)."""
        sec, _frac, incl, _orig = self.header_at(pos)
        return incl <= self.max_incl and sec >= self.min_sec

    def _chain_native(self, pos: int, last: int) -> tuple[np.ndarray, int, bool]:
        if last <= pos:
            return np.empty(0, np.int64), pos, False
        h = self.header
        return _walk_chain(  # type: ignore[misc, no-any-return]
            self.buf, pos, last, self.hl, h.byte_order == ">", self.max_incl, self.min_sec
        )

    def _chain_python(self, pos: int, last: int) -> tuple[np.ndarray, int, bool]:
        """Follow the chain from ``pos`` while headers start below ``last``.

        Returns:
            (accepted header offsets, stop offset, bad): ``bad`` means the header at the stop
            offset fails the reading test; otherwise the stop offset is where the chain left
            ``[pos, last)``.
        """
        hl, buf, unpack = self.hl, self.buf, self._incl
        found: list[int] = []
        append = found.append
        p = pos
        while p < last:  # the hot loop collects offsets only; checks run vectorised below
            append(p)
            p += hl + unpack(buf, p + 8)[0]  # type: ignore[arg-type]
        offs = np.array(found, np.int64)
        if offs.size:
            sec, _frac, incl = self.fields(offs)
            bad = np.flatnonzero((incl > self.max_incl) | (sec < self.min_sec))
            if bad.size:
                k = int(bad[0])
                return offs[:k], int(offs[k]), True
        return offs, p, False
