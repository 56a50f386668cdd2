"""The rqueue server over loopback: a subprocess on an OS-chosen port, driven by asyncio clients."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import subprocess

import pytest
from streamutil import run

from nbmq import testing
from nbmq.streams.rqueue import RqueueClientConnection
from nbmq.testing import ServerProcess
from nbmq.transports.rqueue_aio import RqueueClient
from nbmq.transports.rqueue_server import serve

pytestmark = pytest.mark.network

_ids = itertools.count()
cc = RqueueClientConnection()


async def sync(client: RqueueClient) -> None:
    """Wait until the server has handled everything this client sent so far: messages from one
    connection are handled in order, so the echo of a private notification proves it."""
    topic = f"sync-{next(_ids)}"
    await client.subscribe(topic)
    await client.notify(topic, b"")
    while True:
        got_topic, _ = await asyncio.wait_for(client.recv(), 5)
        if got_topic == topic.encode():
            break
    await client.remove(topic)


async def connect(server) -> RqueueClient:
    return await RqueueClient.connect(server.host, server.port)


def test_subscribe_notify(rqueue_server: ServerProcess) -> None:
    async def main() -> None:
        pub, sub = await connect(rqueue_server), await connect(rqueue_server)
        await sub.subscribe("news")
        await pub.subscribe(b"news")
        await sync(sub)
        await sync(pub)
        await pub.notify("news", b"hello")
        await pub.notify("newsX", b"not matched")  # exact topic match only
        await pub.notify("news", b"x" * 2043)  # payload 1 + 4 + 2043: the 2 KB cap, exactly
        for client in (sub, pub):  # the publisher gets its own: it is subscribed
            assert await client.recv() == (b"news", b"hello")
            assert await client.recv() == (b"news", b"x" * 2043)
        await pub.close()
        await sub.close()

    run(main())


def test_remove_and_deregister(rqueue_server: ServerProcess) -> None:
    async def main() -> None:
        pub, sub = await connect(rqueue_server), await connect(rqueue_server)
        for topic in ("a", "b", "c"):
            await sub.subscribe(topic)
        await sync(sub)
        await sub.remove("a")
        await sync(sub)
        for topic in ("a", "b", "c"):
            await pub.notify(topic, topic.encode())
        assert [await sub.recv() for _ in range(2)] == [(b"b", b"b"), (b"c", b"c")]
        await sub.deregister()
        await sub.subscribe("marker")
        await sync(sub)
        for topic in ("a", "b", "c", "marker"):
            await pub.notify(topic, b"after")
        assert await sub.recv() == (b"marker", b"after")  # nothing from a, b, c
        await pub.close()
        await sub.close()

    run(main())


def test_disconnect_purges_and_others_carry_on(rqueue_server: ServerProcess) -> None:
    async def main() -> None:
        pub, keep = await connect(rqueue_server), await connect(rqueue_server)
        gone = [await connect(rqueue_server) for _ in range(5)]
        for client in [keep, *gone]:
            await client.subscribe("t")
            await sync(client)
        for client in gone:
            await client.close()
        for i in range(100):
            await pub.notify("t", str(i).encode())
        for i in range(100):
            assert await keep.recv() == (b"t", str(i).encode())
        await pub.close()
        await keep.close()

    run(main())


def test_disconnect_purge_in_process() -> None:
    async def main() -> None:
        async with await serve("127.0.0.1", 0) as server:
            host, port = server.address
            client = await RqueueClient.connect(host, port)
            await client.subscribe("x")
            await client.subscribe("y")
            await sync(client)
            assert len(server.broker.subscribers("x")) == len(server.broker.subscribers("y")) == 1
            await client.close()
            for _ in range(200):
                if server.broker.stats()["clients"] == 0:
                    break
                await asyncio.sleep(0.01)
            assert server.broker.stats()["subscriptions"] == 0
            assert server.broker.subscribers("x") == []

    run(main())


def test_fan_out_to_50_clients(rqueue_server: ServerProcess) -> None:
    async def main() -> None:
        pub = await connect(rqueue_server)
        subs = await asyncio.gather(*[connect(rqueue_server) for _ in range(50)])
        for sub in subs:
            await sub.subscribe("fan")
        await asyncio.gather(*[sync(sub) for sub in subs])
        expected = [(b"fan", i.to_bytes(4, "big") * 500) for i in range(40)]
        for topic, content in expected:
            await pub.notify(topic, content)

        async def collect(sub: RqueueClient) -> list:
            return [await sub.recv() for _ in expected]

        results = await asyncio.gather(*[collect(sub) for sub in subs])
        assert all(result == expected for result in results)
        await asyncio.gather(pub.close(), *[sub.close() for sub in subs])

    run(main(), timeout=30)


def test_garbage_client_closed_others_keep_receiving(rqueue_server: ServerProcess) -> None:
    async def main() -> None:
        pub, sub = await connect(rqueue_server), await connect(rqueue_server)
        await sub.subscribe("g")
        await sync(sub)
        reader, writer = await asyncio.open_connection(rqueue_server.host, rqueue_server.port)
        writer.write(cc.subscribe("g") + b"\x00\x03\x42bad")  # type 0x42 does not exist
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), 5)  # the server closes it: EOF or reset
        assert rest == b""
        writer.close()
        for i in range(20):
            await pub.notify("g", bytes([i]))
        assert [await sub.recv() for _ in range(20)] == [(b"g", bytes([i])) for i in range(20)]
        await pub.close()
        await sub.close()

    run(main())


def test_oversized_payload_closes_only_that_client(rqueue_server: ServerProcess) -> None:
    async def main() -> None:
        sub = await connect(rqueue_server)
        await sub.subscribe("o")
        await sync(sub)
        reader, writer = await asyncio.open_connection(rqueue_server.host, rqueue_server.port)
        writer.write(struct.pack(">HB", 2049, 7) + b"\x01o" + b"z" * 2047)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        pub = await connect(rqueue_server)
        await pub.notify("o", b"fine")
        assert await sub.recv() == (b"o", b"fine")
        await pub.close()
        await sub.close()

    run(main())


def test_slow_subscriber_bounded_while_fast_get_everything() -> None:
    """A subscriber that never reads: the server drops its share past --max-buffer, its memory
    stays bounded, and the fast subscribers (paced by the publisher) receive every message."""
    max_buffer = 256 * 1024
    server = testing.rqueue_server("--max-buffer", str(max_buffer))
    try:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect((server.host, server.port))
        slow.sendall(cc.subscribe("s"))

        async def main() -> int:
            pub = await RqueueClient.connect(server.host, server.port)
            fast = [await RqueueClient.connect(server.host, server.port) for _ in range(2)]
            for client in fast:
                await client.subscribe("s")
                await sync(client)
            await sync(pub)  # the slow client's SUBSCRIBE was sent before: handled by now
            content = b"p" * 2040
            batch, batches = 64, 250  # 16000 notifications of 2 KB: 32 MB per subscriber
            rss_start = 0
            for b in range(batches):
                if b == 20:
                    rss_start = server.rss()
                for i in range(batch):
                    await pub.notify("s", (b * batch + i).to_bytes(4, "big") + content)
                for client in fast:
                    for i in range(batch):
                        topic, got = await client.recv()
                        assert int.from_bytes(got[:4], "big") == b * batch + i
            growth = server.rss() - rss_start
            await pub.close()
            for client in fast:
                await client.close()
            return growth

        growth = run(main(), timeout=60)
        assert growth < 8 * max_buffer, f"server grew by {growth} bytes"
        # the slow subscriber now reads what it was given: far less than was published
        slow.settimeout(0.5)
        received = 0
        try:
            while chunk := slow.recv(1 << 20):
                received += len(chunk)
        except TimeoutError:
            pass
        slow.close()
        per_message = 3 + 1 + 1 + 4 + 2040
        assert received % per_message == 0  # whole notifications only
        assert 0 < received // per_message < 16000 // 2
    finally:
        code, _, err = server.stop()
    assert code == 0, err
    assert "slow consumer" in err


def test_slow_consumer_disconnect_policy_in_process() -> None:
    async def main() -> None:
        server = await serve("127.0.0.1", 0, max_buffer=64 * 1024, slow_consumer="disconnect")
        host, port = server.address
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.setblocking(False)
        await asyncio.get_running_loop().sock_connect(slow, (host, port))
        await asyncio.get_running_loop().sock_sendall(slow, cc.subscribe("d"))
        pub = await RqueueClient.connect(host, port)
        await sync(pub)
        for _ in range(2000):
            await pub.notify("d", b"q" * 2000)
            if server.broker.stats()["slow_consumers"]:
                break
        for _ in range(200):
            if server.broker.stats()["clients"] == 1:
                break
            await asyncio.sleep(0.01)
        assert server.broker.stats()["slow_consumers"] == 1
        assert server.broker.stats()["clients"] == 1  # the slow one was closed
        slow.close()
        await pub.close()
        server.close()
        await server.wait_closed()

    run(main(), timeout=30)


def test_server_cli_rejects_bad_options() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nbmq.transports.rqueue_server", "--slow-consumer", "nope"],
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 2


def test_logs_and_clean_sigint() -> None:
    import signal

    server = testing.rqueue_server("--log-level", "INFO", "--stats-interval", "0.1", "--threads", "8")

    async def main() -> None:
        client = await RqueueClient.connect(server.host, server.port)
        await client.subscribe("l")
        await sync(client)
        await client.close()
        await asyncio.sleep(0.3)

    try:
        run(main())
        server.proc.send_signal(signal.SIGINT)
        # Let the SIGINT shutdown finish: stop() would otherwise race a SIGTERM into it.
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    finally:
        code, _, err = server.stop()
    assert code == 0, err
    assert "client connected: 127.0.0.1:" in err
    assert "client disconnected: 127.0.0.1:" in err
    assert "stats clients=" in err and "rqueue server stopping" in err


def test_concurrent_receivers_and_async_for(rqueue_server: ServerProcess) -> None:
    async def main() -> None:
        sub = await connect(rqueue_server)
        await sub.subscribe("c")
        await sync(sub)
        pub = await connect(rqueue_server)
        receivers = [asyncio.ensure_future(sub.recv()) for _ in range(3)]
        await asyncio.sleep(0.01)
        for i in range(3):
            await pub.notify("c", bytes([i]))
        got = sorted(await asyncio.gather(*receivers))
        assert got == [(b"c", bytes([i])) for i in range(3)]
        await pub.notify("c", b"last")
        await pub.close()
        items = []
        async for _topic, content in sub:
            items.append(content)
            if content == b"last":
                await sub.close()  # iteration then ends cleanly
        assert items == [b"last"]

    run(main())
