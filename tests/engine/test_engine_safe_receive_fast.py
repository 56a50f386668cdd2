"""SafeDealer's inlined batch receive against the generic
``Connection.receive_datagram`` + ``SafeDealer._on_data`` / ``_on_ack``: the same datagrams
give the same messages, output (acks, fast resends), events, counters and peers, including
every slow case (handshake, duplicates, recv_hwm refusal, new path, malformed, unknown session,
too large, rejected, budget evictions, bad and unknown acks)."""

from __future__ import annotations

import random
import types

import pytest

from nbmq import codec
from nbmq.engine import SafeDealer
from nbmq.engine.connection import Connection
from nbmq.options import SocketOptions
from nbmq.wire import FrameKind

S = ("10.0.0.1", 8000)
A = ("10.0.0.2", 40000)
B = ("10.0.0.3", 40001)  # the same peer after a NAT rebinding
CLAIM = codec.MESSAGE_OVERHEAD + min(2048, codec.MESSAGE_RESERVATION)
OPTS = SocketOptions(recv_hwm=3, max_message_size=8192, max_incomplete_bytes=4 * CLAIM)


def _data(sid, mid, size=100, pc=1, pi=0, msize=None, psize=None, offset=0):
    msize = size if msize is None else msize
    psize = size if psize is None else psize
    return codec.encode_data_frame(sid, mid, pc, pi, msize, psize, offset, bytes([mid % 256]) * size)


def _ack(sid, frame):
    return codec.encode_control_frame(FrameKind.ACK, sid, codec.ack_hash(frame).to_bytes(8, "big"))


def _connect_peer(engine) -> int:
    """Bind ``engine`` to S and connect peer A to it: the handshake, then one data frame that
    completes it (its Ack taken out). Returns the session id, time 1.0 throughout."""
    engine.bind(S)
    engine.receive_datagram(codec.encode_control_frame(FrameKind.CONNECT, 0), A, 1.0)
    ((reply, _),) = engine.datagrams_to_send(1.0)
    sid = codec.parse_frame(reply).session_id
    engine.receive_datagram(_data(sid, 1), A, 1.0)
    engine.datagrams_to_send(1.0)
    return sid


def _script(sid):
    """Steps (1 ms apart): lists of (datagram, addr) fed as one batch; "recv" (every message
    ready); ("send", bytes); ("ack", indices, addr): acks for those frames of the engine's last
    sent message."""
    steps: list = [[(_data(sid, 1), A), (_data(sid, 2), A), (_data(sid, 1), A)]]  # handshake, dup
    steps += ["recv", [(_data(sid, m), A) for m in (3, 4, 5, 6)]]  # 6: refused (recv_hwm)
    steps += ["recv", [(_data(sid, 6), A)]]  # its resend, taken
    steps += [[(_data(sid, 30), A)], [(_data(sid, 30), A), (_data(sid, 31), A)], "recv"]  # a resend, a batch later
    sizes = ((40, 1), (41, 466), (42, 7), (43, 250), (44, 3), (45, 100))  # Ack hashes four at a time
    steps += [[(_data(sid, m, size=n), A) for m, n in sizes], "recv"]
    frames = codec.shard_message([bytes(range(256)) * 6], sid, 7).frames()
    steps += [[(bytes(f), A) for f in frames]]  # several chunks: INCOMPLETE then COMPLETE
    steps += [("send", b"s" * (codec.MAX_CHUNK_SIZE * 12))]  # 12 frames out
    steps += [("ack", [0], A), ("ack", [2, 3, 4], A)] + ["recv"] * 7
    steps += [("ack", [5, 6, 7, 8], A)]  # 10 ms: frame 1 is lost, resent at once
    steps += [[(codec.encode_control_frame(FrameKind.ACK, sid, b"1234567"), A)]]  # bad ack
    steps += [[(codec.encode_control_frame(FrameKind.ACK, sid, b"12345678"), A), (_data(sid, 8), A)]]
    steps += [("ack", [9, 10, 11, 1], A), ("ack", [1], A)]  # 1 again: already acked
    steps += [[(_data(sid, 9), B), (_data(sid, 10), B)]]  # a new path, then on it
    steps += ["recv"]
    steps += [[(b"\x01\x02\x03", B), (_data(sid ^ 1, 11), B)]]  # malformed, unknown session
    steps += [[(_data(sid, 12, size=10, msize=9000, psize=9000), B)]]  # over max_message_size
    steps += [
        [
            (_data(sid, 13, size=10, pc=2, msize=20, psize=10), B),
            (_data(sid, 13, size=10, pc=3, pi=1, msize=20, psize=10), B),
        ]
    ]  # part_count differs
    steps += [[(_data(sid, m, size=10, pc=2, msize=2048, psize=1024), B) for m in range(14, 22)]]
    steps += ["recv", [(codec.encode_control_frame(FrameKind.HEARTBEAT, sid), B)]]
    steps += [[(_data(sid, 22), B), (_data(sid, 22), B)], "recv"]
    return steps


