"""Fuzz target of the compiled engine (``nbmq/engine/_fast.pyx``) against the Python engine.

``engine_twins`` drives two sockets of one class in lockstep with a script read from the input:
one runs the compiled hot path (``send``, ``receive_one``, ``receive_batch``,
``receive_batch_safe``, ``ack``, ``take``, ``take_safe``: what the class picks when the
extensions are built), the other the Python code they twin (``Socket.send``,
``Socket._receive_unacked``, ``Socket._receive_batch_unacked``,
``SafeDealer._receive_datagrams_py``, and ``SendQueue.take`` with ``sockets._fast`` set to
None while it runs). After every step both must have handed out the same datagrams (bytes and
addresses), raised the same errors, queued the same events and messages, and hold the same
counters and next deadline (the rule of ``nbmq/engine/_fast.pyx``'s docstring).

Input layout: byte 0 picks the socket class (``% 3``: Dealer, SafeDealer, Dish) and the
options (``// 3 % 4``: :data:`OPTIONS`); byte 1 seeds both sockets' random generators; the
rest is ``framing.split_operations``: ``op & 15`` the step (see ``engine_twins``), ``op >> 4``
its argument (bits 0-1 a peer, bit 2 "hold for a batch", bit 3 a variant; or a time step, an
option), the piece its bytes.
"""

from __future__ import annotations

import random
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nbmq import codec
from nbmq.wire import FrameKind

from .framing import split_operations
from .twins import Finding, check_same

__all__ = ["engine_twins", "engine_seeds", "OPTIONS", "OPTION_CHANGES"]

LOCAL = ("10.0.0.1", 8000)
PEERS = (("10.0.0.2", 40000), ("10.0.0.3", 40001), ("10.0.0.4", 40002), ("10.0.0.2", 40009))

#: SocketOptions keyword sets: small queues and budgets so high-water marks, evictions,
#: resends and congestion windows are reached within a few steps
OPTIONS = (
    {},
    {"send_hwm": 3, "recv_hwm": 2, "max_tick_send": 2, "max_message_size": 1500, "max_incomplete_bytes": 3000},
    {
        "safe_resend_ivl": 0.05,
        "safe_resend_limit": 2,
        "peer_keepalive": 1.0,
        "peer_heartbeat_ivl": 0.2,
        "uncompleted_message_ttl": 0.5,
        "max_peer_incomplete_bytes": 2000,
    },
    {"send_hwm": 50, "max_tick_send": 64, "recv_hwm": 100},
)
#: (name, value) of the option-change step
OPTION_CHANGES = (
    ("send_hwm", 1),
    ("send_hwm", 1000),
    ("recv_hwm", 1),
    ("recv_hwm", 1000),
    ("max_tick_send", 1),
    ("max_tick_send", 100),
    ("max_message_size", 100),
    ("max_incomplete_bytes", 600),
    ("max_peer_incomplete_bytes", 400),
    ("safe_resend_ivl", 0.01),
    ("safe_resend_limit", 0),
    ("uncompleted_message_ttl", 0.05),
    ("peer_keepalive", 0.3),
    ("peer_heartbeat_ivl", 0.05),
    ("queue_maint_ivl", 0.01),
    ("max_message_size", 2**32 - 1),
)


def _sockets(kind: int, options: dict, seed: int) -> tuple[Any, Any]:
    """(compiled, python): two bound sockets of one class, the second on the Python code."""
    from nbmq.engine import Dealer, Dish, SafeDealer
    from nbmq.engine.sockets import Socket
    from nbmq.options import SocketOptions

    cls = (Dealer, SafeDealer, Dish)[kind]
    pair = []
    for _ in range(2):
        s = cls(SocketOptions(**options), random.Random(seed))
        s.bind(LOCAL)
        pair.append(s)
    python = pair[1]
    if cls is not Dish:
        python.send = types.MethodType(Socket.send, python)
    if cls is SafeDealer:
        python.receive_datagrams = types.MethodType(SafeDealer._receive_datagrams_py, python)
    else:
        python.receive_datagram = types.MethodType(Socket._receive_unacked, python)
        python.receive_datagrams = types.MethodType(Socket._receive_batch_unacked, python)
    return pair[0], python


@contextmanager
def _python_engine() -> Iterator[None]:
    """``sockets._fast`` None while the Python socket runs: its tick takes with ``SendQueue.take``."""
    from nbmq.engine import sockets

    saved = sockets._fast
    sockets._fast = None
    try:
        yield
    finally:
        sockets._fast = saved


