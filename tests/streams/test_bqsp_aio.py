"""BQSP asyncio client and server over loopback."""

from __future__ import annotations

import asyncio
import random

import pytest
from streamutil import run

from nbmq.streams.bqsp import BqspConnection, PacketReceived
from nbmq.transports.bqsp_aio import BqspClient, serve_bqsp

pytestmark = pytest.mark.network


def test_many_requests_answered_out_of_order() -> None:
    rng = random.Random(1)
    delays = [rng.random() * 0.02 for _ in range(600)]

    async def handler(packet: PacketReceived) -> tuple[bytes, int]:
        index = int.from_bytes(packet.data[:4], "big")
        await asyncio.sleep(delays[index])
        return bytes(packet.data)[::-1], packet.data_type ^ 0xFFFF

    async def main() -> None:
        async with await serve_bqsp(handler) as server:
            client = await BqspClient.connect("127.0.0.1", server.port)
            requests = [i.to_bytes(4, "big") + rng.randbytes(rng.randrange(0, 300)) for i in range(600)]
            replies = await asyncio.gather(*[client.request(r, data_type=i) for i, r in enumerate(requests)])
            for i, (request, reply) in enumerate(zip(requests, replies)):
                assert bytes(reply.data) == request[::-1]
                assert reply.data_type == i ^ 0xFFFF
            assert client.in_flight == 0 and client.unmatched == 0
            await client.close()

    run(main())


def test_backpressure_bounds_requests_in_flight() -> None:
    running = 0
    peak = 0

    async def handler(packet: PacketReceived) -> bytes:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.002)
        running -= 1
        return bytes(packet.data)

    async def main() -> None:
        async with await serve_bqsp(handler) as server:
            client = await BqspClient.connect("127.0.0.1", server.port, max_in_flight=4)
            replies = await asyncio.gather(*[client.request(bytes([i])) for i in range(60)])
            assert [bytes(r.data) for r in replies] == [bytes([i]) for i in range(60)]
            assert {r.queue for r in replies} <= {1, 2, 3, 4}
            await client.close()

    run(main())
    assert peak == 4


def test_timeout_keeps_queue_until_late_reply() -> None:
    release = asyncio.Event

    async def main() -> None:
        gate = release()

        async def handler(packet: PacketReceived) -> bytes:
            if packet.data == b"slow":
                await gate.wait()
            return bytes(packet.data)

        async with await serve_bqsp(handler) as server:
            client = await BqspClient.connect("127.0.0.1", server.port, max_in_flight=2)
            with pytest.raises(TimeoutError):
                await client.request(b"slow", timeout=0.05)
            assert client.in_flight == 1  # the queue number waits for the late reply
            assert bytes((await client.request(b"a")).data) == b"a"
            gate.set()
            for _ in range(100):
                if client.in_flight == 0:
                    break
                await asyncio.sleep(0.01)
            assert client.in_flight == 0 and client.unmatched == 0  # late reply discarded
            replies = await asyncio.gather(client.request(b"b"), client.request(b"c"), client.request(b"d"))
            assert [bytes(r.data) for r in replies] == [b"b", b"c", b"d"]
            await client.close()

    run(main())


@pytest.mark.parametrize("size", [100, 64 * 1024, 3 * 1024 * 1024])
def test_payload_sizes_and_sync_handler(size: int) -> None:
    def handler(packet: PacketReceived) -> bytes:
        return packet.data  # a memoryview is fine

    async def main() -> None:
        async with await serve_bqsp(handler) as server:
            client = await BqspClient.connect("127.0.0.1", server.port)
            payloads = [bytes([i]) * size for i in range(8)]
            replies = await asyncio.gather(*[client.request(p, 3) for p in payloads])
            assert [bytes(r.data) for r in replies] == payloads
            await client.close()

    run(main())


def test_handler_error_and_no_reply() -> None:
    async def handler(packet: PacketReceived) -> bytes | None:
        if packet.data == b"boom":
            raise RuntimeError("boom")
        if packet.data == b"none":
            return None
        return b"ok"

    async def main() -> None:
        async with await serve_bqsp(handler) as server:
            client = await BqspClient.connect("127.0.0.1", server.port)
            client.send(b"none", queue=0)  # fire and forget
            with pytest.raises(TimeoutError):
                await client.request(b"boom", timeout=0.1)
            assert bytes((await client.request(b"x")).data) == b"ok"
            assert server.handler_errors == 1
            await client.close()

    run(main())


def test_server_closes_client_that_breaks_protocol() -> None:
    async def handler(packet: PacketReceived) -> bytes:
        return b""

    async def main() -> None:
        async with await serve_bqsp(handler, max_packet_size=1024) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(BqspConnection().send_header(1 << 20, 1, 1))
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            assert server.protocol_errors == 1
            client = await BqspClient.connect("127.0.0.1", server.port)
            assert (await client.request(b"still ok")).data == b""
            await client.close()

    run(main())


def test_pending_requests_fail_when_connection_drops() -> None:
    async def main() -> None:
        gate = asyncio.Event()

        async def handler(packet: PacketReceived) -> bytes:
            await gate.wait()
            return b""

        server = await serve_bqsp(handler)
        client = await BqspClient.connect("127.0.0.1", server.port, max_in_flight=1)
        first = asyncio.ensure_future(client.request(b"1"))
        second = asyncio.ensure_future(client.request(b"2"))  # waits for a queue number
        await asyncio.sleep(0.05)
        server.close()
        for fut in (first, second):
            with pytest.raises(ConnectionError):
                await fut
        with pytest.raises(ConnectionError):
            await client.request(b"3")
        await server.wait_closed()

    run(main())


def test_client_half_close_gets_all_answers() -> None:
    async def handler(packet: PacketReceived) -> bytes:
        await asyncio.sleep(0.01)
        return bytes(packet.data) * 2

    async def main() -> None:
        async with await serve_bqsp(handler) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            conn = BqspConnection()
            writer.write(b"".join(conn.send(bytes([q]), 0, q) for q in range(1, 11)))
            writer.write_eof()
            conn.receive_data(await asyncio.wait_for(reader.read(), 5))  # server closes after answering
            conn.receive_data(b"")
            events = []
            while (event := conn.next_event()) is not None:
                events.append(event)
            got = {e.queue: bytes(e.data) for e in events if isinstance(e, PacketReceived)}
            assert got == {q: bytes([q]) * 2 for q in range(1, 11)}
            writer.close()

    run(main())
