"""An asyncio rqueue client over :class:`nbmq.streams.rqueue.RqueueClientConnection`.

::

    client = await RqueueClient.connect("127.0.0.1", 6567)
    await client.subscribe("news")
    await client.notify("news", b"hello")       # we are subscribed: the server sends it back
    async for topic, content in client:         # (bytes, bytes); ends when the server closes
        ...
    await client.close()

Received notifications wait in a queue of at most ``max_queued``; while it is full the client
stops reading from the socket, so TCP flow control reaches the server (whose slow-consumer
policy then applies) instead of this process's memory growing. Sending methods wait while the
socket's write buffer is full.

Against a server with access rules (``nbmq rqueue-server --acl``), identify with a TLS client
certificate (``ssl=``) or a ``token=``; a SUBSCRIBE or NOTIFICATION the rules refuse makes
:meth:`RqueueClient.recv` raise :class:`~nbmq.errors.AccessDenied` once, where the server's
denial notice is in the stream (the connection stays usable)::

    context = ssl.create_default_context(cafile="ca.pem")
    client = await RqueueClient.connect("broker.example", 6567, ssl=context, token="s3cret")
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
from collections import deque
from typing import Any

from ..errors import AccessDenied, ProtocolError
from ..streams.rqueue import ConnectionClosed, DeniedByServer, Notification, RqueueClientConnection, Topic
from ..wire import RQUEUE_SERVER_MAX_PAYLOAD

__all__ = ["RqueueClient", "DEFAULT_PORT"]

DEFAULT_PORT = 6567


class RqueueClient(asyncio.Protocol):
    """An rqueue client; build it with :meth:`connect`.

    Args:
        max_payload: largest payload sent or accepted, bytes (default 2048, the server's cap).
        max_queued: received notifications held before reading pauses (default 10000).
        drop_notices: opt in to our drop-notice extension (servers run with ``--drop-notices``):
            the notifications the server dropped for this client add up in
            :attr:`dropped_by_server`. Default off.
        token: sent first thing after connecting, to prove an identity to a server with access
            rules (bytes or str; see :meth:`RqueueClientConnection.authenticate`).
    """

    def __init__(
        self,
        max_payload: int = RQUEUE_SERVER_MAX_PAYLOAD,
        max_queued: int = 10000,
        drop_notices: bool = False,
        token: bytes | str | None = None,
    ) -> None:
        if max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self._conn = RqueueClientConnection(max_payload)
        self._hello = self._conn.authenticate(token) if token is not None else b""  # ValueError when bad
        self._queue: deque[tuple[bytes, bytes] | AccessDenied] = deque()
        self._max_queued = max_queued
        self._transport: asyncio.Transport | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._read_paused = False
        self._can_write: asyncio.Event | None = None
        self._closed: asyncio.Future[None] | None = None
        self._done = False  # no more notifications will arrive
        self._exc: BaseException | None = None  # why, when it was not a clean close
        self._drop_notices = drop_notices

    @classmethod
    async def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        max_payload: int = RQUEUE_SERVER_MAX_PAYLOAD,
        max_queued: int = 10000,
        drop_notices: bool = False,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        token: bytes | str | None = None,
    ) -> RqueueClient:
        """Open a TCP connection to an rqueue server.

        Args:
            host, port: the server.
            max_payload, max_queued, drop_notices, token: as for the class.
            ssl: connect with TLS using this context (``ssl.create_default_context(cafile=...)``;
                load a client certificate into it for mutual TLS). None: plain TCP.
            server_hostname: the name the server's certificate must carry (default ``host``).

        Raises:
            OSError: the connection fails; ssl.SSLError (an OSError): the TLS handshake fails
                (an unknown CA, a wrong name, a refused client certificate).
            ValueError: bad options.
        """
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(
            lambda: cls(max_payload, max_queued, drop_notices, token),
            host,
            port,
            ssl=ssl,
            server_hostname=server_hostname if ssl is not None else None,
        )
        return client

    # -- sending ------------------------------------------------------------------------------

    async def subscribe(self, topic: Topic) -> None:
        """Subscribe to ``topic`` (bytes or str, at most 255 bytes; exact match)."""
        await self._send(self._conn.subscribe(topic))

    async def remove(self, topic: Topic) -> None:
        """Remove the subscription to ``topic``."""
        await self._send(self._conn.remove(topic))

    async def deregister(self) -> None:
        """Remove every subscription of this client."""
        await self._send(self._conn.deregister())

    async def notify(self, topic: Topic, content: Any) -> None:
        """Publish ``content`` (bytes-like) on ``topic``.

        Raises:
            ValueError: topic over 255 bytes or payload over ``max_payload``.
            ConnectionError: the connection is closed.
        """
        await self._send(self._conn.notify(topic, content))

    async def _send(self, data: bytes) -> None:
        self._check_open()
        assert self._can_write is not None
        while not self._can_write.is_set():
            await self._can_write.wait()
            self._check_open()
        self._transport.write(data)  # type: ignore[union-attr]

    def _check_open(self) -> None:
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("rqueue connection closed") from self._exc

    # -- receiving ----------------------------------------------------------------------------

    async def recv(self) -> tuple[bytes, bytes]:
        """The next notification as ``(topic, content)``.

        Raises:
            ConnectionError: the connection ended and every notification was received.
            ProtocolError: the server broke the protocol (after the notifications before it).
            AccessDenied: the server's access rules refused one of this client's messages
                (raised once per denial notice, in stream order; later calls go on).
        """
        while not self._queue:
            if self._done:
                if isinstance(self._exc, ProtocolError):
                    raise self._exc
                raise ConnectionError("rqueue connection closed") from self._exc
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        item = self._queue.popleft()
        if type(item) is AccessDenied:
            raise item
        if self._read_paused and len(self._queue) <= self._max_queued // 2:
            self._read_paused = False
            if self._transport is not None and not self._transport.is_closing():
                self._transport.resume_reading()
        return item  # type: ignore[return-value]

    def __aiter__(self) -> RqueueClient:
        return self

    async def __anext__(self) -> tuple[bytes, bytes]:
        """Like :meth:`recv`, but a clean end (server closed, or :meth:`close`) stops iteration;
        protocol errors and resets are raised."""
        try:
            return await self.recv()
        except ConnectionError:
            if self._exc is None:
                raise StopAsyncIteration from None
            raise

    @property
    def dropped_by_server(self) -> int:
        """Notifications the server reported dropping for this client (drop notices; 0 unless
        ``drop_notices`` and the server has the extension on)."""
        return self._conn.dropped_by_server

    @property
    def denied_by_server(self) -> int:
        """Denial notices received (messages the server's access rules refused)."""
        return self._conn.denied_by_server

    @property
    def queued(self) -> int:
        """Notifications received and not yet taken by :meth:`recv`."""
        return len(self._queue)

    async def close(self) -> None:
        """Close the connection (pending notifications may still be taken with recv)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        if self._closed is not None:
            await self._closed

    async def __aenter__(self) -> RqueueClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._closed = asyncio.get_running_loop().create_future()
        self._can_write = asyncio.Event()
        self._can_write.set()
        if self._hello:
            transport.write(self._hello)  # type: ignore[attr-defined]
        if self._drop_notices:
            transport.write(self._conn.subscribe_drop_notices())  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        queue = self._queue
        try:
            conn.receive_data(data)
            event = conn.next_event()
            while event is not None:
                if type(event) is Notification:
                    queue.append((event.topic, bytes(event.content)))
                elif type(event) is DeniedByServer:
                    queue.append(AccessDenied(event.message_type, event.topic))
                elif type(event) is ConnectionClosed:
                    self._done = True
                event = conn.next_event()
        except ProtocolError as exc:
            self._exc = exc
            self._done = True
            self._transport.abort()  # type: ignore[union-attr]
        if len(queue) >= self._max_queued and not self._read_paused and not self._done:
            self._read_paused = True
            self._transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def eof_received(self) -> bool:
        self.data_received(b"")
        return False

    def pause_writing(self) -> None:
        self._can_write.clear()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self._can_write.set()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self._done = True
        if exc is not None and self._exc is None:
            self._exc = exc
        self._can_write.set()  # type: ignore[union-attr]
        self._wake()
        if not self._closed.done():  # type: ignore[union-attr]
            self._closed.set_result(None)
