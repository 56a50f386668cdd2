"""Decode many datagrams at once into a numpy structured array.

The receive path and the Spark pipeline both lay datagrams out in one buffer (offsets and
lengths) and decode them here; a bad row never raises, it gets an error code.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..wire import CONTROL_HEADER_SIZE, DATA_HEADER_SIZE, FRAME_DTYPE, FrameError, FrameKind
from .frames import check_frame


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
        code, _, fields = check_frame(datagram)
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
            row["payload_offset"] = start + header
            row["payload_length"] = length - header
        row["error"] = code
    return out
