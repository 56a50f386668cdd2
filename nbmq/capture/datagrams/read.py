"""Reading UDP datagrams out of a capture: ``read_datagrams``, the entry of the datagrams room.

The way of a datagram: the file is opened (``files.source``) and recognised (``files.formats``);
the records are found by the classic pcap walk (``files.records.RecordScanner``) or the pcapng
block walk (``files.pcapng.walk_pcapng``); ``decode_fast`` decodes the link / IP / UDP headers
of all of them at once (compiled ``_decode`` or numpy), ``decode_dpkt`` the rows it leaves
aside (and every row with ``engine="dpkt"``); ``assemble`` keeps the UDP datagrams and builds
the ``DatagramBatch``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from ..dpkt_extra import load_dpkt
from ..files.errorlog import ErrorLog
from ..files.formats import PCAP_FILE_HEADER_LEN, detect_format, parse_pcap_header
from ..files.pcapng import first_interface, walk_pcapng
from ..files.records import TRUNCATED_RECORD, RecordScanner
from ..files.source import CaptureSource, OpenedCapture
from .assemble import assemble
from .batch import DatagramBatch
from .decode_fast import decode_fallbacks, decode_packets
from .rows import Decoded, RowTable

__all__ = ["read_datagrams", "probe_capture", "CaptureInfo", "ENGINES", "count_records_before"]

ENGINES = ("auto", "fast", "dpkt")


def read_datagrams(
    source: CaptureSource,
    *,
    start: int = 0,
    end: int | None = None,
    udp_ports: Iterable[int] | None = None,
    engine: str = "auto",
    first_frame: int | None = None,
    walk_from: int | None = None,
) -> DatagramBatch:
    """Read every UDP datagram of a pcap or pcapng capture into a columnar batch.

    Damage inside the capture never raises: undecodable packets and cut or implausible records
    are counted in ``batch.errors`` (reasons in ``batch.error_reasons``) and reading goes on
    after them (resynchronising on the next plausible record when a header is damaged).

    Args:
        source: path of the capture (str or ``os.PathLike``; memory-mapped), or its bytes
            (``bytes``, ``bytearray``, ``memoryview``); gzip-compressed captures are
            decompressed into memory (``nbmq.capture.files.source``).
        start: byte offset; only records (pcapng: packet blocks) whose header starts at or
            after it are read. Used with ``end`` to read one of ``plan_splits``' ranges.
        end: byte offset (exclusive) for record header starts; None = end of the capture.
        udp_ports: if given, keep only datagrams whose source or destination port is in it
            (the others count as ``skipped``).
        engine: ``"fast"`` (vectorised numpy; rows outside its common case go to dpkt),
            ``"dpkt"`` (packet-at-a-time reference) or ``"auto"`` (= ``"fast"``). The batch's
            ``engine`` attribute says which ran.
        first_frame: frame number of the first record at or after ``start``. When None it is
            computed, which for ``start`` past the first record walks the record headers
            before ``start`` (cheap in CPU, but it touches that part of the file); pass the
            values of ``first_frames`` to avoid that in a split-per-task job.
        walk_from: with ``first_frame``, the byte offset of a record of the whole-file read
            at or before ``start``, as ``range_starts`` gives it (classic pcap; ignored for
            pcapng): the record walk starts there, so the range gets exactly what the
            whole-file read gives it. Without it a reader given ``first_frame`` finds its way
            in by resynchronising before ``start`` (which agrees with the whole read except on
            adversarial bytes, such as a pcap carried inside a packet).

    Returns:
        A ``DatagramBatch``: timestamps (float64 s and int64 ns), addresses (str), ports
        (uint16), payloads (one uint8 buffer + int64 offsets + int32 lengths), frame numbers
        (int64), ``truncated`` flags and the ``packets``/``skipped``/``errors`` counters.

    Raises:
        CaptureError: ``source`` is not a pcap or pcapng capture (unknown magic, too short
            for its file header, or a gzip stream with nothing readable in it).
        ValueError: ``engine`` is unknown, ``start`` is negative, ``end < start`` or
            ``walk_from`` lies outside the capture's records.
        OSError: the file cannot be opened.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if start < 0 or (end is not None and end < start):
        raise ValueError(f"bad byte range [{start}, {end})")
    mode = "fast" if engine == "auto" else engine
    with OpenedCapture(source) as cap:
        fmt = detect_format(cap.buf, cap.size)
        if fmt == "pcapng":  # walked from its start anyway: interfaces are defined there
            return read_pcapng(cap, start=start, end=end, udp_ports=udp_ports, engine=mode, first_frame=first_frame)
        return read_pcap(
            cap, start=start, end=end, udp_ports=udp_ports, engine=mode, first_frame=first_frame, walk_from=walk_from
        )


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """What a capture's headers say about it.

    Attributes:
        format: ``"pcap"`` or ``"pcapng"``.
        size: file size in bytes.
        linktype: link type (pcap: from the file header; pcapng: first interface, or None).
        snaplen: snapshot length in bytes (same sources as ``linktype``).
        nanosecond: pcap timestamps in nanoseconds (pcapng: False, units are per interface).
        byte_order: ``"<"`` or ``">"`` (pcapng: of the first section).
        splittable: ``plan_splits`` can spread the file over several byte ranges (classic pcap).
    """

    format: str
    size: int
    linktype: int | None
    snaplen: int | None
    nanosecond: bool
    byte_order: str
    splittable: bool


