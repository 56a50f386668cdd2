"""A SafeDealer's Acks from its batch receive wait up to ``ACK_DELAY`` for a reply to go out
with, and then come after the reply's data frames: a round trip wakes the pinging side once
(for the reply), not twice (for the Ack, then the reply). Both twins of the batch receive."""

from __future__ import annotations

import itertools
import random

import pytest
from engine_helpers import kind_of, pump

from nbmq import codec
from nbmq.engine import SafeDealer
from nbmq.engine.connection import ACK_DELAY, MAX_CONTROL_QUEUE
from nbmq.wire import FrameKind

A = ("10.0.0.1", 40000)
B = ("10.0.0.2", 8000)
T = 0.5  # past the first queue maintenance, before the first heartbeat (1 s)


def _receive(engine, twin, datagrams, addr, now):
    """Feed ``datagrams`` to ``engine`` as one batch through ``twin``'s receive."""
    lengths = [len(d) for d in datagrams]
    offsets = [0, *itertools.accumulate(lengths)][:-1]
    receive = SafeDealer._receive_datagrams_py if twin == "python" else SafeDealer.receive_datagrams
    receive(engine, b"".join(datagrams), offsets, lengths, [addr] * len(datagrams), now)


def _pair():
    server = SafeDealer.bound(B, rng=random.Random(1))
    client = SafeDealer.connecting(B, 0.0, rng=random.Random(2))
    pump(client, A, server, B, 0.0)
    server.tick(0.001)  # (its first queue maintenance: due at once)
    return client, server


@pytest.mark.parametrize("twin", ["compiled", "python"])
def test_acks_wait_for_a_reply_then_follow_its_data(twin):
    client, server = _pair()
    client.send([b"ping"], T)
    frames = [bytes(d) for d, _ in client.datagrams_to_send(T)]
    _receive(server, twin, frames, A, T)
    assert server.next_deadline() == pytest.approx(T + ACK_DELAY)  # not "now"
    assert [bytes(p) for p in server.recv()[0:1]] == [b"ping"]
    server.send([b"pong"], T + ACK_DELAY / 2)
    out = [bytes(d) for d, _ in server.datagrams_to_send(T + ACK_DELAY / 2)]
    assert [kind_of(d) for d in out] == [0, FrameKind.ACK]  # the reply first, its Ack after
    ack = codec.parse_frame(out[1])
    assert int.from_bytes(ack.payload, "big") == codec.ack_hash(frames[0])
    assert server.next_deadline() > T + ACK_DELAY  # nothing held any more


@pytest.mark.parametrize("twin", ["compiled", "python"])
def test_held_acks_are_due_after_the_delay_and_go_alone(twin):
    client, server = _pair()
    client.send([b"one"], T)
    _receive(server, twin, [bytes(d) for d, _ in client.datagrams_to_send(T)], A, T)
    later = T + ACK_DELAY / 4
    client.send([b"two"], later)
    _receive(server, twin, [bytes(d) for d, _ in client.datagrams_to_send(later)], A, later)
    assert server.next_deadline() == pytest.approx(T + ACK_DELAY)  # the first one's due time
    out = server.datagrams_to_send(T + ACK_DELAY)
    assert [kind_of(bytes(d)) for d, _ in out] == [FrameKind.ACK, FrameKind.ACK]


@pytest.mark.parametrize("twin", ["compiled", "python"])
def test_other_control_output_is_due_at_once_and_goes_first(twin):
    client, server = _pair()
    client.send([b"one"], T)
    _receive(server, twin, [bytes(d) for d, _ in client.datagrams_to_send(T)], A, T)
    server._queue_ctrl(codec.encode_control_frame(FrameKind.HEARTBEAT, 7), A)  # not an Ack
    assert server.next_deadline() == T
    server.send([b"reply"], T)
    out = [bytes(d) for d, _ in server.datagrams_to_send(T)]
    assert [kind_of(d) for d in out] == [FrameKind.ACK, FrameKind.HEARTBEAT, 0]


def test_the_control_queue_bound_still_counts_acks_it_cannot_hold():
    client, server = _pair()
    server._ctrl.extend([(b"x", A)] * MAX_CONTROL_QUEUE)
    client.send([b"one"], T)
    _receive(server, "compiled", [bytes(d) for d, _ in client.datagrams_to_send(T)], A, T)
    assert server._acks_held == 0
    assert server.counters.control_dropped == 1