def _run(generic: bool, python: bool = False):
    engine = SafeDealer(OPTS, random.Random(7))
    engine.bind(S)
    if generic:
        engine.receive_datagrams = types.MethodType(Connection.receive_datagrams, engine)
    elif python:  # the pure-Python twin of the compiled batch receive
        engine.receive_datagrams = types.MethodType(SafeDealer._receive_datagrams_py, engine)
    log: list = []
    engine.receive_datagram(codec.encode_control_frame(FrameKind.CONNECT, 0), A, 1.0)
    ((reply, _),) = engine.datagrams_to_send(1.0)
    sid = codec.parse_frame(reply).session_id
    now = 1.0
    sent: list = []
    for step in _script(sid):
        now += 0.001
        if step == "recv":
            while engine.recv_ready():
                log.append(("msg", [bytes(p) for p in engine.recv()]))
            continue
        if step[0] == "send":
            engine.send([step[1]], now)
            sent = [bytes(d) for d, _ in engine.datagrams_to_send(now)]
            log.append(("sent", sent))
            continue
        if step[0] == "ack":
            step = [(_ack(sid, sent[i]), step[2]) for i in step[1]]
        buf = bytearray(b"".join(data for data, _ in step))
        lengths = [len(data) for data, _ in step]
        offsets = [sum(lengths[:i]) for i in range(len(lengths))]
        engine.receive_datagrams(memoryview(buf), offsets, lengths, [a for _, a in step], now)
        buf[:] = bytes(len(buf))  # the transport reuses its buffer
        log.append(("out", [(bytes(d), a) for d, a in engine.datagrams_to_send(now)]))
        while (event := engine.next_event()) is not None:
            log.append(("event", repr(event)))
    peers = {sid: (p.addr, p.state, p._last_seen, p._last_sent) for sid, p in engine.peers.items()}
    q = engine._sendq
    windows = [tuple(getattr(w, name) for name in WINDOW_STATE) for w in q.windows.values()]
    return log, engine.counters.as_dict(), peers, (q.fast_resends, q.in_flight, q.held), windows


WINDOW_STATE = (
    "cwnd",
    "ssthresh",
    "in_flight",
    "srtt",
    "rttvar",
    "min_rtt",
    "rto",
    "backoff",
    "tx",
    "round_end",
    "round_acked",
    "round_lost",
    "round_min_rtt",
    "qdelay",
    "competing",
    "increase",
    "pace_tokens",
    "resends",
    "lost",
    "decreases",
)


def test_inlined_safe_receive_matches_the_generic_path():
    assert SafeDealer.receive_datagrams is not Connection.receive_datagrams
    fast = _run(generic=False)
    slow = _run(generic=True)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert fast[2:] == slow[2:]
    log, c, peers, (fast_resends, in_flight, held), windows = fast
    assert len(windows) == 1 and windows[0][3] is not None  # acks clocked it, RTT sampled
    # the script reaches every case it claims to
    assert sum(1 for kind, _ in log if kind == "msg") == 16  # (3 of the six sizes: recv_hwm)
    assert c["acks_out"] >= 20 and c["acks_in"] == 15 and c["acks_unknown"] == 2
    assert c["duplicate_frames"] == 3 and c["refused_frames"] == 4
    assert c["malformed"] == 2 and c["unknown_session"] == 1 and c["addr_changes"] == 1
    assert c["dropped_too_large"] == 1 and c["dropped_rejected"] == 1 and c["dropped_evicted"] >= 1
    assert fast_resends == 1 and in_flight == 0 and held == 0
    assert peers and all(addr == B for addr, *_ in peers.values())


