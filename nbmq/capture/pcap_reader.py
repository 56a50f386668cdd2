"""Reading classic pcap: the vectorised fast engine and the dpkt reference engine."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

import dpkt
import numpy as np

from .assemble import assemble
from .batch import DatagramBatch
from .decode_dpkt import decode_packet
from .decode_fast import decode_fallbacks, decode_packets
from .errorlog import ErrorLog
from .formats import PCAP_FILE_HEADER_LEN, parse_pcap_header
from .records import TRUNCATED_RECORD, RecordScanner
from .rows import Decoded, RowTable
from .source import OpenedCapture

__all__ = ["read_pcap", "count_records_before"]


def count_records_before(scanner: RecordScanner, offset: int) -> int:
    """Number of records whose header starts before byte ``offset`` (walks the chain)."""
    if offset <= PCAP_FILE_HEADER_LEN:
        return 0
    return int(scanner.walk(PCAP_FILE_HEADER_LEN, offset, ErrorLog()).shape[0])


def read_pcap(
    cap: OpenedCapture,
    *,
    start: int,
    end: int | None,
    udp_ports: Iterable[int] | None,
    engine: str,
    first_frame: int | None,
    walk_from: int | None = None,
) -> DatagramBatch:
    """Read the UDP datagrams of the records whose header starts in ``[start, end)``.

    See ``read_datagrams`` for the meaning of the arguments; ``engine`` is ``"fast"`` or
    ``"dpkt"`` here. The range's records and framing errors are those of the whole-file walk
    (``RecordScanner.walk_range``), so the ranges of a file add up to reading it whole.
    """
    header = parse_pcap_header(cap.buf, cap.size)
    scanner = RecordScanner(cap.buf, cap.size, header)
    stop = cap.size if end is None else min(end, cap.size)
    log = ErrorLog()
    if walk_from is not None and not PCAP_FILE_HEADER_LEN <= walk_from <= cap.size:
        raise ValueError(f"walk_from {walk_from} is outside the records [24, {cap.size}]")
    # without first_frame the walk from byte 24 is needed anyway (to number the frames)
    begin = walk_from if first_frame is not None else None
    offs, before = scanner.walk_range(start, stop, log, exact=first_frame is None, begin=begin)
    if first_frame is None:
        first_frame = 1 + before
    if engine == "dpkt":
        return _read_dpkt(cap, scanner, offs, udp_ports, first_frame, log)
    return _read_fast(cap, scanner, offs, udp_ports, first_frame, log)


def _read_fast(
    cap: OpenedCapture,
    scanner: RecordScanner,
    offs: np.ndarray,
    udp_ports: Iterable[int] | None,
    first_frame: int,
    log: ErrorLog,
) -> DatagramBatch:
    header = scanner.header
    sec, frac, incl = scanner.fields(offs)
    ts_ns = sec * 1_000_000_000 + frac * header.ns_per_frac
    starts = offs + header.record_header_len
    table = decode_packets(cap.buf, cap.size, starts, incl, header.linktype)
    fallback = decode_fallbacks(table, cap.buf, starts, incl, header.linktype)
    return assemble(
        table,
        buf=cap.buf,
        ts_ns=ts_ns,
        frame_numbers=first_frame + np.arange(offs.shape[0], dtype=np.int64),
        record_offsets=offs,
        udp_ports=udp_ports,
        log=log,
        engine="fast",
        fallback_rows=fallback,
    )


class _BufferFile:
    """The minimal file object ``dpkt.pcap.Reader`` needs, over an in-memory buffer.

    Reading never allocates more than what is left, whatever length a damaged header asks for.
    """

    def __init__(self, buf: object, size: int, name: str) -> None:
        self._buf = buf
        self._size = size
        self._pos = 0
        self.name = name

    def read(self, n: int = -1) -> bytes:
        end = self._size if n < 0 else min(self._pos + n, self._size)
        data = bytes(self._buf[self._pos : end])  # type: ignore[index]
        self._pos = max(end, self._pos)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else (self._pos + pos if whence == 1 else self._size + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos


def _read_dpkt(
    cap: OpenedCapture,
    scanner: RecordScanner,
    offs: np.ndarray,
    udp_ports: Iterable[int] | None,
    first_frame: int,
    log: ErrorLog,
) -> DatagramBatch:
    # framing is the shared walk's (both engines must own the same records); dpkt reads each
    header = scanner.header
    f = _BufferFile(cap.buf, cap.size, cap.name)
    records = iter(dpkt.pcap.Reader(f))
    offsets: list[int] = []
    stamps: list[int] = []
    results: list[Decoded] = []
    for pos in offs.tolist():
        f.seek(pos)
        ts, frame = next(records)
        _sec, _frac, incl, _orig = scanner.header_at(pos)
        if len(frame) != incl:  # cannot happen after the walk; kept so dpkt is checked, not trusted
            log.at_offset(pos, TRUNCATED_RECORD)
            break
        offsets.append(pos)
        stamps.append(_ts_to_ns(ts, header.nanosecond))
        results.append(decode_packet(header.linktype, frame))
    n = len(results)
    return assemble(
        RowTable.from_decoded(results),
        buf=cap.buf,
        ts_ns=np.array(stamps, np.int64),
        frame_numbers=first_frame + np.arange(n, dtype=np.int64),
        record_offsets=np.array(offsets, np.int64),
        udp_ports=udp_ports,
        log=log,
        engine="dpkt",
    )


def _ts_to_ns(ts: float | Decimal, nanosecond: bool) -> int:
    # dpkt gives float seconds for microsecond files (exact to well under 0.5 us, so rounding to
    # whole microseconds recovers the stored value) and Decimal seconds for nanosecond files.
    if nanosecond:
        return int(Decimal(ts) * 1_000_000_000)
    return round(ts * 1_000_000) * 1000
