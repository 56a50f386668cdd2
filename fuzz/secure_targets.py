"""Fuzz target of secure mode's frame opener (``nbmq/engine/secure.py``) on both engine paths.

``secure_frames`` gives two bound secure Dealers the same handshake (fixed keys, ephemerals drawn
from a seeded generator, the same session id), so they hold the same session keys; one hands the
opened frames to the compiled receive path, the other to the Python one. Then both take the
script the input describes, datagram by datagram. The genuine datagrams are lone sealed frames
and bundles (several frames under one seal). After every step both must show the same
datagrams out, events, messages and counters, and these must hold:

- nothing but genuine messages comes out, each at most once (replays never deliver);
- every datagram is counted: a genuine frame's first delivery is taken, anything else (altered,
  forged, replayed, plain, truncated) adds exactly one to the refusal counters.

Input layout: ``framing.split_operations``; ``op & 3`` the datagram: 0 a genuine sealed frame from
the pool (``(op >> 2) & 31`` picks it), 1 a genuine frame with the body XORed in at that offset,
2 the body as a datagram of its own, 3 the body after a secure header of the session (a forged
frame). ``op & 0x80`` holds it for a ``receive_datagrams`` batch with the next ones.
"""

from __future__ import annotations

import random
import types
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from .engine_targets import _python_engine, _state
from .framing import join_operations, split_operations
from .twins import Finding, check_same

__all__ = ["secure_frames", "secure_seeds", "REFUSALS"]

SERVER = ("10.0.0.1", 8000)
CLIENT = ("10.0.0.2", 40000)
#: Counters a refused datagram adds one to (exactly one of them)
REFUSALS = (
    "secure_auth_failed",
    "secure_replays",
    "secure_downgrades",
    "secure_handshakes_failed",
    "malformed",
    "unknown_session",
    "unexpected",
)
_MESSAGES = [[b"m%d" % i] for i in range(6)] + [[b"x" * 1200, b"y" * 30]]
#: The messages of each flush: one alone goes as one sealed frame (0x81); several, or one of
#: several frames, as a bundle (0x82) of up to 1472 bytes
_FLUSHES = [[0], [1], [2], [3, 4, 5], [6]]


@contextmanager
def _seeded_ephemerals(seed: int) -> Iterator[None]:
    """Handshake ephemerals from ``random.Random(seed)`` while the block runs (fuzzing only: a
    repeatable handshake)."""
    from nbmq.engine import noise

    real = noise.X25519PrivateKey
    rng = random.Random(seed)

    class Seeded:
        from_private_bytes = staticmethod(real.from_private_bytes)

        @staticmethod
        def generate() -> Any:
            return real.from_private_bytes(rng.randbytes(32))

    noise.X25519PrivateKey = Seeded  # type: ignore[misc]
    try:
        yield
    finally:
        noise.X25519PrivateKey = real  # type: ignore[misc]


def _keys() -> tuple[bytes, bytes, bytes]:
    from nbmq.engine.noise import public_key

    rng = random.Random(1)
    server_secret, client_secret = rng.randbytes(32), rng.randbytes(32)
    return public_key(server_secret), server_secret, client_secret


def _server(python: bool) -> Any:
    from nbmq.engine import Dealer
    from nbmq.engine.sockets import Socket
    from nbmq.options import SocketOptions

    _, server_secret, _ = _keys()
    server = Dealer(SocketOptions(secret_key=server_secret), random.Random(3))
    server.bind(SERVER)
    if python:
        server._receive_plain = types.MethodType(Socket._receive_unacked, server)
        server._receive_plain_batch = types.MethodType(Socket._receive_batch_unacked, server)
    return server


_POOL: dict[str, Any] = {}


def _pool() -> dict[str, Any]:
    """The handshake (Connect, then the client's first sealed frame) and the genuine sealed frames
    of every message in ``_MESSAGES``, made once against a server like the ones the target makes."""
    if _POOL:
        return _POOL
    from nbmq.engine import Dealer
    from nbmq.options import SocketOptions

    server_public, _, client_secret = _keys()
    server = _server(False)
    with _seeded_ephemerals(4):
        client = Dealer.connecting(
            SERVER,
            0.0,
            SocketOptions(secret_key=client_secret, server_public_key=server_public, max_datagram_size=1472),
            random.Random(5),
        )
    ((connect, _),) = client.datagrams_to_send(0.0)
    with _seeded_ephemerals(2):
        server.receive_datagram(connect, CLIENT, 0.0)
    for data, _ in server.datagrams_to_send(0.0):
        client.receive_datagram(data, SERVER, 0.0)
    opening = [bytes(d) for d, _ in client.datagrams_to_send(0.0)]
    frames: list[bytes] = []
    for flush in _FLUSHES:  # lone sealed frames, then bundles
        for index in flush:
            client.send(_MESSAGES[index], 0.0)
        frames += [bytes(data) for data, _ in client.datagrams_to_send(0.0)]
    _POOL.update(connect=bytes(connect), opening=opening, frames=frames)
    return _POOL


