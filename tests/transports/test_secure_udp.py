"""Secure mode over real loopback UDP, blocking and asyncio sockets: full-size sealed frames
(524 bytes) and bundles as large as the path allows arrive whole on either batch reader, and a
plain socket cannot talk to a secure one."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

pytest.importorskip("cryptography")

import nbmq  # noqa: E402
from nbmq.transports.udp import path_datagram_size  # noqa: E402
from nbmq.wire import ETHERNET_DATAGRAM_SIZE, MAX_DATAGRAM_SIZE  # noqa: E402

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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the route MTU is read with Linux's IP_MTU")
def test_the_bundle_size_follows_the_path():
    loopback = path_datagram_size(socket.AF_INET, ("127.0.0.1", 9), bind=False)
    assert loopback == MAX_DATAGRAM_SIZE  # lo's MTU is 64 KiB: a bundle never fragments there
    assert path_datagram_size(socket.AF_INET, ("127.0.0.1", 0), bind=True) == loopback
    # a socket bound to every address answers peers whose paths it cannot know
    assert path_datagram_size(socket.AF_INET, ("0.0.0.0", 0), bind=True) == ETHERNET_DATAGRAM_SIZE


def test_peers_bundling_to_different_sizes_still_talk():
    # bound to every address, the server bundles to Ethernet's size; the client's path is
    # loopback, so it bundles whole messages into one datagram each
    server = nbmq.Dealer.bind("0.0.0.0:0", secret_key=SERVER_SEC)
    port = server.local_address.rsplit(":", 1)[1]
    client = nbmq.Dealer.connect(f"127.0.0.1:{port}", secret_key=CLIENT_SEC, server_public_key=SERVER_PUB)
    try:
        assert server.options.max_datagram_size == ETHERNET_DATAGRAM_SIZE
        assert client.options.max_datagram_size == path_datagram_size(socket.AF_INET, ("127.0.0.1", 9), False)
        assert _step(server, client, until=lambda: server.connected and client.connected)
        sent_before = client.counters.datagrams_out
        for i in range(20):
            client.send([b"%d" % i, BIG])
        client.flush()
        got: list = []
        assert _step(server, client, until=lambda: len(_drain(server, got)) == 20)
        assert all(bytes(m[1]) == BIG for m in got)
        if client.options.max_datagram_size > 20 * len(BIG) // 10:
            # 22 frames a message, a few datagrams in all rather than 440
            assert client.counters.datagrams_out - sent_before < 40
        server.send([b"back", BIG])
        server.flush()
        back: list = []
        assert _step(server, client, until=lambda: len(_drain(client, back)) == 1)
        assert bytes(back[0][1]) == BIG
        c = server.counters
        assert (c.secure_auth_failed, c.malformed, c.secure_replays) == (0, 0, 0)
    finally:
        client.close(linger=0)
        server.close(linger=0)
