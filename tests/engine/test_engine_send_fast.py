"""Dealer's compiled send path (``nbmq.engine._fast``: ``send``, the queue's ``take``, the
batch receive) against the pure-Python engine code it twins
(``Socket.send``, ``SendQueue.take``, ``Socket._receive_batch_unacked``): one script of
sends, flushes, peers joining and leaving, ``send_hwm``, ``max_tick_send`` and close gives the
same datagrams (bytes and addresses), the same errors, events and counters."""

from __future__ import annotations

import random
import types

import numpy as np
import pytest

from nbmq import codec
from nbmq.engine import Dealer, sockets
from nbmq.engine.sockets import Socket
from nbmq.options import SocketOptions
from nbmq.wire import FrameKind

needs_fast = pytest.mark.skipif(sockets._fast is None, reason="nbmq.engine._fast is not built")

S = ("10.0.0.1", 8000)
A = ("10.0.0.2", 40000)
B = ("10.0.0.3", 40001)
BIG = bytes(range(256)) * 4  # 1 KiB: three frames


def _sends():
    """Messages of every shape ``send`` takes: small bytes (the compiled case) and the rest."""
    return [
        [b"a" * 100],
        [np.frombuffer(b"j" * 30, dtype=np.uint8)],  # (what recv returns: an echo's reply)
        (b"b" * 466,),
        (np.full(466, 7, dtype=np.uint8),),
        [b"c" * 467],
        [b""],
        [bytearray(b"d" * 10)],
        [memoryview(b"e" * 20)],
        [b"f", b"g"],
        [BIG],
        [b"h" * 3],
        [b"i" * 200],
        [np.full(467, 8, dtype=np.uint8)],
        [np.arange(40, dtype=np.uint8)[::2]],  # not contiguous
        [np.arange(6, dtype=np.uint16)],
        [np.zeros((2, 3), dtype=np.uint8)],
    ]


def _connect(engine, addr, now, log):
    engine.receive_datagram(codec.encode_control_frame(FrameKind.CONNECT, 0), addr, now)
    ((reply, _),) = engine.datagrams_to_send(now)
    sid = codec.parse_frame(reply).session_id
    # a first data frame from it moves it HALF_OPEN -> CONNECTED
    engine.receive_datagram(codec.encode_data_frame(sid, 99, 1, 0, 1, 1, 0, b"z"), addr, now)
    log.append(("out", [(bytes(d), a) for d, a in engine.datagrams_to_send(now)]))
    return sid


def _run(python: bool, monkeypatch):
    opts = SocketOptions(send_hwm=6, max_tick_send=5)
    engine = Dealer(opts, random.Random(7))
    engine.bind(S)
    if python:
        monkeypatch.setattr(sockets, "_fast", None)  # _take_data: SendQueue.take
        engine.send = types.MethodType(Socket.send, engine)
        engine.receive_datagram = types.MethodType(Socket._receive_unacked, engine)
        engine.receive_datagrams = types.MethodType(Socket._receive_batch_unacked, engine)
    log: list = []
    now = 1.0

    def send(parts):
        try:
            engine.send(parts, now)
            log.append(("sent", engine._nonce))
        except Exception as exc:  # the same errors, raised the same way
            log.append(("error", type(exc).__name__, str(exc)))

    def flush():
        log.append(("out", [(bytes(d), a) for d, a in engine.datagrams_to_send(now)]))
        while (event := engine.next_event()) is not None:
            log.append(("event", repr(event)))

    send([b"early"])  # no peer yet: it waits
    send([b"early2" * 10])
    flush()
    sid_a = _connect(engine, A, now, log)
    flush()  # the waiting messages go to A
    sid_b = _connect(engine, B, now, log)
    for round_ in range(3):  # round-robin over A and B; send_hwm 6 refuses the rest
        now += 0.01
        for parts in _sends():
            send(parts)
        for _ in range(3):  # max_tick_send 5: in several takes
            flush()
    now += 0.01
    for i in range(4):
        send([bytes([i]) * 50])
    # B leaves with messages queued: they go to A (no fixed peer yet)
    engine.receive_datagram(codec.encode_control_frame(FrameKind.DISCONNECTED, sid_b), B, now)
    flush()
    flush()
    # a batch of whole one-frame messages from A and one from an unknown session
    frames = [codec.encode_data_frame(sid_a, 200 + i, 1, 0, 30, 30, 0, bytes([i]) * 30) for i in range(4)]
    frames.insert(2, codec.encode_data_frame(sid_a ^ 5, 7, 1, 0, 3, 3, 0, b"xyz"))
    buf = b"".join(frames)
    offsets = [sum(map(len, frames[:i])) for i in range(len(frames))]
    engine.receive_datagrams(memoryview(buf), offsets, [len(f) for f in frames], [A] * len(frames), now)
    while engine.recv_ready():
        log.append(("msg", [bytes(p) for p in engine.recv()]))
    flush()
    engine.set_option("reference_compat", True)
    send([b"ok"])
    send([b""])
    engine.set_option("reference_compat", False)
    flush()
    engine.close(now)
    send([b"late"])
    flush()
    log.append(("pending", engine.pending_messages))
    assert sid_a != sid_b
    peers = sorted((p.session_id, p.addr, p.state, p.last_sent, p.last_seen) for p in engine.peers.values())
    return log + [("peers", peers)], engine.counters.as_dict()