def _refusals(engine: Any) -> int:
    counters = engine.counters
    return sum(getattr(counters, name) for name in REFUSALS)


def _recv_all(engine: Any) -> list[list[bytes]]:
    out = []
    for _ in range(64):
        try:
            out.append([bytes(p) for p in engine.recv()])
        except Exception:  # WouldBlock: nothing more
            return out
    return out


def secure_frames(data: bytes) -> None:
    """Both secure servers through the script ``data`` describes; the twins agree and every
    datagram is taken once or refused once."""
    pool = _pool()
    frames: list[bytes] = pool["frames"]
    compiled, python = _server(False), _server(True)
    for engine in (compiled, python):
        with _seeded_ephemerals(2):  # each its own generator: the same ephemeral, the same keys
            engine.receive_datagram(pool["connect"], CLIENT, 0.0)
        for datagram in pool["opening"]:
            engine.receive_datagram(datagram, CLIENT, 0.0)
    now = 0.0
    taken: set[bytes] = set()
    held: list[bytes] = []  # datagrams held for one receive_datagrams batch
    expected = 0  # refusals the held datagrams must add
    steps = split_operations(data)[:200]
    for step, (op, body) in enumerate(steps):
        kind, arg = op & 3, (op >> 2) & 31
        if kind == 0:
            datagram = frames[arg % len(frames)]
        elif kind == 1:
            base = bytearray(frames[arg % len(frames)])
            for i, byte in enumerate(body[:64]):
                base[(arg + i) % len(base)] ^= byte
            datagram = bytes(base)
        elif kind == 2:
            datagram = body
        else:
            datagram = frames[arg % len(frames)][:18] + body
        if datagram in frames and datagram not in taken:
            taken.add(datagram)
        else:
            expected += 1
        held.append(datagram)
        if op & 0x80 and step + 1 < len(steps):
            continue  # held: the next steps join the batch
        now += 0.001
        _feed_both(compiled, python, held, expected, now, step)
        held, expected = [], 0
    delivered = compiled.counters.messages_in
    if delivered > len(_MESSAGES):
        raise Finding(f"{delivered} messages delivered from {len(_MESSAGES)} sent")


def _feed_both(compiled: Any, python: Any, held: list[bytes], expected: int, now: float, step: int) -> None:
    """Feed ``held`` to both servers (one datagram: ``receive_datagram``; more: one
    ``receive_datagrams`` batch), then compare them and check the refusals and messages."""
    states = []
    for engine, is_python in ((compiled, False), (python, True)):
        before = _refusals(engine)
        with _python_engine() if is_python else nullcontext():
            if len(held) == 1:
                engine.receive_datagram(held[0], CLIENT, now)
            else:
                lengths = [len(d) for d in held]
                offsets = [sum(lengths[:i]) for i in range(len(held))]
                engine.receive_datagrams(memoryview(b"".join(held)), offsets, lengths, [CLIENT] * len(held), now)
            state = _state(engine, now)
        refused = _refusals(engine) - before
        if refused != expected:
            raise Finding(f"step {step}: {refused} refusals counted for {expected} bad datagrams of {len(held)}")
        states.append((state, _recv_all(engine)))
    check_same(f"step {step}", states[1], states[0])
    for message in states[0][1]:
        if message not in _MESSAGES:
            raise Finding(f"step {step}: a message that was never sent came out: {message!r}")


def secure_seeds() -> list[bytes]:
    """Scripts: every genuine frame in order, replays, flipped bits, plain and forged frames,
    forged bundles."""
    pool = _pool()
    n = len(pool["frames"])
    ordered = [((i << 2) | 0, b"") for i in range(n)]
    return [
        join_operations(ordered),
        join_operations(ordered + ordered[:3]),  # replays after delivery
        join_operations([((5 << 2) | 1, b"\x01")] + ordered),  # a flipped bit first
        join_operations([(2, b"\x01\x00" + bytes(8)), (2, b"\x81\x01" + bytes(8) + bytes(96))] + ordered[:2]),
        join_operations([(3, bytes(24)), (3, b"\x00" * 8 + bytes(16))] + ordered[::-1]),  # forged, then reordered
        join_operations([((i << 2) | 1, bytes([1 << (i % 8)])) for i in range(0, 40, 3)]),
        join_operations([(op | 0x80, body) for op, body in ordered + ordered[:2]] + [(3, bytes(30))]),  # one batch
        join_operations([((5 << 2) | 1 | 0x80, b"\x04"), (2 | 0x80, b"\x01" + bytes(9))] + ordered),  # mixed batch
        join_operations([(2, b"\x82\x02" + bytes(60)), (2, b"\x82\xff"), (3, bytes(40))] + ordered[::-1]),  # bundles
    ]
