"""The same scenarios with the asyncio sockets (nbmq.aio), on UDP, IPC and inproc."""

from __future__ import annotations

import asyncio
import time

import pytest

from nbmq import aio
from nbmq.errors import NotSupported, WouldBlock

from .conftest import FAST, TRANSPORTS, server_address

pytestmark = pytest.mark.network


def run(coro, timeout: float = 10.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def pair(server_cls, client_cls, kind, tmp_path, **options):
    opts = {**FAST, **options}
    server = await server_cls.bind(server_address(kind, tmp_path), **opts)
    client = await client_cls.connect(server.local_address, **opts)
    assert await client.wait_connected(5.0)
    return server, client


def parts(message) -> list[bytes]:
    return [bytes(p) for p in message]


@pytest.fixture(params=TRANSPORTS)
def kind(request):
    return request.param


def test_basic_and_ping_pong(kind, tmp_path):
    async def main():
        server, client = await pair(aio.Dealer, aio.Dealer, kind, tmp_path)
        async with server, client:
            await client.send([b"hello", b"", b"w" * 2000])
            assert parts(await server.recv(timeout=2)) == [b"hello", b"", b"w" * 2000]
            for i in range(30):
                await client.send([b"ping", str(i).encode()])
                assert parts(await server.recv(timeout=2)) == [b"ping", str(i).encode()]
                await server.send([b"pong"])
                assert parts(await client.recv(timeout=2)) == [b"pong"]

    run(main())


def test_round_robin(kind, tmp_path):
    async def main():
        server, a = await pair(aio.Dealer, aio.Dealer, kind, tmp_path)
        b = await aio.Dealer.connect(server.local_address, **FAST)
        async with server, a, b:
            assert await b.wait_connected(5.0)
            while len(server.engine.connected_peers) < 2:
                await asyncio.sleep(0.01)
            for i in range(10):
                await server.send([str(i).encode()])
            got_a = [int(parts(await a.recv(timeout=2))[0]) for _ in range(5)]
            got_b = [int(parts(await b.recv(timeout=2))[0]) for _ in range(5)]
            assert sorted(got_a + got_b) == list(range(10))

    run(main())


def test_radio_dish(kind, tmp_path):
    async def main():
        radio, dish = await pair(aio.Radio, aio.Dish, kind, tmp_path)
        async with radio, dish:
            while not radio.engine.connected_peers:
                await asyncio.sleep(0.01)
            for i in range(5):
                await radio.send([b"news", str(i).encode()])
            assert [parts(await dish.recv(timeout=2)) for _ in range(5)] == [
                [b"news", str(i).encode()] for i in range(5)
            ]
            with pytest.raises(NotSupported):
                await radio.recv(timeout=0.1)
            with pytest.raises(NotSupported):
                await dish.send([b"no"])

    run(main())


def test_send_waits_at_hwm_then_flows(kind, tmp_path):
    async def main():
        server = await aio.SafeDealer.bind(server_address(kind, tmp_path), **FAST)
        client = await aio.SafeDealer.connect(server.local_address, send_hwm=2, **FAST)
        async with server, client:
            # No one reads acks' effect yet: only 2 unacked messages may be held.
            client.send_nowait([b"0"])
            client.send_nowait([b"1"])
            with pytest.raises(WouldBlock):
                client.send_nowait([b"2"])
            start = time.monotonic()
            await client.send([b"2"], timeout=3.0)  # waits for acks, then goes
            assert time.monotonic() - start < 2.0
            for i in range(3, 40):
                await client.send([str(i).encode()])
            got = [int(parts(await server.recv(timeout=3))[0]) for _ in range(40)]
            assert got == list(range(40))

    run(main())


def test_send_timeout_raises(kind, tmp_path):
    async def main():
        address = "127.0.0.1:9" if kind == "udp" else server_address(kind, tmp_path)
        client = await aio.Dealer.connect(address, send_hwm=1, **FAST)
        await client.send([b"x"])
        with pytest.raises(WouldBlock):
            await client.send([b"y"], timeout=0.1)
        with pytest.raises(WouldBlock):
            await client.recv(timeout=0.1)
        start = time.monotonic()
        await client.close(linger=0)
        assert time.monotonic() - start < 0.1

    run(main())


def test_linger_delivers_queued(kind, tmp_path):
    async def main():
        server = await aio.SafeDealer.bind(server_address(kind, tmp_path), **FAST)
        client = await aio.SafeDealer.connect(server.local_address, **FAST)
        for i in range(20):  # before the handshake: they wait in the queue
            client.send_nowait([str(i).encode()])
        await client.close(linger=3.0)
        assert client.engine.counters.acks_in >= 20
        got = [int(parts(await server.recv(timeout=2))[0]) for _ in range(20)]
        assert got == list(range(20))
        await server.close()

    run(main())


def test_no_busy_polling_when_idle(kind, tmp_path):
    async def main():
        server, client = await pair(aio.Dealer, aio.Dealer, kind, tmp_path)
        async with server, client:
            cpu = time.process_time()
            await asyncio.sleep(0.5)  # heartbeats every 50 ms; nothing else to do
            assert time.process_time() - cpu < 0.15
            assert server.peers and client.peers

    run(main())


def test_safe_dealer_exactly_once_over_lossy_relay(lossy_relay):
    async def main():
        opts = dict(FAST, safe_resend_ivl=0.03, safe_resend_limit=60, peer_keepalive=3.0, send_hwm=32)
        server = await aio.SafeDealer.bind("127.0.0.1:0", **opts)
        host, port = server.local_address.rsplit(":", 1)
        relay = lossy_relay((host, int(port)), drop=0.2, dup=0.05, seed=5)
        client = await aio.SafeDealer.connect(relay.address, **opts)
        async with server, client:
            assert await client.wait_connected(5.0)
            n = 120

            async def produce():
                for i in range(n):
                    await client.send([i.to_bytes(4, "big"), b"q" * (i * 37 % 3000)])

            producer = asyncio.create_task(produce())
            got = [parts(await server.recv(timeout=10)) for _ in range(n)]
            await producer
            assert sorted(int.from_bytes(m[0], "big") for m in got) == list(range(n))
            assert all(m[1] == b"q" * (int.from_bytes(m[0], "big") * 37 % 3000) for m in got)
            assert relay.stats["dropped"] and relay.stats["duplicated"] and client.counters.resends

    run(main(), timeout=30.0)
