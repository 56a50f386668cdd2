"""Glue between the drivers and :mod:`nbmq.engine`: build an engine for a socket type and role,
and keep options live (``sock.options.send_hwm = 10`` after construction).

This is the only transport module that knows the engines' constructors and option plumbing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import engine as _engine
from ..options import SocketOptions

__all__ = [
    "LiveOptions", "make_engine", "apply_link_option", "drained", "has_connected_peer", "transmit_due",
    "collect_events",
]

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
