"""A deterministic network simulator for nbmq engines: virtual time, seeded faults.

Engines (any object with the sans-IO surface of :mod:`nbmq.engine.sockets`) sit at addresses on
a simulated datagram network. Every datagram crosses a link with seeded loss, duplication,
reordering, delay and jitter; nodes can move to a new address (NAT rebinding), crash, or be
replaced by a fresh engine (a restart). Time is virtual: nothing sleeps, and the same seed gives
the same run.

The simulator is the driver a transport would be, and follows the flush rule: after every
``receive_datagram`` / ``tick`` / ``send`` it flushes ``datagrams_to_send`` and drains
``next_event`` (into ``node.events``); it ticks each engine at its ``next_deadline()`` (and, with
``tick_interval``, also at a fixed cadence, like a loop that ticks every iteration). Delivered
datagrams are handed to ``receive_datagram`` as a memoryview of one scratch buffer that the next
delivery overwrites, as a transport's ``recvfrom_into`` would, so an engine that kept a view
instead of copying is caught.

Example::

    net = Network(seed=1, link=Link(loss=0.2, duplicate=0.05, reorder=0.1))
    server = net.add(SafeDealer.bound(SERVER), SERVER)
    client = net.add(SafeDealer(), CLIENT)
    net.connect(client, SERVER)
    assert net.run_until(lambda: client.connected and server.connected, max_time=10)
    net.send(client, [b"hello"])
    assert net.run_until(lambda: server.engine.recv_ready(), max_time=10)

Every loop is bounded: :meth:`Network.run_until` by virtual time and by ``max_iterations``.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import WouldBlock
from ..events import Event

__all__ = ["Link", "Node", "Network", "LivelockError", "connected_pair"]


class LivelockError(RuntimeError):
    """The simulation made no progress: an engine kept asking for a tick at the same instant
    without producing anything, or an iteration budget ran out."""


@dataclass(frozen=True)
class Link:
    """Faults of one direction of a simulated link (all probabilities per datagram).

    Attributes:
        loss: probability the datagram is lost (0..1).
        duplicate: probability it is delivered twice (the copy gets its own delay).
        reorder: probability it gets ``reorder_delay * U(0, 1)`` extra seconds, so later
            datagrams overtake it.
        delay: base one-way delay, seconds.
        jitter: extra delay ``jitter * U(0, 1)`` seconds on every datagram.
        reorder_delay: most extra seconds a reordered datagram waits.
    """

    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: float = 0.001
    jitter: float = 0.0
    reorder_delay: float = 0.02

    @property
    def perfect(self) -> bool:
        """No loss, duplication, reordering or jitter."""
        return not (self.loss or self.duplicate or self.reorder or self.jitter)


class Node:
    """An engine at an address on a :class:`Network`.

    Attributes:
        engine: the sans-IO engine.
        addr: its current address (hashable; a ``(host, port)`` tuple looks like UDP).
        name: a label for messages.
        events: every event the engine reported, in order (the network drains them).
        up: False once crashed (datagrams to it are dropped; it is not ticked).
    """

    def __init__(self, network: Network, engine: Any, addr: Hashable, name: str) -> None:
        self.network = network
        self.engine = engine
        self.addr = addr
        self.name = name
        self.events: list[Event] = []
        self.up = True

    @property
    def connected(self) -> bool:
        """True when the engine has at least one connected peer."""
        return bool(self.engine.connected_peers)

    def recv_all(self, limit: int = 1_000_000) -> list[list[bytes]]:
        """Every message the engine has ready, each as a list of ``bytes`` parts."""
        out: list[list[bytes]] = []
        for _ in range(limit):
            try:
                parts = self.engine.recv()
            except WouldBlock:
                break
            out.append([bytes(p) for p in parts])
        return out

    def events_of(self, kind: type) -> list[Any]:
        """The events of one class, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.addr!r}, {type(self.engine).__name__})"


