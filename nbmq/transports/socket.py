"""The blocking nbmq sockets users hold: ``nbmq.Dealer.bind("0.0.0.0:8000")`` and friends.

A socket joins one sans-IO engine (:mod:`nbmq.engine`) to one link (UDP, IPC or inproc). Every
call runs the same step: feed what the OS has to the engine, tick it when a deadline is due,
flush its output, then drain its events (STYLE.md section 6). ``send``/``recv`` never block
unless given a ``timeout``; the wait sleeps in ``selectors`` until the socket is readable or
the engine's ``next_deadline()``; the first wait after a send polls the socket for up to
``busy_poll`` seconds before it sleeps (:func:`spin_readable`; 0 sleeps at once). Time is
``time.monotonic()``.
"""

from __future__ import annotations

import math
import os
import select
import selectors
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from .. import extensions
from ..engine.connection import ACK_DELAY
from ..errors import NoPeer, SocketClosed, WouldBlock
from ..events import Event
from ..options import SocketOptions
from . import engine_binding
from .attributes import OptionAttributes
from .links import open_link, read_grain

__all__ = ["Socket", "Dealer", "SafeDealer", "Radio", "Dish", "spin_readable"]

_monotonic = time.monotonic
_yield = getattr(os, "sched_yield", lambda: None)  # (Unix; elsewhere the spin just polls)
_compiled = extensions.load("nbmq.transports._socket", needs="nbmq.engine._fast")
#: True when ``Socket.send`` / ``Socket.recv`` are the compiled twins (``nbmq.transports._socket``).
COMPILED = _compiled is not None
_BYTES = engine_binding.BYTES
_RETRY = 0.001  # seconds between retries of output a Unix/inproc peer refused (queue full)
#: ``send()`` flushes on its own once about this many datagrams wait: one sendmmsg's worth.
AUTO_FLUSH = 64
#: Datagrams a Dealer whose receive queue is full still reads when a timer is due, so its
#: peers' heartbeats keep arriving (the messages among them are dropped, and counted).
LIVENESS_READ = 16


