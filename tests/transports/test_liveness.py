"""Liveness over real sockets: a killed peer goes after keepalive, a restarted server is
reconnected to, and SafeDealer delivers exactly once through a lossy, duplicating relay."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from nbmq.events import DisconnectReason, PeerDisconnected
from nbmq.transports import Dealer, SafeDealer

from .conftest import FAST, connected, pump, recv_n, server_address

pytestmark = pytest.mark.network


def _client_then_hang(address: str, ready) -> None:
    sock = Dealer.connect(address, **FAST)
    sock.wait_connected(5.0)
    end = time.monotonic() + 5.0
    ready.set()
    while time.monotonic() < end:  # alive and heartbeating until killed
        sock.tick()
        time.sleep(0.01)


def _events(sock) -> list:
    out = []
    while (event := sock.next_event()) is not None:
        out.append(event)
    return out


@pytest.mark.parametrize("kind", ["udp", "ipc"])
def test_killed_peer_disappears_after_keepalive(kind, tmp_path):
    ctx = mp.get_context("fork")
    with Dealer.bind(server_address(kind, tmp_path), **FAST) as server:
        ready = ctx.Event()
        proc = ctx.Process(target=_client_then_hang, args=(server.local_address, ready))
        proc.start()
        try:
            assert pump(server, until=lambda: ready.is_set() and server.connected, timeout=5.0)
            assert pump(server, until=lambda: False, timeout=0.8) is False
            assert server.connected  # heartbeats keep it alive past the keepalive
            os.kill(proc.pid, signal.SIGKILL)
            killed = time.monotonic()
            assert pump(server, until=lambda: not server.peers, timeout=3.0)
            assert time.monotonic() - killed < FAST["peer_keepalive"] + 0.5
            gone = [e for e in _events(server) if isinstance(e, PeerDisconnected)]
            assert gone and gone[-1].reason is DisconnectReason.KEEPALIVE_EXPIRED
        finally:
            proc.kill()
            proc.join(2.0)


def test_abruptly_dropped_inproc_peer_disappears(tmp_path):
    with Dealer.bind(server_address("inproc", tmp_path), **FAST) as server:
        client = Dealer.connect(server.local_address, **FAST)
        assert pump(server, client, until=connected(server, client))
        client._link.close()  # vanish without a Disconnected, as a killed process does
        assert pump(server, until=lambda: not server.peers, timeout=3.0)


@pytest.mark.parametrize("kind", ["udp", "ipc", "inproc"])
def test_restarted_server_is_reconnected(kind, tmp_path):
    server = Dealer.bind(server_address(kind, tmp_path), **FAST)
    address = server.local_address
    client = Dealer.connect(address, **FAST)
    try:
        assert pump(server, client, until=connected(server, client))
        server.close(linger=0)  # tells the client Disconnected; it starts dialling again
        assert pump(client, until=lambda: not client.connected, timeout=2.0)
        server = Dealer.bind(address, **FAST)  # same address, a new process would do the same
        assert pump(server, client, until=connected(server, client), timeout=3.0)
        client.send([b"again"])
        assert recv_n(server, 1, client) == [[b"again"]]
    finally:
        client.close(linger=0)
        server.close(linger=0)


def test_restarted_server_without_goodbye_is_reconnected():
    """The server dies silently; the client's frames reach a new server that answers
    Disconnected, and the client connects again."""
    server = Dealer.bind("127.0.0.1:0", **FAST)
    address = server.local_address
    client = Dealer.connect(address, **FAST)
    try:
        assert pump(server, client, until=connected(server, client))
        server._link.close()  # killed: no Disconnected sent
        server = Dealer.bind(address, **FAST)
        client.send([b"lost or resent?"])  # goes to the new server, which knows no session
        assert pump(server, client, until=connected(server, client), timeout=3.0)
        client.send([b"after"])
        got = recv_n(server, 1, client, timeout=2.0)
        if got == [[b"lost or resent?"]]:  # it may arrive, if it raced the reconnect
            got = recv_n(server, 1, client, timeout=2.0)
        assert got == [[b"after"]]
    finally:
        client.close(linger=0)
        server.close(linger=0)


def test_safe_dealer_exactly_once_over_lossy_relay(lossy_relay):
    opts = dict(FAST, safe_resend_ivl=0.03, safe_resend_limit=60, peer_keepalive=3.0, send_hwm=64)
    sizes = [1, 100, 466, 467, 1500, 5000]
    n = 150
    with SafeDealer.bind("127.0.0.1:0", **opts) as server:
        host, port = server.local_address.rsplit(":", 1)
        relay = lossy_relay((host, int(port)), drop=0.2, dup=0.05, seed=11)
        got: list = []
        thread = threading.Thread(target=lambda: got.extend(recv_n(server, n, timeout=20.0)))
        thread.start()
        with SafeDealer.connect(relay.address, **opts) as client:
            for i in range(n):
                client.send([i.to_bytes(4, "big"), b"p" * sizes[i % len(sizes)]], timeout=5.0)
            pump(client, until=lambda: not thread.is_alive(), timeout=25.0)  # resends need ticks
            ids = [int.from_bytes(m[0], "big") for m in got]
            assert sorted(ids) == list(range(n))  # every message, none twice
            assert all(m[1] == b"p" * sizes[int.from_bytes(m[0], "big") % len(sizes)] for m in got)
            assert relay.stats["dropped"] > 0 and relay.stats["duplicated"] > 0
            assert client.counters.resends > 0
            assert pump(server, client, until=lambda: client.engine.pending_messages == 0, timeout=5.0)
            assert not any(client.counters.dropped.values())
