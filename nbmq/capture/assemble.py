"""Turning per-record decode results into a ``DatagramBatch``."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .addresses import addresses_to_text
from .batch import DatagramBatch, ns_to_seconds
from .errorlog import ErrorLog
from .rows import ERROR, OK, SKIP, RowTable

__all__ = ["assemble"]


def assemble(
    table: RowTable,
    *,
    buf: object,
    ts_ns: np.ndarray,
    frame_numbers: np.ndarray,
    record_offsets: np.ndarray,
    udp_ports: Iterable[int] | None,
    log: ErrorLog,
    engine: str,
    fallback_rows: int = 0,
) -> DatagramBatch:
    """Select the OK rows, copy their payloads into one buffer and build the batch.

    Args:
        table: decode results for n records (no FALLBACK rows left).
        buf: the capture buffer that ``table.pstart``/``pend`` point into.
        ts_ns: int64 (n,), record timestamps in nanoseconds.
        frame_numbers: int64 (n,), 1-based frame numbers of the records.
        record_offsets: int64 (n,), byte offset of each record (orders error reasons).
        udp_ports: keep only datagrams with a source or destination port in this set.
        log: framing errors found so far; packet errors are added to it.
        engine: ``"fast"`` or ``"dpkt"``, stored in the batch.
        fallback_rows: rows the fast engine handed to dpkt.

    Returns:
        The batch; ``packets`` is n, ``errors`` is ``log.count`` after adding packet errors.
    """
    status = table.status
    for i, reason in sorted(table.reasons.items()):
        log.at_frame(int(record_offsets[i]), int(frame_numbers[i]), reason)
    keep = status == OK
    if udp_ports is not None:
        ports = np.fromiter((int(p) for p in udp_ports), np.int64)
        keep &= np.isin(table.sport, ports) | np.isin(table.dport, ports)
    sel = np.flatnonzero(keep)
    skipped = int(np.count_nonzero(status == SKIP)) + int(np.count_nonzero(status == OK)) - sel.size
    assert not np.any((status != OK) & (status != SKIP) & (status != ERROR)), "FALLBACK rows left"

    payload, offsets, lengths = _gather_payloads(table, sel, buf)
    return DatagramBatch(
        timestamp=ns_to_seconds(ts_ns[sel]),
        timestamp_ns=ts_ns[sel].astype(np.int64, copy=False),
        src_addr=addresses_to_text(table.family[sel], table.src[sel]),
        dst_addr=addresses_to_text(table.family[sel], table.dst[sel]),
        src_port=table.sport[sel],
        dst_port=table.dport[sel],
        payload=payload,
        offsets=offsets,
        lengths=lengths,
        frame_number=frame_numbers[sel].astype(np.int64, copy=False),
        truncated=table.truncated[sel],
        packets=int(status.shape[0]),
        skipped=skipped,
        errors=log.count,
        error_reasons=log.reasons,
        engine=engine,
        fallback_rows=fallback_rows,
    )


def _gather_payloads(table: RowTable, sel: np.ndarray, buf: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # One slice copy per datagram, then one join: ~0.3 us per datagram. Slicing the mmap /
    # bytes directly is several times faster than memoryview slices, and needs no index arrays
    # as large as the payload volume (fancy indexing would).
    rows = sel.tolist()
    payloads = table.payloads
    if payloads and len(payloads) >= len(rows) and all(i in payloads for i in rows):
        pieces: list[object] = [payloads[i] for i in rows]
        lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))  # type: ignore[arg-type]
    else:
        lengths = table.pend[sel] - table.pstart[sel]
        pieces = [buf[a:b] for a, b in zip(table.pstart[sel].tolist(), table.pend[sel].tolist())]  # type: ignore[index]
        for row, data in payloads.items():
            j = int(np.searchsorted(sel, row))
            if j < sel.size and sel[j] == row:
                pieces[j] = data
                lengths[j] = len(data)
    data_all = bytearray().join(pieces)  # type: ignore[arg-type]
    offsets = np.zeros(sel.size, np.int64)
    if sel.size > 1:
        np.cumsum(lengths[:-1], out=offsets[1:])
    return np.frombuffer(data_all, np.uint8), offsets, lengths.astype(np.int32)
