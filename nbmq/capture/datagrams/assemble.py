"""Turning per-record decode results into a ``DatagramBatch``, addresses as text once per distinct address."""

from __future__ import annotations

import mmap
import socket
from collections.abc import Iterable

import numpy as np

from ... import extensions
from ..files.errorlog import ErrorLog
from .batch import DatagramBatch, gather_ranges, ns_to_seconds
from .rows import ERROR, OK, SKIP, RowTable

__all__ = ["assemble", "address_table", "addresses_to_text"]


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


# -- addresses: converted once per distinct address rather than once per packet

_decode = extensions.load("nbmq.capture.datagrams._decode")
_factorize = None if _decode is None else _decode.factorize_addresses  # else np.unique does it


def address_table(
    family: np.ndarray, src: np.ndarray, dst: np.ndarray, compiled: bool | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct addresses of a batch as text, and each row's source and destination codes.

    Args:
        family: uint8 (n,), 4 or 6 per row.
        src, dst: uint8 (n, 16), the packed addresses (IPv4 in the first 4 bytes).
        compiled: use the compiled hash table (``nbmq.capture.datagrams._decode``; True requires it),
            numpy's sort-based ``np.unique`` (False), or the first when built (None). Codes may
            differ between the two; the text each row gets does not.

    Returns:
        ``(texts, src_code, dst_code)``: object (k,) array of ``str`` (one per distinct
        address, shared by both columns), int32 (n,) and int32 (n,) indexes into it.
    """
    n = int(family.shape[0])
    if compiled is None:
        compiled = _factorize is not None
    elif compiled and _factorize is None:
        raise RuntimeError("nbmq.capture.datagrams._decode is not built")
    if compiled:
        src_code, dst_code, ufam, uaddr = _factorize(
            np.ascontiguousarray(family, np.uint8),
            np.ascontiguousarray(src, np.uint8),
            np.ascontiguousarray(dst, np.uint8),
        )
    else:
        keys = np.empty((2 * n, 17), np.uint8)
        keys[:n, 0] = family
        keys[n:, 0] = family
        keys[:n, 1:] = src
        keys[n:, 1:] = dst
        uniq, inverse = np.unique(keys.view("V17").ravel(), return_inverse=True)
        inverse = inverse.ravel().astype(np.int32)
        src_code, dst_code = inverse[:n], inverse[n:]
        both = np.frombuffer(uniq.tobytes(), np.uint8).reshape(-1, 17)
        ufam, uaddr = both[:, 0], both[:, 1:]
    return addresses_to_text(ufam, uaddr), src_code, dst_code


def addresses_to_text(family: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """Format packed addresses as text.

    A capture has few distinct addresses, so rows are de-duplicated with ``np.unique`` (on a
    uint32 key for IPv4, on the 16 raw bytes for IPv6) and ``socket.inet_ntop`` runs once per
    distinct address; rows share the resulting ``str`` objects.

    Args:
        family: uint8 (n,), 4 or 6 per row.
        addr: uint8 (n, 16), the address bytes (IPv4 in the first 4).

    Returns:
        object (n,) array of ``str``: dotted quad for IPv4, RFC 5952 text for IPv6.
    """
    out = np.empty(family.shape[0], object)
    v6 = family == 6
    r4 = np.flatnonzero(~v6)
    if r4.size:
        key = np.ascontiguousarray(addr[r4, :4]).view(">u4").ravel()
        uniq, inverse = np.unique(key, return_inverse=True)
        texts = np.array([socket.inet_ntop(socket.AF_INET, int(k).to_bytes(4, "big")) for k in uniq], object)
        out[r4] = texts[inverse.ravel()]
    r6 = np.flatnonzero(v6)
    if r6.size:
        key6 = np.ascontiguousarray(addr[r6]).view("V16").ravel()
        uniq6, inverse6 = np.unique(key6, return_inverse=True)
        texts6 = np.array([socket.inet_ntop(socket.AF_INET6, bytes(k)) for k in uniq6.tolist()], object)
        out[r6] = texts6[inverse6.ravel()]
    return out
