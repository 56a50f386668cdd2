"""BQSP memory bounds: a failed connection frees its buffer at once, without the
cyclic GC, and the server caps the bytes held in incomplete packets across all connections."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import weakref

import pytest
from streamutil import run

import nbmq.streams.bqsp
from nbmq.errors import ProtocolError
from nbmq.streams.bqsp import BqspConnection, BqspState, PacketReceived
from nbmq.transports.bqsp_aio import BqspClient, serve_bqsp


class Chunk(bytearray):
    """A fed buffer we can hold a weak reference to (bytes cannot be weakly referenced)."""


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("fault", ["cut", "oversize"])
def test_failed_connection_frees_its_buffer_without_gc(codec, monkeypatch, no_gc, fault) -> None:
    monkeypatch.setattr(nbmq.streams.bqsp, "codec", codec)
    conn = BqspConnection(max_packet_size=1 << 20)
    chunk = Chunk(codec.encode_bqsp_header(1 << 20, 1, 1) + bytes(300_000))
    ref = weakref.ref(chunk)
    conn.receive_data(chunk)
    del chunk
    assert conn.next_event() is None and conn.buffered == 300_007
    if fault == "cut":
        conn.receive_data(b"")
    else:  # a second, oversized packet cannot come after an unfinished one; feed a bad header
        conn = BqspConnection(max_packet_size=10)
        chunk = Chunk(codec.encode_bqsp_header(1000, 1, 1) + bytes(100))
        ref = weakref.ref(chunk)
        conn.receive_data(chunk)
        del chunk
    with pytest.raises(ProtocolError) as info:
        conn.next_event()
    # the connection and its error are still alive (as a driver holding them would keep them)
    assert conn.state is BqspState.ERROR and conn.buffered == 0
    assert ref() is None, "the failed connection still holds the bytes it had buffered"
    if fault == "oversize":
        assert info.value.__cause__ is not None and info.value.__cause__.__traceback__ is None
    with pytest.raises(ProtocolError):
        conn.receive_data(b"x")  # still in the error state


def _held() -> int:
    return tracemalloc.get_traced_memory()[0]


async def _wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _closed(reader: asyncio.StreamReader) -> bool:
    """True once the server closed (aborted) the connection."""
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        return True


def test_server_frees_a_cut_connections_buffer_without_gc(no_gc) -> None:
    size = 6 << 20

    async def main() -> None:
        async with await serve_bqsp(lambda packet: b"ok", max_packet_size=8 << 20) as server:
            client = await BqspClient.connect("127.0.0.1", server.port)
            assert bytes((await client.request(b"hi")).data) == b"ok"
            before = _held()
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(nbmq.streams.bqsp.codec.encode_bqsp_header(8 << 20, 1, 1))
            writer.write(bytes(size))
            await writer.drain()
            await _wait_for(lambda: server.buffered_total >= size)
            assert _held() - before > size  # the server holds the partial packet
            writer.write_eof()  # the stream ends inside the packet: a protocol error
            assert await _closed(reader)
            await _wait_for(lambda: server.protocol_errors == 1 and len(server._protocols) == 1)
            writer.close()
            await _wait_for(lambda: _held() - before < size // 4)
            assert server.buffered_total == 0
            assert bytes((await client.request(b"again")).data) == b"ok"
            await client.close()

    tracemalloc.start()
    try:
        run(main(), timeout=30)
    finally:
        tracemalloc.stop()


def test_server_wide_budget_closes_the_connection_that_exceeds_it() -> None:
    kib = 1024

    async def handler(packet: PacketReceived) -> bytes:
        return len(packet.data).to_bytes(4, "big")

    async def main() -> None:
        async with await serve_bqsp(handler, max_packet_size=1024 * kib, max_buffered_total=1536 * kib) as server:
            header = nbmq.streams.bqsp.codec.encode_bqsp_header(1024 * kib, 1, 1)
            a_reader, a = await asyncio.open_connection("127.0.0.1", server.port)
            a.write(header + bytes(800 * kib))
            await a.drain()
            await _wait_for(lambda: server.buffered_total >= 800 * kib)
            b_reader, b = await asyncio.open_connection("127.0.0.1", server.port)
            b.write(header + bytes(800 * kib))
            await b.drain()
            assert await _closed(b_reader)
            assert server.closed_over_budget == 1
            # a, under the budget, is untouched: its packet completes and is answered
            a.write(bytes(224 * kib))
            reply = await asyncio.wait_for(a_reader.readexactly(7 + 4), 5)
            assert reply[7:] == (1024 * kib).to_bytes(4, "big")
            # so is a newcomer with a small request
            client = await BqspClient.connect("127.0.0.1", server.port)
            assert bytes((await client.request(b"xyz")).data) == (3).to_bytes(4, "big")
            await client.close()
            assert server.buffered_total == 0 and server.closed_over_budget == 1
            for w in (a, b):
                w.close()

    run(main(), timeout=30)


def test_budget_option_is_validated() -> None:
    async def main() -> None:
        with pytest.raises(ValueError):
            await serve_bqsp(lambda p: None, max_buffered_total=-1)

    run(main())
