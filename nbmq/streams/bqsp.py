"""BQSP connection: a sans-IO engine in the h11 / wsproto shape (STYLE.md section 3).

BQSP (seed 002) frames payloads on any byte stream with a 7-byte little-endian header
(data_size u32, data_type u16, queue u8). Queue numbers let one peer keep many requests in
flight and the other answer them out of order: a response carries its request's queue number.

The engine does no I/O and keeps no clock::

    conn = BqspConnection()
    sock.sendall(conn.send(b"hello", data_type=1, queue=7))   # send() returns the bytes to write
    conn.receive_data(sock.recv(65536))                       # b"" means end of stream
    while (event := conn.next_event()) is not None:
        if isinstance(event, PacketReceived): ...
        elif isinstance(event, ConnectionClosed): break

The same connection class serves both ends: BQSP has no handshake and no roles. The events
(:class:`~nbmq.events.PacketReceived`, :class:`~nbmq.events.ConnectionClosed`) live in
:mod:`nbmq.events` and are re-exported here. ``PacketReceived.data`` is a memoryview: a view into
the bytes object handed to ``receive_data`` when the packet arrived in one piece (no copy), else
into a buffer built for that packet; never reused; ``bytes(data)`` for a copy.
"""

from __future__ import annotations

from enum import Enum

from .. import codec
from ..errors import DecodeError
from ..events import ConnectionClosed, Event, PacketReceived
from ..wire import BQSP_DEFAULT_MAX_PACKET
from .receiver import Buffer, StreamReceiver

__all__ = [
    "Event",
    "PacketReceived",
    "ConnectionClosed",
    "BqspState",
    "BqspConnection",
]


class BqspState(Enum):
    """Receive-side state of a :class:`BqspConnection`."""

    OPEN = "open"  #: receiving packets
    CLOSED = "closed"  #: the peer ended the stream cleanly and ConnectionClosed was reported
    ERROR = "error"  #: the peer broke the protocol; every later receive call raises ProtocolError


class BqspConnection(StreamReceiver):
    """One end of a BQSP byte stream (client or server; the protocol is symmetric).

    Args:
        max_packet_size: the largest data_size accepted from the peer, and allowed in ``send``,
            bytes (default 64 MiB, at most 2**32 - 1). A larger claimed size is a protocol error,
            raised before anything of that size is allocated.

    Raises:
        ValueError: ``max_packet_size`` out of range.

    Counters (ints, read-only by contract): ``packets_received``, ``bytes_received`` (stream bytes
    fed), ``packets_sent``, ``bytes_sent`` (header included).
    """

    def __init__(self, max_packet_size: int = BQSP_DEFAULT_MAX_PACKET) -> None:
        super().__init__(codec.BqspDecoder(max_packet_size))  # ValueError when out of range
        self._max_packet_size = max_packet_size
        self.packets_received = 0
        self.packets_sent = 0
        self.bytes_sent = 0

    @property
    def max_packet_size(self) -> int:
        """Largest data_size accepted in either direction, bytes."""
        return self._max_packet_size

    @property
    def state(self) -> BqspState:
        """The receive-side :class:`BqspState`."""
        if self._error is not None:
            return BqspState.ERROR
        return BqspState.CLOSED if self._closed else BqspState.OPEN

    # -- receive side -------------------------------------------------------------------------

    def next_event(self) -> Event | None:
        """The next event, or None when more data is needed (or after ConnectionClosed).

        Returns:
            :class:`PacketReceived` for each whole packet, in stream order; then, once the stream
            has ended on a packet boundary, :class:`ConnectionClosed` (once).

        Raises:
            ProtocolError: a header claims more than ``max_packet_size`` (the codec's
                DecodeError is chained as ``__cause__``), or the stream ended inside a packet.
                The connection is then in the ERROR state and every later receive call raises
                the same error. Packets before the fault were all returned first.
        """
        if self._error is not None:
            raise self._error
        try:
            packet = self._decoder.next_packet()
        except DecodeError as exc:
            raise self._fail(f"bad packet: {exc}", exc) from exc
        if packet is not None:
            self.packets_received += 1
            return PacketReceived(packet[0], packet[1], packet[2])
        return self._end_of_stream("packet")

    # -- send side ----------------------------------------------------------------------------

    def send(self, data: Buffer, data_type: int = 0, queue: int = 0) -> bytes:
        """Encode one packet. Queues nothing: write the returned bytes to the stream yourself.

        Args:
            data: the payload, any contiguous buffer, at most ``max_packet_size`` bytes.
            data_type: u16 application-defined type.
            queue: u8 queue number (0..255).

        Returns:
            header and payload as one bytes object (one copy of ``data``).

        Raises:
            ValueError: data over ``max_packet_size``, or data_type / queue out of range.
        """
        header = self.send_header(len(data) if isinstance(data, bytes) else memoryview(data).nbytes, data_type, queue)
        return header + data if isinstance(data, bytes) else header + memoryview(data).cast("B")

    def send_header(self, data_size: int, data_type: int = 0, queue: int = 0) -> bytes:
        """Encode only the 7-byte header of a packet whose ``data_size`` payload bytes you write
        right after it (zero-copy sending of large payloads, e.g. ``writelines([header, data])``).

        Returns:
            7 bytes.

        Raises:
            ValueError: data_size over ``max_packet_size``, or data_type / queue out of range.
        """
        if data_size > self._max_packet_size:
            raise ValueError(f"packet of {data_size} bytes is over max_packet_size={self._max_packet_size}")
        header = codec.encode_bqsp_header(data_size, data_type, queue)
        self.packets_sent += 1
        self.bytes_sent += 7 + data_size
        return header
