"""BQSP (seed 002): a 7-byte little-endian header (data_size u32, data_type u16, queue u8), then
data_size bytes of data, on any byte stream.

The decoder parses transactionally (wsproto's ``frame_protocol.Buffer``): a partial header
consumes nothing, and a packet split across any number of feeds comes out whole.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterator

from ..errors import DecodeError, FrameTooLarge
from ..wire import BQSP_DEFAULT_MAX_PACKET, BQSP_HEADER_SIZE, BQSP_MAX_PACKET, BqspPacket
from .frames import Buffer
from .stream import StreamBuffer

HEADER = struct.Struct("<IHB")


def encode_bqsp_header(data_size: int, data_type: int, queue: int) -> bytes:
    """The 7-byte header.

    Args:
        data_size: bytes of data that follow, u32. data_type: u16. queue: u8.

    Returns:
        7 bytes, little-endian (seed 002: size 16, type 0xAAFF, queue 1 -> ``10 00 00 00 FF AA 01``).

    Raises:
        ValueError: a field out of its range.
    """
    data_size, data_type, queue = map(operator.index, (data_size, data_type, queue))
    if not (0 <= data_size <= BQSP_MAX_PACKET and 0 <= data_type <= 0xFFFF and 0 <= queue <= 0xFF):
        raise ValueError("need data_size u32, data_type u16, queue u8")
    return HEADER.pack(data_size, data_type, queue)


def decode_bqsp_header(data: Buffer, offset: int = 0) -> tuple[int, int, int]:
    """Read a header at ``offset``.

    Returns:
        ``(data_size, data_type, queue)``.

    Raises:
        DecodeError: fewer than 7 bytes from ``offset`` (offset = bytes present past ``offset``).
    """
    view = memoryview(data).cast("B")
    offset = operator.index(offset)
    if offset < 0 or len(view) - offset < BQSP_HEADER_SIZE:
        raise DecodeError(max(0, len(view) - offset), "truncated header")
    return HEADER.unpack_from(view, offset)


def encode_bqsp_packet(data: Buffer, data_type: int, queue: int) -> bytes:
    """Header plus data, one packet.

    Raises:
        ValueError: a field out of range or data over 4 GiB - 1 bytes.
    """
    view = memoryview(data).cast("B")
    return encode_bqsp_header(len(view), data_type, queue) + view.tobytes()


class BqspDecoder(StreamBuffer):
    """Incremental BQSP stream decoder: ``feed`` bytes, iterate packets.

    Args:
        max_packet_size: largest data_size accepted, bytes (default 64 MiB, at most 2**32-1).

    Raises:
        ValueError: ``max_packet_size`` out of range.

    Iterating yields :class:`~nbmq.wire.BqspPacket` until no whole packet is buffered. A packet
    whose data arrived in one ``feed`` is a view into that fed object (no copy; do not modify it
    afterwards); one split across feeds is gathered into a buffer of its own as bytes arrive, so
    memory follows the bytes received, never a size merely claimed. After a
    :class:`~nbmq.errors.FrameTooLarge` the stream is unusable and every later call raises it
    again; packets before it were all yielded.
    """

    def __init__(self, max_packet_size: int = BQSP_DEFAULT_MAX_PACKET) -> None:
        if not 0 <= operator.index(max_packet_size) <= BQSP_MAX_PACKET:
            raise ValueError("max_packet_size must be 0..2**32-1")
        self.max_packet_size = max_packet_size
        super().__init__()

    def next_packet(self) -> BqspPacket | None:
        """The next whole packet, or None until more bytes are fed.

        Raises:
            FrameTooLarge: a header claims more than ``max_packet_size`` (offset: the header's
                position in the stream); raised before anything is allocated.
        """
        if self._error is not None:
            raise self._error
        if self._buffered < BQSP_HEADER_SIZE:
            return None
        size, data_type, queue = HEADER.unpack_from(self._peek(BQSP_HEADER_SIZE))
        if size > self.max_packet_size:
            raise self._fail(FrameTooLarge(self._consumed, "packet over max_packet_size"))
        if self._buffered < BQSP_HEADER_SIZE + size:
            return None
        self._take(BQSP_HEADER_SIZE)
        data = self._take(size) if size else memoryview(b"")
        return BqspPacket(data_type, queue, data)

    def __iter__(self) -> Iterator[BqspPacket]:
        return self

    def __next__(self) -> BqspPacket:
        packet = self.next_packet()
        if packet is None:
            raise StopIteration
        return packet
