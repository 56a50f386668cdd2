"""Regression tests of the socket API: closed sockets, options as
attributes, WouldBlock's errno, the ``*`` wildcard, connect to port 0, NoPeer."""

from __future__ import annotations

import asyncio
import errno
import os
import pickle
import subprocess
import sys
import time

import pytest

import nbmq
from nbmq.errors import AddressError, NbmqError, NoPeer, OptionError, SocketClosed, WouldBlock
from nbmq.transports import Dealer, Radio, SafeDealer

from .conftest import FAST, TRANSPORTS, connected, pump, server_address

pytestmark = pytest.mark.network


def test_import_nbmq_makes_aio_available():
    code = "import nbmq; print(nbmq.aio.Dealer.__module__, 'aio' in dir(nbmq))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(os.environ), check=True
    )
    assert out.stdout.split() == ["nbmq.transports.aio", "True"]


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_closed_blocking_socket_raises_socket_closed_everywhere(kind, tmp_path):
    sock = Dealer.bind(server_address(kind, tmp_path), **FAST)
    sock.close()
    calls = {
        "send": lambda: sock.send([b"x"]),
        "recv": sock.recv,
        "recv(timeout)": lambda: sock.recv(timeout=0.2),
        "tick": sock.tick,
        "poll": sock.poll,
        "flush": sock.flush,
        "wait_connected": sock.wait_connected,
    }
    for name, call in calls.items():
        with pytest.raises(SocketClosed):
            call()
    assert issubclass(SocketClosed, NbmqError) and not issubclass(SocketClosed, OSError)
    sock.close()  # idempotent


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_closed_asyncio_socket_raises_at_once(kind, tmp_path):
    async def main():
        sock = await nbmq.aio.Dealer.bind(server_address(kind, tmp_path), **FAST)
        waiting = asyncio.ensure_future(sock.recv())  # parked when the socket closes
        await asyncio.sleep(0.05)
        await sock.close()
        with pytest.raises(SocketClosed):
            await asyncio.wait_for(waiting, 1.0)
        for call in (sock.recv, lambda: sock.send([b"x"]), sock.wait_connected):
            with pytest.raises(SocketClosed):
                await asyncio.wait_for(call(), 1.0)  # at once, not a hang cut by wait_for
        with pytest.raises(SocketClosed):
            sock.recv_nowait()
        with pytest.raises(SocketClosed):
            sock.send_nowait([b"x"])

    asyncio.run(asyncio.wait_for(main(), 10.0))


def test_options_are_socket_attributes_and_typos_raise():
    with Dealer.bind("127.0.0.1:0", **FAST) as sock:
        sock.send_hwm = 5
        assert sock.options.send_hwm == 5 and sock.send_hwm == 5
        assert not hasattr(sock, "__dict__")  # slots: no stray attributes possible
        assert sock.engine._sendq.send_hwm == 5  # applied to the running engine
        with pytest.raises(OptionError, match="send_hwm"):
            sock.send_hwm = 0
        with pytest.raises(AttributeError, match="sendhwm"):
            sock.sendhwm = 5
        with pytest.raises(AttributeError):
            sock.sendhwm  # noqa: B018
        sock.closed = sock.closed  # declared attributes still assign


def test_asyncio_options_are_socket_attributes():
    async def main():
        sock = await nbmq.aio.SafeDealer.bind("127.0.0.1:0", **FAST)
        sock.recv_hwm = 7
        assert sock.options.recv_hwm == 7 and sock.recv_hwm == 7
        with pytest.raises(AttributeError):
            sock.recvhwm = 7
        await sock.close()

    asyncio.run(asyncio.wait_for(main(), 10.0))


def test_would_block_errno_is_eagain():
    exc = WouldBlock("no message ready")
    assert exc.errno == errno.EAGAIN and str(exc) == "no message ready"
    again = pickle.loads(pickle.dumps(NoPeer("none")))
    assert type(again) is NoPeer and again.errno == errno.EAGAIN and str(again) == "none"
    with Dealer.bind("127.0.0.1:0", **FAST) as sock:
        with pytest.raises(WouldBlock) as info:
            sock.recv()
        assert info.value.errno == errno.EAGAIN


def test_star_binds_every_interface():
    with Dealer.bind("*:0", **FAST) as server:
        host, port = server.local_address.rsplit(":", 1)
        assert host == "0.0.0.0" and int(port) > 0
        with Dealer.connect(f"127.0.0.1:{port}", **FAST) as client:
            assert pump(server, client, until=connected(server, client))


@pytest.mark.parametrize("address", ["127.0.0.1:0", "localhost:0", "[::1]:0", "*:8000"])
def test_connect_to_port_zero_or_star_is_refused(address):
    with pytest.raises(AddressError, match="bind"):
        Dealer.connect(address, **FAST)


def test_no_peer_raised_at_send_hwm_without_a_peer():
    with Dealer.bind("127.0.0.1:0", **FAST) as ghost:
        target = ghost.local_address
    with Dealer.connect(target, send_hwm=2, **FAST) as client:  # nobody answers there
        client.send([b"a"])
        client.send([b"b"])
        with pytest.raises(NoPeer, match="no peer"):
            client.send([b"c"], timeout=0.05)
        client.close(linger=0)


def test_plain_would_block_at_send_hwm_with_a_peer():
    with SafeDealer.bind("127.0.0.1:0", **FAST) as server:
        with SafeDealer.connect(server.local_address, send_hwm=1, **FAST) as client:
            assert pump(server, client, until=connected(server, client))
            client.send([b"a"])  # held until acked: the server is not stepped now
            with pytest.raises(WouldBlock) as info:
                client.send([b"b"])
            assert type(info.value) is WouldBlock
            client.close(linger=0)


