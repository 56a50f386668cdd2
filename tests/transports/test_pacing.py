"""Pacing toward slow receivers: per-peer token buckets (``pace_rate``,
``pace_burst``) and GSO that can be turned off."""

from __future__ import annotations

import time

import pytest

from nbmq.errors import OptionError, WouldBlock
from nbmq.transports import Dealer, batch
from nbmq.transports.pacing import Pacer

from .conftest import FAST, connected, pump

A, B = ("127.0.0.1", 1), ("127.0.0.1", 2)


def test_pacer_spreads_a_burst_at_the_rate_per_peer():
    pacer = Pacer(rate=1000, burst=1000)
    pacer.push([(b"x" * 500, A)] * 4 + [(b"y" * 500, B)] * 2, now=0.0)
    assert [d for _, d in pacer.release(0.0)] == [A, A, B, B]  # the burst, per peer
    assert pacer.waiting == 2 and pacer.next_release() == pytest.approx(0.5)
    assert pacer.release(0.49) == []
    assert [d for _, d in pacer.release(0.5)] == [A]
    assert pacer.release(0.99) == [] and pacer.next_release() == pytest.approx(1.0)
    assert [d for _, d in pacer.release(1.0)] == [A]
    assert pacer.waiting == 0 and pacer.next_release() is None


def test_pacer_keeps_order_and_refills_no_further_than_the_burst():
    pacer = Pacer(rate=100, burst=500)
    pacer.push([(bytes([i]) * 100, A) for i in range(10)], now=0.0)
    first = pacer.release(100.0)  # a long idle spell still allows one burst only
    assert [d[0][0] for d in first] == [0, 1, 2, 3, 4]
    rest = pacer.release(105.0)
    assert [d[0][0] for d in rest] == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError):
        Pacer(rate=0, burst=1000)
    with pytest.raises(ValueError):
        Pacer(rate=10, burst=499)


def test_pacer_take_all_returns_what_it_held():
    pacer = Pacer(rate=1, burst=500)
    items = [(b"a" * 400, A), (b"b" * 400, A), (b"c" * 400, B)]
    pacer.push(items, now=0.0)
    assert len(pacer.release(0.0)) == 2
    assert pacer.take_all() == [items[1]] and pacer.waiting == 0


def _burst(sender, receiver, count: int, size: int, timeout: float = 10.0) -> int:
    """Send ``count`` messages of ``size`` bytes at once; the receiver drains while the sender
    steps. Returns how many arrived."""
    for _ in range(count):
        sender.send([b"z" * size], flush=False)
    sender.flush()
    got = 0
    end = time.monotonic() + timeout
    idle_until = None
    while time.monotonic() < end:
        sender.poll(0.001)
        try:
            receiver.recv(timeout=0.002)
            got += 1
            idle_until = None
        except WouldBlock:
            if got == count or (
                not sender._link.has_pending and idle_until is not None and time.monotonic() > idle_until
            ):
                break
            if not sender._link.has_pending and idle_until is None:
                idle_until = time.monotonic() + 0.3
    return got


@pytest.mark.network
@pytest.mark.filterwarnings("ignore::nbmq.transports.udp.DatagramLossWarning")  # the unpaced half loses on purpose
def test_pacing_lets_a_small_buffer_receiver_keep_up():
    small = dict(rcvbuf=128 << 10, gro=False, recv_hwm=10_000, **FAST)
    server = Dealer.bind("127.0.0.1:0", **small)
    fast = Dealer.connect(server.local_address, send_hwm=10_000, **FAST)
    paced = Dealer.connect(server.local_address, send_hwm=10_000, pace_rate=500_000, pace_burst=8 << 10, **FAST)
    with server, fast, paced:
        assert pump(server, fast, paced, until=connected(server, fast, paced))
        assert paced._link.pacer is not None and fast._link.pacer is None
        got = _burst(paced, server, 40, 16 << 10)
        assert got == 40 and server.counters.kernel_drops == 0
        got = _burst(fast, server, 40, 16 << 10)  # the same burst unpaced overflows the buffer
        assert got < 40 and server.counters.kernel_drops > 0


@pytest.mark.network
def test_pacing_and_gso_are_live_options():
    server = Dealer.bind("127.0.0.1:0", **FAST)
    client = Dealer.connect(server.local_address, gso=False, **FAST)
    with server, client:
        assert pump(server, client, until=connected(server, client))
        assert client.options.gso is False and client._link.io.gso is False
        assert _burst(client, server, 20, 4000) == 20
        assert client._link.io.gso_messages == 0  # every datagram on its own
        if batch.COMPILED:
            client.gso = True
            assert _burst(client, server, 20, 4000) == 20
            assert client._link.io.gso_messages > 0
        client.pace_rate = 200_000
        assert client._link.pacer is not None and client._link.pacer.rate == 200_000
        client.pace_rate = 0
        assert client._link.pacer is None
        with pytest.raises(OptionError, match="gso"):
            client.gso = "yes"
        with pytest.raises(OptionError, match="pace_burst"):
            client.pace_burst = 100
