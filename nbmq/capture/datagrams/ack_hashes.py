"""The SafeDealer ack hash of every frame of a batch: the frames table's ``ack_hash`` column.

A SafeDealer receiver answers a data frame with ``Ack(session_id, h)``, ``h`` = FNV-1a 64 over
the data frame's exact bytes, header and chunk (``codec.ack_hash``; ARCHITECTURE.md, wire facts);
the sender drops the frame whose hash an Ack names (an 8-byte payload, big-endian). So a data
frame and the Acks for it share one number, and a report matches them on it without reading any
payload (hashing the payload column in Spark was most of the report step).

The hashing is done by ``nbmq.capture.datagrams._decode.fnv1a64_ranges`` when it is built, else
by :func:`fnv1a64_ranges` here with numpy, one byte position of every row at a time; tests hold
the two (and ``codec.ack_hash``) to identical values.
"""

from __future__ import annotations

import numpy as np

from ...wire import DATA_HEADER_SIZE, FNV_OFFSET_BASIS, FNV_PRIME, SECURE_VERSION, FrameError, FrameKind
from .decode_fast import _decode

__all__ = ["ack_hashes", "fnv1a64_ranges", "COMPILED"]

# the compiled decoder module, as decode_fast gates it (None when not built or NBMQ_NO_EXTENSIONS)
_native_fnv = None if _decode is None else _decode.fnv1a64_ranges

#: True when :func:`fnv1a64_ranges` uses the compiled loop by default.
COMPILED = _native_fnv is not None

#: The payload length of an Ack the engine accepts (nbmq.engine.sockets: other lengths are ignored).
_ACK_PAYLOAD = 8


def fnv1a64_ranges(
    buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, compiled: bool | None = None
) -> np.ndarray:
    """FNV-1a 64 of every ``buffer[starts[i] : starts[i] + lengths[i]]`` (``codec.fnv1a64``).

    Args:
        buffer: uint8 (m,), the bytes.
        starts: integer (n,), first byte of each range in ``buffer``.
        lengths: integer (n,), bytes in each range (>= 0).
        compiled: True requires the compiled loop (``_decode.fnv1a64_ranges``), False uses
            numpy, None (default) the compiled one when built and ``NBMQ_NO_EXTENSIONS`` is unset.

    Returns:
        uint64 (n,): the hashes (an empty range hashes to the offset basis).

    Raises:
        ValueError: ``starts`` and ``lengths`` differ in shape, or a range lies outside ``buffer``.
        RuntimeError: ``compiled=True`` and the extension is not built.
    """
    starts = np.ascontiguousarray(starts, np.int64)
    lengths = np.ascontiguousarray(lengths, np.int64)
    if starts.shape != lengths.shape or starts.ndim != 1:
        raise ValueError("starts and lengths must be 1-D arrays of the same length")
    if compiled is None:
        compiled = _native_fnv is not None
    elif compiled and _native_fnv is None:
        raise RuntimeError("nbmq.capture.datagrams._decode is not built")
    buffer = np.ascontiguousarray(buffer, np.uint8).reshape(-1)
    n = starts.shape[0]
    out = np.empty(n, np.uint64)
    if compiled:
        _native_fnv(buffer, starts, lengths, out)  # type: ignore[misc]
        return out
    if n and (starts.min() < 0 or lengths.min() < 0 or (starts + lengths).max() > buffer.shape[0]):
        raise ValueError("range outside the buffer")
    # Rows longest first, so the rows still hashing at byte j are a prefix: each step is one
    # gather and two vector operations over that prefix (numpy wraps uint64 products mod 2**64).
    order = np.argsort(-lengths, kind="stable")
    s, ln = starts[order], lengths[order]
    h = np.full(n, FNV_OFFSET_BASIS, np.uint64)
    prime = np.uint64(FNV_PRIME)
    ascending = ln[::-1]
    for j in range(int(ln[0]) if n else 0):
        k = n - int(np.searchsorted(ascending, j, side="right"))  # rows with length > j
        h[:k] ^= buffer[s[:k] + j]
        h[:k] *= prime
    out[order] = h
    return out


def ack_hashes(buffer: np.ndarray, rows: np.ndarray, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ack hash each frame names: the frames table's ``ack_hash`` column.

    Args:
        buffer: uint8 (m,), the datagrams, as handed to ``codec.parse_frames``.
        rows: :data:`nbmq.wire.FRAME_DTYPE` (n,), ``codec.parse_frames(buffer, ...)``'s result
            (``payload_offset`` is absolute in ``buffer``).
        compiled: as :func:`fnv1a64_ranges`.

    Returns:
        ``(values, valid)``: int64 (n,) and bool (n,). For a valid data frame, the hash an Ack
        for it carries (``codec.ack_hash`` of the whole datagram); for a valid Ack with an 8-byte
        payload, the hash it carries; the u64's bits read as signed (Spark has no u64; the value
        is only compared). ``valid`` is False (and the value 0) on every other row, secure mode's
        frames included (version 0x81: a sealed Ack's hash is encrypted, and a sealed data
        frame's Ack hashes the plain frame, which the capture does not hold).
    """
    ok = (rows["error"] == FrameError.OK) & (rows["version"] != SECURE_VERSION)
    kind = rows["kind"]
    values = np.zeros(rows.shape[0], np.uint64)
    data = np.flatnonzero(ok & (kind == FrameKind.DATA))
    if data.size:
        start = rows["payload_offset"][data].astype(np.int64) - DATA_HEADER_SIZE
        values[data] = fnv1a64_ranges(
            buffer, start, rows["payload_length"][data].astype(np.int64) + DATA_HEADER_SIZE, compiled
        )
    acks = np.flatnonzero(ok & (kind == FrameKind.ACK) & (rows["payload_length"] == _ACK_PAYLOAD))
    if acks.size:
        at = rows["payload_offset"][acks].astype(np.int64)[:, None] + np.arange(_ACK_PAYLOAD)
        values[acks] = np.ascontiguousarray(np.asarray(buffer, np.uint8)[at]).view(">u8").ravel()
    valid = np.zeros(rows.shape[0], bool)
    valid[data] = True
    valid[acks] = True
    return values.view(np.int64), valid