def test_radio_send_without_peer_drops_instead_of_no_peer():
    with Radio.bind("127.0.0.1:0", **FAST) as radio:
        radio.send([b"x"])  # pub/sub: dropped and counted, never raised
        radio.tick()
        assert radio.counters.dropped_total == 1


def test_send_auto_batches_until_64_datagrams_or_a_step():
    with Dealer.bind("127.0.0.1:0", **FAST) as server, Dealer.connect(server.local_address, **FAST) as client:
        assert pump(server, client, until=connected(server, client))
        out = client.counters.data_frames_out
        for _ in range(10):
            client.send([b"x" * 100])
        assert client.counters.data_frames_out == out  # queued, not yet written
        client.send([b"now"], flush=True)
        assert client.counters.data_frames_out == out + 11
        for _ in range(63):
            client.send([b"y"])
        assert client.counters.data_frames_out == out + 11
        client.send([b"y"])  # the 64th datagram flushes the batch
        assert client.counters.data_frames_out == out + 75
        client.send([b"z" * (466 * 70 + 1)])  # one message of 71 datagrams goes at once
        assert client.counters.data_frames_out == out + 75 + 71
        client.send([b"tail"], flush=False)
        client.send([b"tail"], flush=False)
        assert client.counters.data_frames_out == out + 75 + 71
        with pytest.raises(WouldBlock):
            client.recv()  # recv, tick, poll and close flush what send() batched
        assert client.counters.data_frames_out == out + 75 + 71 + 2
        client.send([b"last"])
        client.close(linger=0)  # flushes to the OS even with linger=0
        got = 0
        for _ in range(200):
            try:
                server.recv(timeout=0.01)
                got += 1
            except WouldBlock:
                if got == 11 + 64 + 1 + 2 + 1:
                    break
        assert got == 79


def test_socket_event_queue_trimming_is_counted():
    """A socket keeps at most ``max_events``; what it drops is counted, not silent."""
    import socket as pysocket
    import time

    with Dealer.bind("127.0.0.1:0", max_events=3) as server:
        host, port = server.local_address.rsplit(":", 1)
        raw = pysocket.socket(pysocket.AF_INET, pysocket.SOCK_DGRAM)
        try:
            for _ in range(20):  # malformed datagrams: one FrameRejected event each
                raw.sendto(b"\x07garbage", (host, int(port)))
        finally:
            raw.close()
        deadline = time.monotonic() + 5.0
        while server.counters.malformed < 20 and time.monotonic() < deadline:
            server.poll(timeout=0.05)
        assert server.counters.malformed == 20
        events = []
        while (event := server.next_event()) is not None and len(events) < 50:
            events.append(event)
        assert len(events) == 3
        assert server.counters.events_dropped == 17


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_repr_shows_address_state_and_peers(kind, tmp_path):
    with Dealer.bind(server_address(kind, tmp_path), **FAST) as server:
        assert repr(server) == f"<nbmq.Dealer {server.local_address} listening peers=0>"
        with Dealer.connect(server.local_address, **FAST) as client:
            text = repr(client)
            assert text.startswith(f"<nbmq.Dealer {client.local_address} -> ")
            assert text.endswith(("connecting peers=0>", "connected peers=1>"))
            assert pump(server, client, until=lambda: server.connected and client.connected)
            assert repr(client) == f"<nbmq.Dealer {client.local_address} -> {server.local_address} connected peers=1>"
            assert repr(server).endswith(" connected peers=1>")
        assert repr(client) == "<nbmq.Dealer closed>"  # the with block closed it
    assert server.closed


def test_aio_repr_and_async_with():
    async def main():
        async with await nbmq.aio.SafeDealer.bind("127.0.0.1:0", **FAST) as server:
            assert repr(server) == f"<nbmq.aio.SafeDealer {server.local_address} listening peers=0>"
        assert repr(server) == "<nbmq.aio.SafeDealer closed>"

    asyncio.run(main())


def test_close_with_unacked_messages_to_a_gone_peer_is_bounded_by_linger():
    server = SafeDealer.bind("127.0.0.1:0", **FAST)
    client = SafeDealer.connect(server.local_address, **FAST)
    assert pump(server, client, until=connected(server, client))
    server.close(linger=0)  # the peer goes: nothing will ack what the client sends now
    for _ in range(5):
        client.send([b"unacked"])
    start = time.monotonic()
    client.close(linger=0.4)
    assert time.monotonic() - start < 1.5


def test_poll_returns_at_once_when_a_message_is_ready():
    # The message is read from the OS by a step before poll() (here: tick), so the OS has
    # nothing more to signal: poll must not wait for the next timer (heartbeats, 1 s).
    with (
        nbmq.Dealer.bind("127.0.0.1:0") as server,
        nbmq.Dealer.connect(server.local_address) as client,
    ):
        end = time.monotonic() + 5.0
        while not (client.connected and server.connected) and time.monotonic() < end:
            client.tick()
            server.poll(0.01)
        client.send(b"ready", flush=True)
        while not server.engine.recv_ready() and time.monotonic() < end:
            server.tick()
        assert server.engine.recv_ready()
        start = time.monotonic()
        server.poll(5.0)
        assert time.monotonic() - start < 0.3
        assert bytes(server.recv()[0]) == b"ready"
