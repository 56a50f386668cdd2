"""The blocking socket's compiled ``send`` / ``recv`` (``nbmq.transports._socket``) against the
Python methods they twin (``Socket._send_py`` / ``Socket._recv_py``): one script of messages
of every shape, ``flush`` values, a full queue without a peer, a send-only and a receive-only
socket and a closed one gives the same messages, errors, auto-flush state and counters."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from nbmq.errors import WouldBlock
from nbmq.transports import socket as socket_module
from nbmq.transports.socket import AUTO_FLUSH, Dealer, Dish, Radio, SafeDealer, Socket

from .conftest import FAST, pump

needs_compiled = pytest.mark.skipif(not socket_module.COMPILED, reason="nbmq.transports._socket is not built")


def _shapes() -> list:
    """Every shape ``send`` takes (the compiled case: one bytes / bytearray part of at most
    466 bytes, bare or in a list or tuple) with the flush values it may get."""
    return [
        (b"a" * 100, None),
        ([b"b" * 466], None),
        ((b"c" * 10,), None),
        (bytearray(b"d" * 30), None),
        ([bytearray(b"e" * 466)], None),
        (b"f" * 467, None),
        (memoryview(b"g" * 20), None),
        (np.frombuffer(b"h" * 12, dtype=np.uint8), None),
        ([np.frombuffer(b"i" * 12, dtype=np.uint8)], None),
        ((np.full(466, 3, dtype=np.uint8),), True),
        ([np.full(467, 4, dtype=np.uint8)], None),
        ([np.arange(6, dtype=np.uint16)], None),
        ([np.zeros((2, 3), dtype=np.uint8)], None),
        ([np.arange(20, dtype=np.uint8)[::2]], False),
        ([b"j", b"k"], None),
        ([b""], None),
        (b"", None),
        (b"l" * 40, True),
        (b"m" * 40, False),
        (b"n" * 40, 0),
        ([b"o" * 40], 1),
        ((b"p" * 40,), False),
        ([], None),
        ("text", None),
    ]


def _call(log: list, fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # the same errors, raised the same way
        log.append(("error", type(exc).__name__, str(exc)))
        return None
    log.append(("ok", None if result is None else [bytes(p) for p in result]))
    return result


def _script(kind: type[Socket]) -> list:
    log: list = []
    name = f"inproc://fast-{uuid.uuid4().hex}"
    with kind.bind(name, **FAST) as server, kind.connect(name, **FAST) as client:
        assert pump(server, client, until=lambda: server.connected and client.connected)
        for i in range(AUTO_FLUSH + 5):  # past AUTO_FLUSH datagrams: the auto-flush runs
            _call(log, client.send, bytes([i]) * 10)
            log.append(("unflushed", client._unflushed, client.counters.data_frames_out))
        for round_ in range(5):
            for parts, flush in _shapes():
                if flush is None:
                    _call(log, client.send, parts)
                else:
                    _call(log, client.send, parts, flush=flush)
                log.append(("unflushed", client._unflushed, client.counters.data_frames_out))
        expected = sum(1 for entry in log if entry == ("ok", None))  # the sends taken
        _call(log, client.flush)
        assert pump(server, client, until=lambda: server.engine.recv_ready() >= expected)
        for _ in range(expected + 1):
            _call(log, server.recv)
        client.send(b"tail", flush=False)
        _call(log, client.recv)  # flushes what send() batched, then WouldBlock
        log.append(("unflushed", client._unflushed, client.counters.data_frames_out))
        log.append(("counters", sorted(client.counters.as_dict().items())))
    _call(log, client.send, b"closed")
    _call(log, client.recv)
    # a full queue without a peer: WouldBlock, then NoPeer after the timeout
    with kind.connect(f"inproc://nobody-{uuid.uuid4().hex}", send_hwm=3, **FAST) as lonely:
        for i in range(5):
            _call(log, lonely.send, bytes([i]) * 8)
        _call(log, lonely.send, b"x", timeout=0.01)
        log.append(("held", lonely.engine.pending_messages))
    return log


def _one_way(log: list) -> None:
    name = f"inproc://oneway-{uuid.uuid4().hex}"
    with Dish.bind(name, **FAST) as dish, Radio.connect(name, **FAST) as radio:
        _call(log, dish.send, b"not here")
        _call(log, radio.recv)
        _call(log, radio.send, b"x" * 50)


@needs_compiled
@pytest.mark.parametrize("kind", [Dealer, SafeDealer])
def test_compiled_send_and_recv_match_the_python_methods(kind, monkeypatch):
    assert Socket.send is not Socket._send_py and Socket.recv is not Socket._recv_py
    fast = _script(kind)
    _one_way(fast)
    with monkeypatch.context() as m:
        m.setattr(Socket, "send", Socket._send_py)
        m.setattr(Socket, "recv", Socket._recv_py)
        slow = _script(kind)
        _one_way(slow)
    assert [e for e in fast if e[0] != "counters"] == [e for e in slow if e[0] != "counters"]
    assert [e for e in fast if e[0] == "counters"] == [e for e in slow if e[0] == "counters"]
    # the script reaches what it claims to: auto-flushes, each error kind
    unflushed = [e[1] for e in fast if e[0] == "unflushed"]
    assert unflushed[AUTO_FLUSH - 2 : AUTO_FLUSH] == [AUTO_FLUSH - 1, 0]
    errors = {e[1] for e in fast if e[0] == "error"}
    assert {"WouldBlock", "NoPeer", "SocketClosed", "NotSupported", "TypeError"} <= errors, errors


def test_send_recv_round_trip_through_whichever_methods_run():
    name = f"inproc://rt-{uuid.uuid4().hex}"
    with Dealer.bind(name, **FAST) as server, Dealer.connect(name, **FAST) as client:
        assert pump(server, client, until=lambda: server.connected and client.connected)
        sent = [i.to_bytes(4, "big") * (1 + i % 100) for i in range(300)]
        for msg in sent:
            client.send(msg)
        client.flush()
        got = []
        for _ in range(2000):
            try:
                got.append(bytes(server.recv(timeout=0.01)[0]))
            except WouldBlock:
                if len(got) == len(sent):
                    break
        assert got == sent


@needs_compiled
@pytest.mark.parametrize("kind", [Dealer, SafeDealer])
def test_a_small_message_is_queued_without_the_engines_python_send(kind):
    """The compiled send queues a small message into a compiled engine with one C call; the
    engine's bound ``send`` runs only for the other cases (here ``reference_compat``)."""
    name = f"inproc://small-{uuid.uuid4().hex}"
    with kind.bind(name, **FAST) as server, kind.connect(name, **FAST) as client:
        assert pump(server, client, until=lambda: server.connected and client.connected)
        assert socket_module._compiled.small_sender(client.engine) is client.engine
        calls = []
        engine_send = client._engine_send
        client._engine_send = lambda parts, now: calls.append(parts) or engine_send(parts, now)
        client.send(b"a" * 100)
        client.send([bytearray(b"b" * 466)])
        client.send((np.full(10, 7, dtype=np.uint8),))
        assert calls == [] and client.engine.pending_messages == 3
        client.options.reference_compat = True  # the engine's own send, which checks parts
        client.send(b"c" * 10)
        assert calls == [[b"c" * 10]] and client.engine.pending_messages == 4
        client.flush()
        assert pump(server, client, until=lambda: server.engine.recv_ready() >= 4)
        got = [bytes(server.recv()[0]) for _ in range(4)]
        assert got == [b"a" * 100, b"b" * 466, bytes([7] * 10), b"c" * 10]


@needs_compiled
def test_small_sender_takes_only_engines_whose_send_is_compiled():
    name = f"inproc://radio-{uuid.uuid4().hex}"
    with Dish.bind(name, **FAST) as dish, Radio.connect(name, **FAST) as radio:
        assert socket_module._compiled.small_sender(radio.engine) is None
        assert socket_module._compiled.small_sender(dish.engine) is None
        assert radio._small_engine is None
    assert socket_module._compiled.small_sender(object()) is None


@needs_compiled
def test_compiled_send_and_recv_refuse_what_is_not_a_socket():
    with pytest.raises(TypeError):
        Socket.send(object(), b"x")
    with pytest.raises(TypeError):
        Socket.recv(None)


@needs_compiled
def test_a_foreign_small_engine_is_refused_not_trusted():
    name = f"inproc://foreign-{uuid.uuid4().hex}"
    with Dealer.bind(name, **FAST) as server:
        server._small_engine = object()  # the compiled send checks the type it casts to
        with pytest.raises(TypeError):
            server.send(b"x")
