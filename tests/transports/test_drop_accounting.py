"""Every lost datagram is counted, in datagrams, and heavy loss is said out loud:

- two asyncio tasks, one ``await send()`` loop and one ``await recv()`` loop, the sender far
  faster than the receiver's buffer: offered minus delivered equals the counted drops (the
  receiver's ``kernel_drops`` and ``dropped``, the sender's ``dropped`` and transport errors),
  exactly without GRO and within 1% under GRO, where the kernel counts a dropped coalesced
  run once and the link sizes it from the runs it reads;
- a fire-and-forget socket that loses more than 1% warns once (``DatagramLossWarning``,
  naming the options that help); a SafeDealer, which resends, does not.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import warnings

import pytest

import nbmq
from nbmq import aio
from nbmq.errors import WouldBlock
from nbmq.events import DatagramsDropped
from nbmq.transports import batch
from nbmq.transports.udp import DatagramLossWarning

from .conftest import FAST

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RXQ_OVFL is Linux's"),
]

BURSTS, BURST = 20, 2000  # messages of 100 B: one datagram each


async def _two_loops(gro: bool, kind: type = aio.Dealer) -> tuple[int, int, int, list, bool]:
    """A flooding program in one loop: a sender task that floods bursts without yielding
    (``await send`` returns at once under ``send_hwm``), a receiver task that drains."""
    server = await kind.bind("127.0.0.1:0", rcvbuf=64 << 10, gro=gro, **FAST)
    client = await kind.connect(server.local_address, send_hwm=BURST, **FAST)
    async with server, client:
        assert await asyncio.wait_for(client.wait_connected(), 5.0)
        delivered = 0
        done = asyncio.Event()

        async def receiver() -> None:
            nonlocal delivered
            while True:
                try:
                    await server.recv(timeout=0.3 if done.is_set() else 5.0)
                except WouldBlock:
                    return
                delivered += 1

        task = asyncio.create_task(receiver())
        payload = b"x" * 100
        for _ in range(BURSTS):
            for _ in range(BURST):
                await client.send([payload])
            await asyncio.sleep(0.005)  # the receiver runs between bursts
        done.set()
        await asyncio.wait_for(task, 15.0)
        rx, tx = server.counters, client.counters
        counted = rx.kernel_drops + rx.dropped_total + tx.dropped_total + client.transport_errors
        events = [e for e in iter(server.next_event, None) if isinstance(e, DatagramsDropped)]
        gro_used = getattr(server._link.io, "gro", False)
        assert sum(e.count for e in events) == rx.kernel_drops
        return BURSTS * BURST, delivered, counted, events, gro_used


@pytest.mark.filterwarnings("ignore::nbmq.transports.udp.DatagramLossWarning")
@pytest.mark.parametrize("gro", [False, True], ids=["gro-off", "gro-on"])
def test_offered_minus_delivered_is_the_counted_drops(gro):
    offered, delivered, counted, events, gro_used = asyncio.run(asyncio.wait_for(_two_loops(gro), 40.0))
    assert delivered < offered and events  # the scenario loses, or it tests nothing
    lost = offered - delivered
    if gro_used:
        assert abs(lost - counted) <= offered // 100, (lost, counted)
    else:
        assert lost == counted


def test_heavy_loss_warns_once_and_names_the_remedies():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        offered, delivered, _, _, _ = asyncio.run(asyncio.wait_for(_two_loops(batch.COMPILED), 40.0))
    assert offered - delivered > offered // 100
    loss = [w for w in caught if issubclass(w.category, DatagramLossWarning)]
    assert len(loss) == 1
    text = str(loss[0].message)
    assert not loss[0].filename.startswith(os.path.dirname(nbmq.__file__)), loss[0].filename  # the user's line
    assert "pace_rate" in text and "SafeDealer" in text and "rcvbuf" in text


def test_a_safedealer_resends_and_does_not_warn():
    async def main() -> tuple[int, int]:
        server = await aio.SafeDealer.bind("127.0.0.1:0", rcvbuf=64 << 10, **FAST)
        client = await aio.SafeDealer.connect(server.local_address, **FAST)
        async with server, client:
            assert await asyncio.wait_for(client.wait_connected(), 5.0)
            sent, delivered = 3000, 0

            async def sender() -> None:
                for _ in range(sent):
                    await client.send([b"x" * 100])

            task = asyncio.create_task(sender())
            end = time.monotonic() + 20.0
            while delivered < sent and time.monotonic() < end:
                try:
                    await server.recv(timeout=1.0)
                except WouldBlock:
                    continue
                delivered += 1
            await task
            return sent, delivered

    with warnings.catch_warnings():
        warnings.simplefilter("error", DatagramLossWarning)
        sent, delivered = asyncio.run(asyncio.wait_for(main(), 40.0))
    assert delivered == sent