@needs_fast
def test_compiled_send_matches_the_python_path(monkeypatch):
    assert Dealer.send is sockets._fast.send
    fast_log, fast_counters = _run(False, monkeypatch)
    assert Dealer.receive_datagram is sockets._fast.receive_one
    with monkeypatch.context() as m:
        slow_log, slow_counters = _run(True, m)
    assert fast_log == slow_log
    assert fast_counters == slow_counters
    # the script reaches what it claims to
    errors = [entry[1] for entry in fast_log if entry[0] == "error"]
    assert "WouldBlock" in errors and "InteropError" in errors and "NbmqError" in errors
    outs = [d for entry in fast_log if entry[0] == "out" for d in entry[1]]
    assert {a for _, a in outs} == {A, B}
    assert fast_counters["messages_out"] > 20 and fast_counters["unknown_session"] == 1
    assert sum(1 for entry in fast_log if entry[0] == "msg") == 6  # 2 "z" + 4


@needs_fast
def test_compiled_take_hands_out_what_the_python_take_would():
    """Frame by frame: the compiled take writes the frame ``codec.encode_data_frame`` writes."""
    opts = SocketOptions(send_hwm=100)
    engine = Dealer(opts, random.Random(3))
    engine.bind(S)
    log: list = []
    sid = _connect(engine, A, 1.0, log)
    for size in (1, 100, 466):
        engine.send([b"q" * size], 1.0)
    out = engine.datagrams_to_send(1.0)
    nonce = 1 + 0  # the Dealer's first nonce
    expect = []
    for size in (1, 100, 466):
        mid = codec.message_id([], nonce)  # over the nonce alone outside reference_compat
        nonce += 1
        expect.append((codec.encode_data_frame(sid, mid, 1, 0, size, size, 0, b"q" * size), A))
    assert [(bytes(d), a) for d, a in out] == expect


def _receive_run(python: bool, datagrams: list, monkeypatch):
    opts = SocketOptions(recv_hwm=10, max_message_size=400, max_incomplete_bytes=4096)
    engine = Dealer(opts, random.Random(11))
    engine.bind(S)
    if python:
        engine.receive_datagram = types.MethodType(Socket._receive_unacked, engine)
        engine.receive_datagrams = types.MethodType(Socket._receive_batch_unacked, engine)
    log: list = []
    sid = _connect(engine, A, 1.0, log)
    now = 1.0
    rng = random.Random(5)
    i = 0
    while i < len(datagrams):
        now += 0.001
        group = [(d(sid) if callable(d) else d, a) for d, a in datagrams[i : i + rng.randint(1, 6)]]
        i += len(group)
        if rng.random() < 0.3:  # one at a time: receive_datagram
            for data, addr in group:
                engine.receive_datagram(memoryview(bytearray(data)), addr, now)
        else:
            buf = bytearray(b"".join(d for d, _ in group))
            lengths = [len(d) for d, _ in group]
            offsets = [sum(lengths[:k]) for k in range(len(group))]
            engine.receive_datagrams(memoryview(buf), offsets, lengths, [a for _, a in group], now)
        log.append(("out", [(bytes(d), a) for d, a in engine.datagrams_to_send(now)]))
        while (event := engine.next_event()) is not None:
            log.append(("event", repr(event)))
        for _ in range(rng.randint(0, 3)):
            if engine.recv_ready():
                log.append(("msg", [bytes(p) for p in engine.recv()]))
    peers = sorted((p.session_id, p.addr, p.state, p.last_seen) for p in engine.peers.values())
    return log + [("peers", peers)], engine.counters.as_dict()