def test_python_twin_matches_the_generic_path():
    # with the extensions built, SafeDealer.receive_datagrams is compiled
    # (_fast.receive_batch_safe); its Python twin must match the generic path too
    fast = _run(generic=False, python=True)
    slow = _run(generic=True)
    assert fast == slow


def test_compiled_safe_receive_in_use_when_built():
    from nbmq.engine import sockets

    if sockets._fast is None:
        pytest.skip("extensions not built: the Python twin is in use")
    assert SafeDealer.receive_datagrams is sockets._fast.receive_batch_safe


@pytest.mark.parametrize("size", [1, 8, 9])
def test_ack_frame_bytes_match_the_codec(size):
    # the inlined Ack is the codec's control frame, byte for byte
    engine = SafeDealer(OPTS, random.Random(7))
    sid = _connect_peer(engine)
    frame = _data(sid, 2, size=size)
    engine.receive_datagrams(memoryview(frame), [0], [len(frame)], [A], 1.1)
    assert engine.datagrams_to_send(1.1) == [(_ack(sid, frame), A)]


def _send_script(engine):
    """Sends of every shape (the compiled small case and the rest), errors included, then
    the frames handed out: the same for the compiled and the Python ``send``."""
    log: list = []
    _connect_peer(engine)
    for parts in (
        [b"a" * 100],
        (b"b" * 466,),
        [b"c" * 467],
        [b""],
        [bytearray(b"d")],
        [b"e", b"f"],
        [b"g" * 3],
        [b"h"],
        5,
    ):
        try:
            engine.send(parts, 1.1)
            log.append(("sent", engine._nonce))
        except Exception as exc:  # the same errors, raised the same way
            log.append(("error", type(exc).__name__, str(exc)))
    log.append([(bytes(d), a) for d, a in engine.datagrams_to_send(1.1)])
    engine.close(1.2)
    try:
        engine.send([b"late"], 1.2)
    except Exception as exc:
        log.append(("error", type(exc).__name__, str(exc)))
    return log, engine.counters.as_dict(), engine._sendq.held


def test_safe_send_compiled_matches_the_python_send():
    from nbmq.engine import sockets
    from nbmq.engine.sockets import Socket

    opts = SocketOptions(send_hwm=6)
    fast = _send_script(SafeDealer(opts, random.Random(7)))
    python = SafeDealer(opts, random.Random(7))
    python.send = types.MethodType(Socket.send, python)
    assert fast == _send_script(python)
    assert ("error", "WouldBlock", "send_hwm (6) messages held") in fast[0]
    if sockets._fast is not None:
        assert SafeDealer.send is sockets._fast.send


def _drain(engine, now: float, sent: list, log: list) -> None:
    """The engine's datagrams due at ``now`` (appended to ``sent`` and ``log``), then its events."""
    out = [(bytes(d), a) for d, a in engine.datagrams_to_send(now)]
    sent.extend(out)
    log.append(("out", out))
    while (event := engine.next_event()) is not None:
        log.append(("event", repr(event)))


def _feed_acks(engine, sids: dict, frames: list, now: float) -> None:
    """One Ack for each data frame of ``frames`` (``(datagram, addr)``), fed back as one
    ``receive_datagrams`` batch per peer."""
    for addr in (A, B):
        acks = [_ack(sids[addr], d) for d, a in frames if a == addr and d[1] == 0]
        if acks:
            buf = b"".join(acks)
            engine.receive_datagrams(
                memoryview(buf), [18 * i for i in range(len(acks))], [18] * len(acks), [addr] * len(acks), now
            )


def _two_peer_engine(options: SocketOptions, python: bool, monkeypatch) -> tuple:
    """A bound SafeDealer (the Python twin's take, send and receive when ``python``) with
    peers A and B connected and one message received from each: ``(engine, {addr: sid})``."""
    from nbmq.engine import sockets
    from nbmq.engine.sockets import Socket

    engine = SafeDealer(options, random.Random(7))
    engine.bind(S)
    if python:
        monkeypatch.setattr(sockets, "_fast", None)  # _take_data: SendQueue.take -> _take_safe
        engine.send = types.MethodType(Socket.send, engine)
        engine.receive_datagrams = types.MethodType(SafeDealer._receive_datagrams_py, engine)
    sids = {}
    for addr in (A, B):
        engine.receive_datagram(codec.encode_control_frame(FrameKind.CONNECT, 0), addr, 1.0)
        ((reply, _),) = engine.datagrams_to_send(1.0)
        sids[addr] = sid = codec.parse_frame(reply).session_id
        engine.receive_datagram(_data(sid, 1), addr, 1.0)
        engine.datagrams_to_send(1.0)  # its ack
    return engine, sids


