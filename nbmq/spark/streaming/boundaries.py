"""Where the whole records of a growing capture end: the streaming source's offsets.

A capture being written (dumpcap, tcpdump) ends, at any instant, with a record that may be
cut in the middle. :func:`whole_records` walks the record headers from a known boundary and
returns the end of the last record that is entirely on disk, plus how many records it passed,
so a micro-batch reads whole records only and the record being written is read next batch.
Classic pcap walks with :class:`nbmq.capture.files.records.RecordScanner` (the readers' own chain,
damage skipped the same way, compiled when built); pcapng walks block lengths.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Boundary", "Deferred", "whole_records", "record_starts"]

_PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_PACKET_BLOCKS = (2, 3, 6)
_MAX_BLOCK = 64 << 20


@dataclass(frozen=True)
class Deferred:
    """A pcapng damage the stream has resynchronised past whose error *text* the file's final
    size decides: a block whose leading length runs past the bytes on disk, the trailing copy
    disagreeing. The batch read says ``truncated block`` when the file ends before ``to`` and
    ``block lengths differ`` when it reaches it, so the row waits for that.

    Attributes:
        at: byte offset of the damaged block; to: where its leading length says it ends;
        trailing: 1 when its trailing length copy framed it (``; trailing length copy used``).
    """

    at: int
    to: int
    trailing: int = 0

    def text(self, size: int) -> str:
        """The batch read's reason for this damage in a file of ``size`` bytes."""
        problem = "block lengths differ" if size >= self.to else "truncated block"
        return f"offset {self.at}: {problem}" + ("; trailing length copy used" if self.trailing else "")


@dataclass(frozen=True)
class Boundary:
    """The end of the whole records of a capture, as a streaming offset.

    Attributes:
        end: byte offset just past the last whole record (0: not even a whole file header yet).
        records: records (pcapng: packet blocks) before ``end``, damaged ones skipped.
        damaged: True when the walk stopped at damage it cannot decide on yet (``end`` waits
            there until more bytes, or ``final``, decide it).
        starts: classic pcap, undamaged walk only: the int64 offsets of the records the walk
            found in ``[start, end)`` (one per record counted), which :func:`record_starts`
            takes instead of walking the range again; None otherwise.
        deferred: the damage passed but whose error text is not decided yet (None: none).
        told: the reason (``"offset N: ..."``) of the ``pending`` damage given to
            :func:`whole_records`, decided by this walk (None: none decided).
        size: the file's size the walk decided on, bytes (0: not known).
    """

    end: int
    records: int
    damaged: bool = False
    starts: Any = field(default=None, compare=False, repr=False)
    deferred: Deferred | None = None
    told: str | None = None
    size: int = 0


def whole_records(
    path: str, start: int = 0, records: int = 0, final: bool = False, pending: Deferred | None = None
) -> Boundary:
    """Walk the capture at ``path`` from the boundary ``start`` to its last whole record.

    Damage is resynchronised past exactly as the batch readers do (classic
    pcap ``RecordScanner.walk``, pcapng ``walk_pcapng``), but a growing file's end must not
    decide it: a resynchronisation the readers would confirm only because the bytes end there
    (pcap: fewer than ``CONFIRM_HEADERS`` headers after the candidate; pcapng: a candidate block
    not yet followed by a whole block) is not taken; ``end`` stays *before* the record that
    owns the damage, so the batch that finally reads past it reads that record and counts the
    damage's error row once.

    Args:
        path: a pcap or pcapng file, possibly still growing.
        start: a record boundary found earlier (0: the start of the file), bytes.
        records: records before ``start``.
        final: the file will not grow (rotated, or an ``availableNow`` run): its end decides
            damage as the batch read of the same bytes does.
        pending: the :class:`Deferred` damage of the last walk (``Boundary.deferred``): its
            text is decided once the file reaches ``pending.to`` or is final (``told``);
            while it waits, a second such damage holds the walk (one pending per file).

    A pcapng block whose leading length runs past the bytes on disk and whose trailing copy
    disagrees is passed as soon as the resynchronisation after it is settled (it no longer
    holds the frames behind it back until its claimed end is written); its
    error row waits as ``deferred`` until its text is decided (gap a).

    Returns:
        The :class:`Boundary` at the file's current size (``start``/``records`` unchanged when
        nothing whole was added).

    Raises:
        OSError: the file cannot be opened (it may have rotated away).
        nbmq.errors.CaptureError: the file's first bytes are not a capture's magic.
    """
    import dataclasses

    from ...capture.files.formats import PCAP_FILE_HEADER_LEN, detect_format
    from ...capture.files.source import OpenedCapture

    def decide(size: int) -> tuple[Deferred | None, str | None]:
        if pending is not None and (size >= pending.to or final):
            return None, pending.text(size)
        return pending, None

    size = os.path.getsize(path)
    if size < 4 or size <= start:
        still, told = decide(size)
        return Boundary(start, records, deferred=still, told=told, size=size)
    with OpenedCapture(path) as cap:
        if detect_format(cap.buf, cap.size) == "pcap":
            if cap.size < PCAP_FILE_HEADER_LEN:
                return Boundary(start, records)
            return _pcap(cap, max(start, PCAP_FILE_HEADER_LEN), records, final)
        still, told = decide(cap.size)  # the bytes the walk sees decide, as in the reader
        b = _pcapng(cap, start, records, final, held=still is not None)
        return dataclasses.replace(b, deferred=still or b.deferred, told=told, size=cap.size)


