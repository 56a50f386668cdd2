"""Turning per-record decode results into a ``DatagramBatch``."""

from __future__ import annotations

import mmap
from collections.abc import Iterable

import numpy as np

from .addresses import address_table
from .batch import DatagramBatch, gather_ranges, ns_to_seconds
from ..files.errorlog import ErrorLog
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
    """Select the OK rows and build the batch, its payload viewing ``buf`` when possible.

    Without rows decoded by dpkt, the payload is ``buf`` itself for an immutable buffer (no
    copy; offsets point at each UDP payload) and a single vectorised gather otherwise.

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
    texts, src_code, dst_code = address_table(table.family[sel], table.src[sel], table.dst[sel])
    return DatagramBatch(
        timestamp=ns_to_seconds(ts_ns[sel]),
        timestamp_ns=ts_ns[sel].astype(np.int64, copy=False),
        src_addr=texts[src_code],
        dst_addr=texts[dst_code],
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
        addresses=texts,
        src_code=src_code,
        dst_code=dst_code,
    )


def _immutable(buf: object) -> bool:
    """True when nobody can change or resize ``buf`` under an array viewing it."""
    if isinstance(buf, bytes):
        return True
    if isinstance(buf, mmap.mmap):
        return memoryview(buf).readonly  # the reader maps files with ACCESS_READ
    return isinstance(buf, memoryview) and buf.readonly


def _gather_payloads(table: RowTable, sel: np.ndarray, buf: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    payloads = table.payloads
    own = bool(payloads) and bool(np.isin(sel, np.fromiter(payloads, np.int64, len(payloads))).any())
    if not own:
        starts = table.pstart[sel]
        lengths = table.pend[sel] - starts
        whole = np.frombuffer(buf, np.uint8) if len(buf) else np.empty(0, np.uint8)  # type: ignore[arg-type, call-overload]
        if _immutable(buf):
            # No copy at all: the batch views the capture's bytes (see DatagramBatch).
            return whole, starts.astype(np.int64, copy=False), lengths.astype(np.int32)
        data_all = gather_ranges(whole, starts, lengths)  # one vectorised copy
        offsets = np.zeros(sel.size, np.int64)
        if sel.size > 1:
            np.cumsum(lengths[:-1], out=offsets[1:])
        return data_all, offsets, lengths.astype(np.int32)
    # Some rows were decoded by dpkt and carry their own bytes: one slice per datagram, one join.
    rows = sel.tolist()
    if len(payloads) >= len(rows) and all(i in payloads for i in rows):
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