def _take_script(python: bool, monkeypatch):
    """Small messages to two peers in turn through windows that fill, acks that open them, a
    large message among them and a peer leaving with messages queued: the frames handed out,
    windows, flights, events and counters."""
    engine, sids = _two_peer_engine(SocketOptions(send_hwm=40, max_tick_send=7), python, monkeypatch)
    log: list = []
    q = engine._sendq
    now = 1.0
    sent: list = []

    def flush():
        _drain(engine, now, sent, log)

    def ack(frames):
        _feed_acks(engine, sids, frames, now)

    for i in range(12):
        engine.send([bytes([i]) * (50 + i)], now)
    engine.send([b"L" * 1000], now)  # three frames
    for i in range(6):
        engine.send([bytes([i]) * 466], now)
    flush()
    for win in q.windows.values():
        win.cwnd = 700.0  # a few frames: the windows fill
    for step in range(8):
        now += 0.001
        flush()
        ack(sent[step * 3 : step * 3 + 5])
        if step == 4:  # B leaves with messages queued
            engine.receive_datagram(codec.encode_control_frame(FrameKind.DISCONNECTED, sids[B]), B, now)
            engine.send([b"after"], now)
    flush()
    now += 1.0  # past the resend timer: B's frames drop their messages (PEER_GONE)
    flush()
    windows = [tuple(getattr(w, name) for name in WINDOW_STATE) for w in q.windows.values()]
    state = (q.held, q._rr, q._blocked, sorted(q._inflight), q.frames_out, q.bytes_out)
    return log, engine.counters.as_dict(), windows, state


def test_safe_take_compiled_matches_the_python_take(monkeypatch):
    from nbmq.engine import sockets

    fast = _take_script(False, monkeypatch)
    with monkeypatch.context() as m:
        slow = _take_script(True, m)
    assert fast[0] == slow[0]
    assert fast[1:] == slow[1:]
    log, counters, windows, (held, rr, blocked, inflight, frames_out, _) = fast
    # the script reaches what it claims to
    assert frames_out > 20 and counters["acks_in"] > 10
    outs = [len(out) for kind, out in log if kind == "out"]
    assert any(0 < n < 7 for n in outs[1:6])  # windows full: fewer than max_tick_send out
    assert any(kind == "event" and "PeerDisconnected" in text for kind, text in log)
    if sockets._fast is not None:
        assert sockets._fast.take_safe is not None


def test_compiled_flight_is_the_python_flight():
    """_fast.Flight (made by the compiled take) against queues._Flight: the same attributes
    after construction and after forget() (the flight record in C)."""
    from nbmq.engine import sockets
    from nbmq.engine.congestion import Window
    from nbmq.engine.queues import _Flight

    if sockets._fast is None:
        pytest.skip("nbmq.engine._fast is not built")
    names = ("hash", "view", "msg", "due", "resends", "sent_at", "win", "tx", "last_sent", "fast")
    wins = []
    states = []
    for cls in (_Flight, sockets._fast.Flight):
        win = Window(0.2)
        win.in_flight = 1000
        msg = object()
        flight = cls(12345, b"v" * 134, msg, 1.25, 1.0, win)
        state = [getattr(flight, n) for n in names]
        assert flight.msg is msg and flight.win is win
        flight.tx, flight.resends, flight.fast, flight.last_sent, flight.due = 7, 1, 2, 1.5, -1.0
        state += [getattr(flight, n) for n in names if n not in ("msg", "win")]
        flight.forget()
        flight.forget()  # a second forget does nothing
        state += [flight.win, win.in_flight]
        states.append(state[:2] + state[3:6] + state[7:])
        wins.append(win)
    assert states[0] == states[1]
    assert wins[0].in_flight == wins[1].in_flight == 1000 - 134