def _pcap(cap: object, start: int, records: int, final: bool) -> Boundary:
    import numpy as np

    from ...capture.files.errorlog import ErrorLog
    from ...capture.files.formats import parse_pcap_header
    from ...capture.files.records import RecordScanner

    header = parse_pcap_header(cap.buf, cap.size)  # type: ignore[attr-defined]
    size = cap.size  # type: ignore[attr-defined]
    scanner = RecordScanner(cap.buf, size, header)  # type: ignore[attr-defined]
    offs = scanner.walk(start, size, ErrorLog())
    if offs.size == 0:
        return Boundary(start, records)
    hl = scanner.hl
    ends = offs + hl + scanner.fields(offs)[2]
    # a record not where its predecessor ends is where the walk resynchronised after damage
    for j in (np.flatnonzero(ends[:-1] != offs[1:]) + 1).tolist():
        if not final and not _confirmed_on_disk(scanner, int(offs[j])):
            return Boundary(int(offs[j - 1]), records + j - 1, True)  # re-read the owner later
    last_end = int(ends[-1])
    if last_end + hl <= size:
        sec, _frac, incl, _orig = scanner.header_at(last_end)
        if incl > scanner.max_incl or sec < scanner.min_sec:  # damage, no resynchronisation yet
            if final:  # the batch read ends here with the error: read to the end to count it
                return Boundary(size, records + int(offs.size), True)
            return Boundary(int(offs[-1]), records + int(offs.size) - 1, True)
    clean = offs.size == 1 or not bool((ends[:-1] != offs[1:]).any())
    return Boundary(last_end, records + int(offs.size), starts=offs if clean else None)


def _confirmed_on_disk(scanner: object, pos: int) -> bool:
    """True when all ``CONFIRM_HEADERS`` headers confirming ``pos`` are on disk (the readers'
    confirmation did not lean on the end of the bytes, so more bytes cannot undo it)."""
    from ...capture.files.records import CONFIRM_HEADERS

    hl, size = scanner.hl, scanner.size  # type: ignore[attr-defined]
    for _ in range(CONFIRM_HEADERS):
        if pos + hl > size:
            return False
        pos += hl + scanner.header_at(pos)[2]  # type: ignore[attr-defined]
    return True


def _pcapng(cap: object, start: int, records: int, final: bool, held: bool = False) -> Boundary:
    """The pcapng block walk of ``walk_pcapng`` (same damage decisions) from ``start``;
    ``held``: a deferred damage still waits (a second one stops the walk)."""
    from ...capture.files import pcapng as ng

    buf, size = cap.buf, cap.size  # type: ignore[attr-defined]
    if size < 12:
        return Boundary(start, records)
    magic = bytes(buf[8:12])
    order = "<" if magic == b"\x4d\x3c\x2b\x1a" else ">"
    pos = start
    deferred = None
    while pos + 12 <= size:
        btype, blen = struct.unpack_from(order + "II", buf, pos)
        if btype == _PCAPNG_SHB:
            magic = bytes(buf[pos + 8 : pos + 12])
            order = "<" if magic == b"\x4d\x3c\x2b\x1a" else ">"
            (blen,) = struct.unpack_from(order + "I", buf, pos + 4)
        problem = ng._length_problem(buf, size, pos, blen, order)
        if problem == "truncated block" and not final:
            # the block being written, or a damaged leading length: a settled resynchronisation
            # decides the frames now (as it will on any longer file), the text waits (Deferred)
            nxt = _settled_resync(buf, size, pos, order)
            if nxt is _WAIT:
                break
            if not ng._trailing_length(buf, pos, nxt, order):
                # both lengths wrong (or the block being written, until whole blocks after it
                # say otherwise): skip it now, its row waits for the size to word it
                if held or deferred is not None or _chained(buf, size, nxt, order) < EVIDENCE_BLOCKS:
                    break
                deferred = Deferred(pos, pos + blen)
                records += btype in _PCAPNG_PACKET_BLOCKS  # a skipped packet keeps its number
                pos = nxt
                continue
            problem = None  # framed by its trailing copy: the reader words it from the same bytes
            blen = nxt - pos
        if problem is not None:
            if final:
                nxt = ng._resync(buf, size, pos, order)
            else:
                nxt = _settled_resync(buf, size, pos, order)
                if nxt is _WAIT:
                    return Boundary(pos, records, True)
            if problem == ng._LENGTHS_DIFFER and (size if nxt is None else nxt) == pos + blen:
                pass  # the leading length frames the block
            elif nxt is None:  # the batch read ends here with the error: read to the end
                return Boundary(size, records, True)
            elif ng._trailing_length(buf, pos, nxt, order):
                blen = nxt - pos
            else:
                records += btype in _PCAPNG_PACKET_BLOCKS  # a skipped packet keeps its number
                pos = nxt
                continue
        if btype in _PCAPNG_PACKET_BLOCKS:
            records += 1
        pos += blen
    return Boundary(pos, records, deferred=deferred)


