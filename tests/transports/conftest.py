"""Fixtures of the transport tests: short liveness options, a lossy UDP relay, helpers that
pump sockets with bounded loops."""

from __future__ import annotations

import random
import selectors
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

#: Liveness fast enough for tests: a dead peer goes in 0.6 s, reconnect every 0.1 s.
FAST = dict(peer_heartbeat_ivl=0.05, peer_keepalive=0.6, reconnect_wait=0.1, linger=0.5)

#: The three transports, as the address a server binds.
TRANSPORTS = ("udp", "ipc", "inproc")


def server_address(kind: str, tmp_path) -> str:
    if kind == "udp":
        return "127.0.0.1:0"
    if kind == "ipc":
        return f"ipc://{tmp_path}/s-{uuid.uuid4().hex[:8]}.sock"
    return f"inproc://t-{uuid.uuid4().hex}"


def pump(*socks, until: Callable[[], bool], timeout: float = 5.0, step: float = 0.005) -> bool:
    """Tick every socket until ``until()`` is true or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for s in socks:
            s.tick()
        if until():
            return True
        time.sleep(step)
    return until()


def connected(*socks) -> Callable[[], bool]:
    return lambda: all(len(s.peers) > 0 for s in socks)


class LossyRelay:
    """A UDP relay on 127.0.0.1 between clients and one server that drops and duplicates.

    Each client address gets its own upstream socket, so the server sees one address per
    client. Loss and duplication are drawn from a seeded ``random.Random`` (reproducible for
    a given order of datagrams). Runs in a daemon thread until :meth:`close`.
    """

    def __init__(self, upstream: tuple[str, int], drop: float = 0.2, dup: float = 0.05, seed: int = 7):
        self.upstream = upstream
        self.drop, self.dup = drop, dup
        self.rng = random.Random(seed)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.front.setblocking(False)
        self.address = "%s:%d" % self.front.getsockname()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.front, selectors.EVENT_READ, None)
        self.back: dict[tuple, socket.socket] = {}
        self.stats = {"in": 0, "dropped": 0, "duplicated": 0}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _forward(self, sock: socket.socket, data: bytes, dest) -> None:
        self.stats["in"] += 1
        r = self.rng.random()
        if r < self.drop:
            self.stats["dropped"] += 1
            return
        copies = 2 if r < self.drop + self.dup else 1
        self.stats["duplicated"] += copies - 1
        for _ in range(copies):
            try:
                sock.sendto(data, dest)
            except OSError:
                pass

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self.sel.select(0.05):
                client = key.data
                while True:
                    try:
                        data, src = key.fileobj.recvfrom(2048)
                    except (BlockingIOError, OSError):
                        break
                    if client is None:  # from a client: to the server via its upstream socket
                        up = self.back.get(src)
                        if up is None:
                            up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                            up.bind(("127.0.0.1", 0))
                            up.setblocking(False)
                            self.back[src] = up
                            self.sel.register(up, selectors.EVENT_READ, src)
                        self._forward(up, data, self.upstream)
                    else:  # from the server: back to that client
                        self._forward(self.front, data, client)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        self.sel.close()
        self.front.close()
        for s in self.back.values():
            s.close()


@pytest.fixture
def lossy_relay() -> Iterator[Callable[..., LossyRelay]]:
    relays: list[LossyRelay] = []

    def make(upstream: tuple[str, int], **kw) -> LossyRelay:
        relay = LossyRelay(upstream, **kw)
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        relay.close()


def open_pair(server_cls, client_cls, kind: str, tmp_path, **options):
    """A bound ``server_cls`` and a ``client_cls`` connected to it (handshake done)."""
    opts = {**FAST, **options}
    server = server_cls.bind(server_address(kind, tmp_path), **opts)
    client = client_cls.connect(server.local_address, **opts)
    assert pump(server, client, until=connected(server, client), timeout=5.0), "no handshake"
    return server, client


def recv_n(sock, n: int, *others, timeout: float = 5.0) -> list[list[bytes]]:
    """``n`` messages from ``sock`` as lists of bytes, ticking ``others`` meanwhile."""
    got: list[list[bytes]] = []
    end = time.monotonic() + timeout
    from nbmq.errors import WouldBlock

    while len(got) < n and time.monotonic() < end:
        for other in others:
            other.tick()
        try:
            got.append([bytes(p) for p in sock.recv(timeout=0.01)])
        except WouldBlock:
            pass
    return got