def test_compiled_take_keeps_going_after_a_full_window():
    """Once a peer's window filled (the Python take then makes the waiting message's frame),
    the compiled take still sends the messages after it when acks open the window: every
    flight it makes is a compiled one (a SmallMessage is its own; it once handed the whole rest of the queue to the
    Python take after the first full window)."""
    from nbmq.engine import sockets

    if sockets._fast is None:
        pytest.skip("nbmq.engine._fast is not built")
    engine = SafeDealer(SocketOptions(send_hwm=200, max_tick_send=1000), random.Random(7))
    sid = _connect_peer(engine)
    q = engine._sendq
    now = 1.0
    engine.send([b"first"], now)
    engine.datagrams_to_send(now)
    (win,) = q.windows.values()
    win.cwnd = 700.0  # five 134-byte frames
    for i in range(120):
        engine.send([bytes([i]) * 100], now)
    rounds = []
    kinds = set()
    for _ in range(60):
        now += 0.001
        out = [bytes(d) for d, _ in engine.datagrams_to_send(now)]
        kinds.update(type(f).__name__ for f in q._inflight.values())
        rounds.append(sum(1 for d in out if d[1] == 0))
        acks = [_ack(sid, d) for d in out if d[1] == 0]
        if not acks:
            break
        buf = b"".join(acks)
        engine.receive_datagrams(
            memoryview(buf), [18 * i for i in range(len(acks))], [18] * len(acks), [A] * len(acks), now
        )
    assert sum(rounds) == 121 and q.held == 0 and q.in_flight == 0
    assert len([n for n in rounds if n]) >= 4  # the window filled, round after round
    assert kinds == {"SmallMessage"}  # (a small message is its own flight)


@pytest.mark.parametrize("close", [True, False])
def test_flights_in_flight_are_freed_with_their_engine(close):
    """Compiled flights are not tracked by the cycle collector: a window and its flights
    still in flight are freed when the engine is closed, or dropped without closing."""
    import gc
    import weakref

    engine = SafeDealer(SocketOptions(send_hwm=50), random.Random(7))
    _connect_peer(engine)
    for i in range(20):
        engine.send([bytes([i]) * 100], 1.0)
    assert len(engine.datagrams_to_send(1.0)) == 20
    q = engine._sendq
    (win,) = q.windows.values()
    assert len(win.order) == 20 and q.in_flight == 20
    order = weakref.ref(win.order)  # (a deque: Window and the flights take no weakrefs)
    del win, q
    if close:
        engine.close(1.0)
    del engine
    gc.collect()
    assert order() is None


@pytest.mark.parametrize("close", [True, False])
def test_a_message_in_flight_is_freed_with_its_engine(close):
    """A SafeDealer dropped (closed or not) with small messages in flight lets go of every
    one: the user's parts (each message keeps its own) are referenced by nothing of the
    engine after a collection (the transmission order released its flights)."""
    import gc
    import sys

    engine = SafeDealer(SocketOptions(send_hwm=50), random.Random(7))
    _connect_peer(engine)
    parts = [bytes([i]) * 100 for i in range(20)]
    base = [sys.getrefcount(p) for p in parts]
    for i in range(20):
        engine.send([parts[i]], 1.0)
    assert engine.datagrams_to_send(1.0)
    assert engine._sendq._inflight
    if close:
        engine.close(1.0)
    del engine
    gc.collect()
    assert [sys.getrefcount(p) for p in parts] == base


