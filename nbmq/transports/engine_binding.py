"""Glue between the drivers and :mod:`nbmq.engine`: build an engine for a socket type and role,
and keep options live (``sock.options.send_hwm = 10`` after construction).

This is the only transport module that knows the engines' constructors and option plumbing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import engine as _engine
from ..errors import NoPeer, WouldBlock
from ..options import SocketOptions
from .address import format_address

__all__ = [
    "LiveOptions",
    "make_engine",
    "apply_link_option",
    "drained",
    "has_connected_peer",
    "transmit_due",
    "collect_events",
    "datagrams_of",
    "queue_many",
    "take_ready",
    "check_max_messages",
    "queue_full",
    "queue_packed",
    "describe",
]

BYTES = (bytes, bytearray, memoryview)
_CHUNK = 466  # bytes of payload per datagram
_END = object()

ENGINES = {
    "Dealer": _engine.Dealer,
    "SafeDealer": _engine.SafeDealer,
    "Radio": _engine.Radio,
    "Dish": _engine.Dish,
}


class LiveOptions:
    """A socket's options, read from and written to its engine: an assignment goes to the
    engine's ``set_option`` (validated there, once, on the engine's one copy: ``OptionError``
    naming the option), then to ``on_change(name, value)``, which applies what the link holds
    of it (:func:`apply_link_option`)."""

    __slots__ = ("_engine", "_on_change")

    def __init__(self, engine: Any, on_change: Callable[[str, Any], None] | None = None) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_on_change", on_change)

    def __getattr__(self, name: str) -> Any:
        return self._engine.option(name)

    def __setattr__(self, name: str, value: Any) -> None:
        engine = self._engine
        engine.set_option(name, value)
        if self._on_change is not None:
            self._on_change(name, engine.option(name))

    def as_dict(self) -> dict[str, Any]:
        return self._engine.options.as_dict()

    def snapshot(self) -> SocketOptions:
        """An independent copy of the current values."""
        return self._engine.options

    def __repr__(self) -> str:
        return repr(self._engine.options)


def make_engine(kind: str, bind: bool, local: Any, remote: Any, options: SocketOptions, now: float) -> Any:
    """An engine of type ``kind`` (``"Dealer"`` ...) bound at ``local`` or dialling ``remote``,
    with its own copy of ``options``."""
    cls = ENGINES[kind]
    if bind:
        return cls.bound(local, options)
    return cls.connecting(remote, now, options)


def apply_link_option(link: Any, options: Any, name: str, value: Any) -> None:
    """Make option ``name``, just changed to ``value`` in the engine, take effect in the link
    (the blocking and the asyncio socket alike; ``options`` is the socket's
    :class:`LiveOptions`): socket buffers, GSO, pacing (bytes/s, burst bytes), or GRO, which
    stays off while ``recv_hwm`` < 64 (one GRO read may hold 64 datagrams: below that the
    receive queue could never take a read). Other options are the engine's alone."""
    if name in ("sndbuf", "rcvbuf"):
        link.set_buffers(options)
    elif name == "gso" and hasattr(link, "set_gso"):
        link.set_gso(value)
    elif name in ("pace_rate", "pace_burst") and hasattr(link, "set_pacing"):
        link.set_pacing(options.pace_rate, options.pace_burst)
    elif name in ("gro", "recv_hwm") and hasattr(link, "set_gro"):
        link.set_gro(options.gro and options.recv_hwm >= 64)


def drained(engine: Any) -> bool:
    """True when the engine holds no message for sending (queued or awaiting acks)."""
    return engine.pending_messages == 0


def has_connected_peer(engine: Any) -> bool:
    return bool(engine.connected_peers)


def transmit_due(engine: Any, link: Any, now: float, limit: int) -> None:
    """Hand ``link`` the datagrams ``engine`` has due at ``now`` (seconds): first what the link
    still holds, then batches of up to ``limit`` (``max_tick_send``) until the engine has no
    more, a batch is short, or the link holds output back (the OS or pacing refused it)."""
    if not link.has_pending or link.transmit([]):
        while True:  # more than max_tick_send frames may be waiting: pull again
            out = engine.datagrams_to_send(now)
            if not out or not link.transmit(out) or len(out) < limit:
                break


