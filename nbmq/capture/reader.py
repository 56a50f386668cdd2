"""``read_datagrams``: the one entry point for reading UDP datagrams out of a capture."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .batch import DatagramBatch
from .formats import detect_format, parse_pcap_header
from .pcap_reader import read_pcap
from .pcapng_reader import first_interface, read_pcapng
from .source import CaptureSource, OpenedCapture

__all__ = ["read_datagrams", "probe_capture", "CaptureInfo", "ENGINES"]

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
            decompressed into memory (``nbmq.capture.source``).
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
