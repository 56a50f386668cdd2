"""Decode many datagrams at once into a numpy structured array.

The receive path and the Spark pipeline both lay datagrams out in one buffer (offsets and
lengths) and decode them here; a bad row never raises, it gets an error code.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..errors import DecodeError
from ..wire import (
    BUNDLE_VERSION,
    CONTROL_HEADER_SIZE,
    DATA_HEADER_SIZE,
    FRAME_DTYPE,
    SEALED_KINDS,
    SECURE_COUNTER_SIZE,
    SECURE_OVERHEAD,
    SECURE_VERSION,
    FrameError,
    FrameKind,
)
from .frames import bundle_layout, check_frame


def check_rows(offsets: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``offsets`` and ``lengths`` as numpy arrays, checked: 1-D, the same shape, integers.

    Raises:
        ValueError: they differ in shape or are not 1-D.
        TypeError: a non-empty one is not an integer array.
    """
    offsets = np.asarray(offsets)
    lengths = np.asarray(lengths)
    if offsets.ndim != 1 or offsets.shape != lengths.shape:
        raise ValueError("offsets and lengths must be 1-D arrays of the same length")
    if (offsets.size and offsets.dtype.kind not in "iu") or (lengths.size and lengths.dtype.kind not in "iu"):
        raise TypeError("offsets and lengths must be integer arrays")
    return offsets, lengths