def collect_events(engine: Any, events: Any, max_events: int) -> None:
    """Move ``engine``'s events to ``events`` (a deque), keeping the newest ``max_events``; the
    oldest trimmed are counted through ``engine.events_discarded`` (loss is never silent)."""
    event = engine.next_event()
    if event is None:
        return
    while event is not None:
        events.append(event)
        event = engine.next_event()
    excess = len(events) - max_events
    if excess > 0:
        for _ in range(excess):
            events.popleft()
        engine.events_discarded(excess)


def datagrams_of(parts: list[Any]) -> int:
    """About how many datagrams the message ``parts`` (a list of bytes-like) takes: one per
    part plus one per 466 bytes (a chunk). The drivers' auto-flush counts these."""
    if len(parts) == 1:
        return 1 + len(parts[0]) // _CHUNK
    return len(parts) + sum(map(len, parts)) // _CHUNK


def queue_many(
    engine: Any, messages: Iterator[Any], now: float, unflushed: int, flush_at: int, flush: Callable[[], None]
) -> tuple[int, int]:
    """Queue messages from the iterator ``messages`` (each a list of bytes-like parts, or one
    bytes-like) into ``engine`` while it is under ``send_hwm``; a message is pulled from the
    iterator only when it can be taken, so none is lost to a full queue. ``flush()`` is called
    each time about ``flush_at`` datagrams wait (``unflushed`` of them already did).

    Returns:
        ``(taken, unflushed)``: messages queued, datagrams (estimated) waiting for a flush.

    Raises:
        As ``engine.send`` for a bad message (NotSupported, MessageTooLarge...): the
        messages before it stay queued.
    """
    taken = 0
    send = engine.send
    while engine.send_ready:
        parts = next(messages, _END)
        if parts is _END:
            break
        if isinstance(parts, BYTES):
            parts = [parts]
        send(parts, now)
        taken += 1
        unflushed += datagrams_of(parts)
        if unflushed >= flush_at:
            flush()
            unflushed = 0
    return taken, unflushed


def queue_packed(engine: Any, data: Any, offsets: Any, lengths: Any, now: float) -> tuple[int, int]:
    """``engine.send_packed(data, offsets, lengths, now)`` (see there: one-part messages packed
    in one buffer, queued while under ``send_hwm``).

    Returns:
        ``(taken, datagrams)``: messages queued, and about how many datagrams they make (one
        per message plus one per 466 bytes; the drivers' auto-flush counts these).
    """
    taken = engine.send_packed(data, offsets, lengths, now)
    if not taken:
        return 0, 0
    nbytes = int(np.asarray(lengths[:taken], dtype=np.int64).sum())
    return taken, taken + nbytes // _CHUNK


def queue_full(engine: Any, send_hwm: int) -> WouldBlock:
    """The error for a ``send_many`` that could queue nothing: NoPeer (a WouldBlock) when
    ``engine`` has no connected peer to take what is queued, else WouldBlock."""
    if not has_connected_peer(engine):
        return NoPeer(f"send_hwm ({send_hwm}) messages are queued; no peer is connected to take them")
    return WouldBlock(f"send_hwm ({send_hwm}) messages are queued")


def take_ready(engine: Any, out: list[Any], max_messages: int) -> list[Any]:
    """Append to ``out`` the messages ``engine`` has ready, until ``out`` holds
    ``max_messages``; reads nothing from the OS. Returns ``out``."""
    recv = engine.recv
    try:
        while len(out) < max_messages:
            out.append(recv())
    except WouldBlock:
        pass
    return out


def check_max_messages(max_messages: int) -> None:
    """ValueError unless ``max_messages`` is an int >= 1 (``recv_many``'s argument)."""
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise ValueError(f"max_messages must be an int >= 1, got {max_messages!r}")


def describe(name: str, closed: bool, link: Any, engine: Any) -> str:
    """The ``repr()`` of a socket: its class ``name`` (``"nbmq.Dealer"``), its local address,
    the address it dials (connecting sockets), its state (``connected``, ``handshaking``,
    ``connecting``, ``listening`` or ``closed``) and how many peers it knows, e.g.
    ``<nbmq.Dealer 0.0.0.0:41000 -> 127.0.0.1:5555 connected peers=1>``."""
    if closed:
        return f"<{name} closed>"
    local = link.local_address
    target = link.engine_address
    dials = "" if target is None else f" -> {format_address(getattr(link, 'family', 0), target, link.scheme)}"
    if has_connected_peer(engine):
        state = "connected"
    elif engine.peers:
        state = "handshaking"  # peers known, none past the handshake yet
    else:
        state = "listening" if target is None else "connecting"
    return f"<{name} {local}{dials} {state} peers={len(engine.peers)}>"
