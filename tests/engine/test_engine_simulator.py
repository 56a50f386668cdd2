"""nbmq.testing: the simulator itself (faults, topology changes, bounded loops)."""

from __future__ import annotations

import random

import pytest

from nbmq.engine import Dealer
from nbmq.testing import Link, LivelockError, Network, connected_pair

S = ("10.0.0.1", 8000)


class Echo:
    """A minimal engine: answers every datagram with the same bytes, keeps nothing."""

    def __init__(self):
        self.out = []
        self.seen = []
        self.connected_peers = []

    def receive_datagram(self, data, addr, now):
        self.seen.append((bytes(data), now))
        self.out.append((bytes(data), addr))

    def datagrams_to_send(self, now):
        out, self.out = self.out, []
        return out

    def next_deadline(self):
        return None

    def next_event(self):
        return None

    def tick(self, now):
        pass


class Sender(Echo):
    def __init__(self, to, count):
        super().__init__()
        self.out = [(i.to_bytes(4, "big"), to) for i in range(count)]


def test_loss_duplication_and_delay_statistics():
    net = Network(seed=1, link=Link(loss=0.25, duplicate=0.1, delay=0.01, jitter=0.005))
    sink = net.add(Echo(), "sink")
    sink.engine.out = []
    sink.engine.receive_datagram = lambda d, a, n: sink.engine.seen.append((bytes(d), n))
    net.add(Sender("sink", 10_000), "src")
    net.step(1.0)
    assert net.sent == 10_000
    assert 0.23 < net.lost / net.sent < 0.27
    assert 0.08 < net.duplicated / (net.sent - net.lost) < 0.12
    arrivals = [n for _, n in sink.engine.seen]
    assert len(arrivals) == net.sent - net.lost + net.duplicated == net.delivered
    assert all(0.01 <= t <= 0.015 + 1e-9 for t in arrivals)


def test_reordering_happens_and_perfect_link_keeps_order():
    for link, reordered in ((Link(), False), (Link(reorder=0.3, reorder_delay=0.05), True)):
        net = Network(seed=2, link=link)
        sink = net.add(Echo(), "sink")
        sink.engine.receive_datagram = lambda d, a, n, s=sink: s.engine.seen.append((bytes(d), n))
        net.add(Sender("sink", 1000), "src")
        net.step(1.0)
        order = [int.from_bytes(d, "big") for d, _ in sink.engine.seen]
        assert (order != sorted(order)) is reordered
        assert sorted(order) == list(range(1000))


def test_per_direction_links_and_undeliverable():
    net = Network()
    a = net.add(Echo(), "a")
    net.set_link("b", "a", Link(loss=1.0))
    net.add(Sender("a", 5), "b")
    net.add(Sender("nowhere", 3), "c")
    net.step(1.0)
    assert a.engine.seen == []
    assert net.lost == 5 and net.undeliverable == 3


def test_scratch_buffer_is_reused_between_deliveries():
    kept = []

    class Keeper(Echo):
        def receive_datagram(self, data, addr, now):
            kept.append(data)  # a bad engine: keeps the view

    net = Network()
    net.add(Keeper(), "k")
    net.add(Sender("k", 2), "s")
    net.step(1.0)
    assert isinstance(kept[0], memoryview)
    assert bytes(kept[0]) == bytes(kept[1])  # overwritten by the second delivery


def test_livelock_is_detected():
    class Spinner(Echo):
        def next_deadline(self):
            return 0.0  # always due, never does anything

    net = Network(max_iterations=1000)
    net.add(Spinner(), "x")
    with pytest.raises(LivelockError):
        net.step(1.0)


def test_run_until_is_bounded_by_time():
    net = Network()
    net.add(Echo(), "x")
    assert net.run_until(lambda: False, 5.0) is False
    assert net.now == pytest.approx(5.0)
    assert net.run_until(lambda: True, 5.0) is True
    assert net.now == pytest.approx(5.0)


def test_tick_interval_ticks_everyone():
    ticks = []

    class Ticker(Echo):
        def tick(self, now):
            ticks.append(now)

    net = Network(tick_interval=0.1)
    net.add(Ticker(), "t")
    net.step(1.0)
    assert len(ticks) == 11  # 0.0, 0.1, ..., 1.0


def test_tick_interval_with_real_engines_changes_nothing_visible():
    """Ticking far more often than the deadlines ask (the reference's loop) is harmless."""
    results = []
    for interval in (None, 0.003):
        net = Network(seed=5, link=Link(loss=0.1), tick_interval=interval)
        server = net.add(Dealer.bound(S, rng=random.Random(1)), S)
        client = net.add(Dealer(), ("c", 1))
        net.connect(client, S)
        net.step(5.0)
        results.append((client.engine.counters.heartbeats_out, server.engine.counters.heartbeats_out))
    assert results[0] == results[1]


def test_address_taken_and_move():
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    with pytest.raises(ValueError):
        net.add(Dealer(), S)
    with pytest.raises(ValueError):
        net.move(client, S)
    net.move(client, ("10.9.9.9", 1))
    assert client.addr == ("10.9.9.9", 1)
