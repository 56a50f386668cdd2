"""The asyncio BQSP client: many requests in flight over one connection.

The driver holds no protocol logic: bytes go to :class:`nbmq.streams.bqsp.BqspConnection`, events come
back out.

Client::

    client = await BqspClient.connect("127.0.0.1", port)
    reply = await client.request(b"ping", data_type=1)      # many may be in flight at once
    print(reply.data_type, bytes(reply.data))
    await client.close()

Each request takes a free queue number (1..``max_in_flight``, at most 255; queue 0 is left for
fire-and-forget :meth:`BqspClient.send` and server pushes) and resolves with the first packet that
comes back on that queue. **When every queue number is busy, ``request`` waits** (first come,
first served) until a response frees one: backpressure, like a pyzmq socket at its high-water
mark, rather than an error. A request cancelled (or timed out) after it was sent keeps its queue
number until the late response arrives and is discarded, so a late answer never resolves a newer
request; a server that never answers therefore costs that queue number until reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import ProtocolError
from ..streams.bqsp import BqspConnection, PacketReceived
from ..wire import BQSP_DEFAULT_MAX_PACKET

__all__ = ["BqspClient", "write_packet"]

log = logging.getLogger("nbmq.streams.bqsp")
_ZERO_COPY = 16 * 1024  # payloads from this size are written beside their header, not joined


def write_packet(
    transport: asyncio.WriteTransport, conn: BqspConnection, data: Any, data_type: int, queue: int
) -> None:
    """Write one BQSP packet of ``data`` to ``transport``, encoded by ``conn``: joined with its
    header when small, written beside it (no copy) from 16 KiB on.

    Raises:
        ValueError: data over the connection's max_packet_size, or data_type / queue out of range.
    """
    size = memoryview(data).nbytes
    if size < _ZERO_COPY:
        transport.write(conn.send(data, data_type, queue))
    else:
        transport.writelines([conn.send_header(size, data_type, queue), data])


class BqspClient(asyncio.Protocol):
    """An asyncio BQSP client with many requests in flight. Build it with :meth:`connect`.

    Attributes:
        unmatched: packets that arrived on a queue with no request waiting (int); each is also
            passed to ``on_packet`` when given.
    """

    def __init__(
        self,
        max_in_flight: int = 255,
        max_packet_size: int = BQSP_DEFAULT_MAX_PACKET,
        on_packet: Callable[[PacketReceived], None] | None = None,
    ) -> None:
        if not 1 <= max_in_flight <= 255:
            raise ValueError("max_in_flight must be 1..255")
        self._conn = BqspConnection(max_packet_size)
        self._free: deque[int] = deque(range(1, max_in_flight + 1))
        self._waiters: deque[asyncio.Future[int]] = deque()
        self._pending: dict[int, asyncio.Future[PacketReceived] | None] = {}  # None: abandoned
        self._on_packet = on_packet
        self._transport: asyncio.Transport | None = None
        self._exc: BaseException | None = None
        self._closed: asyncio.Future[None] | None = None
        self._can_write: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.unmatched = 0

    @classmethod
    async def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_in_flight: int = 255,
        max_packet_size: int = BQSP_DEFAULT_MAX_PACKET,
        on_packet: Callable[[PacketReceived], None] | None = None,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> BqspClient:
        """Open a TCP connection (TLS with ``ssl``, a client context; ``server_hostname`` is the name
        the server's certificate must carry, default ``host``).

        Raises:
            OSError: the connection fails; ssl.SSLError (an OSError): the TLS handshake fails.
            ValueError: bad options.
        """
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(
            lambda: cls(max_in_flight, max_packet_size, on_packet),
            host,
            port,
            ssl=ssl,
            server_hostname=server_hostname if ssl is not None else None,
        )
        return client

    @property
    def in_flight(self) -> int:
        """Queue numbers in use (requests awaiting a response, abandoned ones included)."""
        return len(self._pending)

    async def request(self, data: Any, data_type: int = 0, *, timeout: float | None = None) -> PacketReceived:
        """Send ``data`` on a free queue number and wait for the response on that queue.

        Waits first for a free queue number (backpressure) and for the write buffer to drain.

        Returns:
            the response :class:`~nbmq.streams.bqsp.PacketReceived` (``data`` is a view; see there).

        Raises:
            ConnectionError: the connection is closed or was lost (ProtocolError as cause when
                the server broke the protocol).
            TimeoutError: no response within ``timeout`` seconds (the wait for a free queue
                number counts too).
            ValueError: data over max_packet_size or data_type out of range.
        """
        if timeout is not None:
            return await asyncio.wait_for(self.request(data, data_type), timeout)
        self._check()
        queue = self._free.popleft() if self._free else await self._acquire()
        fut: asyncio.Future[PacketReceived] = self._loop.create_future()
        sent = False
        try:
            if not self._can_write.is_set():  # type: ignore[union-attr]
                await self._drain()
            write_packet(self._transport, self._conn, data, data_type, queue)  # type: ignore[arg-type]
            sent = True
            self._pending[queue] = fut
            return await fut
        except BaseException:
            if not sent:
                self._release(queue)
            elif self._pending.get(queue) is fut:
                if self._exc is None:
                    self._pending[queue] = None  # keep the number until the late response
                else:
                    del self._pending[queue]
            raise

    def send(self, data: Any, data_type: int = 0, queue: int = 0) -> None:
        """Fire-and-forget: write one packet on ``queue`` (default 0) without waiting for a reply
        (nor for the write buffer: pair with :meth:`request` or pace yourself).

        Raises:
            ConnectionError: the connection is closed. ValueError: fields out of range.
        """
        self._check()
        write_packet(self._transport, self._conn, data, data_type, queue)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Close the connection; requests still waiting fail with ConnectionError."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        if self._closed is not None:
            await self._closed

    async def __aenter__(self) -> BqspClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- queue numbers --------------------------------------------------------------------------

    async def _acquire(self) -> int:
        self._check()
        if self._free:
            return self._free.popleft()
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._release(waiter.result())
            raise

    def _release(self, queue: int) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(queue)
                return
        self._free.append(queue)

    def _check(self) -> None:
        if self._exc is not None:
            raise ConnectionError("BQSP connection closed") from self._exc
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("BQSP connection closed")

    async def _drain(self) -> None:
        assert self._can_write is not None
        while not self._can_write.is_set():
            self._check()
            await self._can_write.wait()
        self._check()

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._loop = loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self._can_write = asyncio.Event()
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        try:
            conn.receive_data(data)
            event = conn.next_event()
            while event is not None:
                if type(event) is PacketReceived:
                    self._dispatch(event)
                event = conn.next_event()
        except ProtocolError as exc:
            exc.with_traceback(None)  # its frames hold this protocol: no cycle for the GC to find
            log.warning("BQSP server broke the protocol: %s", exc)
            self._exc = exc
            self._transport.abort()  # type: ignore[union-attr]

    def _dispatch(self, packet: PacketReceived) -> None:
        queue = packet.queue
        if queue in self._pending:
            fut = self._pending.pop(queue)
            if fut is not None and not fut.done():
                fut.set_result(packet)
            self._release(queue)
            return
        self.unmatched += 1
        if self._on_packet is not None:
            self._on_packet(packet)

    def eof_received(self) -> bool:
        self.data_received(b"")  # reports a cut packet as a protocol error
        return False

    def pause_writing(self) -> None:
        self._can_write.clear()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self._can_write.set()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._exc is None:
            self._exc = exc or ConnectionResetError("connection closed")
        error = ConnectionError("BQSP connection closed")
        error.__cause__ = self._exc
        for fut in self._pending.values():
            if fut is not None and not fut.done():
                fut.set_exception(error)
        self._pending.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._waiters.clear()
        self._can_write.set()  # type: ignore[union-attr]
        if not self._closed.done():  # type: ignore[union-attr]
            self._closed.set_result(None)  # type: ignore[union-attr]
