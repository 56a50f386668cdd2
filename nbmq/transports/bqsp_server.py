"""The asyncio BQSP server: answers each packet with a handler, concurrently.

The driver holds no protocol logic: bytes go to :class:`nbmq.streams.bqsp.BqspConnection`, events come
back out.

Server::

    async def handler(packet):           # nbmq.streams.bqsp.PacketReceived
        return bytes(packet.data)        # or (data, data_type), or None for no reply
    server = await serve_bqsp(handler, "127.0.0.1", 0)

The server runs one handler task per packet, concurrently, and answers on the packet's queue
with the packet's data_type unless the handler returns ``(data, data_type)``. It stops reading
from a connection while ``max_concurrency`` handlers run for it or its write buffer is full.

Memory: besides ``max_packet_size`` per packet, ``max_buffered_total`` bounds the bytes held in
incomplete packets across all connections; the connection that would pass it is closed and
counted. A connection that breaks the protocol frees what it held at once.

TLS: ``ssl=`` a server context (:func:`nbmq.transports.tls.server_context`; with a client CA for
mutual TLS). Failed handshakes are counted (``tls_failures``) and logged once per peer host.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl as _ssl
from collections.abc import Awaitable, Callable
from typing import Any, Union

from ..errors import ProtocolError
from ..streams.bqsp import BqspConnection, ConnectionClosed, PacketReceived
from ..wire import BQSP_DEFAULT_MAX_PACKET
from .bqsp_client import write_packet
from .tls import DEFAULT_HANDSHAKE_TIMEOUT, TlsAcceptor

__all__ = ["BqspServer", "serve_bqsp", "Handler", "DEFAULT_MAX_BUFFERED_TOTAL"]

log = logging.getLogger("nbmq.streams.bqsp")
Reply = Union[bytes, bytearray, memoryview, "tuple[Any, int]", None]
Handler = Callable[[PacketReceived], Awaitable[Reply] | Reply]
#: Server-wide bound on bytes held in incomplete packets: four packets of the default 64 MiB cap.
DEFAULT_MAX_BUFFERED_TOTAL = 256 * 1024 * 1024


class _ServerProtocol(asyncio.Protocol):
    def __init__(self, server: BqspServer) -> None:
        self._server = server
        self._conn = BqspConnection(server.max_packet_size)
        self._tasks: set[asyncio.Task[None]] = set()
        self._transport: asyncio.Transport | None = None
        self._read_paused = False
        self._write_paused = False
        self._eof = False
        self._held = 0  # bytes of incomplete packets charged to the server-wide budget

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server._protocols.add(self)
        if self._server.tls is not None:
            self._server.tls.start(transport, self, self._established)  # type: ignore[arg-type]
            return
        log.debug("BQSP client connected: %s", transport.get_extra_info("peername"))

    def _established(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        log.debug("BQSP client connected over TLS: %s", transport.get_extra_info("peername"))

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        server = self._server
        try:
            conn.receive_data(data)
            event = conn.next_event()
            while event is not None:
                if type(event) is PacketReceived:
                    if server._is_async:
                        task = asyncio.ensure_future(self._run(event))
                        self._tasks.add(task)
                        task.add_done_callback(self._task_done)
                    else:
                        try:
                            reply = server.handler(event)
                        except Exception:
                            server.handler_errors += 1
                            log.exception("BQSP handler failed")
                        else:
                            self._reply(event, reply)
                elif type(event) is ConnectionClosed:
                    self._eof = True
                event = conn.next_event()
        except ProtocolError as exc:
            exc.with_traceback(None)  # its frames hold this protocol: no cycle for the GC to find
            log.warning("BQSP client broke the protocol, closing it: %s", exc)
            server.protocol_errors += 1
            self._drop()
            return
        held = conn.buffered
        server.buffered_total += held - self._held
        self._held = held
        if server.buffered_total > server.max_buffered_total:
            server.closed_over_budget += 1
            log.warning(
                "BQSP client %s holds %d bytes of incomplete packets, the server %d "
                "(max_buffered_total %d): closing it",
                self._peer(),
                held,
                server.buffered_total,
                server.max_buffered_total,
            )
            self._drop()
            return
        self._update_reading()

    def _peer(self) -> Any:
        return self._transport.get_extra_info("peername") if self._transport is not None else None

    def _drop(self) -> None:
        """Abort the connection and free what it holds at once (not when the GC gets to it)."""
        self._server.buffered_total -= self._held
        self._held = 0
        self._conn = BqspConnection(0)  # the old one's buffered bytes go now
        if self._transport is not None:
            self._transport.abort()

    async def _run(self, packet: PacketReceived) -> None:
        reply = await self._server.handler(packet)  # type: ignore[misc]
        self._reply(packet, reply)

    def _reply(self, packet: PacketReceived, reply: Reply) -> None:
        if reply is None or self._transport is None or self._transport.is_closing():
            return
        data_type = packet.data_type
        if isinstance(reply, tuple):
            reply, data_type = reply
        write_packet(self._transport, self._conn, reply, data_type, packet.queue)
        self._server.replies += 1

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._server.handler_errors += 1
            log.error("BQSP handler failed", exc_info=task.exception())
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        busy = self._write_paused or len(self._tasks) >= self._server.max_concurrency
        if busy and not self._read_paused:
            self._read_paused = True
            transport.pause_reading()
        elif not busy and self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        if self._eof and not self._tasks:
            transport.close()  # the client is done sending and every request is answered

    def eof_received(self) -> bool:
        self.data_received(b"")
        return True  # keep the write side open until the handlers have answered

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._protocols.discard(self)
        self._server.buffered_total -= self._held
        self._held = 0
        for task in self._tasks:
            task.cancel()
        log.debug("BQSP client disconnected (%s)", exc or "closed")


class BqspServer:
    """A listening BQSP server (see :func:`serve_bqsp`).

    Attributes:
        handler, max_packet_size, max_concurrency, max_buffered_total: as given.
        buffered_total: bytes of incomplete packets held for all connections now (int).
        replies, handler_errors, protocol_errors: counters (int).
        closed_over_budget: connections closed because their incomplete packet would have taken
            ``buffered_total`` past ``max_buffered_total`` (int).
        tls: the :class:`~nbmq.transports.tls.TlsAcceptor` (None without TLS).
        tls_failures: failed TLS handshakes (int).
    """

    def __init__(
        self,
        handler: Handler,
        max_packet_size: int,
        max_concurrency: int,
        max_buffered_total: int = DEFAULT_MAX_BUFFERED_TOTAL,
        tls: TlsAcceptor | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if max_buffered_total < 0:
            raise ValueError("max_buffered_total must be at least 0")
        self.max_buffered_total = max_buffered_total
        self.buffered_total = 0
        self.closed_over_budget = 0
        self.handler = handler
        self.tls = tls
        self.max_packet_size = max_packet_size
        self.max_concurrency = max_concurrency
        self._is_async = inspect.iscoroutinefunction(handler)
        self._protocols: set[_ServerProtocol] = set()
        self._server: asyncio.AbstractServer | None = None
        self.replies = 0
        self.handler_errors = 0
        self.protocol_errors = 0

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(self._server.sockets) if self._server is not None else ()

    @property
    def tls_failures(self) -> int:
        return self.tls.failures if self.tls is not None else 0

    @property
    def port(self) -> int:
        """The bound TCP port (useful after binding port 0)."""
        return self.sockets[0].getsockname()[1]

    def close(self) -> None:
        """Stop listening and abort every connection."""
        if self._server is not None:
            self._server.close()
        if self.tls is not None:
            self.tls.close()
        for protocol in list(self._protocols):
            if protocol._transport is not None:
                protocol._transport.abort()

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def __aenter__(self) -> BqspServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.wait_closed()


async def serve_bqsp(
    handler: Handler,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    max_packet_size: int = BQSP_DEFAULT_MAX_PACKET,
    max_concurrency: int = 256,
    max_buffered_total: int = DEFAULT_MAX_BUFFERED_TOTAL,
    ssl: _ssl.SSLContext | None = None,
    tls_handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    **kwargs: Any,
) -> BqspServer:
    """Listen for BQSP clients and answer each packet with ``handler``.

    Args:
        handler: called with each :class:`~nbmq.streams.bqsp.PacketReceived`; a coroutine function runs
            as one task per packet (concurrently), a plain function inline. It returns the reply
            data (sent on the packet's queue with its data_type), ``(data, data_type)``, or None
            for no reply. An exception is logged and counted, and no reply is sent.
        host, port: where to listen (port 0: the OS picks; read ``server.port``).
        max_packet_size: the largest packet accepted or sent, bytes.
        max_concurrency: handlers running at once per connection before reading pauses.
        max_buffered_total: bytes of incomplete packets held for all connections together
            (default 256 MiB) besides ``max_packet_size`` per packet. A connection whose
            incomplete packet would take the total past it is closed and counted
            (``closed_over_budget``); the others are untouched. Bytes are charged as received,
            not as claimed by a header, and checked after each read, so the
            total can pass the bound by at most one read (256 KiB) before the close.
        ssl: serve TLS with this context (:func:`~nbmq.transports.tls.server_context`); None: plain TCP.
        tls_handshake_timeout: seconds a client has to finish its TLS handshake.
        kwargs: passed to ``loop.create_server``.

    Raises:
        OSError: the address cannot be bound. ValueError: bad options.
    """
    tls = TlsAcceptor(ssl, log, tls_handshake_timeout) if ssl is not None else None
    server = BqspServer(handler, max_packet_size, max_concurrency, max_buffered_total, tls)
    loop = asyncio.get_running_loop()
    server._server = await loop.create_server(lambda: _ServerProtocol(server), host, port, **kwargs)
    return server