def _call(fn: Any, *args: Any) -> tuple:
    try:
        result = fn(*args)
    except Exception as e:  # the same errors, raised the same way (class and text)
        return ("raise", type(e).__name__, str(e))
    if isinstance(result, list):
        return ("ok", [bytes(p) for p in result])
    return ("ok", result)


def _state(s: Any, now: float) -> tuple:
    """Everything observable after a step: datagrams out, events, messages ready, counters, deadline."""
    out = [(bytes(d), a) for d, a in s.datagrams_to_send(now)]
    events = []
    while (event := s.next_event()) is not None:
        events.append(repr(event))
    return (
        out,
        events,
        s.recv_ready(),
        s.counters.as_dict(),
        s.next_deadline(),
        s.incomplete_messages,
        s.frames_in_flight,
        s.pending_messages,
        sorted((sid, p.addr, p.state.name) for sid, p in s.peers.items()),
    )


class _Script:
    """What the steps refer to: the peers' session ids, datagrams handed out and received."""

    def __init__(self) -> None:
        self.sids: dict[int, int] = {}
        self.sent: list[bytes] = []
        self.received: list[tuple[bytes, tuple]] = []
        self.mid = 1

    def learn(self, out: list[tuple[bytes, tuple]]) -> None:
        for d, addr in out:
            self.sent.append(d)
            if len(d) > 1 and d[1] == FrameKind.CONNECTED and addr in PEERS:
                self.sids[PEERS.index(addr)] = codec.parse_frame(d).session_id
        del self.sent[:-64]

    def sid(self, peer: int) -> int:
        return self.sids.get(peer, peer + 1)


def _datagrams(script: _Script, kind: int, arg: int, body: bytes) -> list[tuple[bytes, tuple]]:
    """The datagrams a receive step feeds (``kind`` 0-5 of ``engine_twins``)."""
    peer = arg % len(PEERS)
    addr, sid = PEERS[peer], script.sid(peer)
    if kind == 0:  # a peer joins (or rejoins)
        return [(bytes(codec.encode_control_frame(FrameKind.CONNECT, 0)), addr)]
    if kind == 1:  # a whole small message, or a part of a larger one the body describes
        script.mid += 1
        chunk = body[:466]
        if arg & 8 and len(body) >= 4:
            pc, pi, size = 1 + body[0] % 3, body[1] % 3, len(chunk) + body[2] * 4
            return [
                (
                    bytes(
                        codec.encode_data_frame(
                            sid, script.mid - body[3] % 3, pc, min(pi, pc - 1), size, size, 0, chunk
                        )
                    ),
                    addr,
                )
            ]
        return [(bytes(codec.encode_data_frame(sid, script.mid, 1, 0, len(chunk), len(chunk), 0, chunk)), addr)]
    if kind == 2:  # hostile bytes: a header with the peer's session id, then anything
        return [(bytes([1, body[0] % 6 if body else 0]) + sid.to_bytes(8, "big") + body[1:], addr)]
    if kind == 3:  # an Ack: of a data frame handed out (arg picks which), or for an unknown frame
        data = [d for d in script.sent if len(d) > 1 and d[1] == FrameKind.DATA]
        if data and not arg & 8:
            d = data[-1 - (body[0] if body else 0) % len(data)]
            payload = codec.ack_hash(d).to_bytes(8, "big")
            sid = codec.parse_frame(d).session_id
        else:
            payload = body[:8]
        return [(bytes(codec.encode_control_frame(FrameKind.ACK, sid, payload)), addr)]
    if kind == 4:  # a resend: a datagram received before, again
        if not script.received:
            return []
        return [script.received[-1 - arg % len(script.received)]]
    # a peer leaves (DISCONNECTED) or keeps alive (HEARTBEAT)
    frame = FrameKind.DISCONNECTED if arg & 8 else FrameKind.HEARTBEAT
    return [(bytes(codec.encode_control_frame(frame, sid)), addr)]


