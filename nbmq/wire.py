"""Wire constants and parsed-frame types shared by both codec twins.

Source: the nbmq 0.2.0 crate page (seed 000) and the Rust reference's observed bytes
(tests/data/nbmq_v0_2_0.json). Every integer in an nbmq frame is big-endian.

DataFrame (kind 0), a 34-byte header then the chunk::

    0 version u8 | 1 kind u8 | 2 session_id u64 | 10 message_id u64 | 18 part_count u8
    19 part_index u8 | 20 message_size u32 | 24 part_size u32 | 28 chunk_size u16
    30 chunk_offset u32 | 34 chunk (chunk_size bytes, at most 466)

ControlFrame (kinds 1..5), a 10-byte header then a payload::

    0 version u8 | 1 kind u8 | 2 session_id u64 | 10 payload
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np

__all__ = [
    "VERSION",
    "DATA_HEADER_SIZE",
    "CONTROL_HEADER_SIZE",
    "MAX_FRAME_SIZE",
    "MAX_CHUNK_SIZE",
    "MAX_PARTS",
    "MAX_MESSAGE_SIZE",
    "SECURE_VERSION",
    "SECURE_COUNTER_SIZE",
    "SECURE_OVERHEAD",
    "MAX_SEALED_FRAME_SIZE",
    "BUNDLE_VERSION",
    "BUNDLE_HEAD_SIZE",
    "BUNDLE_ENTRY_SIZE",
    "BUNDLE_OVERHEAD",
    "MIN_BUNDLE_FRAMES",
    "MAX_BUNDLE_FRAMES",
    "MAX_DATAGRAM_SIZE",
    "ETHERNET_DATAGRAM_SIZE",
    "BUNDLE_ERROR_REASONS",
    "FNV_OFFSET_BASIS",
    "FNV_PRIME",
    "FrameKind",
    "SEALED_KINDS",
    "FrameError",
    "FRAME_ERROR_REASONS",
    "FRAME_DTYPE",
    "DataFrame",
    "ControlFrame",
    "BQSP_HEADER_SIZE",
    "BQSP_DEFAULT_MAX_PACKET",
    "BQSP_MAX_PACKET",
    "BqspPacket",
    "RQUEUE_PREAMBLE_SIZE",
    "RQUEUE_SERVER_MAX_PAYLOAD",
    "RQUEUE_MAX_PAYLOAD",
    "RqueueType",
    "RqueueMessage",
]

VERSION = 1
DATA_HEADER_SIZE = 34
CONTROL_HEADER_SIZE = 10
MAX_FRAME_SIZE = 500
MAX_CHUNK_SIZE = MAX_FRAME_SIZE - DATA_HEADER_SIZE  # 466
MAX_PARTS = 255  # part_count is a u8 (the reference's "256 parts" message is off by one)
MAX_MESSAGE_SIZE = 0xFFFFFFFF  # message_size is a u32
FNV_OFFSET_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
#: Secure mode's version byte (docs/secure.md): the high bit marks it, the low bits are VERSION.
#: Connect and Connected carry a Noise handshake message as their payload; every other sealed
#: frame is its plain header, a u64 counter, the encrypted chunk or payload and a 16-byte tag.
SECURE_VERSION = 0x80 | VERSION
SECURE_COUNTER_SIZE = 8
#: Bytes sealing adds to a plain frame: the counter and the Poly1305 tag.
SECURE_OVERHEAD = SECURE_COUNTER_SIZE + 16
MAX_SEALED_FRAME_SIZE = MAX_FRAME_SIZE + SECURE_OVERHEAD  # 524
#: A sealed bundle's version byte (docs/secure.md): several frames of one secure session under one
#: seal. Layout: BUNDLE_VERSION, a u8 frame count, per frame a u16 BE ciphertext length and its
#: clear sealed header (version SECURE_VERSION), then one u64 counter, the frames' encrypted
#: payloads one after the other and one 16-byte tag; associated data is everything before the
#: ciphertext. Readers that know only VERSION or SECURE_VERSION refuse it as a wrong version.
BUNDLE_VERSION = 0x82
BUNDLE_HEAD_SIZE = 2  # version byte and frame count
BUNDLE_ENTRY_SIZE = 2  # each frame's u16 ciphertext length (its header follows)
#: Bytes a bundle adds to its plain frames, besides BUNDLE_ENTRY_SIZE per frame.
BUNDLE_OVERHEAD = BUNDLE_HEAD_SIZE + SECURE_OVERHEAD  # 26
MIN_BUNDLE_FRAMES = 2  # one frame goes alone, as a SECURE_VERSION frame
MAX_BUNDLE_FRAMES = 255  # the count is a u8
#: A UDP datagram's largest payload over IPv4 (65,535 less the IPv4 and UDP headers): a secure
#: socket reads datagrams up to this size, so peers that bundle to different sizes still agree.
MAX_DATAGRAM_SIZE = 65507
#: The bundle size when the path's MTU is unknown: Ethernet's 1,500 less IPv4 and UDP headers.
ETHERNET_DATAGRAM_SIZE = 1472
#: Why a bundle is malformed (``bundle_layout``'s DecodeError reasons; index 0 is "well formed").
BUNDLE_ERROR_REASONS = (
    "",
    "secure bundle frame count out of range",
    "secure bundle truncated",
    "secure bundle holds a header that is not a sealed one",
    "secure bundle mixes sessions",
    "secure bundle lengths do not add up",
)


class FrameKind(IntEnum):
    """The kind byte (offset 1) of an nbmq frame."""

    DATA = 0
    CONNECT = 1
    CONNECTED = 2
    DISCONNECTED = 3
    HEARTBEAT = 4
    ACK = 5


#: Kinds whose frames secure mode seals (counter, ciphertext, tag); its Connect and Connected
#: carry the Noise handshake instead.
SEALED_KINDS = frozenset((FrameKind.DATA, FrameKind.DISCONNECTED, FrameKind.HEARTBEAT, FrameKind.ACK))


class FrameError(IntEnum):
    """Why a datagram did not decode: the ``error`` column of :data:`FRAME_DTYPE` rows.

    ``OK`` (0) means the row decoded. Each other code has one :class:`~nbmq.errors.DecodeError`
    reason, in :data:`FRAME_ERROR_REASONS`, which ``parse_frame`` raises for the same bytes.
    """

    OK = 0
    TRUNCATED = 1
    VERSION = 2
    KIND = 3
    TOO_LARGE = 4
    PART_COUNT = 5
    PART_INDEX = 6
    PART_SIZE = 7
    CHUNK_SIZE = 8
    CHUNK_BOUNDS = 9
    OUT_OF_BUFFER = 10
    SEALED_TOO_LARGE = 11


FRAME_ERROR_REASONS: dict[int, str] = {
    FrameError.OK: "",
    FrameError.TRUNCATED: "truncated header",
    FrameError.VERSION: "wrong version",
    FrameError.KIND: "unknown kind",
    FrameError.TOO_LARGE: "datagram over 500 bytes",
    FrameError.PART_COUNT: "part_count is 0",
    FrameError.PART_INDEX: "part_index >= part_count",
    FrameError.PART_SIZE: "part larger than its message",
    FrameError.CHUNK_SIZE: "chunk_size disagrees with the bytes present",
    FrameError.CHUNK_BOUNDS: "chunk past its part",
    FrameError.OUT_OF_BUFFER: "datagram outside the buffer",
    FrameError.SEALED_TOO_LARGE: "sealed frame over 524 bytes",
}

#: One row per datagram from ``parse_frames``: every header field, where the payload (chunk of a
#: DataFrame, payload of a ControlFrame) lies in the batch buffer, and a :class:`FrameError` code.
#: Packed (no padding): 47 bytes a row. Fields of a row whose ``error`` is not OK are undefined
#: past the field that failed (zero where never read).
FRAME_DTYPE = np.dtype(
    [
        ("version", "u1"),
        ("kind", "u1"),
        ("session_id", "<u8"),
        ("message_id", "<u8"),
        ("part_count", "u1"),
        ("part_index", "u1"),
        ("message_size", "<u4"),
        ("part_size", "<u4"),
        ("chunk_size", "<u2"),
        ("chunk_offset", "<u4"),
        ("payload_offset", "<i8"),
        ("payload_length", "<u4"),
        ("error", "u1"),
    ]
)


class DataFrame(NamedTuple):
    """A parsed nbmq data frame (kind 0).

    Attributes:
        session_id: u64 session identifier, echoed by both peers.
        message_id: u64 message identifier (FNV-1a 64 of the parts and the sender's nonce).
        part_count: number of parts in the message, 1..255.
        part_index: index of this frame's part, 0..part_count-1.
        message_size: sum of all part sizes, bytes (u32).
        part_size: size of this frame's part, bytes (u32).
        chunk_offset: offset of this chunk within its part, bytes (u32).
        chunk: the chunk bytes, a ``memoryview`` into the datagram (no copy); ``len(chunk)`` is
            the wire's chunk_size.
    """

    session_id: int
    message_id: int
    part_count: int
    part_index: int
    message_size: int
    part_size: int
    chunk_offset: int
    chunk: memoryview

    @property
    def kind(self) -> FrameKind:
        """Always :attr:`FrameKind.DATA`."""
        return FrameKind.DATA

    @property
    def chunk_size(self) -> int:
        """Bytes in this chunk (the wire's chunk_size field)."""
        return len(self.chunk)


class ControlFrame(NamedTuple):
    """A parsed nbmq control frame (kinds 1..5).

    Attributes:
        kind: the :class:`FrameKind` (CONNECT, CONNECTED, DISCONNECTED, HEARTBEAT or ACK).
        session_id: u64 session identifier (0 in Connect).
        payload: the bytes after the 10-byte header, a ``memoryview`` into the datagram (no
            copy). An Ack carries the 8-byte big-endian FNV-1a 64 of the acked data frame; the
            other kinds carry nothing (trailing bytes are kept here and ignored by the engine).
    """

    kind: FrameKind
    session_id: int
    payload: memoryview


BQSP_HEADER_SIZE = 7
BQSP_DEFAULT_MAX_PACKET = 64 * 1024 * 1024
BQSP_MAX_PACKET = 0xFFFFFFFF


class BqspPacket(NamedTuple):
    """One BQSP packet (seed 002): a 7-byte little-endian header then ``data``.

    Attributes:
        data_type: u16 application-defined type of the data.
        queue: u8 queue number; a response carries its request's queue.
        data: the payload, a ``memoryview`` (a view into the fed bytes when the packet arrived
            in one feed, else into a buffer the decoder built for it; never modified later).
    """

    data_type: int
    queue: int
    data: memoryview


RQUEUE_PREAMBLE_SIZE = 3
RQUEUE_SERVER_MAX_PAYLOAD = 2048  # "Payloads are capped at 2KB" (seed 004)
RQUEUE_MAX_PAYLOAD = 0xFFFF


class RqueueType(IntEnum):
    """rqueue message types (seed 004)."""

    SUBSCRIBE = 1
    REMOVE = 2
    DEREGISTER = 5
    NOTIFICATION = 7


class RqueueMessage(NamedTuple):
    """One decoded rqueue message.

    Attributes:
        type: the :class:`RqueueType`.
        topic: topic bytes (memoryview; empty for DEREGISTER).
        content: notification content (memoryview; empty for the other types).
    """

    type: RqueueType
    topic: memoryview
    content: memoryview