def probe_capture(source: CaptureSource) -> CaptureInfo:
    """Read a capture's file / section header and first interface without reading packets.

    Args:
        source: path or bytes of the capture.

    Returns:
        A ``CaptureInfo``.

    Raises:
        CaptureError: not a pcap or pcapng capture.
        OSError: the file cannot be opened.
    """
    with OpenedCapture(source) as cap:
        fmt = detect_format(cap.buf, cap.size)
        if fmt == "pcap":
            h = parse_pcap_header(cap.buf, cap.size)
            return CaptureInfo("pcap", cap.size, h.linktype, h.snaplen, h.nanosecond, h.byte_order, True)
        first = first_interface(cap)
        order = "<" if bytes(cap.buf[8:12]) == b"\x4d\x3c\x2b\x1a" else ">"  # type: ignore[index]
        lt, snap = (first.linktype, first.snaplen) if first is not None else (None, None)
        return CaptureInfo("pcapng", cap.size, lt, snap, False, order, False)


# -- classic pcap: the shared record walk, then either engine


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
    dpkt = load_dpkt("the dpkt engine")
    from .decode_dpkt import decode_packet

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
    # dpkt gives float seconds for microsecond files and Decimal seconds for nanosecond files.
    # Below 2**32 s a float is within 0.25 us of the stored value and ts * 1e6 adds at most as
    # much, so rounding recovers it. Past that (a fraction field of a million or more carried
    # into the seconds) the two errors can pass 0.5 us; a float's shortest repr is still the
    # stored value there (one microsecond is more than a float's spacing below 2**33 s).
    if nanosecond:
        return int(Decimal(ts) * 1_000_000_000)
    if ts < 4294967296.0:
        return round(ts * 1_000_000) * 1000
    return int(Decimal(repr(ts)) * 1_000_000) * 1000


# -- pcapng: the block walk, then either engine (one pass per link type)


def read_pcapng(
    cap: OpenedCapture,
    *,
    start: int,
    end: int | None,
    udp_ports: Iterable[int] | None,
    engine: str,
    first_frame: int | None,
) -> DatagramBatch:
    """Read the UDP datagrams of the packet blocks starting in ``[start, end)``.

    See ``read_datagrams`` for the arguments; ``engine`` is ``"fast"`` or ``"dpkt"``. When
    ``first_frame`` is given, frame numbers are shifted so the first packet read gets it.
    """
    stop = cap.size if end is None else min(end, cap.size)
    log = ErrorLog(floor=start, ceiling=stop)  # a range counts the damage of its own blocks
    use_dpkt = engine == "dpkt"
    if use_dpkt:
        from .decode_dpkt import decode_packet  # before the walk: its block parsing needs dpkt too
    pk = walk_pcapng(cap, start, stop, log, dpkt_blocks=use_dpkt)
    n = len(pk.offsets)
    frames = np.array(pk.frames, np.int64)
    if first_frame is not None and n:
        frames += first_frame - frames[0]
    linktypes = np.array(pk.linktypes, np.int64)
    if use_dpkt:
        table = RowTable.from_decoded([decode_packet(lt, fb) for lt, fb in zip(pk.linktypes, pk.frames_bytes)])
        fallback = 0
    else:
        table = RowTable.allocate(n)
        starts = np.array(pk.data_starts, np.int64)
        caplens = np.array(pk.caplens, np.int64)
        for lt in np.unique(linktypes).tolist():  # one pass per link type
            rows = np.flatnonzero(linktypes == lt)
            part = decode_packets(cap.buf, cap.size, starts[rows], caplens[rows], int(lt))
            _scatter(table, part, rows)
        fallback = decode_fallbacks(table, cap.buf, starts, caplens, linktypes)
    return assemble(
        table,
        buf=cap.buf,
        ts_ns=np.array(pk.ts_ns, np.int64),
        frame_numbers=frames,
        record_offsets=np.array(pk.offsets, np.int64),
        udp_ports=udp_ports,
        log=log,
        engine=engine,
        fallback_rows=fallback,
    )


def _scatter(table: RowTable, part: RowTable, rows: np.ndarray) -> None:
    for name in ("status", "family", "src", "dst", "sport", "dport", "pstart", "pend", "truncated"):
        getattr(table, name)[rows] = getattr(part, name)
    for i, reason in part.reasons.items():
        table.reasons[int(rows[i])] = reason
