"""Cut a multipart message into data frames, all written into one preallocated buffer.

Source: tests/data/VECTORS.md ("Sharding"): parts go out in order, each cut into chunks of at
most 466 bytes, ``chunk_offset`` counts from the start of the part, ``message_size`` is the sum
of part sizes. Divergence (ARCHITECTURE.md): an empty part is carried as one zero-length chunk,
where the reference emits nothing and the message never completes at the receiver.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..wire import DATA_HEADER_SIZE, MAX_CHUNK_SIZE, MAX_MESSAGE_SIZE, MAX_PARTS, VERSION, FrameKind
from .frames import DATA_HEADER, Buffer

_U64 = 0xFFFFFFFFFFFFFFFF


class ShardedMessage(NamedTuple):
    """The frames of one message laid out back to back in one buffer.

    Attributes:
        buffer: uint8 array, shape ``(total_bytes,)``, holding every frame.
        offsets: int64 array, shape ``(frame_count,)``: where each frame starts in ``buffer``.
        lengths: int32 array, shape ``(frame_count,)``: each frame's size, bytes (34..500).
    """

    buffer: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray

    def frames(self) -> list[memoryview]:
        """Each frame as a memoryview into ``buffer`` (no copy), in send order."""
        view = self.buffer.data
        return [view[o : o + n] for o, n in zip(self.offsets.tolist(), self.lengths.tolist())]


def _views(parts: Sequence[Buffer]) -> list[memoryview]:
    if isinstance(parts, (bytes, bytearray, memoryview, str)):
        raise TypeError("parts must be a sequence of buffers, not one buffer")
    views = [memoryview(p).cast("B") for p in parts]
    if not views:
        raise ValueError("a message needs at least one part (send [b''] for an empty message)")
    if len(views) > MAX_PARTS:
        raise ValueError(f"a message has at most {MAX_PARTS} parts, got {len(views)}")
    return views


def frame_count(part_sizes: Sequence[int]) -> int:
    """Frames needed for parts of these sizes: ``sum(max(1, ceil(size / 466)))``."""
    return sum(max(1, -(-size // MAX_CHUNK_SIZE)) for size in part_sizes)


def shard_message(parts: Sequence[Buffer], session_id: int, message_id: int) -> ShardedMessage:
    """Cut a multipart message into data frames written into one new buffer.

    Args:
        parts: 1..255 parts, any C-contiguous buffers (bytes, bytearray, memoryview, numpy
            uint8); empty parts are allowed.
        session_id: u64 session the frames belong to.
        message_id: u64 id of the message (see ``message_id``).

    Returns:
        A :class:`ShardedMessage`: one uint8 buffer with every frame, plus int64 offsets and
        int32 lengths, in send order (part by part, chunk offsets ascending). Each part's bytes
        are copied once, into the buffer.

    Raises:
        ValueError: no parts, more than 255 parts, or a message over 4 GiB - 1 bytes.
        TypeError: ``parts`` is a single buffer or holds a non-buffer.
        OverflowError: an id is not a u64.
    """
    views = _views(parts)
    session_id = operator.index(session_id)
    message_id = operator.index(message_id)
    if not (0 <= session_id <= _U64 and 0 <= message_id <= _U64):
        raise OverflowError("session_id and message_id must be u64")
    sizes = [len(v) for v in views]
    message_size = sum(sizes)
    if message_size > MAX_MESSAGE_SIZE:
        raise ValueError(f"a message is at most {MAX_MESSAGE_SIZE} bytes, got {message_size}")
    count = frame_count(sizes)
    buffer = np.empty(count * DATA_HEADER_SIZE + message_size, dtype=np.uint8)
    offsets = np.empty(count, dtype=np.int64)
    lengths = np.empty(count, dtype=np.int32)
    out = buffer.data
    pos = 0
    frame = 0
    part_count = len(views)
    for index, view in enumerate(views):
        part_size = len(view)
        chunk_offset = 0
        while True:
            size = min(MAX_CHUNK_SIZE, part_size - chunk_offset)
            DATA_HEADER.pack_into(
                out,
                pos,
                VERSION,
                FrameKind.DATA,
                session_id,
                message_id,
                part_count,
                index,
                message_size,
                part_size,
                size,
                chunk_offset,
            )
            out[pos + DATA_HEADER_SIZE : pos + DATA_HEADER_SIZE + size] = view[chunk_offset : chunk_offset + size]
            offsets[frame] = pos
            lengths[frame] = DATA_HEADER_SIZE + size
            pos += DATA_HEADER_SIZE + size
            frame += 1
            chunk_offset += size
            if chunk_offset >= part_size:
                break
    return ShardedMessage(buffer, offsets, lengths)


def shard_message_bytes(parts: Sequence[Buffer], session_id: int, message_id: int) -> list[bytes]:
    """:func:`shard_message`, each frame as its own ``bytes`` (a convenience; one more copy).

    Returns:
        The frames in send order. Errors as :func:`shard_message`.
    """
    sharded = shard_message(parts, session_id, message_id)
    data = sharded.buffer.tobytes()
    return [data[o : o + n] for o, n in zip(sharded.offsets.tolist(), sharded.lengths.tolist())]