_WAIT = -1
#: whole blocks chained from a settled resynchronisation that show a block whose leading
#: length runs past the bytes on disk is damaged, not being written (its payload would have
#: to hold this many valid blocks in a row)
EVIDENCE_BLOCKS = 4


def _chained(buf: object, size: int, pos: int, order: str) -> int:
    """Whole plausible blocks in a row from ``pos`` (at most ``EVIDENCE_BLOCKS``)."""
    n = 0
    while n < EVIDENCE_BLOCKS:
        blen = _candidate(buf, size, pos, order)
        if not blen:
            break
        n += 1
        pos += blen
    return n


def _candidate(buf: object, size: int, pos: int, order: str) -> int | None:
    """A resynchronisation candidate's block length; 0: not a block; None: not all on disk."""
    from ...capture.files import pcapng as ng

    if pos + 12 > size:
        return None
    btype, blen = struct.unpack_from(order + "II", buf, pos)  # type: ignore[call-overload]
    if btype == _PCAPNG_SHB:
        order = ng._shb_order(buf, size, pos) or order
        (blen,) = struct.unpack_from(order + "I", buf, pos + 4)  # type: ignore[call-overload]
    if btype not in ng._KNOWN_BLOCKS or blen < 12 or blen % 4 or blen > _MAX_BLOCK:
        return 0
    if pos + blen > size:
        return None
    return blen if struct.unpack_from(order + "I", buf, pos + blen - 4)[0] == blen else 0  # type: ignore[call-overload]


def _settled_resync(buf: object, size: int, pos: int, order: str) -> int | None:
    """``walk_pcapng``'s resynchronisation, when no later byte can change it, else ``_WAIT``.

    The readers take the first plausible block after ``pos`` that is followed by another one
    or by the end of the bytes; a candidate, or its follower, still running past the end
    (or ending exactly there) may be decided otherwise once the file grows.
    """
    from ...capture.files import pcapng as ng

    for c in ng.block_candidates(buf, size, pos, order):
        blen = _candidate(buf, size, c, order)
        if blen is None or c + blen == size:
            return _WAIT
        if blen and (follow := _candidate(buf, size, c + blen, order)) != 0:
            return _WAIT if follow is None else c
    return _WAIT


def record_starts(path: str, start: int, end: int, target_bytes: int, walked: Any = None) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` of a classic pcap file at record boundaries into pieces of about
    ``target_bytes``; returns ``(piece_start, records_before_piece_relative_to_start)`` pairs.

    ``start`` must be a record boundary (or 0) and ``end`` the end of a whole record. pcapng
    ranges are not cut (one piece). ``walked``: the record offsets :func:`whole_records`
    found from ``start`` (``Boundary.starts``, a walk without damage) -- the planner's walk is
    reused instead of walking the range a second time (the walk was half of the planning).
    """
    from ...capture.files.errorlog import ErrorLog
    from ...capture.files.formats import PCAP_FILE_HEADER_LEN, detect_format, parse_pcap_header
    from ...capture.files.records import RecordScanner
    from ...capture.files.source import OpenedCapture

    if end - start <= target_bytes:
        return [(start, 0)]
    if walked is not None:
        import numpy as np

        return _cut(walked[: int(np.searchsorted(walked, end))], start, end, target_bytes)
    with OpenedCapture(path) as cap:
        if detect_format(cap.buf, cap.size) != "pcap":
            return [(start, 0)]
        scanner = RecordScanner(cap.buf, cap.size, parse_pcap_header(cap.buf, cap.size))
        offs = scanner.walk(max(start, PCAP_FILE_HEADER_LEN), end, ErrorLog())
    return _cut(offs, start, end, target_bytes)


def _cut(offs: Any, start: int, end: int, target_bytes: int) -> list[tuple[int, int]]:
    pieces = [(start, 0)]
    if offs.size == 0:
        return pieces
    import numpy as np

    marks = np.arange(start + target_bytes, end, target_bytes)
    idx = np.unique(np.searchsorted(offs, marks))
    for i in idx.tolist():
        if 0 < i < offs.size:
            pieces.append((int(offs[i]), i))
    return pieces
