"""The reference's scenarios over real sockets, on every transport: UDP (127.0.0.1), IPC
(Unix datagram) and inproc."""

from __future__ import annotations

import os
import selectors
import threading
import time

import pytest

from nbmq.errors import NotSupported, WouldBlock
from nbmq.events import PeerConnected
from nbmq.transports import Dealer, Dish, Radio, SafeDealer

from .conftest import FAST, TRANSPORTS, connected, open_pair, pump, recv_n, server_address

pytestmark = pytest.mark.network


@pytest.fixture(params=TRANSPORTS)
def kind(request):
    return request.param


def test_basic_send_both_ways(kind, tmp_path):
    server, client = open_pair(Dealer, Dealer, kind, tmp_path)
    with server, client:
        client.send([b"hello", b"", b"world" * 300])
        client.send(b"one part")
        assert recv_n(server, 2, client) == [[b"hello", b"", b"world" * 300], [b"one part"]]
        server.send([b"back"])
        assert recv_n(client, 1, server) == [[b"back"]]
        assert isinstance(server.next_event(), PeerConnected)
        assert server.counters.messages_in == 2


def test_ping_pong(kind, tmp_path):
    server, client = open_pair(Dealer, Dealer, kind, tmp_path)
    with server, client:
        for i in range(50):  # one thread, two sockets: each send must go before the other waits
            client.send([b"ping", str(i).encode()], flush=True)
            assert [bytes(p) for p in server.recv(timeout=2.0)] == [b"ping", str(i).encode()]
            server.send([b"pong", str(i).encode()], flush=True)
            assert [bytes(p) for p in client.recv(timeout=2.0)] == [b"pong", str(i).encode()]


def test_round_robin_between_clients(kind, tmp_path):
    server, first = open_pair(Dealer, Dealer, kind, tmp_path)
    second = Dealer.connect(server.local_address, **FAST)
    with server, first, second:
        assert pump(server, second, until=lambda: len(server.engine.connected_peers) == 2)
        for i in range(10):
            server.send([str(i).encode()])
        a = recv_n(first, 5, server)
        b = recv_n(second, 5, server)
        assert len(a) == len(b) == 5
        assert sorted(int(m[0]) for m in a + b) == list(range(10))


def test_radio_to_every_dish(kind, tmp_path):
    radio, dish1 = open_pair(Radio, Dish, kind, tmp_path)
    dish2 = Dish.connect(radio.local_address, **FAST)
    with radio, dish1, dish2:
        assert pump(radio, dish2, until=lambda: len(radio.engine.connected_peers) == 2)
        for i in range(5):
            radio.send([b"news", str(i).encode()])
        expected = [[b"news", str(i).encode()] for i in range(5)]
        assert recv_n(dish1, 5, radio) == expected
        assert recv_n(dish2, 5, radio) == expected
        with pytest.raises(NotSupported):
            radio.recv()
        with pytest.raises(NotSupported):
            dish1.send([b"no"])


def test_send_hwm_and_live_options(kind, tmp_path):
    # Nobody is bound there: messages wait in the one queue until send_hwm.
    address = server_address(kind, tmp_path)
    if kind == "udp":
        address = "127.0.0.1:9"  # discard port; nobody answers
    with Dealer.connect(address, send_hwm=3, **FAST) as client:
        for _ in range(3):
            client.send([b"x"])
        with pytest.raises(WouldBlock):
            client.send([b"x"])
        start = time.monotonic()
        with pytest.raises(WouldBlock):
            client.send([b"x"], timeout=0.2)
        assert 0.15 < time.monotonic() - start < 1.0
        client.options.send_hwm = 5  # takes effect on the running socket
        client.send([b"x"])
        client.send([b"x"])
        with pytest.raises(WouldBlock):
            client.send([b"x"])
        assert client.engine.pending_messages == 5
        client.close(linger=0)


def test_safe_dealer_delivers_everything(kind, tmp_path):
    server, client = open_pair(SafeDealer, SafeDealer, kind, tmp_path, safe_resend_ivl=0.05)
    with server, client:
        for i in range(40):
            client.send([str(i).encode(), bytes([i]) * 2000], timeout=2.0)
            if i % 8 == 7:
                server.tick()
        got = recv_n(server, 40, client)
        assert [int(m[0]) for m in got] == list(range(40))
        assert all(m[1] == bytes([int(m[0])]) * 2000 for m in got)
        assert pump(server, client, until=lambda: client.engine.pending_messages == 0)


def test_recv_timeout_sleeps_without_spinning(kind, tmp_path):
    server, client = open_pair(Dealer, Dealer, kind, tmp_path)
    with server, client:
        cpu, start = time.process_time(), time.monotonic()
        with pytest.raises(WouldBlock):
            server.recv(timeout=0.3)
        assert 0.28 < time.monotonic() - start < 1.0
        assert time.process_time() - cpu < 0.15  # it slept in select, it did not poll


