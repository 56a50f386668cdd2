"""The small-message send path end to end: Dealer to Dealer over UDP,
IPC and inproc, default ``send()`` (auto-batched, GSO on UDP), every message of every shape
arrives whole and in order, and the counters on both ends agree. Runs on whichever engine is
built (the compiled ``nbmq.engine._fast`` or, with NBMQ_NO_EXTENSIONS=1, the Python twin)."""

from __future__ import annotations

import time

import pytest

import nbmq.transports as nt
from nbmq.errors import WouldBlock

from .conftest import FAST, TRANSPORTS, pump, server_address


def _messages(count: int) -> list[list[bytes]]:
    """Mostly one-part bytes of 1..466 bytes (one frame), some larger, multipart, empty or
    not bytes; each numbered so order and content can be checked."""
    out: list[list[bytes]] = []
    for i in range(count):
        tag = i.to_bytes(4, "big")
        kind = i % 50
        if kind == 7:
            out.append([tag + bytes(range(256)) * 4])  # three frames
        elif kind == 11:
            out.append([tag, b"second part"])
        elif kind == 13:
            out.append([tag, b""])
        elif kind == 17:
            out.append([bytearray(tag + b"mutable")])  # type: ignore[list-item]
        else:
            out.append([tag + bytes([i % 251]) * (i % 463)])  # 4..466 bytes
    return out


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_small_messages_arrive_whole_and_in_order(kind, tmp_path):
    messages = _messages(3000)
    options = dict(FAST, send_hwm=1000, recv_hwm=100_000)
    with (
        nt.Dealer.bind(server_address(kind, tmp_path), **options) as server,
        nt.Dealer.connect(server.local_address, **options) as client,
    ):
        assert pump(server, client, until=lambda: client.connected and server.connected)
        got: list[list[bytes]] = []
        end = time.monotonic() + 20.0
        sent = 0
        while len(got) < len(messages) and time.monotonic() < end:
            for _ in range(200):  # a burst, then the receiver drains what came
                if sent == len(messages):
                    break
                try:
                    client.send(messages[sent])
                except WouldBlock:
                    break
                sent += 1
            for _ in range(50):  # flush (an IPC peer takes few at a time) and drain
                client.tick()
                before = len(got)
                for _ in range(2000):
                    try:
                        got.append([bytes(p) for p in server.recv(timeout=0.002)])
                    except WouldBlock:
                        break
                if len(got) == before:
                    break
        assert got == [[bytes(p) for p in m] for m in messages]
        assert client.counters.messages_out == len(messages)
        assert server.counters.messages_in == len(messages)
        assert server.counters.kernel_drops == 0 and server.counters.dropped_total == 0


@pytest.mark.parametrize("safe", [False, True])
def test_a_reused_bytearray_sends_what_it_held_at_send(safe, tmp_path):
    """A common user loop: one bytearray stamped with an index and sent, again and again."""
    cls = nt.SafeDealer if safe else nt.Dealer
    with (
        cls.bind(server_address("udp", tmp_path), **FAST) as server,
        cls.connect(server.local_address, **FAST) as client,
    ):
        assert pump(server, client, until=lambda: client.connected and server.connected)
        msg = bytearray(100)
        for i in range(300):
            msg[:8] = msg[-8:] = i.to_bytes(8, "little")
            client.send(msg)
        msg[:] = bytes(100)  # after send returned: none of this may reach the wire
        client.flush()
        got = []
        end = time.monotonic() + 10.0
        while len(got) < 300 and time.monotonic() < end:
            try:
                got.append(bytes(server.recv(timeout=0.2)[0]))
            except WouldBlock:
                client.tick()
        assert [(int.from_bytes(m[:8], "little"), int.from_bytes(m[-8:], "little")) for m in got] == [
            (i, i) for i in range(300)
        ]
