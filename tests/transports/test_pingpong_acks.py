"""A blocking SafeDealer that answers what it receives at once (ping-pong) leaves the Acks of a
step held for its reply to carry; one that does not answer sends them at once, and a held Ack
that no reply carried within ``ACK_DELAY`` (no reply, or a late one) ends ping-pong mode."""

from __future__ import annotations

import time

import nbmq
from nbmq.engine.connection import ACK_DELAY

from .conftest import FAST, connected, pump

ROUNDS = 20  # a round the machine delays past ACK_DELAY does not enter ping-pong: try again


def _round(client, server, reply: bool) -> int:
    """The client pings, the server receives (and replies); returns the Acks the server still
    held when its recv() returned."""
    client.send(b"ping", flush=True)
    server.recv(timeout=2.0)
    held = server.engine._acks_held
    if reply:
        server.send(b"pong", flush=True)
        assert server.engine._acks_held == 0  # the reply carried them
        client.recv(timeout=2.0)
    return held


def test_replies_carry_the_acks_and_silence_ends_it():
    with (
        nbmq.SafeDealer.bind("127.0.0.1:0", **FAST) as server,
        nbmq.SafeDealer.connect(server.local_address, **FAST) as client,
    ):
        assert pump(server, client, until=connected(server, client))
        assert _round(client, server, reply=False) == 0  # not a replier yet: acked at once
        assert any(_round(client, server, reply=True) for _ in range(ROUNDS))
        assert server._pingpong
        acks_in = client.counters.acks_in
        held = _round(client, server, reply=False)  # no reply: the Ack waits ACK_DELAY at most
        time.sleep(ACK_DELAY * 5)
        server.tick()
        assert server.engine._acks_held == 0 and not server._pingpong
        end = time.monotonic() + 2.0
        while client.counters.acks_in < acks_in + 1 and time.monotonic() < end:
            client.poll(0.01)
        assert client.counters.acks_in == acks_in + 1
        assert held == 1
        assert _round(client, server, reply=False) == 0  # acked at once again


def test_a_receiver_that_never_replies_acks_at_once():
    with (
        nbmq.SafeDealer.bind("127.0.0.1:0", **FAST) as server,
        nbmq.SafeDealer.connect(server.local_address, **FAST) as client,
    ):
        assert pump(server, client, until=connected(server, client))
        for _ in range(5):
            assert _round(client, server, reply=False) == 0
        assert not server._pingpong


def test_a_late_reply_ends_it():
    with (
        nbmq.SafeDealer.bind("127.0.0.1:0", **FAST) as server,
        nbmq.SafeDealer.connect(server.local_address, **FAST) as client,
    ):
        assert pump(server, client, until=connected(server, client))
        assert any(_round(client, server, reply=True) for _ in range(ROUNDS))
        client.send(b"ping", flush=True)
        server.recv(timeout=2.0)
        assert server.engine._acks_held == 1
        time.sleep(ACK_DELAY * 5)  # the server works on its reply longer than ACK_DELAY
        server.send(b"pong", flush=True)
        assert server.engine._acks_held == 0 and not server._pingpong
        client.recv(timeout=2.0)
        assert _round(client, server, reply=True) == 0  # acked at once again