def test_fileno_with_selectors(kind, tmp_path):
    server, client = open_pair(Dealer, Dealer, kind, tmp_path)
    with server, client, selectors.DefaultSelector() as sel:
        sel.register(server.fileno(), selectors.EVENT_READ)
        server.tick()
        client.send([b"wake"])
        client.flush()  # send() batches until a step or flush
        assert sel.select(2.0)
        server.tick()
        assert [bytes(p) for p in server.recv()] == [b"wake"]


def test_linger_delivers_what_was_queued(kind, tmp_path):
    for cls in (Dealer, SafeDealer):
        server = cls.bind(server_address(kind, tmp_path), **FAST)
        got: list = []

        def serve():
            got.extend(recv_n(server, 20, timeout=4.0))

        thread = threading.Thread(target=serve)
        thread.start()
        client = cls.connect(server.local_address, **FAST)
        for i in range(20):  # queued before any peer is connected
            client.send([str(i).encode()])
        client.close(linger=3.0)
        thread.join(5.0)
        server.close(linger=0)
        assert [int(m[0]) for m in got] == list(range(20)), cls.__name__


def test_close_linger_zero_returns_at_once(kind, tmp_path):
    address = "127.0.0.1:9" if kind == "udp" else server_address(kind, tmp_path)
    client = Dealer.connect(address, **FAST)
    for _ in range(10):
        client.send([b"never"])
    start = time.monotonic()
    client.close(linger=0)
    assert time.monotonic() - start < 0.05
    client.close()  # idempotent
    client = Dealer.connect(address, **FAST)
    client.send([b"never"])
    start = time.monotonic()
    client.close(linger=0.3)  # no peer ever comes: waits out the linger, no longer
    assert 0.25 < time.monotonic() - start < 1.0


def test_close_removes_ipc_files(tmp_path):
    server, client = open_pair(Dealer, Dealer, "ipc", tmp_path)
    paths = [server.local_address[len("ipc://") :], client.local_address[len("ipc://") :]]
    assert all(os.path.exists(p) for p in paths)
    client.close()
    server.close()
    assert not any(os.path.exists(p) for p in paths)


def test_ipv6_loopback():
    with Dealer.bind("[::1]:0", **FAST) as server, Dealer.connect(server.local_address, **FAST) as client:
        assert server.local_address.startswith("[::1]:")
        assert pump(server, client, until=connected(server, client))
        client.send([b"six"])
        assert recv_n(server, 1, client) == [[b"six"]]


def test_buffers_follow_options():
    import socket

    with Dealer.bind("127.0.0.1:0", rcvbuf=256 * 1024, sndbuf=128 * 1024) as sock:
        raw = sock._link.sock
        assert raw.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 256 * 1024
        sock.options.rcvbuf = 512 * 1024
        assert raw.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 512 * 1024


def test_inproc_name_freed_by_close_or_garbage_collection():
    import gc

    from nbmq.transports.inproc import bound_names

    sock = Dealer.bind("inproc://freed")
    assert "freed" in bound_names()
    sock.close()
    assert "freed" not in bound_names()
    sock = Dealer.bind("inproc://freed")
    del sock
    gc.collect()
    Dealer.bind("inproc://freed").close()  # the name is free again


@pytest.mark.parametrize("kind", ["ipc", "inproc"])
def test_local_transports_push_back_instead_of_dropping(kind, tmp_path):
    """A Unix datagram or inproc peer that does not read fills up; the sender keeps the rest
    (then WouldBlock at send_hwm) and loses nothing once the reader catches up."""
    server, client = open_pair(Dealer, Dealer, kind, tmp_path, send_hwm=50, rcvbuf=64 * 1024)
    with server, client:
        sent = 0
        cpu = time.process_time()
        while sent < 300:
            try:
                client.send([sent.to_bytes(4, "big"), b"b" * 1000])
                sent += 1
            except WouldBlock:
                break
        assert 0 < sent < 300  # the reader is asleep: the sender was pushed back
        got: list = []

        def serve():
            got.extend(recv_n(server, 300, timeout=10.0))

        thread = threading.Thread(target=serve)
        thread.start()
        while sent < 300:
            client.send([sent.to_bytes(4, "big"), b"b" * 1000], timeout=5.0)
            sent += 1
        assert pump(client, until=lambda: not thread.is_alive(), timeout=10.0)
        assert [int.from_bytes(m[0], "big") for m in got] == list(range(300))
        assert time.process_time() - cpu < 5.0


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="Linux abstract namespace")
def test_ipc_abstract_namespace():
    import uuid

    name = f"ipc://@nbmq-test-{uuid.uuid4().hex[:8]}"
    with Dealer.bind(name, **FAST) as server, Dealer.connect(name, **FAST) as client:
        assert server.local_address == name
        assert pump(server, client, until=connected(server, client))
        client.send([b"abstract"])
        assert recv_n(server, 1, client) == [[b"abstract"]]