def _big_take_script(python: bool, monkeypatch):
    """Multi-frame messages to two peers in turn, with small ones between
    them, through windows that fill mid-message and max_tick_send cutting messages, acks that
    open the windows, send_hwm refusals, a peer leaving mid-message and the resend timer: the
    frames handed out, every flight (hash, frame, message, due, sent_at, tx), each window's
    transmission order and state, the queued messages, events and counters."""
    from nbmq.errors import WouldBlock

    engine, sids = _two_peer_engine(SocketOptions(send_hwm=9, max_tick_send=11), python, monkeypatch)
    log: list = []
    q = engine._sendq
    peers = {id(p): a for a, p in ((A, engine._peers.get(sids[A])), (B, engine._peers.get(sids[B])))}
    now = 1.0
    sent: list = []

    def send(parts):
        try:
            engine.send(parts, now)
            log.append(("sent", len(parts)))
        except WouldBlock as exc:
            log.append(("would block", str(exc)))

    def snapshot():
        wins = {peers.get(id(p)): w for p, w in q.windows.items()}
        name = {id(w): a for a, w in wins.items()}
        flights = sorted(
            (
                f.hash,
                bytes(f.view),
                f.msg.message_id,
                f.due,
                f.sent_at,
                f.last_sent,
                f.tx,
                f.resends,
                f.fast,
                name.get(id(f.win)),
            )
            for f in q._inflight.values()
        )
        orders = {a: [(tx, f.hash) for tx, f in w.order] for a, w in wins.items()}
        msgs = [(m.message_id, m.sent, m.unacked, m.dropped, peers.get(id(m.peer))) for m in q._queue]
        log.append(("state", flights, orders, msgs, q._rr, q._blocked, q.held))

    def flush():
        _drain(engine, now, sent, log)
        snapshot()

    def ack(frames):
        _feed_acks(engine, sids, frames, now)

    chunk = codec.MAX_CHUNK_SIZE
    send([b"a" * (chunk * 6 + 7)])  # seven frames
    send([b"s" * 60])
    send([b"b" * (chunk * 4), b"c" * 100, b"d" * 3])  # three parts, six frames
    send([b"e" * (chunk * 9)])
    for i in range(3):
        send([bytes([i]) * (40 + i)])
    send([b"f" * (chunk * 5 + 1)])
    send([b"g" * 1000])  # send_hwm (9) reached: refused
    flush()
    for win in q.windows.values():
        win.cwnd = 1700.0  # three and a half frames: the windows fill mid-message
    for step in range(10):
        now += 0.001
        flush()
        batch = sent[step * 4 : step * 4 + 6]
        ack([f for k, f in enumerate(batch) if (step * 4 + k) % 7 != 3])  # some lost
        if step == 2:
            send([b"h" * (chunk * 3)])
            send([b"i" * 10])
        if step == 5:  # B leaves with a message part sent and messages queued
            engine.receive_datagram(codec.encode_control_frame(FrameKind.DISCONNECTED, sids[B]), B, now)
            send([b"j" * (chunk * 2 + 5)])
    flush()
    now += 3.0  # past the resend timer: resends
    flush()
    now += 0.001
    ack([f for f in sent if f[1] == A])
    flush()
    log.append(("held", q.held))  # (B's, not yet dropped)
    send([b"k" * (chunk * 3 + 1)])  # no loss: each message's last frame acked as first sent
    send([b"l" * (chunk * 2)])
    for _ in range(8):  # (a drain round, due by now, holds the window for two of these steps)
        now += 0.001
        start = len(sent)
        flush()
        ack(sent[start:])
    log.append(("held", q.held))
    windows = [tuple(getattr(w, name) for name in WINDOW_STATE) for w in q.windows.values()]
    state = (q.held, q._rr, q._blocked, sorted(q._inflight), q.frames_out, q.bytes_out, q.resends, q.acked)
    return log, engine.counters.as_dict(), windows, state


def test_safe_take_of_multi_frame_messages_compiled_matches_the_python_take(monkeypatch):
    """The compiled take of sharded messages against ``_take_safe``: the
    same frames, flights (hash, due, sent_at, tx), transmission orders, windows, queue and
    counters at every step, and the compiled ack of those frames against ``SendQueue.ack``."""
    fast = _big_take_script(False, monkeypatch)
    with monkeypatch.context() as m:
        slow = _big_take_script(True, m)
    for a, b in zip(fast[0], slow[0]):
        assert a == b
    assert len(fast[0]) == len(slow[0])
    assert fast[1:] == slow[1:]
    log, counters, windows, (held, rr, blocked, inflight, frames_out, _, resends, acked) = fast
    # the script reaches what it claims to
    outs = [len(entry[1]) for entry in log if entry[0] == "out"]
    assert frames_out >= 40 and acked > 25 and resends > 0
    assert any(0 < n < 11 for n in outs[1:8])  # windows full mid-message
    assert any(entry[0] == "would block" for entry in log)
    assert any(entry[0] == "event" and "PeerDisconnected" in entry[1] for entry in log)
    assert counters["dropped_peer_gone"] > 0
    held_before = [entry for entry in log if entry[0] == "held"][0]
    assert log[-1] == held_before  # the last two messages released by their acks
    states = [entry for entry in log if entry[0] == "state"]
    assert any(msgs and msgs[0][1] > 0 for _, _, _, msgs, *_ in states)  # a message part sent