def _mutated_datagrams(seed: int, count: int) -> list:
    """Whole one-frame messages (the compiled case), with one byte of some of them changed
    (header or payload), truncated or lengthened, multi-chunk messages, other addresses."""
    rng = random.Random(seed)
    out: list = []
    for m in range(count):
        size = rng.choice([1, 10, 100, 400, 401, 466])
        kind = rng.random()

        def make(sid, m=m, size=size, kind=kind, r=rng.random(), pos=rng.randrange(34 + size), val=rng.randrange(256)):
            frame = bytearray(codec.encode_data_frame(sid, m, 1, 0, size, size, 0, bytes([m % 256]) * size))
            if kind < 0.25:
                frame[pos] = val
            elif kind < 0.3:
                frame = frame[:pos]
            elif kind < 0.35:
                frame += b"\0"
            return bytes(frame)

        if kind > 0.9:
            frames = codec.shard_message([bytes(range(200)), bytes(200)], 0, 1000 + m)
            for f in frames.frames():
                out.append(
                    (
                        lambda sid, f=bytes(f): codec.encode_data_frame(
                            sid, *codec.parse_frame(f)[1:7], bytes(codec.parse_frame(f)[7])
                        ),
                        A,
                    )
                )
            continue
        out.append((make, B if kind > 0.85 else A))
    return out


@needs_fast
@pytest.mark.parametrize("seed", range(6))
def test_compiled_receive_matches_the_python_path_on_mutated_frames(seed, monkeypatch):
    """Bad input (any header byte changed, cut, lengthened), budgets, recv_hwm and paths: the
    compiled receive takes only what the Python path would complete the same way."""
    datagrams = _mutated_datagrams(seed, 400)
    fast = _receive_run(False, datagrams, monkeypatch)
    slow = _receive_run(True, datagrams, monkeypatch)
    assert fast == slow
    counters = fast[1]
    assert counters["messages_in"] > 100 and counters["malformed"] > 0
    assert counters["dropped_recv_hwm"] > 0 and counters["dropped_too_large"] > 0


@needs_fast
def test_compiled_send_refuses_a_nonce_past_u64_as_the_python_path(monkeypatch):
    """The message id hashes the nonce as 8 bytes: past 2**64 - 1 both paths raise the
    codec's OverflowError and queue nothing (the compiled one must not wrap it)."""
    results = []
    for python in (False, True):
        engine = Dealer(SocketOptions(), random.Random(3))
        if python:
            engine.send = types.MethodType(Socket.send, engine)
        engine._nonce = 2**64 - 1
        engine.send([b"last"], 1.0)
        with pytest.raises(OverflowError) as info:
            engine.send([b"past"], 1.0)
        results.append((str(info.value), engine.pending_messages, engine._nonce))
    assert results[0] == results[1] == (results[0][0], 1, 2**64)


@needs_fast
def test_compiled_send_packed_meets_the_last_nonce_as_the_python_path():
    """A packed run that would pass 2**64 - 1 queues up to the last u64 nonce, then raises the
    codec's OverflowError, in both paths (the compiled one keeps the nonce in C)."""
    results = []
    for python in (False, True):
        engine = Dealer(SocketOptions(), random.Random(3))
        if python:
            engine.send = types.MethodType(Socket.send, engine)
            engine.send_packed = types.MethodType(Socket.send_packed, engine)
        engine._nonce = 2**64 - 3
        data = bytes(range(5)) * 4
        with pytest.raises(OverflowError) as info:
            engine.send_packed(data, [0, 4, 8, 12, 16], [4] * 5, 1.0)
        ids = [m.message_id for m in engine._sendq._queue]
        results.append((str(info.value), engine.pending_messages, engine._nonce, ids))
    assert results[0] == results[1]
    assert results[0][1:3] == (3, 2**64)


def test_compiled_engine_path_in_use_when_required():
    """Under NBMQ_REQUIRE_EXTENSIONS=1 (CI) the Dealer runs the compiled path, not a silent
    fallback; under NBMQ_NO_EXTENSIONS=1 it runs the Python twin."""
    import os

    if os.environ.get("NBMQ_NO_EXTENSIONS", "") not in ("", "0"):
        assert sockets._fast is None and Dealer.send is Socket.send
    elif os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        assert sockets._fast is not None
        assert Dealer.send is sockets._fast.send
        assert Dealer.receive_datagrams is sockets._fast.receive_batch
    else:
        pytest.skip("neither NBMQ_REQUIRE_EXTENSIONS nor NBMQ_NO_EXTENSIONS is set")