class Network:
    """Simulated datagram network on virtual time.

    Args:
        seed: seeds the link faults (a ``random.Random``).
        link: the default :class:`Link` for every direction (perfect, 1 ms, by default).
        start: the virtual clock's start, seconds.
        tick_interval: also tick every node this often (seconds); None ticks only at each
            engine's ``next_deadline()``.
        max_iterations: a budget for each :meth:`run_until` / :meth:`step` call; running out
            raises :class:`LivelockError`.

    Counters: ``sent``, ``delivered``, ``lost``, ``duplicated``, ``undeliverable`` (to an
    address with no live node), ``bytes_sent``.
    """

    def __init__(
        self,
        seed: int = 0,
        link: Link | None = None,
        start: float = 0.0,
        tick_interval: float | None = None,
        max_iterations: int = 10_000_000,
    ) -> None:
        self.rng = random.Random(seed)
        self.default_link = Link() if link is None else link
        self.now = start
        self.tick_interval = tick_interval
        self.max_iterations = max_iterations
        self.nodes: list[Node] = []
        self._by_addr: dict[Hashable, Node] = {}
        self._links: dict[tuple[Hashable, Hashable], Link] = {}
        self._queue: list[tuple[float, int, Hashable, Hashable, bytes]] = []  # a heap
        self._fifo: deque[tuple[float, int, Hashable, Hashable, bytes]] = deque()
        self._seq = 0
        self._scratch = bytearray(65536)
        self._next_tick = start
        self.sent = 0
        self.delivered = 0
        self.lost = 0
        self.duplicated = 0
        self.undeliverable = 0
        self.bytes_sent = 0

    # ------------------------------------------------------------------ topology

    def add(self, engine: Any, addr: Hashable, name: str | None = None) -> Node:
        """Put ``engine`` at ``addr`` (flushes anything it queued already)."""
        if addr in self._by_addr:
            raise ValueError(f"address {addr!r} is taken")
        node = Node(self, engine, addr, name or f"node{len(self.nodes)}")
        self.nodes.append(node)
        self._by_addr[addr] = node
        self._flush(node)
        return node

    def connect(self, node: Node, remote_addr: Hashable) -> None:
        """``node.engine.connect(remote_addr, now)`` and flush."""
        node.engine.connect(remote_addr, self.now)
        self._flush(node)

    def set_link(self, src: Hashable, dst: Hashable, link: Link) -> None:
        """Use ``link`` for datagrams from address ``src`` to address ``dst``."""
        self._links[(src, dst)] = link

    def set_links(self, a: Hashable, b: Hashable, link: Link) -> None:
        """Use ``link`` both ways between addresses ``a`` and ``b``."""
        self._links[(a, b)] = link
        self._links[(b, a)] = link

    def clear_links(self) -> None:
        """Forget every per-pair link: all directions use the default again."""
        self._links.clear()

    def move(self, node: Node, new_addr: Hashable) -> None:
        """The node's address changes (NAT rebinding): it sends from, and is reached at,
        ``new_addr``; datagrams in flight to the old address are lost."""
        if new_addr in self._by_addr:
            raise ValueError(f"address {new_addr!r} is taken")
        del self._by_addr[node.addr]
        node.addr = new_addr
        self._by_addr[new_addr] = node

    def crash(self, node: Node) -> None:
        """The node stops: it is no longer ticked and datagrams to it are dropped."""
        node.up = False
        if self._by_addr.get(node.addr) is node:
            del self._by_addr[node.addr]

    def replace(self, node: Node, engine: Any) -> Node:
        """A restart: a fresh ``engine`` takes the node's address (the old one is crashed)."""
        self.crash(node)
        return self.add(engine, node.addr, node.name)

    # ------------------------------------------------------------------ application calls

    def send(self, node: Node, parts: Sequence[Any]) -> None:
        """``node.engine.send(parts, now)`` and flush (WouldBlock propagates)."""
        node.engine.send(parts, self.now)
        self._flush(node)

    def flush(self, node: Node) -> None:
        """Put what ``node.engine`` queued on the wire and collect its events (the flush rule;
        :meth:`send` and the clock do this by themselves, call it after calling the engine
        directly)."""
        self._flush(node)

    # ------------------------------------------------------------------ time

    def step(self, dt: float) -> None:
        """Advance the clock by ``dt`` seconds, delivering and ticking in time order."""
        self._advance(self.now + dt, None)

    def run_until(self, predicate: Callable[[], Any], max_time: float) -> bool:
        """Advance until ``predicate()`` is true (checked after every instant processed) or
        ``max_time`` virtual seconds have passed.

        Returns:
            True if the predicate became true, False on timeout.
        """
        if predicate():
            return True
        return self._advance(self.now + max_time, predicate)

    def _next_delivery(self) -> float | None:
        fifo = self._fifo
        heap = self._queue
        if fifo:
            if heap and heap[0] < fifo[0]:
                return heap[0][0]
            return fifo[0][0]
        return heap[0][0] if heap else None

    def _advance(self, target: float, predicate: Callable[[], Any] | None) -> bool:
        heap = self._queue
        fifo = self._fifo
        iterations = 0
        idle_at_same_time = 0
        last_time = self.now
        by_addr = self._by_addr
        nodes = self.nodes
        while True:
            iterations += 1
            if iterations > self.max_iterations:
                raise LivelockError(f"over {self.max_iterations} iterations before t={target}")
            t = self._next_delivery()
            for node in nodes:
                if node.up:
                    deadline = node.engine.next_deadline()
                    if deadline is not None and (t is None or deadline < t):
                        t = deadline
            if self.tick_interval is not None and (t is None or self._next_tick < t):
                t = self._next_tick
            if t is None or t > target:
                self.now = max(self.now, target)
                return False
            if t > self.now:
                self.now = t
            now = self.now
            if now == last_time:
                idle_at_same_time += 1
                if idle_at_same_time > 100_000:
                    raise LivelockError(f"no progress at t={now}")
            else:
                idle_at_same_time = 0
                last_time = now
            # every delivery due now (in (time, seq) order), then one flush per node touched:
            # a transport reading a batch (recvmmsg) flushes once after it, too
            touched: dict[int, Node] = {}
            scratch = self._scratch
            view = memoryview(scratch)
            while True:
                if fifo and fifo[0][0] <= now and not (heap and heap[0] < fifo[0]):
                    _, _, dst, src, data = fifo.popleft()
                elif heap and heap[0][0] <= now:
                    _, _, dst, src, data = heapq.heappop(heap)
                else:
                    break
                target_node = by_addr.get(dst)
                if target_node is None or not target_node.up:
                    self.undeliverable += 1
                    continue
                n = len(data)
                scratch[:n] = data
                target_node.engine.receive_datagram(view[:n], src, now)
                self.delivered += 1
                touched[id(target_node)] = target_node
            for node in touched.values():
                self._flush(node)
            # ticks due
            tick_all = self.tick_interval is not None and self._next_tick <= now
            if tick_all:
                assert self.tick_interval is not None
                self._next_tick = now + self.tick_interval
            for node in nodes:
                if not node.up:
                    continue
                deadline = node.engine.next_deadline()
                if tick_all or (deadline is not None and deadline <= now):
                    node.engine.tick(now)
                    self._flush(node)
            if predicate is not None and predicate():
                return True

    def _flush(self, node: Node) -> None:
        engine = node.engine
        out = engine.datagrams_to_send(self.now)
        if out:
            self._transmit(node.addr, out)
        events = node.events
        while True:
            event = engine.next_event()
            if event is None:
                break
            events.append(event)

    def _transmit(self, src: Hashable, out: list[tuple[Any, Hashable]]) -> None:
        now = self.now
        rng = self.rng
        heap = self._queue
        links = self._links
        default = self.default_link
        seq = self._seq
        fifo_append = self._fifo.append
        default_fifo = default.perfect
        sent = 0
        nbytes = 0
        for data, dst in out:
            data = bytes(data)
            sent += 1
            nbytes += len(data)
            link = links.get((src, dst), default) if links else default
            if link is default and default_fifo:
                # one constant delay: arrival times never decrease, so a FIFO keeps them sorted
                seq += 1
                fifo_append((now + link.delay, seq, dst, src, data))
                continue
            if link.loss and rng.random() < link.loss:
                self.lost += 1
                continue
            copies = 1
            if link.duplicate and rng.random() < link.duplicate:
                copies = 2
                self.duplicated += 1
            for _ in range(copies):
                delay = link.delay + link.jitter * rng.random()
                if link.reorder and rng.random() < link.reorder:
                    delay += link.reorder_delay * rng.random()
                seq += 1
                heapq.heappush(heap, (now + delay, seq, dst, src, data))
        self._seq = seq
        self.sent += sent
        self.bytes_sent += nbytes

    @property
    def in_flight(self) -> int:
        """Datagrams on the wire."""
        return len(self._queue) + len(self._fifo)


def connected_pair(
    server_engine: Any,
    client_engine: Any,
    seed: int = 0,
    link: Link | None = None,
    server_addr: Hashable = ("10.0.0.1", 8000),
    client_addr: Hashable = ("10.0.0.2", 40000),
    max_time: float = 30.0,
) -> tuple[Network, Node, Node]:
    """A network with ``server_engine`` bound at ``server_addr`` and ``client_engine`` dialling
    it from ``client_addr``, run until both are connected.

    Raises:
        TimeoutError: not connected within ``max_time`` virtual seconds.
    """
    net = Network(seed=seed, link=link)
    server_engine.bind(server_addr)
    server = net.add(server_engine, server_addr, "server")
    client = net.add(client_engine, client_addr, "client")
    net.connect(client, server_addr)
    if not net.run_until(lambda: server.connected and client.connected, max_time):
        raise TimeoutError("the pair did not connect")
    return net, server, client
