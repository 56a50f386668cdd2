"""Spreading one capture over several readers (e.g. Spark tasks) by byte ranges."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from .errorlog import ErrorLog
from .formats import PCAP_FILE_HEADER_LEN, detect_format, parse_pcap_header
from .pcapng import walk_pcapng
from .records import RecordScanner
from .source import CaptureSource, OpenedCapture

__all__ = ["plan_splits", "first_frames", "range_starts", "walk_windows", "WALK_WINDOW"]

#: Bytes of a classic pcap walked per window by ``walk_windows``; the pages behind are dropped.
WALK_WINDOW = 32 << 20


def walk_windows(
    cap: OpenedCapture,
    scanner: RecordScanner,
    log: ErrorLog,
    start: int = 0,
    stop: int | None = None,
    *,
    begin: int = PCAP_FILE_HEADER_LEN,
    first_frame: int = 1,
    window: int | None = None,
) -> Iterator[tuple[int, int, np.ndarray, int, int]]:
    """Walk a classic pcap's records in byte windows, dropping the mapped pages behind.

    The windows add up to ``scanner.walk_range(start, stop, log, begin=begin)`` exactly
    (records and framing errors, damage included): each window is walked from a record of the
    whole-file walk at or before it (the previous window's last record), as byte ranges are.
    Once the consumer resumes the generator after a window, the pages before that window's
    last record are released (``OpenedCapture.release``), so resident memory stays about one
    window whatever the capture's size.

    Args:
        cap: the opened capture; scanner: its ``RecordScanner``; log: receives framing errors.
        start, stop: byte range whose record starts are walked (stop None: the end).
        begin: a record of the whole-file walk at or before the range's first record
            (``range_starts``' ``walk_from``; 24: the first record).
        first_frame: frame number of the range's first record.
        window: bytes per window (default ``WALK_WINDOW``, read at call time).

    Yields:
        ``(lo, hi, offsets, frame, walk_from)`` per window ``[lo, hi)``: the int64 record
        offsets starting in it, the frame number of its first record, and the record the
        window's walk started from (pass ``first_frame=frame, walk_from=walk_from`` to
        ``read_datagrams(start=lo, end=hi)`` to read exactly this window).
    """
    stop = cap.size if stop is None else min(stop, cap.size)
    window = max(1, WALK_WINDOW if window is None else window)
    released = 0
    for lo in range(max(start, 0), stop, window):
        hi = min(lo + window, stop)
        offs, _ = scanner.walk_range(lo, hi, log, begin=begin)
        yield lo, hi, offs, first_frame, begin
        first_frame += offs.size
        if offs.size:
            begin = int(offs[-1])
        if begin - released >= window // 2 or hi >= stop:  # one madvise per half window or so
            cap.release(released, begin)
            released = begin


def plan_splits(source: CaptureSource, target_bytes: int) -> list[tuple[int, int]]:
    """Cut a capture into byte ranges of about ``target_bytes`` each, without reading it.

    ``read_datagrams(source, start=s, end=e)`` on every range returns, together, exactly the
    datagrams of the whole file, each once, and the same error count, damage included: a range
    owns the whole-file walk's records whose header starts in it and the framing errors they
    own, and a reader starting mid-record finds its way in by resynchronising before its start
    (``RecordScanner.walk_range`` in ``nbmq.capture.files.records``). Only classic pcap is split; a
    pcapng capture, a file that fits in one range, and a pcap whose first records do not pass
    the strict header test that resynchronisation relies on (an unusual writer) come back as
    one range.

    Args:
        source: path or bytes of the capture.
        target_bytes: wanted size of each range in bytes (> 0).

    Returns:
        ``[(start, end), ...]``: contiguous, ordered, covering ``[0, file size)``.

    Raises:
        ValueError: ``target_bytes`` is not positive.
        CaptureError: not a pcap or pcapng capture.
        OSError: the file cannot be opened.
    """
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, not {target_bytes}")
    with OpenedCapture(source) as cap:
        size = cap.size
        if detect_format(cap.buf, size) != "pcap" or size <= target_bytes:
            return [(0, size)]
        scanner = RecordScanner(cap.buf, size, parse_pcap_header(cap.buf, size))
        usable = scanner.min_sec > 0 and scanner.strict_chain(PCAP_FILE_HEADER_LEN)
        del scanner  # drops its views of the mapping before the file is closed
    if not usable:
        return [(0, size)]
    cuts = list(range(0, size, target_bytes)) + [size]
    return list(zip(cuts[:-1], cuts[1:]))


def range_starts(source: CaptureSource, splits: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Where each range's reading starts, from one walk over the record headers.

    The walk is the whole-file read's own (``RecordScanner.walk``), so passing both values to
    ``read_datagrams(..., first_frame=f, walk_from=w)`` makes every range read exactly the
    records (and framing errors) the whole-file read gives them, damage included, while
    touching only the bytes of its range and of the record before it.

    Args:
        source: path or bytes of the capture.
        splits: ranges from ``plan_splits`` (any ``(start, end)`` byte ranges).

    Returns:
        One ``(walk_from, first_frame)`` per range: the byte offset of the last record before
        the range (24 when there is none; pcapng: the range start), and the 1-based frame
        number of the range's first record.

    Raises:
        CaptureError: not a pcap or pcapng capture.
        OSError: the file cannot be opened.
    """
    with OpenedCapture(source) as cap:
        if detect_format(cap.buf, cap.size) == "pcapng":
            pk = walk_pcapng(cap, 0, cap.size, ErrorLog())
            offsets = np.array(pk.offsets, np.int64)
            frames = np.array(pk.frames, np.int64)
            out = []
            for start, _end in splits:
                j = int(np.searchsorted(offsets, start))
                out.append((start, int(frames[j]) if j < frames.size else int(frames[-1]) + 1 if frames.size else 1))
            return out
        scanner = RecordScanner(cap.buf, cap.size, parse_pcap_header(cap.buf, cap.size))
        # a range owns the whole-file walk's records starting in it and the errors they own
        # (RecordScanner.walk_range); walking from the record before it also meets a record of
        # the range that is cut by the end of the file, which the walk's offsets leave out.
        # The walk goes window by window (flat memory on big files).
        starts = sorted({s for s, _e in splits})
        found: dict[int, tuple[int, int]] = {}
        k = 0
        last, frame = PCAP_FILE_HEADER_LEN, 1  # record before the window, and its successor's frame
        for _lo, hi, offs, frame, _from in walk_windows(cap, scanner, ErrorLog(), PCAP_FILE_HEADER_LEN):
            while k < len(starts) and starts[k] < hi:
                j = int(np.searchsorted(offs, starts[k]))
                found[starts[k]] = (int(offs[j - 1]) if j else last, frame + j)
                k += 1
            if offs.size:
                last = int(offs[-1])
            frame += offs.size
        del scanner
    return [found.get(s, (last, frame)) for s, _e in splits]


def first_frames(source: CaptureSource, splits: Sequence[tuple[int, int]]) -> list[int]:
    """Frame number of the first record of each range (``range_starts``' second values).

    Pass ``first_frame=first_frames(...)[i]`` to ``read_datagrams`` for range i so that no
    reader has to walk the part of the file before its range (``range_starts`` also gives
    the offset to start reading at).

    Args:
        source: path or bytes of the capture.
        splits: ranges from ``plan_splits`` (any ``(start, end)`` byte ranges).

    Returns:
        One int per range: the 1-based frame number its first record gets.

    Raises:
        CaptureError: not a pcap or pcapng capture.
        OSError: the file cannot be opened.
    """
    return [frame for _record, frame in range_starts(source, splits)]