def parse_frames(buffer: np.ndarray | bytes, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Decode every datagram ``buffer[offsets[i] : offsets[i] + lengths[i]]``.

    Args:
        buffer: the datagrams back to back, a uint8 array or any C-contiguous buffer.
        offsets: integer array, shape ``(n,)``: where each datagram starts, bytes.
        lengths: integer array, shape ``(n,)``: each datagram's size, bytes.

    Returns:
        A :data:`~nbmq.wire.FRAME_DTYPE` array, shape ``(n,)``. Per row: ``version`` and
        ``kind`` once 2 bytes are present; every header field once the whole header is present
        (34 bytes for data, 10 for control; ``session_id`` only for control); ``payload_offset``
        (absolute in ``buffer``) and ``payload_length`` likewise; ``error`` a
        :class:`~nbmq.wire.FrameError` code, the same rule ``parse_frame`` raises for. Fields
        never reached are 0. A row outside ``buffer`` gets ``OUT_OF_BUFFER``.

        Secure mode's frames (``version`` 0x81, docs/secure.md) decode too, since their
        headers are in clear (``parse_frame`` refuses them): a sealed frame's fields are its
        plain header's, its payload is the ciphertext between the u64 counter and the 16-byte
        tag (``payload_length`` = length - header - 24), and over 524 bytes it is
        ``SEALED_TOO_LARGE``; a secure Connect or Connected decodes as a plain control frame
        (its payload is the Noise handshake message).

    Raises:
        ValueError: ``offsets`` and ``lengths`` differ in shape or are not 1-D.
        TypeError: ``offsets`` or ``lengths`` is not an integer array (an empty one may be of
            any dtype), or ``buffer`` is not a C-contiguous buffer.
    """
    offsets, lengths = check_rows(offsets, lengths)
    view = memoryview(cast(Any, buffer)).cast("B")
    total = len(view)
    out = np.zeros(len(offsets), dtype=FRAME_DTYPE)
    for i, (start, length) in enumerate(zip(offsets.tolist(), lengths.tolist())):
        row = out[i]
        if start < 0 or length < 0 or start + length > total:
            row["error"] = FrameError.OUT_OF_BUFFER
            continue
        datagram = view[start : start + length]
        code, _, fields = check_frame(datagram, sealed=True)
        if length >= 2:
            row["version"] = datagram[0]
            row["kind"] = datagram[1]
        if fields is not None:
            if datagram[1] == FrameKind.DATA:
                (
                    _,
                    _,
                    row["session_id"],
                    row["message_id"],
                    row["part_count"],
                    row["part_index"],
                    row["message_size"],
                    row["part_size"],
                    row["chunk_size"],
                    row["chunk_offset"],
                ) = fields
                header = DATA_HEADER_SIZE
            else:
                row["session_id"] = fields[2]
                header = CONTROL_HEADER_SIZE
            if datagram[0] == SECURE_VERSION and datagram[1] in SEALED_KINDS:
                # a sealed frame: its payload is the ciphertext between the counter and the tag
                row["payload_offset"] = start + header + SECURE_COUNTER_SIZE
                row["payload_length"] = length - header - SECURE_OVERHEAD
            else:
                row["payload_offset"] = start + header
                row["payload_length"] = length - header
        row["error"] = code
    return out


def split_bundles(
    buffer: np.ndarray | bytes, offsets: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Datagrams as :func:`parse_frames` reads them, each well-formed sealed bundle (version
    0x82, docs/secure.md) replaced by its frames, each laid out as if it had been sealed alone:
    its clear header (version 0x81), the bundle's counter, its ciphertext and the bundle's tag.
    ``parse_frames`` then gives one row per bundled frame, ``payload`` its ciphertext. Every
    other datagram, a malformed bundle included, is kept as it is (``parse_frames`` then says
    what is wrong with it).

    Args:
        buffer: the datagrams back to back, a uint8 array or any C-contiguous buffer.
        offsets, lengths: integer arrays, shape ``(n,)``: each datagram's start and size, bytes.

    Returns:
        ``(buffer, offsets, lengths, source)``: the records' buffer (uint8: the input's bytes,
        then the frames taken out of bundles), their offsets and lengths (int64, shape ``(m,)``,
        ``m >= n``) and ``source`` (int64 ``(m,)``: the input datagram each record comes from,
        in order), so per-datagram columns (time, addresses) are ``column[source]``. Without
        bundles these are the inputs and ``arange(n)``.

    Raises:
        ValueError, TypeError: as :func:`parse_frames`, for ``offsets`` and ``lengths``.
    """
    offsets, lengths = check_rows(offsets, lengths)
    view = np.frombuffer(memoryview(cast(Any, buffer)).cast("B"), dtype=np.uint8)
    offsets = offsets.astype(np.int64)
    lengths = lengths.astype(np.int64)
    n = len(offsets)
    total = len(view)
    inside = (offsets >= 0) & (lengths >= 2) & (lengths <= total) & (offsets <= total - lengths)
    first = np.zeros(n, dtype=np.uint8)
    first[inside] = view[offsets[inside]]
    candidates = np.flatnonzero(first == BUNDLE_VERSION)
    counts = np.ones(n, dtype=np.int64)
    extra = bytearray()
    pieces: dict[int, list[tuple[int, int]]] = {}
    raw = memoryview(cast(Any, view))
    for i in candidates.tolist():
        start = int(offsets[i])
        datagram = raw[start : start + int(lengths[i])]
        try:
            entries, end = bundle_layout(datagram)
        except DecodeError:
            continue
        seal = bytes(datagram[end : end + SECURE_COUNTER_SIZE])
        tag = bytes(datagram[len(datagram) - (SECURE_OVERHEAD - SECURE_COUNTER_SIZE) :])
        at = end + SECURE_COUNTER_SIZE
        records = []
        for head, size, length in entries:
            records.append((total + len(extra), size + SECURE_OVERHEAD + length))
            extra += datagram[head : head + size]
            extra += seal
            extra += datagram[at : at + length]
            extra += tag
            at += length
        pieces[i] = records
        counts[i] = len(records)
    if not pieces:
        return view, offsets, lengths, np.arange(n, dtype=np.int64)
    source = np.repeat(np.arange(n, dtype=np.int64), counts)
    out_offsets = np.repeat(offsets, counts)
    out_lengths = np.repeat(lengths, counts)
    firsts = np.cumsum(counts) - counts
    for i, records in pieces.items():
        at = int(firsts[i])
        for j, (offset, length) in enumerate(records):
            out_offsets[at + j] = offset
            out_lengths[at + j] = length
    return np.concatenate([view, np.frombuffer(bytes(extra), dtype=np.uint8)]), out_offsets, out_lengths, source
