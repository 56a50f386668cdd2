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
from dataclasses import dataclass

__all__ = ["Boundary", "whole_records", "record_starts"]

_PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_PACKET_BLOCKS = (2, 3, 6)
_MAX_BLOCK = 64 << 20


@dataclass(frozen=True)
class Boundary:
    """The end of the whole records of a capture, as a streaming offset.

    Attributes:
        end: byte offset just past the last whole record (0: not even a whole file header yet).
        records: records (pcapng: packet blocks) before ``end``, damaged ones skipped.
        damaged: True when the walk met a damaged header (pcap: skipped by resynchronising;
            pcapng: the walk cannot go on, so ``end`` stops there until the file is read whole).
    """

    end: int
    records: int
    damaged: bool = False


def whole_records(path: str, start: int = 0, records: int = 0) -> Boundary:
    """Walk the capture at ``path`` from the boundary ``start`` to its last whole record.

    Args:
        path: a pcap or pcapng file, possibly still growing.
        start: a record boundary found earlier (0: the start of the file), bytes.
        records: records before ``start``.

    Returns:
        The :class:`Boundary` at the file's current size (``start``/``records`` unchanged when
        nothing whole was added).

    Raises:
        OSError: the file cannot be opened (it may have rotated away).
        nbmq.errors.CaptureError: the file's first bytes are not a capture's magic.
    """
    from ...capture.files.formats import PCAP_FILE_HEADER_LEN, detect_format
    from ...capture.files.source import OpenedCapture

    size = os.path.getsize(path)
    if size < 4 or size <= start:
        return Boundary(start, records)
    with OpenedCapture(path) as cap:
        if detect_format(cap.buf, cap.size) == "pcap":
            if cap.size < PCAP_FILE_HEADER_LEN:
                return Boundary(start, records)
            return _pcap(cap, max(start, PCAP_FILE_HEADER_LEN), records)
        return _pcapng(cap, start, records)


def _pcap(cap: object, start: int, records: int) -> Boundary:
    from ...capture.files.errorlog import ErrorLog
    from ...capture.files.formats import parse_pcap_header
    from ...capture.files.records import RecordScanner

    header = parse_pcap_header(cap.buf, cap.size)  # type: ignore[attr-defined]
    scanner = RecordScanner(cap.buf, cap.size, header)  # type: ignore[attr-defined]
    log = ErrorLog()
    offs = scanner.walk(start, cap.size, log)  # type: ignore[attr-defined]
    if offs.size == 0:
        return Boundary(start, records, log.count > 0)
    last = int(offs[-1])
    end = last + scanner.hl + scanner.header_at(last)[2]
    return Boundary(end, records + int(offs.size), any("implausible" in r for r in log.reasons))


def _pcapng(cap: object, start: int, records: int) -> Boundary:
    buf, size = cap.buf, cap.size  # type: ignore[attr-defined]
    if size < 12:
        return Boundary(start, records)
    magic = bytes(buf[8:12])
    order = "<" if magic == b"\x4d\x3c\x2b\x1a" else ">"
    pos = start
    while pos + 12 <= size:
        btype, blen = struct.unpack_from(order + "II", buf, pos)
        if btype == _PCAPNG_SHB:
            magic = bytes(buf[pos + 8 : pos + 12])
            order = "<" if magic == b"\x4d\x3c\x2b\x1a" else ">"
            (blen,) = struct.unpack_from(order + "I", buf, pos + 4)
        if blen < 12 or blen % 4 or blen > _MAX_BLOCK:
            return Boundary(pos, records, True)
        if pos + blen > size:
            break
        if btype in _PCAPNG_PACKET_BLOCKS:
            records += 1
        pos += blen
    return Boundary(pos, records)


def record_starts(path: str, start: int, end: int, target_bytes: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` of a classic pcap file at record boundaries into pieces of about
    ``target_bytes``; returns ``(piece_start, records_before_piece_relative_to_start)`` pairs.

    ``start`` must be a record boundary (or 0) and ``end`` the end of a whole record. pcapng
    ranges are not cut (one piece).
    """
    from ...capture.files.errorlog import ErrorLog
    from ...capture.files.formats import PCAP_FILE_HEADER_LEN, detect_format, parse_pcap_header
    from ...capture.files.records import RecordScanner
    from ...capture.files.source import OpenedCapture

    if end - start <= target_bytes:
        return [(start, 0)]
    with OpenedCapture(path) as cap:
        if detect_format(cap.buf, cap.size) != "pcap":
            return [(start, 0)]
        scanner = RecordScanner(cap.buf, cap.size, parse_pcap_header(cap.buf, cap.size))
        offs = scanner.walk(max(start, PCAP_FILE_HEADER_LEN), end, ErrorLog())
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
