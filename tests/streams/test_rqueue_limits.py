"""The rqueue server under stalled, idle and too many clients, and drop notices
end to end. Small timeouts; every wait is bounded."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from streamutil import run

from nbmq import testing
from nbmq.streams.rqueue import RqueueClientConnection
from nbmq.transports.rqueue_aio import RqueueClient
from nbmq.transports.rqueue_server import build_parser, serve

pytestmark = pytest.mark.network

cc = RqueueClientConnection()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """True when the server closes the connection within ``seconds``."""
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except ConnectionResetError:
        return True
    except asyncio.TimeoutError:
        return False


async def roundtrip(client: RqueueClient, topic: str) -> bytes:
    await client.subscribe(topic)
    await client.notify(topic, b"ping")
    got_topic, content = await asyncio.wait_for(client.recv(), 5)
    assert got_topic == topic.encode()
    return content


def test_read_timeout_closes_stalled_and_trickling_clients_only() -> None:
    async def main() -> None:
        async with await serve("127.0.0.1", 0, read_timeout=0.3) as server:
            host, port = server.address
            good = await RqueueClient.connect(host, port)
            quiet_r, quiet_w = await asyncio.open_connection(host, port)  # nothing started
            stalled_r, stalled_w = await asyncio.open_connection(host, port)
            stalled_w.write(b"\x08\x00\x07\x01t")  # claims 2,048 bytes, sends 2, then silence
            trickle_r, trickle_w = await asyncio.open_connection(host, port)
            message = cc.notify("t", bytes(100))
            start = time.monotonic()
            assert await closed_within(stalled_r, 3.0)
            assert time.monotonic() - start < 2.0
            for byte in message[:30]:  # one byte per 50 ms: active, yet never finishing
                trickle_w.write(bytes((byte,)))
                if trickle_r.at_eof() or trickle_w.is_closing():
                    break
                await asyncio.sleep(0.05)
            assert await closed_within(trickle_r, 3.0)
            assert not await closed_within(quiet_r, 0.5)  # no message started: left alone
            assert await roundtrip(good, "alive") == b"ping"
            stats = server.stats()
            assert stats["timeouts"] == 2 and stats["clients"] == 2
            for w in (quiet_w, stalled_w, trickle_w):
                w.close()
            await good.close()

    run(main(), timeout=20)


def test_idle_timeout_spares_clients_with_traffic_either_way() -> None:
    async def main() -> None:
        async with await serve("127.0.0.1", 0, idle_timeout=0.4) as server:
            host, port = server.address
            listener = await RqueueClient.connect(host, port)  # only receives
            await listener.subscribe("tick")
            publisher = await RqueueClient.connect(host, port)
            idle_r, idle_w = await asyncio.open_connection(host, port)
            start = time.monotonic()
            for _ in range(12):  # 1.2 s: three idle timeouts
                await publisher.notify("tick", b".")
                assert await asyncio.wait_for(listener.recv(), 5) == (b"tick", b".")
                await asyncio.sleep(0.1)
            assert await closed_within(idle_r, 0.1)  # long closed by now
            assert time.monotonic() - start < 5
            assert server.stats()["timeouts"] == 1 and server.stats()["clients"] == 2
            idle_w.close()
            await listener.close()
            await publisher.close()

    run(main(), timeout=20)


def test_max_connections_refuses_the_extra_one() -> None:
    async def main() -> None:
        async with await serve("127.0.0.1", 0, max_connections=2) as server:
            host, port = server.address
            first = await RqueueClient.connect(host, port)
            second = await RqueueClient.connect(host, port)
            await roundtrip(second, "x")  # both accepted and registered by now
            extra_r, extra_w = await asyncio.open_connection(host, port)
            assert await closed_within(extra_r, 3.0)
            assert server.stats()["refused"] == 1 and server.stats()["clients"] == 2
            await first.close()
            for _ in range(200):
                if server.stats()["clients"] == 1:
                    break
                await asyncio.sleep(0.01)
            third = await RqueueClient.connect(host, port)
            assert await roundtrip(third, "y") == b"ping"
            extra_w.close()
            for client in (second, third):
                await client.close()

    run(main(), timeout=20)


def test_drop_notices_account_for_every_notification() -> None:
    total, size = 30_000, 1000  # 30 MB: more than loopback's socket buffers hold

    async def main() -> None:
        async with await serve("127.0.0.1", 0, max_buffer=16 * 1024, drop_notices=True) as server:
            host, port = server.address
            sub = await RqueueClient.connect(host, port, max_queued=50, drop_notices=True)
            await sub.subscribe("t")
            pub = await RqueueClient.connect(host, port)
            await roundtrip(pub, "sync")
            payload = bytes(size - 4)
            for i in range(total):
                await pub.notify("t", i.to_bytes(4, "big") + payload)
            await roundtrip(pub, "sync2")  # the server handled every notification
            dropped = server.stats()["dropped"]
            assert dropped > 0, "the subscriber was never slow: the test proves nothing"
            received = 0
            deadline = time.monotonic() + 10
            while received + sub.dropped_by_server < total:
                assert time.monotonic() < deadline, (received, sub.dropped_by_server, dropped)
                await asyncio.wait_for(sub.recv(), 5)
                received += 1
            assert sub.dropped_by_server == dropped and received == total - dropped
            await sub.close()
            await pub.close()

    run(main(), timeout=30)


def test_command_line_flags() -> None:
    args = build_parser().parse_args(
        ["--read-timeout", "2.5", "--idle-timeout", "60", "--max-connections", "7", "--drop-notices"]
    )
    assert (args.read_timeout, args.idle_timeout, args.max_connections, args.drop_notices) == (2.5, 60.0, 7, True)
    defaults = build_parser().parse_args([])
    assert (defaults.read_timeout, defaults.idle_timeout, defaults.max_connections, defaults.drop_notices) == (
        30.0,
        0.0,
        10_000,
        False,
    )
    server = testing.rqueue_server("--read-timeout", "0.3", "--max-connections", "1")
    try:
        with socket.create_connection((server.host, server.port), timeout=5) as first:
            first.sendall(b"\x08\x00\x07")  # starts a message and stalls
            first.settimeout(5)
            start = time.monotonic()
            try:
                assert first.recv(1) == b""
            except ConnectionResetError:
                pass
            assert time.monotonic() - start < 4
    finally:
        code, _, err = server.stop()
    assert code == 0, err