def engine_twins(data: bytes) -> None:
    """Both engines through the script ``data`` describes: the same observable state after every step."""
    if len(data) < 2:
        return
    compiled, python = _sockets(data[0] % 3, OPTIONS[(data[0] // 3) % 4], data[1])
    script = _Script()
    now = 1.0
    batch: list[tuple[bytes, tuple]] = []
    for step, (op, body) in enumerate(split_operations(data[2:])[:200]):
        kind, arg = op & 15, op >> 4
        now += 0.001
        calls: list[tuple[str, tuple]] = []
        if kind <= 5:
            grams = _datagrams(script, kind, arg, body)
            if arg & 4 and kind != 0:  # held for one receive_datagrams batch
                batch.extend(grams)
                continue
            calls = [("receive_datagram", (d, a, now)) for d, a in grams]
            script.received.extend(grams)
        elif kind == 6:  # a batch of what was held, plus the body as one more hostile datagram
            odd = None
            if arg & 8 and len(body) >= 16:  # and a row anywhere: offset and length from the body
                odd = (int.from_bytes(body[:8], "big", signed=True), int.from_bytes(body[8:16], "big", signed=True))
                body = body[16:]
            grams = batch + [(body, PEERS[arg % len(PEERS)])]
            batch = []
            buf = b"".join(d for d, _ in grams)
            lengths = [len(d) for d, _ in grams]
            offsets = [sum(lengths[:i]) for i in range(len(lengths))]
            addrs = [a for _, a in grams]
            if odd is not None:
                offsets.append(odd[0])
                lengths.append(odd[1])
                addrs.append(PEERS[arg % len(PEERS)])
            calls = [("receive_datagrams", (memoryview(buf), offsets, lengths, addrs, now))]
            script.received.extend(grams[:-1])
        elif kind in (7, 8):  # a send: the body, or several parts, or a message of several frames
            parts = [body] if kind == 7 else [body * (1 + arg % 5)] * (1 + arg % 3)
            calls = [("send", (parts, now))]
        elif kind == 9:  # time passes
            now += (arg + 1) * 0.05
            calls = [("tick", (now,))]
        elif kind == 10:
            name, value = OPTION_CHANGES[arg % len(OPTION_CHANGES)]
            calls = [("set_option", (name, value))]
        elif kind == 11:
            calls = [("recv", ())] * (1 + arg % 4)
        elif kind == 12:
            calls = [("connect", (PEERS[arg % len(PEERS)], now))]
        elif kind == 13:  # the deadline the engine asked for, exactly
            deadline = compiled.next_deadline()
            if deadline is not None and deadline > now:
                now = deadline
            calls = [("tick", (now,))]
        elif kind == 14:
            calls = [("close", (now,))]
        else:
            calls = [("kernel_dropped", (arg,))]
        states = []
        for s in (compiled, python):
            with _python_engine() if s is python else _nothing():
                results = [_call(getattr(s, name), *args) for name, args in calls]
                states.append((results, _state(s, now)))
        check_same(f"engine step {step} (op {op}: {[name for name, _ in calls]})", states[1], states[0])
        script.learn(states[0][1][0])
    if compiled.counters.as_dict() != python.counters.as_dict():
        raise Finding("the counters differ at the end")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def engine_seeds() -> list[bytes]:
    """Seed scripts: two peers join, messages both ways (small, sharded, hostile), acks of
    frames handed out and of unknown ones, a batch, resends, ticks past every deadline, option
    changes and a peer leaving; for every socket class and option set."""
    from .framing import join_operations

    small, big = b"m" * 40, bytes(range(256)) * 2
    plan = [
        (0, b""),
        (0 | 16, b""),
        (1, small),
        (1 | 16, small),
        (12, b""),
        (7, small),
        (8 | 16, big[:300]),
        (9, b""),
        (3, b""),
        (3 | 16 * 8, b"\x01" * 8),
        (1 | 16 * 4, small),
        (2 | 16 * 4, b"\x00\x01\x02"),
        (6, b"junk"),
        (4, b""),
        (11 | 16 * 3, b""),
        (10 | 16 * 1, b""),
        (7, big[:466]),
        (7, big[:467]),
        (13, b""),
        (13, b""),
        (3 | 16 * 3, b"\x02"),
        (1 | 16 * 8, b"\x02\x01\x05\x00" + small),
        (9 | 16 * 15, b""),
        (10 | 16 * 11, b""),
        (13, b""),
        (5 | 16 * 8, b""),
        (5 | 16 * 9, b""),
        (11, b""),
        (14, b""),
        (7, small),
    ]
    body = join_operations(plan)
    return [bytes([k, 7]) + body for k in range(12)]
