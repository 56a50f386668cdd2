"""asyncio sockets read, count and pace as the blocking ones do:

- a read never takes more datagrams than ``recv_hwm`` has room for; a full queue stops reading
  (the rest waits in the kernel) and a receiver that drains each step loses nothing to RECV_HWM;
- the kernel's receive-buffer drops reach ``counters.kernel_drops`` and ``DatagramsDropped``;
- a full receiver still hears its peers' heartbeats;
- ``pace_rate``/``pace_burst`` pace a peer's datagrams and ``gso`` is live (the same batch
  writer, ``sendmmsg`` with GSO, as the blocking sockets).

The senders are blocking sockets stepped from the coroutine, so a burst really lands in the
kernel at once, whatever the asyncio side does.
"""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from nbmq import aio
from nbmq.errors import OptionError, WouldBlock
from nbmq.events import DatagramsDropped, DropReason
from nbmq.transports import Dealer, batch, engine_binding

from .conftest import FAST

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RXQ_OVFL is Linux's"),
    pytest.mark.filterwarnings("ignore::nbmq.transports.udp.DatagramLossWarning"),  # drops are made on purpose
]


def run(coro, timeout: float = 20.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def connect_sync(server, client, timeout: float = 5.0) -> None:
    """Step a blocking ``client`` until it and the asyncio ``server`` have a peer."""
    end = time.monotonic() + timeout
    while not (server.peers and client.connected):
        assert time.monotonic() < end, "no handshake"
        client.tick()
        await asyncio.sleep(0.005)


def flush_all(sock, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    sock.flush()
    while sock._link.has_pending and time.monotonic() < end:
        sock.poll(0.005)


@pytest.mark.parametrize("gro", [False, True], ids=["gro-off", "gro-on"])
def test_a_draining_asyncio_receiver_loses_nothing_to_recv_hwm(gro):
    # recv_hwm far below a burst; the receiver drains until WouldBlock, then yields to the
    # loop for 10 ms (its "step"), in which asyncio's own transport would read ~every datagram.
    # Heartbeats every 0.5 s: a loaded machine may stall the 10 ms step past FAST's 50 ms, and a
    # queue full for a heartbeat interval reads (and drops) for liveness, by design.
    slow = dict(FAST, peer_heartbeat_ivl=0.5, peer_keepalive=5.0)

    async def main():
        server = await aio.Dealer.bind("127.0.0.1:0", recv_hwm=100, rcvbuf=4 << 20, gro=gro, **slow)
        client = Dealer.connect(server.local_address, send_hwm=100_000, **slow)
        async with server:
            with client:
                await connect_sync(server, client)
                sent = delivered = 0
                paused = False
                for _ in range(10):  # bursts of 400 small messages, GSO-coalesced runs
                    for _ in range(400):
                        client.send([b"y" * 100], flush=False)
                    sent += 400
                    flush_all(client)
                    idle_until = time.monotonic() + 0.2
                    while time.monotonic() < idle_until:
                        while True:
                            try:
                                server.recv_nowait()  # (reads the kernel when the queue is empty)
                                delivered += 1
                            except WouldBlock:
                                break
                            idle_until = time.monotonic() + 0.2
                            assert server.engine.recv_ready() <= 100
                            paused = paused or not server.reading
                        client.tick()
                        await asyncio.sleep(0.01)
                        assert server.engine.recv_ready() <= 100
                        paused = paused or not server.reading
                counters = server.counters
                assert counters.dropped[DropReason.RECV_HWM] == 0, counters
                assert paused  # the queue filled and the socket stopped reading
                if gro:  # a dropped coalesced run is counted as the runs read next: an estimate
                    assert abs(delivered + counters.kernel_drops - sent) <= sent // 20
                else:
                    assert delivered + counters.kernel_drops == sent
                assert delivered >= sent // 2, (delivered, counters)

    run(main())


@pytest.mark.parametrize("gro", [False, True], ids=["gro-off", "gro-on"])
def test_asyncio_kernel_drops_are_counted_and_reported(gro):
    async def main():
        server = await aio.Dealer.bind("127.0.0.1:0", rcvbuf=16 << 10, recv_hwm=100_000, gro=gro, **FAST)
        client = Dealer.connect(server.local_address, send_hwm=100_000, **FAST)
        async with server:
            with client:
                await connect_sync(server, client)
                sent = 3000
                for _ in range(sent):
                    client.send([b"x" * 100], flush=False)
                flush_all(client)  # faster than the asyncio side can read: the kernel drops
                delivered = 0
                while True:
                    try:
                        await server.recv(timeout=0.1)
                        delivered += 1
                    except WouldBlock:
                        break
                drops = server.counters.kernel_drops
                events = [e for e in iter(server.next_event, None) if isinstance(e, DatagramsDropped)]
                assert drops > 0 and delivered < sent
                assert sum(e.count for e in events) == drops == events[-1].total
                if gro:  # a dropped coalesced run is counted as the runs read next: an estimate
                    assert abs(delivered + drops - sent) <= sent // 20
                else:
                    assert delivered + drops == sent

    run(main())


@pytest.mark.parametrize("hwm", [5, 64], ids=["gro-off", "gro-on"])  # GRO is used from recv_hwm 64
def test_a_full_asyncio_receiver_still_hears_its_peers(hwm):
    async def main():
        server = await aio.Dealer.bind("127.0.0.1:0", recv_hwm=hwm, **FAST)
        client = Dealer.connect(server.local_address, send_hwm=10_000, **FAST)
        async with server:
            with client:
                await connect_sync(server, client)
                assert server._link.io.gro == (hwm >= 64 and batch.COMPILED)
                for i in range(8 * hwm):
                    client.send([b"m%d" % i], flush=False)
                flush_all(client)
                end = time.monotonic() + 3 * FAST["peer_keepalive"]
                while time.monotonic() < end:
                    client.tick()
                    await asyncio.sleep(0.005)
                assert server.peers and client.connected
                ready = server.engine.recv_ready()
                assert 0 < ready <= hwm and not server.reading
                assert server.counters.dropped[DropReason.RECV_HWM] > 0  # counted, never silent
                for i in range(ready):  # room again: reading resumes
                    assert bytes((await server.recv(timeout=1))[0]) == b"m%d" % i
                assert server.reading

    run(main())


def drain(receiver, count: int, idle: float = 0.5, timeout: float = 10.0) -> int:
    """Messages the blocking ``receiver`` gets, up to ``count``, until ``idle`` seconds pass
    without one (bounded by ``timeout``)."""
    got = 0
    end = time.monotonic() + timeout
    while got < count and time.monotonic() < end:
        try:
            receiver.recv(timeout=idle)
        except WouldBlock:
            break
        got += 1
    return got


async def burst(sender, receiver, count: int, size: int) -> int:
    """``count`` messages of ``size`` bytes from the asyncio ``sender`` at once (a producer that
    does not yield), the blocking ``receiver`` draining in a thread, as a separate process
    would; returns how many arrived."""
    loop = asyncio.get_running_loop()
    got = loop.run_in_executor(None, drain, receiver, count)
    for _ in range(count):
        sender.send_nowait([b"z" * size])
    return await got


async def unread_burst(sender, count: int, size: int, timeout: float = 5.0) -> None:
    """``count`` messages of ``size`` bytes from the asyncio ``sender`` at once, returning when
    all of them have been handed to the kernel (bounded by ``timeout``)."""
    for _ in range(count):
        sender.send_nowait([b"z" * size])
    end = time.monotonic() + timeout
    while not engine_binding.drained(sender.engine) or sender._link.has_pending:
        assert time.monotonic() < end, "the burst was not written"
        await asyncio.sleep(0.005)


def test_asyncio_pacing_lets_a_small_buffer_receiver_keep_up():
    async def main():
        server = Dealer.bind("127.0.0.1:0", rcvbuf=64 << 10, gro=False, recv_hwm=10_000, **FAST)
        fast = await aio.Dealer.connect(server.local_address, send_hwm=10_000, **FAST)
        paced = await aio.Dealer.connect(
            server.local_address, send_hwm=10_000, pace_rate=1_000_000, pace_burst=8 << 10, **FAST
        )
        with server:
            async with fast, paced:
                end = time.monotonic() + 5
                while not (fast.peers and paced.peers and len(server.peers) == 2):
                    assert time.monotonic() < end, "no handshake"
                    server.tick()
                    await asyncio.sleep(0.005)
                assert paced._link.pacer is not None and fast._link.pacer is None
                start = time.monotonic()
                assert await burst(paced, server, 40, 16 << 10) == 40
                assert time.monotonic() - start >= 0.4  # 640 KiB at 1 MB/s, 8 KiB ahead
                assert server.counters.kernel_drops == 0
                # The same burst with nobody reading while it is written: the buffer holds
                # a fraction of it, so the paced run above kept up only by being paced.
                await unread_burst(fast, 40, 16 << 10)
                assert drain(server, 40) < 40 and server.counters.kernel_drops > 0

    run(main())


def test_asyncio_pacing_and_gso_are_live_options():
    async def main():
        server = Dealer.bind("127.0.0.1:0", **FAST)
        client = await aio.Dealer.connect(server.local_address, gso=False, **FAST)
        with server:
            async with client:
                end = time.monotonic() + 5
                while not (client.peers and server.peers):
                    assert time.monotonic() < end, "no handshake"
                    server.tick()
                    await asyncio.sleep(0.005)
                assert client._link.io.gso is False
                assert await burst(client, server, 20, 4000) == 20
                assert client._link.io.gso_messages == 0  # every datagram on its own
                if batch.COMPILED:
                    client.gso = True
                    assert await burst(client, server, 20, 4000) == 20
                    assert client._link.io.gso_messages > 0  # the batch writer coalesced them
                client.pace_rate = 200_000
                assert client._link.pacer is not None and client._link.pacer.rate == 200_000
                client.pace_rate = 0
                assert client._link.pacer is None
                with pytest.raises(OptionError, match="gso"):
                    client.gso = "yes"
                with pytest.raises(OptionError, match="pace_burst"):
                    client.pace_burst = 100

    run(main())