def spin_readable(fd: int, seconds: float) -> bool:
    """Poll ``fd`` (int) without waiting, again and again, for up to ``seconds`` (float):
    True as soon as it is readable (or in error), False when the time ran out. The
    ``busy_poll`` spin before a wait sleeps (Aeron's and Go's idle strategy): a reply that
    arrives within it is read without waking a sleeping thread. Each ``poll`` releases the GIL;
    the compiled twin (``_socket.spin_readable``) holds none for the whole loop. Between polls
    the process yields its core (``sched_yield``): on a busy machine the peer process that is
    to answer may be waiting for this very core."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    end = _monotonic() + seconds
    while True:
        if poller.poll(0):
            return True
        if _monotonic() >= end:
            return False
        _yield()


_spin_readable_py = spin_readable  # the reference of the compiled twin
if _compiled is not None:
    spin_readable = _compiled.spin_readable  # noqa: F811 (the same, without the GIL)


class SocketFieldsPy:
    """The fields the compiled ``send``/``recv`` read per message (twin of
    ``_socket.SocketFields``, which holds them as C fields): ``closed``, ``_unflushed``,
    ``_engine_send``, ``_small_engine``, ``_ready`` (see :class:`Socket`)."""

    __slots__ = ("closed", "_unflushed", "_engine_send", "_small_engine", "_ready")


SocketFields = SocketFieldsPy if _compiled is None else _compiled.SocketFields


class Socket(SocketFields, OptionAttributes):
    """An nbmq socket over UDP, IPC or inproc. Build with :meth:`bind` or :meth:`connect`.

    Attributes:
        engine: the sans-IO engine (read it for ``counters`` and ``peers``; do not drive it).
        options: the live :class:`~nbmq.options.SocketOptions`; assignments validate and take
            effect at the next call (``sock.options.send_hwm = 10``).
        local_address: the bound address as text (the OS-chosen port after ``bind(":0")``).

    Every option is also a socket attribute, as in pyzmq: ``sock.send_hwm = 10`` is
    ``sock.options.send_hwm = 10`` (validated, OptionError on a bad value) and
    ``sock.send_hwm`` reads it. Assigning any other unknown name raises AttributeError
    (a typo must not create a stray attribute that configures nothing; subclasses that need
    attributes of their own declare ``__slots__`` or get a ``__dict__`` by omitting them).
    """

    __slots__ = (
        "options",
        "engine",
        "_link",
        "_events",
        "_sel",
        "_mask",
        "_tick_recv",
        "_recv_hwm",
        "_tick_send",
        "_max_events",
        "_busy_poll",
        "_spin_next",
        "_pingpong",
        "_acked_at",
        "__weakref__",
    )
    _kind = ""

    def _check_open(self) -> None:
        if self.closed:
            raise SocketClosed(f"{type(self).__name__} is closed")

    def __init__(self, address: str, bind: bool, options: dict[str, Any]) -> None:
        opts = SocketOptions(**options)
        self._link = link = open_link(address, bind, opts)
        try:
            self.engine = engine_binding.make_engine(
                self._kind, bind, link.local_address, link.engine_address, opts, _monotonic()
            )
        except BaseException:
            link.close()
            raise
        self._engine_send = self.engine.send  # (bound once: the compiled send calls it per message)
        # the engine when the compiled send may queue a small message into it with one C call
        self._small_engine = None if _compiled is None else _compiled.small_sender(self.engine)
        self.options = engine_binding.LiveOptions(self.engine, self._option_changed)
        self._cache_options()
        self._ready = self.engine.ready_queue
        self._events: deque[Event] = deque()
        self._unflushed = 0  # datagrams (estimated) queued by send() since the last flush
        # Ping-pong mode (TCP's interactive delayed ack): the user answers what it receives at
        # once, so a step leaves the Acks it made held in the engine (ACK_DELAY) for the reply
        # to carry; the peer then wakes once for both. Off, a step sends its Acks at once
        # (``_acked_at``, seconds: when it last did).
        self._pingpong = False
        self._acked_at = -math.inf
        # A flush of what send() queued arms one busy_poll spin for the next wait: a reply is
        # likely on its way. A socket that only receives never spins.
        self._spin_next = False
        self._sel = selectors.DefaultSelector()
        self._mask = selectors.EVENT_READ
        self._sel.register(self._link.fileno(), self._mask)
        self.closed = False
        self._flush(_monotonic())

    @classmethod
    def bind(cls, address: str, **options: Any) -> Any:
        """A socket bound to ``address`` (``"host:port"``, ``"[v6]:port"``, ``"ipc:///path"``,
        ``"inproc://name"``; port 0 = any free port). Options as in SocketOptions.

        Raises:
            AddressError: malformed address. OptionError: unknown option or bad value.
            OSError: the address is in use (the message says so) or cannot be bound.
        """
        return cls(address, True, options)

    @classmethod
    def connect(cls, address: str, **options: Any) -> Any:
        """A socket that dials ``address`` (sends ``Connect`` now and every ``reconnect_wait``
        until a peer answers). Raises as :meth:`bind`."""
        return cls(address, False, options)

    def _option_changed(self, name: str, value: Any) -> None:
        engine_binding.apply_link_option(self._link, self.options, name, value)
        self._cache_options()

    def _cache_options(self) -> None:
        """Keep the options every step reads as plain attributes (read through
        ``LiveOptions`` they cost a lookup in the engine each); refreshed on every change."""
        options = self.options
        self._tick_recv = options.max_tick_recv
        self._recv_hwm = options.recv_hwm
        self._tick_send = options.max_tick_send
        self._max_events = options.max_events
        self._busy_poll = options.busy_poll

    # --- the step: receive -> tick -> flush -> drain ------------------------------------------
    def _step(self, now: float) -> None:
        engine = self.engine
        budget = self._tick_recv
        if engine.CAN_RECV and not engine.SAFE:  # (a full SafeDealer refuses frames: they come again)
            # Never read more than the receive queue can hold, counting the worst case of one
            # message per datagram: the rest waits in the kernel, not in our drop counter.
            room = self._recv_hwm - engine.recv_ready()
            if room < budget:
                budget = room
                grain = read_grain(self._link)  # a GRO read needs room for 64, or reads nothing
                if room < grain:
                    deadline = engine.next_deadline()
                    budget = max(LIVENESS_READ, grain) if deadline is not None and deadline <= now else 0
        if budget > 0:
            self._link.receive(engine, now, budget)
        deadline = engine.next_deadline()
        if deadline is not None and deadline <= now:  # (also "output waiting": see next_deadline)
            if engine._acks_held and engine._ack_due <= now:  # no reply carried them in time
                self._pingpong = False
            self._link.check_kernel_drops(engine)
            engine.tick(now)
            self._flush(now)
        elif self._link.has_pending or self._unflushed:
            self._flush(now)
        elif engine._acks_held and not self._pingpong:
            self._flush(now)
            self._acked_at = now
        else:  # nothing to write: only the events the reads raised
            engine_binding.collect_events(engine, self._events, self._max_events)

    def _flush_sent(self, now: float) -> None:
        """Flush what ``send()`` queued. Sent within ``ACK_DELAY`` of a step that sent its
        Acks at once, it is a reply: the socket enters ping-pong mode (see ``__init__``); a
        reply that finds its Acks held past ``ACK_DELAY`` came too late: it leaves it."""
        engine = self.engine
        if engine._acks_held and engine._ack_due < now:
            self._pingpong = False
        elif now - self._acked_at < ACK_DELAY:
            self._pingpong = True
        self._spin_next = True
        self._flush(now)

    def _flush(self, now: float) -> None:
        self._unflushed = 0
        engine_binding.transmit_due(self.engine, self._link, now, self._tick_send)
        engine_binding.collect_events(self.engine, self._events, self._max_events)

    def _wait(self, until: float | None, spin: bool = False) -> None:
        """Sleep until readable, writable (if output is pending), the engine's next deadline
        or ``until``, whichever is first; then step. With ``spin`` (a wait for a message:
        ``recv``, ``poll``), the first wait for reading alone after a flush of sent messages
        first spins (``busy_poll`` seconds at most, never past the wait's end) and steps at
        once when the spin found the socket readable: a reply is likely on its way. A send
        waiting for room never spins (a throughput sender would burn its core for nothing)."""
        now = _monotonic()
        timeout = None if until is None else max(0.0, until - now)
        deadline = self.engine.next_deadline()
        if deadline is not None and deadline <= now and self._link.has_pending:
            deadline = now + _RETRY  # "output waiting", but the OS is full: do not spin
        if deadline is not None:
            timeout = max(0.0, deadline - now) if timeout is None else min(timeout, max(0.0, deadline - now))
        mask = selectors.EVENT_READ
        if self._link.has_pending:
            paced = getattr(self._link, "paced_until", None)
            if paced is not None:  # held by pacing, not by the OS: a timer, not writability
                wait = max(0.0, paced - now)
                timeout = wait if timeout is None else min(timeout, wait)
            elif self._link.write_waitable:
                mask |= selectors.EVENT_WRITE
            else:
                timeout = _RETRY if timeout is None else min(timeout, _RETRY)
        if mask != self._mask:
            self._sel.modify(self._link.fileno(), mask)
            self._mask = mask
        spun = self._busy_poll
        if spin and spun and self._spin_next and mask == selectors.EVENT_READ and timeout != 0.0:
            self._spin_next = False
            if timeout is not None and timeout < spun:
                spun = timeout
            if spin_readable(self._link.fileno(), spun):
                self._step(_monotonic())
                return
            if timeout is not None:
                timeout = max(0.0, timeout - spun)
        self._sel.select(timeout)
        self._step(_monotonic())

    # --- user API ------------------------------------------------------------------------------
    def send(self, parts: Any, timeout: float | None = 0.0, flush: bool | None = None) -> None:
        """Queue a multipart message; its datagrams go out in batches (auto-batching).

        By default (``flush=None``) the frames wait until about 64 datagrams are queued, or
        the next ``recv()``, ``tick()``, ``poll()``, ``flush()``, ``wait_connected()`` or
        ``close()``, whichever comes first: one ``sendmmsg`` then carries up to 64 datagrams
        (GSO-coalesced on Linux). A loop that sends and never steps must call ``flush()``.

        Args:
            parts: a list of bytes-like parts (a single bytes-like is one part).
            timeout: seconds to wait while at ``send_hwm``: 0 (default) raises at once,
                None waits for ever.
            flush: True writes at once (one syscall for this message); False never flushes
                here, not even at 64 datagrams; None (default) auto-batches as above.

        Raises:
            WouldBlock: ``send_hwm`` reached (after ``timeout``); NoPeer (a WouldBlock) when,
            besides, no peer is connected. NotSupported: on a Dish. SocketClosed: closed.
        """
        if self.closed:
            self._check_open()
        if isinstance(parts, _BYTES):
            parts = [parts]
        now = _monotonic()
        try:
            self.engine.send(parts, now)
        except WouldBlock:
            self._check_open()
            until = None if timeout is None else now + timeout
            self._step(now)
            while True:
                try:
                    self.engine.send(parts, _monotonic())
                    break
                except WouldBlock as exc:
                    if until is not None and _monotonic() >= until:
                        if not self.connected:
                            raise NoPeer(f"{exc}; no peer is connected to take them") from None
                        raise
                self._wait(until)
        if flush is None:
            unflushed = self._unflushed + engine_binding.datagrams_of(parts)
            if unflushed < AUTO_FLUSH:
                self._unflushed = unflushed
                return
        elif not flush:
            return
        self._flush_sent(_monotonic())

    def send_many(self, messages: Iterable[Any], timeout: float | None = 0.0) -> int:
        """Queue messages from ``messages`` (an iterable of multipart messages: lists of
        bytes-like parts, or single bytes-like) until ``send_hwm`` is reached, in one call.
        A message is taken from the iterable only when it can be queued, so a generator loses
        none: send the rest later. Waits (up to ``timeout`` seconds: 0, the default, not at
        all; None = for ever) only while it can take none. Datagrams go out as ``send``'s
        auto-batching: one ``sendmmsg`` per about 64, the rest at the next step or ``flush()``.

        Returns:
            How many messages were queued (>= 1; 0 only for an empty iterable).

        Raises:
            WouldBlock: none could be queued within ``timeout`` (NoPeer when no peer is
            connected either). SocketClosed: closed. As ``send`` for a bad message (the
            messages before it stay queued).
        """
        now = self._await_send_room(timeout)
        taken, self._unflushed = engine_binding.queue_many(
            self.engine, iter(messages), now, self._unflushed, AUTO_FLUSH, lambda: self._flush(now)
        )
        return taken

    def send_packed(self, data: Any, offsets: Any, lengths: Any, timeout: float | None = 0.0) -> int:
        """Queue one-part messages packed back to back in ``data``, in order, until ``send_hwm``
        is reached: the batch form of :meth:`send` (the twin of :meth:`recv_packed`), one
        call for many messages. Message ``i`` is ``data[offsets[i]:offsets[i] + lengths[i]]``.
        Waits (up to ``timeout`` seconds: 0, the default, not at all; None = for ever) only
        while it can take none; datagrams go out as ``send_many``'s.

        Args:
            data: bytes-like (bytes, bytearray, memoryview, uint8 numpy array); copied once.
            offsets, lengths: integer sequences or 1-D arrays of one length n (int64), bytes.

        Returns:
            How many messages were queued, the first ones (send the rest later; 0 only for n = 0).

        Raises:
            ValueError: bad ``offsets``/``lengths`` (not integers, not 1-D, lengths differ, a
            range outside ``data``; checked before anything is queued). WouldBlock: none could
            be queued within ``timeout`` (NoPeer when no peer is connected either).
            NotSupported: on a Dish. SocketClosed: closed.
        """
        now = self._await_send_room(timeout)
        taken, datagrams = engine_binding.queue_packed(self.engine, data, offsets, lengths, now)
        self._unflushed += datagrams
        if self._unflushed >= AUTO_FLUSH:
            self._flush(now)
        return taken

    def _await_send_room(self, timeout: float | None) -> float:
        """Wait (``timeout`` seconds; None = for ever) until the engine takes a message; returns
        the time (monotonic seconds). WouldBlock / NoPeer when it did not. SocketClosed: closed."""
        self._check_open()
        engine = self.engine
        now = _monotonic()
        if not engine.send_ready:
            until = None if timeout is None else now + timeout
            self._step(now)
            while not engine.send_ready:
                if until is not None and _monotonic() >= until:
                    raise engine_binding.queue_full(engine, self.options.send_hwm)
                self._wait(until)
            now = _monotonic()
        return now

    def flush(self) -> None:
        """Write what the engine has queued (see ``send(flush=False)``). SocketClosed: closed."""
        self._check_open()
        self._flush_sent(_monotonic())

    def recv(self, timeout: float | None = 0.0) -> list[Any]:
        """The next complete message, as a list of parts (uint8 numpy arrays owning their bytes).

        Args:
            timeout: seconds to wait for one: 0 (default) does not wait, None waits for ever.

        Raises:
            WouldBlock: no message (within ``timeout``). NotSupported: on a Radio.
            SocketClosed: the socket is closed.
        """
        if self._unflushed:
            self._flush_sent(_monotonic())
        ready = self._ready
        if ready:  # engine.recv(), inlined: the drain loop's one call per message
            return ready.popleft()
        engine = self.engine
        if not engine.CAN_RECV:
            return engine.recv()  # NotSupported
        self._check_open()
        self._await_message(timeout)
        return ready.popleft()

    _send_py = send  # the reference, and what the compiled twins hand every other call to
    _recv_py = recv
    if _compiled is not None:  # the same, compiled: a message loop's calls without a Python frame
        _compiled.install(send, recv, AUTO_FLUSH)
        send = _compiled.send
        recv = _compiled.recv

    def _await_message(self, timeout: float | None) -> None:
        """Step, then wait (up to ``timeout`` seconds; None = for ever) until the engine has a
        message ready. WouldBlock: none within ``timeout``."""
        now = _monotonic()
        self._step(now)
        until = None if timeout is None else now + timeout
        engine = self.engine
        while not engine.recv_ready():
            if until is not None and _monotonic() >= until:
                raise WouldBlock("no message ready")
            self._wait(until, spin=True)

    def recv_many(self, max_messages: int, timeout: float | None = None) -> list[Any]:
        """Up to ``max_messages`` messages (int >= 1) at once: waits as :meth:`recv` for the
        first (up to ``timeout`` seconds; None, the default, = for ever, as the asyncio
        socket's), then adds those already read, without another read. Returns a list of
        messages (each a list of uint8 numpy arrays).

        Raises:
            ValueError: ``max_messages`` is not an int >= 1. WouldBlock: none within
            ``timeout``. NotSupported: on a Radio. SocketClosed: closed.
        """
        engine_binding.check_max_messages(max_messages)
        return engine_binding.take_ready(self.engine, [self.recv(timeout)], max_messages)

    def recv_packed(self, max_messages: int, timeout: float | None = None) -> tuple[Any, Any, Any]:
        """Up to ``max_messages`` one-part messages (int >= 1) in one buffer: the zero-copy
        batch form of :meth:`recv_many` (one array per call, not one per message). Waits as
        :meth:`recv` for the first (``timeout`` seconds; None, the default, = for ever), then
        adds those already read, without another read.

        Returns:
            ``(data, offsets, lengths)``: ``data`` a 1-D ``uint8`` numpy array owning the
            bytes of all n messages back to back; ``offsets`` and ``lengths`` 1-D ``int64``
            arrays of shape ``(n,)``: message ``i`` is ``data[offsets[i]:offsets[i] + lengths[i]]``.

        Raises:
            ValueError: ``max_messages`` is not an int >= 1, or the oldest message has several
            parts (it stays queued: take it with :meth:`recv`; packing stops before one).
            WouldBlock: none within ``timeout``. NotSupported: on a Radio. SocketClosed: closed.
        """
        engine_binding.check_max_messages(max_messages)
        if self._unflushed:
            self._flush_sent(_monotonic())
        try:
            return self.engine.recv_packed(max_messages)
        except WouldBlock:
            self._check_open()
        self._await_message(timeout)
        return self.engine.recv_packed(max_messages)

    def tick(self) -> None:
        """Step once without blocking: read what arrived, run due timers (heartbeats,
        keepalive, reconnect, resends, expiry), flush. Call it in every loop iteration.
        SocketClosed: the socket is closed."""
        self._check_open()
        self._step(_monotonic())

    def poll(self, timeout: float | None = 0.0) -> None:
        """Step, waiting up to ``timeout`` seconds (None = until something happens); returns
        at once when a message is ready for :meth:`recv` (read by this step or an earlier
        one: the OS has nothing more to signal for it). SocketClosed: the socket is closed."""
        self._check_open()
        self._step(_monotonic())
        if self._ready:
            return
        self._wait(None if timeout is None else _monotonic() + timeout, spin=True)

    def wait_connected(self, timeout: float | None = 5.0) -> bool:
        """Step until the socket has a connected peer or ``timeout`` passes; True if it has.
        SocketClosed: the socket is closed."""
        self._check_open()
        until = None if timeout is None else _monotonic() + timeout
        self._step(_monotonic())
        while not self.connected:
            if until is not None and _monotonic() >= until:
                return False
            self._wait(until)
        return True

    def next_event(self) -> Event | None:
        """The oldest event not yet read (PeerConnected, PeerDisconnected, MessageDropped,
        FrameRejected), or None. The socket keeps at most ``max_events``, dropping the oldest."""
        if not self._events:
            self._flush(_monotonic())
        return self._events.popleft() if self._events else None

    @property
    def peers(self) -> Any:
        """The engine's peers (see nbmq.engine)."""
        return self.engine.peers

    @property
    def connected(self) -> bool:
        return engine_binding.has_connected_peer(self.engine)

    @property
    def counters(self) -> Any:
        """The engine's counters, ``kernel_drops`` (datagrams the OS dropped for want of
        receive buffer) asked of the OS now; ``send_errors`` of the link is
        ``transport_send_errors``."""
        if not self.closed:
            self._link.check_kernel_drops(self.engine)
        return self.engine.counters

    @property
    def transport_send_errors(self) -> int:
        """Datagrams the OS refused for good (peer gone, unreachable): lost, as on a network."""
        return self._link.send_errors

    @property
    def local_address(self) -> str:
        return self._link.local_address

    def fileno(self) -> int:
        """A file descriptor that is readable when datagrams arrived (selectors, event loops).
        Call ``tick()`` when it is readable and at least by ``engine.next_deadline()``; after
        ``send()`` call ``flush()`` (or ``tick()``) before waiting on it (auto-batching)."""
        return self._link.fileno()

    def close(self, linger: float | None = None) -> None:
        """Close the socket: keep flushing queued messages (and awaiting SafeDealer acks) for
        up to ``linger`` seconds (default ``options.linger``; 0 drops them at once; inf waits
        until done), then close the engine and the OS socket (an IPC file is removed).
        Idempotent."""
        if self.closed:
            return
        linger = self.options.linger if linger is None else float(linger)
        try:
            if self._unflushed:  # what send() batched goes to the OS even with linger=0
                self._flush(_monotonic())
            if linger > 0:
                until = None if math.isinf(linger) else _monotonic() + linger
                self._step(_monotonic())
                while not engine_binding.drained(self.engine) or self._link.has_pending:
                    if until is not None and _monotonic() >= until:
                        break
                    self._wait(until)
            self.engine.close(_monotonic())
            self._link.transmit([])
            out = self.engine.datagrams_to_send(_monotonic())
            if out:
                self._link.transmit(out)
        finally:
            self.closed = True
            self._sel.close()
            self._link.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return engine_binding.describe(f"nbmq.{type(self).__name__}", self.closed, self._link, self.engine)


class Dealer(Socket):
    """Fire-and-forget duplex socket; messages to several peers are spread among them."""

    __slots__ = ()
    _kind = "Dealer"


class SafeDealer(Socket):
    """A Dealer whose frames are acked by the receiver and resent until they are."""

    __slots__ = ()
    _kind = "SafeDealer"


class Radio(Socket):
    """Send-only: every message goes to every connected peer (pub/sub)."""

    __slots__ = ()
    _kind = "Radio"


class Dish(Socket):
    """Receive-only peer of a Radio."""

    __slots__ = ()
    _kind = "Dish"
