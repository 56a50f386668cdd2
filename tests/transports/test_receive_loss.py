"""Loss below and inside the socket, made visible or avoided:

- the kernel's receive-buffer drops reach ``counters.kernel_drops`` and ``DatagramsDropped``
  (Linux ``SO_RXQ_OVFL`` ancillary data on the batched path, ``SO_MEMINFO`` at ticks);
- a step never reads more datagrams than ``recv_hwm`` has room for, so a receiver that drains
  before every step loses nothing to RECV_HWM.
"""

from __future__ import annotations

import socket
import sys
import time

import pytest

from nbmq.errors import WouldBlock
from nbmq.events import DatagramsDropped, DropReason
from nbmq.transports import Dealer, batch

from .conftest import FAST, connected, pump
from .test_batch import PATHS

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RXQ_OVFL is Linux's"),
    pytest.mark.filterwarnings("ignore::nbmq.transports.udp.DatagramLossWarning"),  # drops are made on purpose
]


def _flush_all(sock, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    sock.flush()
    while sock._link.has_pending and time.monotonic() < end:
        sock.poll(0.005)


@pytest.mark.parametrize("path", PATHS)
def test_batch_reader_learns_drops_from_ancillary_data(path):
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a few datagrams at most
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        io = batch.batch_io(rx, **path)
        assert io.rxq_ovfl and io.kernel_drops == 0
        for _ in range(300):
            tx.sendto(b"x" * 100, rx.getsockname())
        queued = 0
        while n := io.recv()[0]:
            queued += n
        tx.sendto(b"last", rx.getsockname())  # queued after the drops: it carries their count
        got = 0
        for _ in range(100):
            got += io.recv()[0]
            if got:
                break
        assert got == 1
        assert io.kernel_drops == 300 - queued > 0


@pytest.mark.parametrize("gro", [False, True], ids=["gro-off", "gro-on"])
def test_kernel_drops_are_counted_and_reported(gro):
    server = Dealer.bind("127.0.0.1:0", rcvbuf=16 << 10, recv_hwm=100_000, gro=gro, **FAST)
    client = Dealer.connect(server.local_address, send_hwm=100_000, **FAST)
    with server, client:
        assert pump(server, client, until=connected(server, client))
        sent = 3000
        for _ in range(sent):
            client.send([b"x" * 100], flush=False)
        _flush_all(client)
        time.sleep(0.05)
        delivered = 0
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            try:
                server.recv(timeout=0.05)
                delivered += 1
            except WouldBlock:
                if delivered:
                    break
        drops = server.counters.kernel_drops
        events = [e for e in iter(server.next_event, None) if isinstance(e, DatagramsDropped)]
        assert drops > 0 and delivered < sent
        assert sum(e.count for e in events) == drops == events[-1].total
        if gro:  # a dropped coalesced run is counted as the runs read next: an estimate
            assert abs(delivered + drops - sent) <= sent // 20
        else:
            assert delivered + drops == sent


@pytest.mark.parametrize("gro", [False, True], ids=["gro-off", "gro-on"])
def test_a_draining_receiver_loses_nothing_to_recv_hwm(gro):
    # recv_hwm far below what one step could read (max_tick_recv 1000, GRO reads of 1024).
    server = Dealer.bind("127.0.0.1:0", recv_hwm=100, rcvbuf=4 << 20, gro=gro, **FAST)
    client = Dealer.connect(server.local_address, send_hwm=100_000, **FAST)
    with server, client:
        assert pump(server, client, until=connected(server, client))
        sent, delivered = 0, 0
        for _ in range(10):  # bursts of 400 small messages, each a GSO-coalesced run
            for _ in range(400):
                client.send([b"y" * 100], flush=False)
            sent += 400
            _flush_all(client)
            time.sleep(0.01)
            idle_until = time.monotonic() + 0.2
            while time.monotonic() < idle_until:
                while True:  # drain, then step: a receiver that falls behind
                    try:
                        server.recv()
                        delivered += 1
                    except WouldBlock:
                        break
                    idle_until = time.monotonic() + 0.2
                assert server.engine.recv_ready() == 0
                server.tick()
                assert server.engine.recv_ready() <= 100
        counters = server.counters
        assert counters.dropped[DropReason.RECV_HWM] == 0
        assert delivered + counters.kernel_drops == sent or (
            gro and abs(delivered + counters.kernel_drops - sent) <= sent // 20
        )
        assert delivered >= sent // 2


@pytest.mark.parametrize("hwm", [5, 64], ids=["gro-off", "gro-on"])  # GRO is used from recv_hwm 64
def test_a_full_receiver_still_hears_its_peers(hwm):
    # A Dealer whose application stops draining reads no more than it can queue, but a few
    # datagrams when a timer is due, so heartbeats arrive and its peers do not expire. Under
    # GRO "a few" is a whole coalesced run (64): a GRO read of fewer reads nothing.
    server = Dealer.bind("127.0.0.1:0", recv_hwm=hwm, **FAST)
    client = Dealer.connect(server.local_address, send_hwm=10_000, **FAST)
    with server, client:
        assert pump(server, client, until=connected(server, client))
        assert server._link.io.gro == (hwm >= 64 and batch.COMPILED)
        for i in range(8 * hwm):
            client.send([b"m%d" % i], flush=False)
        _flush_all(client)
        end = time.monotonic() + 3 * FAST["peer_keepalive"]
        while time.monotonic() < end:
            server.tick()
            client.tick()
            time.sleep(0.005)
        assert server.connected and client.connected
        assert 0 < server.engine.recv_ready() <= hwm
        assert server.counters.dropped[DropReason.RECV_HWM] > 0  # counted, never silent
