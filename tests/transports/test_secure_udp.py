"""Secure mode over real loopback UDP, blocking and asyncio sockets: full-size sealed frames
(524 bytes) arrive whole on either batch reader, and a plain socket cannot talk to a secure one."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("cryptography")

import nbmq  # noqa: E402

pytestmark = pytest.mark.network

SERVER_PUB, SERVER_SEC = nbmq.generate_keypair()
CLIENT_PUB, CLIENT_SEC = nbmq.generate_keypair()
BIG = bytes(range(256)) * 40  # 10,240 bytes: 22 full 500-byte frames, sealed to 524


def _step(*socks, until, rounds=300):
    for _ in range(rounds):  # bounded: 300 x 2 x 10 ms at most
        for sock in socks:
            sock.poll(0.01)
        if until():
            return True
    return False


def _drain(sock, got: list) -> list:
    try:
        got.extend(sock.recv_many(64, timeout=0))
    except nbmq.WouldBlock:
        pass
    return got


@pytest.mark.parametrize("gro", [True, False], ids=["gro", "plain-reads"])
def test_full_size_sealed_frames_arrive_whole(gro):
    server = nbmq.Dealer.bind("127.0.0.1:0", secret_key=SERVER_SEC, allowed_public_keys=[CLIENT_PUB], gro=gro)
    client = nbmq.Dealer.connect(server.local_address, secret_key=CLIENT_SEC, server_public_key=SERVER_PUB, gro=gro)
    try:
        assert _step(server, client, until=lambda: server.connected and client.connected)
        for i in range(20):
            client.send([b"%d" % i, BIG])
        client.flush()
        got: list = []
        assert _step(server, client, until=lambda: len(_drain(server, got)) == 20)
        assert sorted(int(bytes(m[0])) for m in got) == list(range(20))
        assert all(bytes(m[1]) == BIG for m in got)
        c = server.counters
        assert (c.secure_auth_failed, c.malformed, c.secure_replays) == (0, 0, 0)
    finally:
        client.close(linger=0)
        server.close(linger=0)


def test_a_plain_client_gets_nothing_from_a_secure_server():
    server = nbmq.Dealer.bind("127.0.0.1:0", secret_key=SERVER_SEC)
    client = nbmq.Dealer.connect(server.local_address)
    try:
        assert not _step(server, client, until=lambda: client.connected, rounds=30)
        assert server.counters.secure_downgrades >= 1 and not server.peers
    finally:
        client.close(linger=0)
        server.close(linger=0)


def test_asyncio_secure_dealers():
    async def main() -> None:
        server = await nbmq.aio.Dealer.bind("127.0.0.1:0", secret_key=SERVER_SEC)
        client = await nbmq.aio.Dealer.connect(
            server.local_address, secret_key=CLIENT_SEC, server_public_key=SERVER_PUB
        )
        try:
            assert await client.wait_connected(timeout=5.0)
            await client.send([b"hello", BIG])
            message = await server.recv(timeout=5.0)
            assert [bytes(p) for p in message] == [b"hello", BIG]
            assert server.counters.secure_handshakes == 1
        finally:
            await client.close()
            await server.close()

    asyncio.run(main())