def test_compiled_take_keeps_multi_frame_messages_as_compiled_flights():
    """A 64 KiB SafeDealer message is taken by the compiled take: its frames (memoryviews
    into the message's buffer) are kept as _fast.Flight, each hashed as the codec hashes it."""
    from nbmq.engine import sockets

    if sockets._fast is None:
        pytest.skip("nbmq.engine._fast is not built")
    engine = SafeDealer(SocketOptions(send_hwm=4, max_tick_send=1000), random.Random(7))
    _connect_peer(engine)
    q = engine._sendq
    engine.send([b"first"], 1.0)
    engine.datagrams_to_send(1.0)
    (win,) = q.windows.values()
    win.cwnd = 1e9
    engine.send([bytes(range(256)) * 256], 1.0)
    out = engine.datagrams_to_send(1.0)
    frames = [d for d, _ in out if bytes(d)[1] == 0]
    assert len(frames) == len(q._inflight) - 1 > 100  # (and "first")
    for d in frames:
        f = q._inflight[codec.ack_hash(d)]
        assert bytes(f.view) == bytes(d) and f.win is win and type(f).__name__ == "Flight"
    txs = [tx for tx, _ in win.order]
    assert txs == list(range(txs[0], txs[0] + len(frames) + 1))
    assert win.in_flight == sum(len(d) for d in frames) + 39


@pytest.mark.parametrize("close", [True, False])
def test_multi_frame_flights_in_flight_are_freed_with_their_engine(close):
    """The compiled flights of a sharded message (memoryviews into its
    buffer) are freed with their engine, closed or dropped without closing."""
    import gc
    import weakref

    engine = SafeDealer(SocketOptions(send_hwm=50), random.Random(7))
    _connect_peer(engine)
    engine.send([b"z" * 5000], 1.0)  # eleven frames
    assert len(engine.datagrams_to_send(1.0)) == 11
    q = engine._sendq
    (win,) = q.windows.values()
    assert len(win.order) == 11
    order = weakref.ref(win.order)
    del win, q
    if close:
        engine.close(1.0)
    del engine
    gc.collect()
    assert order() is None


@pytest.mark.parametrize("count", [1, 3, 4, 7, 8, 9, 13, 17])
def test_small_messages_are_their_own_flights_hashed_as_the_codec_hashes(count):
    """Small messages sent by the compiled take (hashed several at a time) are their own
    flights, each under the codec's hash of its frame, in the window's transmission order
    with the frames of a sharded message sent between them; every ack releases its message."""
    from nbmq.engine import sockets

    if sockets._fast is None:
        pytest.skip("nbmq.engine._fast is not built")
    engine = SafeDealer(SocketOptions(send_hwm=100, max_tick_send=1000), random.Random(7))
    sid = _connect_peer(engine)
    q = engine._sendq
    engine.send([b"first"], 1.0)
    engine.datagrams_to_send(1.0)
    (win,) = q.windows.values()
    win.cwnd = 1e9
    sizes = [(i * 37) % 120 + 1 for i in range(count)]  # of differing lengths
    for i, size in enumerate(sizes):
        engine.send([bytes([i]) * size], 1.0)
        if i == count // 2:
            engine.send([bytes(1000)], 1.0)  # three frames, between the small ones
    out = [d for d, _ in engine.datagrams_to_send(1.0) if bytes(d)[1] == 0]
    assert len(out) == count + 3
    flights = [q._inflight[codec.ack_hash(d)] for d in out]
    for d, f in zip(out, flights):
        assert bytes(f.view) == bytes(d) and f.win is win
    small = [f for d, f in zip(out, flights) if int.from_bytes(bytes(d)[20:24], "big") != 1000]
    assert all(type(f).__name__ == "SmallMessage" and f.msg is f for f in small)
    assert [bytes(f.small) for f in small] == [bytes([i]) * size for i, size in enumerate(sizes)]
    order = [(tx, f) for tx, f in win.order if f.win is not None][1:]  # (after "first")
    assert [f for _, f in order] == flights and [f.tx for f in flights] == [tx for tx, _ in order]
    assert [tx for tx, _ in order] == list(range(order[0][0], order[0][0] + len(out)))
    acks = b"".join(_ack(sid, d) for d in out)
    engine.receive_datagrams(
        memoryview(acks), [18 * i for i in range(len(out))], [18] * len(out), [A] * len(out), 1.001
    )
    assert q.in_flight == 1 and q.held == 1  # ("first" is not acked)
