"""asyncio nbmq sockets: ``sock = await nbmq.aio.Dealer.connect(...)``, ``await sock.recv()``.

The driver follows aioquic's ``QuicConnectionProtocol``, but reads the link itself instead of
through asyncio's datagram transport, so it shares the blocking socket's link
(:mod:`nbmq.transports.udp`, ``ipc``, ``inproc``) and behaves the same:

- **Reads** go through the link's batch reader (``recvmmsg`` on Linux, GRO when on), at most
  ``max_tick_recv`` datagrams and never more than the room left under ``recv_hwm`` (one
  message per datagram, the worst case). ``recv`` serves messages from the batch already
  read; when it is used up, ``recv`` reads the kernel itself and yields one loop turn, and
  only when the kernel had nothing does it wait for ``loop.add_reader``. A full receive queue
  stops reading (the reader is removed) until half of it is free; the rest waits in the
  kernel. Stopped for a heartbeat interval (``peer_heartbeat_ivl``: the application is not
  draining), a due timer still reads ``LIVENESS_READ`` datagrams so the peers' heartbeats
  arrive (the messages among them are dropped, and counted). The blocking socket does so at
  any due timer; here timers fire between the application's drains, which would then lose
  messages a draining receiver should get.
- **Kernel drops** (``SO_RXQ_OVFL`` with each batch, ``SO_MEMINFO`` at each timer and each
  ``counters`` read) reach ``counters.kernel_drops`` and a ``DatagramsDropped`` event, in
  datagrams (estimated under GRO), and a ``DatagramLossWarning`` once they pass 1% of what
  was received (:mod:`.udp`).
- **Writes** go through the link: one ``sendmmsg`` (GSO-coalesced) per flush, paced per peer
  by ``pace_rate``/``pace_burst``. ``send`` queues and one flush per loop turn writes what
  the turn queued, or at once when about ``AUTO_FLUSH`` datagrams wait. Output the OS refuses
  waits for ``loop.add_writer``; output held by pacing waits for a ``loop.call_later`` timer.
- **Timers**: one ``loop.call_at`` at the engine's ``next_deadline()``. Nothing polls. Time is
  ``loop.time()`` (monotonic).

Events are drained into the waiters of ``recv``, ``send`` (at ``send_hwm``),
``wait_connected`` and ``close``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from ..errors import NoPeer, SocketClosed, WouldBlock
from ..events import Event
from ..options import SocketOptions
from . import engine_binding
from .attributes import OptionAttributes
from .links import open_link, read_grain
from .socket import _RETRY, AUTO_FLUSH, LIVENESS_READ

__all__ = ["Socket", "Dealer", "SafeDealer", "Radio", "Dish"]

_BYTES = engine_binding.BYTES


class Socket(OptionAttributes):
    """An asyncio nbmq socket. Build with ``await Dealer.bind(address, **options)`` or
    ``await Dealer.connect(...)``; addresses and options as the blocking sockets
    (:class:`nbmq.transports.socket.Socket`), options also as attributes
    (``sock.send_hwm = 10``). Every call on a closed socket, and every call waiting when it is
    closed, raises :class:`~nbmq.errors.SocketClosed`.

    Attributes:
        engine: the sans-IO engine (read it for ``counters`` and ``peers``; do not drive it).
        options: the live :class:`~nbmq.options.SocketOptions`.
        reading: False while the receive queue is full and the socket leaves datagrams in the
            kernel; True otherwise.
    """

    __slots__ = (
        "options",
        "engine",
        "closed",
        "reading",
        "transport_recv_errors",
        "_loop",
        "_link",
        "_fd",
        "_events",
        "_waiters",
        "_timer",
        "_timer_at",
        "_soon",
        "_writing",
        "_out_timer",
        "_unflushed",
        "_paused_at",
        "_resume_at",
        "__weakref__",
    )
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
        opts = SocketOptions(**options)
        self._link = link = open_link(address, bind, opts)
        try:
            self.engine = engine_binding.make_engine(
                cls._kind, bind, link.local_address, link.engine_address, opts, loop.time()
            )
            self.options = engine_binding.LiveOptions(self.engine, self._option_changed)
            self._fd = link.fileno()
            loop.add_reader(self._fd, self._on_readable)
        except BaseException:
            link.close()
            raise
        self._events: deque[Event] = deque()
        self._waiters: dict[str, list[asyncio.Future[None]]] = {"recv": [], "send": [], "conn": [], "drain": []}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._soon: asyncio.Handle | None = None
        self._out_timer: asyncio.TimerHandle | None = None
        self._writing = False  # a writer waits for the OS to take refused output
        self._unflushed = 0  # datagrams (estimated) queued by send since the last flush
        self.reading = True
        self._paused_at = 0.0  # loop time the reader was removed
        self._resume_at = 0  # messages ready at or below which a paused reader comes back
        self.transport_recv_errors = 0
        self.closed = False
        self._transmit()
        return self

    def _option_changed(self, name: str, value: Any) -> None:
        engine_binding.apply_link_option(self._link, self.options, name, value)
        if name in ("pace_rate", "pace_burst") and hasattr(self._link, "set_pacing"):
            self._transmit_soon()  # what pacing held may go now
        elif name == "recv_hwm" and not self.closed:
            self._update_reading()

    # --- receive: bounded by the room under recv_hwm ----------------------------------------------
    def _room(self) -> int:
        """Datagrams one read may take: ``max_tick_recv``, bounded for a receiving, non-safe
        engine by the room left under ``recv_hwm`` (a full SafeDealer refuses frames instead:
        they come again)."""
        engine, options = self.engine, self.options
        budget = options.max_tick_recv
        if engine.CAN_RECV and not engine.SAFE:
            room = options.recv_hwm - engine.recv_ready()
            if room < budget:
                # Below the read grain (64 under GRO) a read takes nothing and the socket
                # stays readable: a busy loop. Stop reading instead.
                return room if room >= read_grain(self._link) else 0
        return budget

    def _update_reading(self) -> None:
        """Remove the reader while there is no room, put it back when there is."""
        if self._room() > 0:
            if not self.reading:
                self._loop.add_reader(self._fd, self._on_readable)
                self.reading = True
        elif self.reading:
            self._loop.remove_reader(self._fd)
            self.reading = False
            self._paused_at = self._loop.time()
            # back when half the queue (at least a read grain) is free: not at every message
            options = self.options
            self._resume_at = options.recv_hwm - max(options.recv_hwm // 2, read_grain(self._link))

    def _maybe_resume(self) -> None:
        """The reader is stopped and a message was taken: put it back once half the queue
        is free (not at every message: a reader added and removed per message costs two
        ``epoll_ctl``)."""
        if self.engine.recv_ready() <= self._resume_at:
            self._update_reading()

    def _read_now(self) -> bool:
        """The receive queue is empty: read the kernel now, in the caller, instead of waiting
        for the loop to call the reader. True when a message is ready."""
        budget = self._room()
        engine = self.engine
        if budget > 0:
            try:
                self._link.receive(engine, self._loop.time(), budget)
            except OSError:
                self.transport_recv_errors += 1
        self._update_reading()  # (a full queue stops the reader until half of it is free)
        if engine.recv_ready():
            self._transmit()  # acks (a SafeDealer's sender waits for them), events, waiters
            return True
        return False

    def _on_readable(self) -> None:
        budget = self._room()
        if budget <= 0:
            self._update_reading()
            return
        engine = self.engine
        try:
            self._link.receive(engine, self._loop.time(), budget)
        except OSError:
            self.transport_recv_errors += 1  # e.g. an ICMP error surfacing on the socket: counted
        if engine.CAN_RECV and not engine.SAFE:
            self._update_reading()
        if self._waiters["recv"] and engine.recv_ready():
            self._wake("recv")
        self._transmit_soon()

    # --- the driver: transmit (flush, re-arm, drain) ----------------------------------------------
    def _transmit_soon(self) -> None:
        if self._soon is None and not self.closed:
            self._soon = self._loop.call_soon(self._transmit)

    def _on_timer(self) -> None:
        fired_at = self._timer_at or 0.0
        self._timer = self._timer_at = None
        engine, link = self.engine, self._link
        now = max(self._loop.time(), fired_at)
        if not self.reading and now - self._paused_at >= self.options.peer_heartbeat_ivl:
            # full, and not drained for a heartbeat interval: still hear the peers' heartbeats
            try:  # (a GRO read of fewer than 64 reads nothing: ask for a whole run)
                link.receive(engine, now, max(LIVENESS_READ, read_grain(link)))
            except OSError:
                self.transport_recv_errors += 1
        link.check_kernel_drops(engine)  # the OS's receive-buffer drops, if any
        engine.tick(now)
        self._transmit()

    def _on_output(self) -> None:
        """The OS can take more (writer) or pacing lets more go (timer): flush again."""
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False
        self._out_timer = None
        self._transmit()

    def _wait_output(self) -> None:
        """Output is held: wait for writability, the pacer's release time or a short retry."""
        link, loop = self._link, self._loop
        paced = getattr(link, "paced_until", None)
        if paced is not None:  # held by pacing, not by the OS: a timer (pacing reads time.monotonic)
            if self._out_timer is None:
                self._out_timer = loop.call_later(max(0.0, paced - time.monotonic()), self._on_output)
        elif link.write_waitable:
            if not self._writing:
                loop.add_writer(self._fd, self._on_output)
                self._writing = True
        elif self._out_timer is None:  # Unix / inproc peers do not report writability
            self._out_timer = loop.call_later(_RETRY, self._on_output)

    def _transmit(self) -> None:
        if self._soon is not None:  # called directly: the scheduled flush has nothing left to do
            self._soon.cancel()
            self._soon = None
        self._unflushed = 0
        engine, link, loop = self.engine, self._link, self._loop
        now = loop.time()
        engine_binding.transmit_due(engine, link, now, self.options.max_tick_send)
        held = link.has_pending
        if held and not self.closed:
            self._wait_output()
        deadline = engine.next_deadline()
        if held and deadline is not None and deadline <= now:
            deadline = now + _RETRY  # "output waiting", but it is held: do not spin
        if deadline != self._timer_at and not engine.closed and not self.closed:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if deadline is None else loop.call_at(deadline, self._on_timer)
            self._timer_at = deadline
        engine_binding.collect_events(engine, self._events, self.options.max_events)
        waiters = self._waiters
        if waiters["send"] and engine.send_ready:
            self._wake("send")
        if waiters["conn"] and engine_binding.has_connected_peer(engine):
            self._wake("conn")
        if waiters["drain"] and engine_binding.drained(engine) and not held:
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
        SocketClosed when closed). Its datagrams are written at the end of this loop turn, or
        at once when about ``AUTO_FLUSH`` (64) datagrams wait: one ``sendmmsg`` each."""
        self._check_open()
        if isinstance(parts, _BYTES):
            parts = [parts]
        self.engine.send(parts, self._loop.time())
        unflushed = self._unflushed + engine_binding.datagrams_of(parts)
        if unflushed >= AUTO_FLUSH:
            self._transmit()  # a producer that never yields still writes in batches
        else:
            self._unflushed = unflushed
            if self._soon is None:
                self._soon = self._loop.call_soon(self._transmit)

    async def send(self, parts: Any, timeout: float | None = None) -> None:
        """Queue a message, waiting while ``send_hwm`` messages are held (up to ``timeout``
        seconds; None = for ever). Raises WouldBlock on timeout (NoPeer when no peer is
        connected either), SocketClosed when closed."""
        try:
            return self.send_nowait(parts)
        except WouldBlock:
            pass
        until = None if timeout is None else self._loop.time() + timeout
        while True:
            try:
                return self.send_nowait(parts)
            except WouldBlock as exc:
                left = None if until is None else until - self._loop.time()
                if (left is not None and left <= 0) or not await self._park("send", left):
                    self._check_open()
                    if not engine_binding.has_connected_peer(self.engine):
                        raise NoPeer(f"{exc}; no peer is connected to take them") from None
                    raise
                self._check_open()

    async def send_many(self, messages: Iterable[Any], timeout: float | None = None) -> int:
        """Queue messages from the iterable ``messages`` until ``send_hwm``; returns how many
        (int). As the blocking :meth:`nbmq.transports.socket.Socket.send_many`, but ``timeout``
        defaults to None (wait for ever while it can take none); datagrams are written as
        ``send_nowait``'s. Raises WouldBlock / NoPeer (took none within ``timeout``),
        SocketClosed, or as ``send`` for a bad message."""
        await self._await_send_room(timeout)
        taken, unflushed = engine_binding.queue_many(
            self.engine, iter(messages), self._loop.time(), self._unflushed, AUTO_FLUSH, self._transmit
        )
        self._unflushed = unflushed
        if unflushed and self._soon is None:
            self._soon = self._loop.call_soon(self._transmit)
        return taken

    async def send_packed(self, data: Any, offsets: Any, lengths: Any, timeout: float | None = None) -> int:
        """Queue one-part messages packed in ``data`` (message ``i`` is
        ``data[offsets[i]:offsets[i] + lengths[i]]``) until ``send_hwm``; returns how many. As
        the blocking socket's ``send_packed`` (same arguments and errors), but ``timeout``
        defaults to None (wait for ever while it can take none)."""
        await self._await_send_room(timeout)
        taken, datagrams = engine_binding.queue_packed(self.engine, data, offsets, lengths, self._loop.time())
        self._unflushed += datagrams
        if self._unflushed >= AUTO_FLUSH:
            self._transmit()
        elif self._unflushed and self._soon is None:
            self._soon = self._loop.call_soon(self._transmit)
        return taken

    async def _await_send_room(self, timeout: float | None) -> None:
        """Wait (``timeout`` seconds; None = for ever) until the engine takes a message.
        WouldBlock / NoPeer when it did not; SocketClosed when closed."""
        self._check_open()
        engine = self.engine
        if not engine.send_ready:
            until = None if timeout is None else self._loop.time() + timeout
            while not engine.send_ready:
                left = None if until is None else until - self._loop.time()
                if (left is not None and left <= 0) or not await self._park("send", left):
                    self._check_open()
                    raise engine_binding.queue_full(engine, self.options.send_hwm)
                self._check_open()

    def recv_nowait(self) -> list[Any]:
        """The next message (list of uint8 numpy arrays); WouldBlock when none is ready,
        SocketClosed when closed. Reads the kernel at once when the queue is empty."""
        if self.closed:
            self._check_open()
        engine = self.engine
        try:
            message = engine.recv()
        except WouldBlock:
            self._check_open()
            if not self._read_now():
                raise
            message = engine.recv()
        if not self.reading:
            self._maybe_resume()
        return message

    async def recv(self, timeout: float | None = None) -> list[Any]:
        """The next message, waiting up to ``timeout`` seconds (None = for ever). Raises
        WouldBlock on timeout, NotSupported on a Radio, SocketClosed when closed (also when
        closed while waiting).

        Messages come from the batch the last read took (up to ``max_tick_recv`` datagrams,
        one ``recvmmsg``): no loop wakeup per message. When that batch is used up, the kernel
        is read at once, then the task yields to the loop once (timers, flushes and other
        tasks run) before it gets the message; it waits for the reader only when the kernel
        had nothing."""
        engine = self.engine
        try:
            message = engine.recv()
        except WouldBlock:
            return await self._recv_wait(timeout)
        if not self.reading:
            self._maybe_resume()
        return message

    async def _recv_wait(self, timeout: float | None, take: Any = None) -> Any:
        """Wait up to ``timeout`` seconds for a message, then return ``take()`` (default
        ``engine.recv()``)."""
        until = None if timeout is None else self._loop.time() + timeout
        engine = self.engine
        take = engine.recv if take is None else take
        while True:
            self._check_open()
            if self._read_now():
                await asyncio.sleep(0)  # one loop turn per batch: timers, acks, other tasks
            else:
                left = None if until is None else until - self._loop.time()
                if (left is not None and left <= 0) or not await self._park("recv", left):
                    self._check_open()
                    raise WouldBlock("no message ready")
            try:
                return take()
            except WouldBlock:
                continue  # another task took it

    async def recv_many(self, max_messages: int, timeout: float | None = None) -> list[Any]:
        """Up to ``max_messages`` messages (int >= 1) at once: waits as :meth:`recv` for the
        first (up to ``timeout`` seconds; None = for ever), then adds those already read,
        without waiting. Returns a list of messages (each a list of uint8 numpy arrays).

        Raises:
            ValueError: ``max_messages`` is not an int >= 1. WouldBlock: none within
            ``timeout``. NotSupported: on a Radio. SocketClosed: closed.
        """
        engine_binding.check_max_messages(max_messages)
        out = engine_binding.take_ready(self.engine, [await self.recv(timeout)], max_messages)
        if not self.reading:
            self._maybe_resume()
        return out

    async def recv_packed(self, max_messages: int, timeout: float | None = None) -> tuple[Any, Any, Any]:
        """Up to ``max_messages`` one-part messages in one buffer, ``(data, offsets, lengths)``
        (uint8, int64, int64): the zero-copy batch form of :meth:`recv_many`, as the blocking
        socket's ``recv_packed`` (same return and errors); waits up to ``timeout`` seconds
        (None = for ever) for the first."""
        engine_binding.check_max_messages(max_messages)
        engine = self.engine
        try:
            out = engine.recv_packed(max_messages)
        except WouldBlock:
            out = await self._recv_wait(timeout, lambda: engine.recv_packed(max_messages))
        if not self.reading:
            self._maybe_resume()
        return out

    async def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until a peer is connected; False if ``timeout`` seconds passed first.
        SocketClosed when closed."""
        self._check_open()
        if engine_binding.has_connected_peer(self.engine):
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
    def transport_send_errors(self) -> int:
        """Datagrams the OS refused for good (peer gone, unreachable): lost, as on a network."""
        return self._link.send_errors

    @property
    def transport_errors(self) -> int:
        """Datagrams lost to OS errors, sending (``transport_send_errors``) or receiving."""
        return self._link.send_errors + self.transport_recv_errors

    @property
    def local_address(self) -> str:
        return self._link.local_address

    async def close(self, linger: float | None = None) -> None:
        """Flush queued messages (and SafeDealer acks) for up to ``linger`` seconds (default
        ``options.linger``; 0 = drop at once), close the engine and the link (an IPC file is
        removed). Idempotent."""
        if self.closed:
            return
        linger = self.options.linger if linger is None else float(linger)
        self._transmit()  # what send queued goes to the OS even with linger=0
        if linger > 0 and (not engine_binding.drained(self.engine) or self._link.has_pending):
            await self._park("drain", None if math.isinf(linger) else linger)
        if self.closed:
            return
        link, loop = self._link, self._loop
        try:
            self.engine.close(loop.time())
            link.transmit([])
            out = self.engine.datagrams_to_send(loop.time())
            if out:
                link.transmit(out)
        finally:
            self.closed = True
            for handle in (self._timer, self._soon, self._out_timer):
                if handle is not None:
                    handle.cancel()
            if self.reading:
                loop.remove_reader(self._fd)
            if self._writing:
                loop.remove_writer(self._fd)
            self.reading = self._writing = False
            for name in self._waiters:
                self._wake(name)
            link.close()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return engine_binding.describe(f"nbmq.aio.{type(self).__name__}", self.closed, self._link, self.engine)


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
