"""BQSP sans-IO engine: seed examples, any slicing of the stream, errors, out-of-order queues."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbmq.errors import ProtocolError
from nbmq.streams.bqsp import BqspConnection, BqspState, ConnectionClosed, PacketReceived

# seed 002: header example and the {"status":"ok"} JSON packet
SEED_HEADER = bytes([0x10, 0, 0, 0, 0xFF, 0xAA, 1])
SEED_JSON = b'{"status":"ok"}'
SEED_PACKET = bytes([0xF, 0, 0, 0, 2, 0, 1]) + SEED_JSON


def drain(conn: BqspConnection) -> list:
    events = []
    while (event := conn.next_event()) is not None:
        events.append(event)
        assert len(events) < 100_000
    return events


def packets(events: list) -> list[tuple[int, int, bytes]]:
    return [(e.data_type, e.queue, bytes(e.data)) for e in events if isinstance(e, PacketReceived)]


def feed_sliced(conn: BqspConnection, stream: bytes, cuts: list[int]) -> list:
    events = []
    pos = 0
    for cut in sorted(set(cuts)) + [len(stream)]:
        if cut > pos:
            conn.receive_data(stream[pos:cut])
            events += drain(conn)
            pos = cut
    conn.receive_data(b"")
    return events + drain(conn)


def test_seed_header_and_packet() -> None:
    conn = BqspConnection()
    assert conn.send_header(16, 0xAAFF, 1) == SEED_HEADER
    assert conn.send(SEED_JSON, data_type=2, queue=1) == SEED_PACKET
    peer = BqspConnection()
    peer.receive_data(SEED_PACKET)
    event = peer.next_event()
    assert event == PacketReceived(2, 1, memoryview(SEED_JSON))
    assert isinstance(event.data, memoryview)
    assert peer.next_event() is None
    peer.receive_data(b"")
    assert isinstance(peer.next_event(), ConnectionClosed)
    assert peer.next_event() is None  # reported once
    assert peer.state is BqspState.CLOSED


def test_seed_header_alone_needs_data() -> None:
    conn = BqspConnection()
    conn.receive_data(SEED_HEADER + b"x" * 15)
    assert conn.next_event() is None
    conn.receive_data(b"y")
    assert packets([conn.next_event()]) == [(0xAAFF, 1, b"x" * 15 + b"y")]


STREAM = (
    b"".join(BqspConnection().send(bytes([i]) * (i * 37 % 300), data_type=i * 11, queue=i % 256) for i in range(60))
    + SEED_PACKET
)
EXPECTED = [(i * 11, i % 256, bytes([i]) * (i * 37 % 300)) for i in range(60)] + [(2, 1, SEED_JSON)]


@pytest.mark.parametrize("mode", ["whole", "bytes", "random"])
def test_stream_any_slicing(mode: str) -> None:
    conn = BqspConnection()
    if mode == "whole":
        cuts: list[int] = []
    elif mode == "bytes":
        cuts = list(range(1, len(STREAM)))
    else:
        rng = random.Random(6)
        cuts = rng.sample(range(1, len(STREAM)), 200)
    events = feed_sliced(conn, STREAM, cuts)
    assert packets(events) == EXPECTED
    assert isinstance(events[-1], ConnectionClosed)
    assert conn.packets_received == len(EXPECTED)
    assert conn.bytes_received == len(STREAM)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=40))
def test_stream_hypothesis_slicing(cuts: list[int]) -> None:
    assert packets(feed_sliced(BqspConnection(), STREAM, cuts)) == EXPECTED


def test_empty_payload_and_memoryview_input() -> None:
    conn = BqspConnection()
    wire = conn.send(b"", 7, 255) + conn.send(bytearray(b"abc"), 1, 0) + conn.send(memoryview(b"de"), 2, 3)
    peer = BqspConnection()
    peer.receive_data(memoryview(wire))
    assert packets(drain(peer)) == [(7, 255, b""), (1, 0, b"abc"), (2, 3, b"de")]


@pytest.mark.parametrize("cut", [1, 6, 7, 10])
def test_eof_inside_packet_is_protocol_error(cut: int) -> None:
    conn = BqspConnection()
    conn.receive_data(SEED_PACKET + SEED_PACKET[:cut])
    assert packets([conn.next_event()]) == [(2, 1, SEED_JSON)]  # packets before the fault first
    assert conn.next_event() is None
    conn.receive_data(b"")
    with pytest.raises(ProtocolError, match="inside a packet"):
        conn.next_event()
    assert conn.state is BqspState.ERROR
    with pytest.raises(ProtocolError):
        conn.next_event()
    with pytest.raises(ProtocolError):
        conn.receive_data(b"more")


def test_oversized_packet_is_protocol_error() -> None:
    conn = BqspConnection(max_packet_size=100)
    conn.receive_data(conn.send(b"a" * 100, 1, 1) + BqspConnection().send_header(101, 1, 2))
    assert packets([conn.next_event()]) == [(1, 1, b"a" * 100)]
    with pytest.raises(ProtocolError, match="max_packet_size") as info:
        conn.next_event()
    assert info.value.__cause__ is not None  # the codec's FrameTooLarge
    assert conn.state is BqspState.ERROR
    with pytest.raises(ProtocolError):
        conn.receive_data(b"x")


def test_claimed_4gib_allocates_nothing() -> None:
    conn = BqspConnection()
    conn.receive_data(b"\xff\xff\xff\xff\x00\x00\x00")  # 4 GiB - 1 claimed, 64 MiB cap
    with pytest.raises(ProtocolError):
        conn.next_event()


def test_send_limits_and_options() -> None:
    conn = BqspConnection(max_packet_size=10)
    assert conn.max_packet_size == 10
    with pytest.raises(ValueError):
        conn.send(b"x" * 11)
    with pytest.raises(ValueError):
        conn.send(b"x", data_type=0x10000)
    with pytest.raises(ValueError):
        conn.send(b"x", queue=256)
    with pytest.raises(ValueError):
        BqspConnection(max_packet_size=-1)
    assert conn.send(b"x" * 10, 1, 2)[:7] == bytes([10, 0, 0, 0, 1, 0, 2])


def test_data_after_eof_is_a_caller_bug() -> None:
    conn = BqspConnection()
    conn.receive_data(b"")
    conn.receive_data(b"")  # repeated EOF is harmless
    with pytest.raises(RuntimeError):
        conn.receive_data(b"x")
    assert isinstance(conn.next_event(), ConnectionClosed)


def test_interleaved_queues_answered_out_of_order() -> None:
    """A client with 255 requests in flight; the server answers in a shuffled order, each on its
    request's queue; the client matches every response by queue number."""
    rng = random.Random(42)
    client, server = BqspConnection(), BqspConnection()
    requests = {q: rng.randbytes(rng.randrange(0, 200)) for q in range(1, 256)}
    wire = b"".join(client.send(data, data_type=q, queue=q) for q, data in requests.items())
    server.receive_data(wire)
    received = drain(server)
    assert len(received) == 255
    rng.shuffle(received)
    answers = b"".join(server.send(bytes(e.data)[::-1], e.data_type, e.queue) for e in received)
    cuts = sorted(rng.sample(range(1, len(answers)), 500))
    responses = {}
    for event in feed_sliced(client, answers, cuts):
        if isinstance(event, PacketReceived):
            assert event.queue not in responses
            responses[event.queue] = (event.data_type, bytes(event.data))
    assert responses == {q: (q, data[::-1]) for q, data in requests.items()}


def test_engines_import_no_io_modules() -> None:
    """ARCHITECTURE.md: the engines never import socket, asyncio, selectors or time."""
    import ast
    from pathlib import Path

    import nbmq.streams

    paths = sorted(Path(nbmq.streams.__file__).parent.glob("*.py"))
    assert len(paths) >= 6
    for path in paths:
        name = path.name
        tree = ast.parse(path.read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add((node.module or "").split(".")[0])
        assert not imported & {"socket", "asyncio", "selectors", "time", "random", "os"}, (name, imported)
