"""Dealer's and Dish's inlined receive path, one datagram at a time
and in recvmmsg-style batches (``receive_datagrams``), against the generic
``Connection.receive_datagram`` + ``RecvQueue.push``: the same datagrams give the same
messages, events, counters and replies, including every slow case (handshake, new path,
malformed, unknown session, too large, rejected, recv_hwm drops, budget evictions)."""

from __future__ import annotations

import random
import types

import numpy as np
import pytest

from nbmq import codec
from nbmq.engine import Dealer, Dish
from nbmq.engine.connection import Connection
from nbmq.options import SocketOptions
from nbmq.wire import FrameKind

S = ("10.0.0.1", 8000)
A = ("10.0.0.2", 40000)
B = ("10.0.0.3", 40001)  # the same peer after a NAT rebinding
CLAIM = codec.MESSAGE_OVERHEAD + min(2048, codec.MESSAGE_RESERVATION)  # one 2 KiB message's
OPTS = SocketOptions(recv_hwm=3, max_message_size=4096, max_incomplete_bytes=4 * CLAIM)


def _engine(cls, generic: bool):
    engine = cls(OPTS, random.Random(7))
    engine.bind(S)
    if generic:
        engine.receive_datagram = types.MethodType(Connection.receive_datagram, engine)
    return engine


def _data(sid, mid, size=100, pc=1, pi=0, msize=None, psize=None, offset=0, chunk=None):
    chunk = bytes([mid % 256]) * size if chunk is None else chunk
    msize = size if msize is None else msize
    psize = size if psize is None else psize
    return codec.encode_data_frame(sid, mid, pc, pi, msize, psize, offset, chunk)


def _script(sid):
    """(datagram, addr) pairs and "recv" steps, after the Connect."""
    steps = [(_data(sid, m), A) for m in range(1, 3)]  # the first moves HALF_OPEN -> CONNECTED
    steps += ["recv", (_data(sid, 3), A), (_data(sid, 4), A), (_data(sid, 5), A)]  # 5: hwm drop
    steps += ["recv", "recv", "recv", "recv"]
    frames = codec.shard_message([bytes(range(256)) * 6], sid, 6).frames()
    steps += [(bytes(f), A) for f in frames]  # several chunks: INCOMPLETE then COMPLETE
    steps += [(_data(sid, 7), B), (_data(sid, 8), B)]  # a new path, then on it
    steps += [(b"\x01\x02\x03", B)]  # malformed
    steps += [(_data(sid ^ 1, 9), B)]  # unknown session
    steps += [(_data(sid, 10, size=10, msize=9000, psize=9000), B)]  # over max_message_size
    steps += [(_data(sid, 11, size=10, pc=2, msize=20, psize=10), B)]
    steps += [(_data(sid, 11, size=10, pc=3, pi=1, msize=20, psize=10), B)]  # part_count differs
    for m in range(12, 20):  # incomplete 2 KiB claims: the budget evicts the oldest
        steps += [(_data(sid, m, size=10, pc=2, msize=2048, psize=1024), B)]
    steps += ["recv"] * 3 + [(codec.encode_control_frame(FrameKind.HEARTBEAT, sid), B)]
    steps += [(_data(sid, 20), B)]
    steps += ["recv"] * 4
    return steps


def _groups(steps):
    """Runs of consecutive datagrams (one recvmmsg batch each), and the "recv" steps."""
    out: list = []
    for step in steps:
        if step == "recv":
            out.append(step)
        elif out and out[-1] != "recv" and len(out[-1]) < 4:
            out[-1].append(step)
        else:
            out.append([step])
    return out


def _run(cls, mode: str):
    """mode: "generic" (Connection.receive_datagram), "fast" (the socket's own
    receive_datagram) or "batch" (receive_datagrams, one call per group)."""
    engine = _engine(cls, generic=mode == "generic")
    log: list = []
    engine.receive_datagram(codec.encode_control_frame(FrameKind.CONNECT, 0), A, 1.0)
    ((reply, _),) = engine.datagrams_to_send(1.0)
    sid = codec.parse_frame(reply).session_id
    now = 1.0
    for group in _groups(_script(sid)):
        now += 0.001
        if group == "recv":
            if engine.recv_ready():
                log.append(("msg", [bytes(p) for p in engine.recv()]))
            continue
        buf = bytearray(b"".join(data for data, _ in group))
        view = memoryview(buf)
        lengths = [len(data) for data, _ in group]
        offsets = [sum(lengths[:i]) for i in range(len(lengths))]
        addrs = [addr for _, addr in group]
        if mode == "batch":
            engine.receive_datagrams(view, offsets, lengths, addrs, now)
        else:
            for offset, length, addr in zip(offsets, lengths, addrs):
                engine.receive_datagram(view[offset : offset + length], addr, now)
        buf[:] = bytes(len(buf))  # the transport reuses its buffer
        log.append(("out", [(bytes(d), a) for d, a in engine.datagrams_to_send(now)]))
        while (event := engine.next_event()) is not None:
            log.append(("event", repr(event)))
    peers = {sid: (p.addr, p.state) for sid, p in engine.peers.items()}
    return log, engine.counters.as_dict(), peers


@pytest.mark.parametrize("cls", [Dealer, Dish])
@pytest.mark.parametrize("mode", ["fast", "batch"])
def test_inlined_receive_matches_the_generic_path(cls, mode):
    assert cls.receive_datagram is not Connection.receive_datagram
    assert cls.receive_datagrams is not Connection.receive_datagrams
    fast_log, fast_counters, fast_peers = _run(cls, mode)
    slow_log, slow_counters, slow_peers = _run(cls, "generic")
    assert fast_log == slow_log
    assert fast_counters == slow_counters
    assert fast_peers == slow_peers
    # the script reaches every case it claims to
    assert sum(1 for kind, _ in fast_log if kind == "msg") == 8
    c = fast_counters
    assert c["malformed"] == 1 and c["unknown_session"] == 1
    assert c["dropped_recv_hwm"] == 1 and c["dropped_too_large"] == 1 and c["addr_changes"] == 1
    assert c["dropped_rejected"] == 1 and c["dropped_evicted"] >= 1
    assert fast_peers and all(addr == B for addr, _ in fast_peers.values())


def test_received_parts_own_their_memory():
    engine = _engine(Dealer, generic=False)
    engine.receive_datagram(codec.encode_control_frame(FrameKind.CONNECT, 0), A, 1.0)
    ((reply, _),) = engine.datagrams_to_send(1.0)
    sid = codec.parse_frame(reply).session_id
    buf = bytearray(_data(sid, 1))
    engine.receive_datagram(memoryview(buf), A, 1.1)
    buf[-100:] = bytes(100)  # the transport reuses its buffer
    (part,) = engine.recv()
    assert part.dtype == np.uint8 and bytes(part) == bytes([1]) * 100
