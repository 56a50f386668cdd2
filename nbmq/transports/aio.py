"""asyncio nbmq sockets: ``sock = await nbmq.aio.Dealer.connect(...)``, ``await sock.recv()``.

The driver is aioquic's ``QuicConnectionProtocol`` pattern: ``datagram_received`` feeds the
engine and schedules ``_transmit`` (coalesced with ``call_soon``); ``_transmit`` writes
``datagrams_to_send``, re-arms the one timer at ``next_deadline()`` with ``loop.call_at`` and
drains events into the waiters of ``recv``, ``send`` (at ``send_hwm``), ``wait_connected`` and
``close``. Nothing polls. Time is ``loop.time()`` (monotonic). UDP and IPC use asyncio's
datagram transport; inproc uses a small transport of the same shape over the in-memory hub.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any

from ..errors import NoPeer, SocketClosed, WouldBlock
from ..events import Event
from ..options import SocketOptions
from . import engines
from .attributes import OptionAttributes
from .inproc import InprocLink, InprocTransport
from .links import open_link

__all__ = ["Socket", "Dealer", "SafeDealer", "Radio", "Dish"]

_BYTES = (bytes, bytearray, memoryview)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, owner: Socket) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.owner._datagram_received(data, addr)

    def error_received(self, exc: Exception) -> None:
        self.owner.transport_errors += 1  # ICMP unreachable and the like: a lost datagram

    def pause_writing(self) -> None:
        self.owner._paused = True

    def resume_writing(self) -> None:
        self.owner._paused = False
        self.owner._transmit_soon()

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost()


class Socket(OptionAttributes):
    """An asyncio nbmq socket. Build with ``await Dealer.bind(address, **options)`` or
    ``await Dealer.connect(...)``; addresses and options as the blocking sockets
    (:class:`nbmq.transports.socket.Socket`), options also as attributes
    (``sock.send_hwm = 10``). Every call on a closed socket, and every call waiting when it is
    closed, raises :class:`~nbmq.errors.SocketClosed`."""

    __slots__ = ("options", "engine", "closed", "transport_errors", "_loop", "_link", "_events", "_waiters",
                 "_timer", "_timer_at", "_soon", "_paused", "_closed_fut", "_transport", "__weakref__")
    _kind = ""

    @classmethod
    async def bind(cls, address: str, **options: Any) -> Any:
        """Bound socket (see the blocking ``bind`` for addresses, options and errors)."""
        return await cls._open(address, True, options)

    @classmethod
    async def connect(cls, address: str, **options: Any) -> Any:
        """Connecting socket: dials now and every ``reconnect_wait`` while it has no peer."""
        return await cls._open(address, False, options)

    @classmethod
    async def _open(cls, address: str, bind: bool, options: dict[str, Any]) -> Any:
        self = cls.__new__(cls)
        loop = self._loop = asyncio.get_running_loop()
        self.options = engines.LiveOptions(SocketOptions(**options), self._option_changed)
        self._link = link = open_link(address, bind, self.options)
        self.engine = engines.make_engine(cls._kind, bind, link.local_address, link.engine_address, self.options, loop.time())
        self._events: deque[Event] = deque()
        self._waiters: dict[str, list[asyncio.Future[None]]] = {"recv": [], "send": [], "conn": [], "drain": []}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._soon: asyncio.Handle | None = None
        self._paused = False
        self.transport_errors = 0
        self.closed = False
        self._closed_fut = loop.create_future()
        protocol = _Protocol(self)
        if isinstance(link, InprocLink):
            self._transport: Any = InprocTransport(link, protocol, loop)
        else:
            self._transport, _ = await loop.create_datagram_endpoint(lambda: protocol, sock=link.sock)
        self._transmit()
        return self

    def _option_changed(self, name: str, value: Any) -> None:
        engines.apply_option(self.engine, name, value)
        if name in ("sndbuf", "rcvbuf"):
            self._link.set_buffers(self.options)

    # --- the driver: feed -> transmit (flush, re-arm, drain) -------------------------------------
    def _datagram_received(self, data: Any, addr: Any) -> None:
        engine = self.engine
        engine.receive_datagram(data, addr, self._loop.time())
        if self._waiters["recv"] and engine.recv_ready():
            self._wake("recv")
        self._transmit_soon()

    def _transmit_soon(self) -> None:
        if self._soon is None and not self.closed:
            self._soon = self._loop.call_soon(self._transmit)

    def _on_timer(self) -> None:
        fired_at = self._timer_at or 0.0
        self._timer = self._timer_at = None
        self._link.check_kernel_drops(self.engine)  # the OS's receive-buffer drops, if any
        self.engine.tick(max(self._loop.time(), fired_at))
        self._transmit()

    def _transmit(self) -> None:
        self._soon = None
        engine, loop = self.engine, self._loop
        now = loop.time()
        if not self._paused:
            sendto = self._transport.sendto
            for data, addr in engine.datagrams_to_send(now):
                sendto(data, addr)
        deadline = engine.next_deadline()
        if deadline is not None and self._paused:
            deadline = max(deadline, now + 0.05)  # resume_writing transmits; do not spin
        if deadline != self._timer_at and not engine.closed:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if deadline is None else loop.call_at(deadline, self._on_timer)
            self._timer_at = deadline
        events = self._events
        while (event := engine.next_event()) is not None:
            events.append(event)
            if len(events) > self.options.max_events:
                events.popleft()
                engine.events_discarded(1)
        waiters = self._waiters
        if waiters["send"] and engine.pending_messages < self.options.send_hwm:
            self._wake("send")
        if waiters["conn"] and engines.has_connected_peer(engine):
            self._wake("conn")
        if waiters["drain"] and engines.drained(engine) and not self._transport.get_write_buffer_size():
            self._wake("drain")

    def _wake(self, name: str) -> None:
        waiters = self._waiters[name]
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        waiters.clear()

    async def _park(self, name: str, timeout: float | None) -> bool:
        fut = self._loop.create_future()
        self._waiters[name].append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if fut in self._waiters[name]:
                self._waiters[name].remove(fut)

    def _check_open(self) -> None:
        if self.closed:
            raise SocketClosed(f"{type(self).__name__} is closed")

    # --- user API --------------------------------------------------------------------------------
    def send_nowait(self, parts: Any) -> None:
        """Queue a message; raises WouldBlock at ``send_hwm`` (NotSupported on a Dish,
        SocketClosed when closed)."""
        self._check_open()
        self.engine.send([parts] if isinstance(parts, _BYTES) else parts, self._loop.time())
        self._transmit_soon()

    async def send(self, parts: Any, timeout: float | None = None) -> None:
        """Queue a message, waiting while ``send_hwm`` messages are held (up to ``timeout``
        seconds; None = for ever). Raises WouldBlock on timeout (NoPeer when no peer is
        connected either), SocketClosed when closed."""
        until = None if timeout is None else self._loop.time() + timeout
        while True:
            try:
                return self.send_nowait(parts)
            except WouldBlock as exc:
                left = None if until is None else until - self._loop.time()
                if (left is not None and left <= 0) or not await self._park("send", left):
                    self._check_open()
                    if not engines.has_connected_peer(self.engine):
                        raise NoPeer(f"{exc}; no peer is connected to take them") from None
                    raise
                self._check_open()

    def recv_nowait(self) -> list[Any]:
        """The next message (list of uint8 numpy arrays); WouldBlock when none is ready,
        SocketClosed when closed."""
        self._check_open()
        return self.engine.recv()

    async def recv(self, timeout: float | None = None) -> list[Any]:
        """The next message, waiting up to ``timeout`` seconds (None = for ever). Raises
        WouldBlock on timeout, NotSupported on a Radio, SocketClosed when closed (also when
        closed while waiting)."""
        until = None if timeout is None else self._loop.time() + timeout
        while True:
            try:
                return self.engine.recv()
            except WouldBlock:
                self._check_open()
                left = None if until is None else until - self._loop.time()
                if (left is not None and left <= 0) or not await self._park("recv", left):
                    raise
                self._check_open()

    async def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until a peer is connected; False if ``timeout`` seconds passed first.
        SocketClosed when closed."""
        self._check_open()
        if engines.has_connected_peer(self.engine):
            return True
        woken = await self._park("conn", timeout)
        self._check_open()
        return woken

    def next_event(self) -> Event | None:
        """The oldest event not yet read, or None (at most ``max_events`` are kept)."""
        return self._events.popleft() if self._events else None

    @property
    def peers(self) -> Any:
        return self.engine.peers

    @property
    def counters(self) -> Any:
        """The engine's counters, ``kernel_drops`` asked of the OS now (see the blocking
        socket's ``counters``)."""
        if not self.closed:
            self._link.check_kernel_drops(self.engine)
        return self.engine.counters

    @property
    def local_address(self) -> str:
        return self._link.local_address

    async def close(self, linger: float | None = None) -> None:
        """Flush queued messages (and SafeDealer acks) for up to ``linger`` seconds (default
        ``options.linger``; 0 = drop at once), close the engine and the transport."""
        if self.closed:
            return
        linger = self.options.linger if linger is None else float(linger)
        if linger > 0 and not engines.drained(self.engine):
            self._transmit()
            await self._park("drain", None if math.isinf(linger) else linger)
        self.engine.close(self._loop.time())
        self._transmit()
        self.closed = True
        for handle in (self._timer, self._soon):
            if handle is not None:
                handle.cancel()
        for name in self._waiters:
            self._wake(name)
        self._transport.close()
        await asyncio.wait_for(asyncio.shield(self._closed_fut), 1.0)

    def _lost(self) -> None:
        self._link.close()  # closes the socket (idempotent) and removes an IPC file
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class Dealer(Socket):
    """Fire-and-forget duplex socket (asyncio)."""

    __slots__ = ()
    _kind = "Dealer"


class SafeDealer(Socket):
    """Acked, resent, de-duplicated Dealer (asyncio); ``send`` waits while acks are due."""

    __slots__ = ()
    _kind = "SafeDealer"


class Radio(Socket):
    """Send-only fan-out to every connected Dish (asyncio)."""

    __slots__ = ()
    _kind = "Radio"


class Dish(Socket):
    """Receive-only peer of a Radio (asyncio)."""

    __slots__ = ()
    _kind = "Dish"
