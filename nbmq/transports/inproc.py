"""In-process transport: engines joined in memory, no kernel on the data path.

A per-process registry maps bound names to endpoints. Every endpoint has an inbox (a deque of
``(datagram, source)``) and a wake-up socketpair whose read end is its ``fileno()``, so an
inproc socket works with ``selectors`` and asyncio like a kernel socket and across threads.
A connecting endpoint gets a private name ``"<name>#<n>"`` so the bound side can answer it.
Sending to a name nobody has bound loses the datagram, as UDP to a closed port does (the
engine's reconnect then retries).
"""

from __future__ import annotations

import itertools
import socket
import threading
import weakref
from collections import deque
from typing import Any

from ..errors import AddressError

__all__ = ["InprocLink", "bound_names"]

# Weak: a socket dropped without close() frees its name when it is garbage collected.
_registry: weakref.WeakValueDictionary[str, InprocLink] = weakref.WeakValueDictionary()
_lock = threading.Lock()
_ids = itertools.count(1)


def bound_names() -> list[str]:
    """The inproc names bound in this process (for tests and debugging)."""
    with _lock:
        return [name for name in _registry if "#" not in name]


class InprocLink:
    """One inproc endpoint. Same duck type as :class:`~nbmq.transports.udp.DatagramLink`.

    Args:
        name: the inproc name (without ``inproc://``).
        bind: True to own ``name``; False to connect to it from a private name.
        capacity: datagrams the inbox holds; a sender finding it full keeps its datagrams
            pending and retries (back-pressure, never silent loss).

    Raises:
        AddressError: ``bind`` and ``name`` is already bound in this process.
    """

    #: EVENT_WRITE means nothing here; the driver retries pending datagrams on a short timer.
    write_waitable = False
    scheme = "inproc"

    def __init__(self, name: str, bind: bool, capacity: int = 4096) -> None:
        self.name = name if bind else f"{name}#{next(_ids)}"
        self.peer = None if bind else name
        self.capacity = capacity
        self.inbox: deque[tuple[bytes, str]] = deque()
        self.pending: deque[tuple[Any, Any]] = deque()
        self.has_pending = False
        self.send_errors = 0
        self.closed = False
        with _lock:
            if self.name in _registry:
                raise AddressError(f"address 'inproc://{name}': already bound in this process")
            _registry[self.name] = self
        self._rsock, self._wsock = socket.socketpair()
        self._rsock.setblocking(False)
        self._wsock.setblocking(False)

    @property
    def local_address(self) -> str:
        return f"inproc://{self.name}"

    @property
    def engine_address(self) -> Any:
        """The bound name the engine dials (connecting side), or None."""
        return self.peer

    def fileno(self) -> int:
        return self._rsock.fileno()

    def set_buffers(self, options: Any) -> None:
        if options.rcvbuf:
            self.capacity = max(64, options.rcvbuf // 512)

    def _wake(self) -> None:
        try:
            self._wsock.send(b"\0")
        except OSError:  # full (a wake-up is already pending) or closed
            pass

    def take(self, budget: int) -> list[tuple[bytes, str]]:
        """Up to ``budget`` datagrams from the inbox, ``(data, source)``, oldest first."""
        try:
            while self._rsock.recv(4096):
                pass
        except OSError:
            pass
        inbox = self.inbox
        out = [inbox.popleft() for _ in range(min(budget, len(inbox)))]
        if inbox:
            self._wake()  # budget reached: make sure the next wait does not sleep on the rest
        return out

    kernel_drops = 0  # no kernel: a full inbox pushes back on the sender instead

    def check_kernel_drops(self, engine: Any) -> None:
        """No kernel, no kernel drops (see the UDP link)."""

    def receive(self, engine: Any, now: float, budget: int) -> int:
        """Feed up to ``budget`` inbox datagrams to ``engine``; returns how many."""
        feed = engine.receive_datagram
        items = self.take(budget)
        for data, source in items:
            feed(data, source, now)
        return len(items)

    def transmit(self, datagrams: list[tuple[Any, Any]]) -> bool:
        """Deliver ``datagrams`` (``(data, name)``); keep what a full inbox refuses pending.
        Returns True when nothing is left pending."""
        if datagrams:
            self.pending.extend(datagrams)
        pending = self.pending
        woken = set()
        registry = _registry  # a lookup is atomic under the GIL; bind/close take the lock
        while pending:
            data, dest = pending[0]
            target = registry.get(dest)
            if target is None or target.closed:
                pending.popleft()
                self.send_errors += 1  # nobody bound there: lost, as UDP to a closed port
                continue
            if len(target.inbox) >= target.capacity:
                break
            target.inbox.append((bytes(data), self.name))
            pending.popleft()
            woken.add(target)
        for target in woken:
            target._wake()
        self.has_pending = bool(pending)
        return not pending

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with _lock:
            if _registry.get(self.name) is self:
                del _registry[self.name]
        self._rsock.close()
        self._wsock.close()
