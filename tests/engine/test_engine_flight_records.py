"""The SafeDealer sender's records of its frames in flight, compiled and twin: a congestion
window's transmission order (the ring of ``(tx, flight)`` C records,
``nbmq.engine._queue_state.TransmissionOrder``; twin: a deque of pairs) and a safe queue's
frames by ack hash (the C table ``InflightTable``; twin: a dict). Each gives what its twin
gives for the same calls, and holds a reference to each flight while it keeps it and none
after (removed, cleared or freed)."""

from __future__ import annotations

import sys
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.engine import congestion, queues

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COMPILED = congestion.TransmissionOrder is not deque
needs_compiled = pytest.mark.skipif(not COMPILED, reason="nbmq.engine._queue_state is not built")

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2**40)),
        st.tuples(st.just("appendleft"), st.integers(0, 2**40)),
        st.tuples(st.just("popleft"), st.just(0)),
        st.tuples(st.just("index"), st.integers(-300, 300)),
        st.tuples(st.just("burst"), st.integers(1, 300)),
        st.tuples(st.just("drain"), st.integers(1, 300)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    max_size=120,
)


@needs_compiled
@SETTINGS
@given(_OPS)
def test_the_ring_gives_what_the_deque_gives(ops):
    """Every method of the deque the Python code uses, on both, across the ring's growth,
    wrap-around and shrinking: the same pairs (the same flight objects), lengths and errors."""
    ring, twin = congestion.TransmissionOrder(), deque()
    flights = [object() for _ in range(8)]
    for k, (op, arg) in enumerate(ops):
        flight = flights[k % len(flights)]
        if op == "append":
            ring.append((arg, flight))
            twin.append((arg, flight))
        elif op == "appendleft":
            ring.appendleft((arg, flight))
            twin.appendleft((arg, flight))
        elif op == "popleft":
            if twin:
                assert ring.popleft() == twin.popleft()
            else:
                with pytest.raises(IndexError):
                    ring.popleft()
        elif op == "index":
            if -len(twin) <= arg < len(twin):
                got, want = ring[arg], twin[arg]
                assert got == want and got[1] is want[1]
            else:
                with pytest.raises(IndexError):
                    ring[arg]
        elif op == "burst":
            for tx in range(arg):
                ring.append((tx, flights[tx % 8]))
                twin.append((tx, flights[tx % 8]))
        elif op == "drain":
            for _ in range(min(arg, len(twin))):
                assert ring.popleft() == twin.popleft()
        else:
            ring.clear()
            twin.clear()
        assert len(ring) == len(twin) and bool(ring) == bool(twin)
    assert list(ring) == list(twin)


@needs_compiled
def test_a_pair_that_is_not_a_pair_is_refused_and_changes_nothing():
    ring = congestion.TransmissionOrder()
    ring.append((1, "a"))
    for bad in ((1,), (1, 2, 3), ("x", "a"), None):
        with pytest.raises((TypeError, ValueError)):
            ring.append(bad)
        with pytest.raises((TypeError, ValueError)):
            ring.appendleft(bad)
    assert list(ring) == [(1, "a")]


@needs_compiled
def test_the_ring_owns_one_reference_per_record():
    """Each record holds its flight; popleft, clear and freeing the ring let go of it."""
    flight = object()
    base = sys.getrefcount(flight)
    ring = congestion.TransmissionOrder()
    for tx in range(1000):  # (the ring grows, wraps and, drained, shrinks)
        ring.append((tx, flight))
    assert sys.getrefcount(flight) == base + 1000
    for _ in range(990):
        ring.popleft()
    ring.appendleft((5, flight))
    assert sys.getrefcount(flight) == base + 11
    ring.clear()
    assert sys.getrefcount(flight) == base and not ring
    ring.append((1, flight))
    del ring
    assert sys.getrefcount(flight) == base


_TABLE_OPS = st.lists(
    st.tuples(
        st.sampled_from(["set", "get", "pop", "del", "in", "burst", "drain", "clear"]),
        # few distinct low bits: hashes that share home slots, so removals shift runs back
        st.one_of(st.integers(0, 40), st.integers(0, 2**64 - 1), st.sampled_from([-1, 2**64, "x"])),
    ),
    max_size=150,
)


def _key(k):
    return k * 1024 if type(k) is int and 0 <= k <= 40 else k


@needs_compiled
@SETTINGS
@given(_TABLE_OPS)
def test_the_table_gives_what_the_dict_gives(ops):
    """The in-flight table against a dict under the calls the send queue makes: the same
    flights for the same hashes, the same misses and errors (a hash outside u64 is never
    held), and keys, values and items in the order the hashes were put, across growth,
    shrinking and removals inside probe runs."""
    table, twin = queues.InflightTable(), {}
    for step, (op, k) in enumerate(ops):
        k = _key(k)
        flight = object()
        valid = type(k) is int and 0 <= k < 2**64
        if op == "set":
            if valid:
                table[k] = flight
                twin[k] = flight
            else:
                with pytest.raises((OverflowError, TypeError)):
                    table[k] = flight
        elif op == "get":
            assert table.get(k) is twin.get(k) and table.get(k, "d") is twin.get(k, "d")
        elif op == "pop":
            assert table.pop(k, None) is twin.pop(k, None)
        elif op == "del":
            if k in twin:
                del table[k]
                del twin[k]
            else:
                with pytest.raises(KeyError):
                    del table[k]
                with pytest.raises(KeyError):
                    table[k]
        elif op == "in":
            assert (k in table) == (k in twin)
        elif op == "burst":
            for i in range(step * 7, step * 7 + 200):  # (hashes of no particular pattern)
                table[i * 0x9E3779B97F4A7C15 % 2**64] = flight
                twin[i * 0x9E3779B97F4A7C15 % 2**64] = flight
        elif op == "drain":
            for key in list(twin)[:150]:
                assert table.pop(key) is twin.pop(key)
        else:
            table.clear()
            twin.clear()
        assert len(table) == len(twin) and bool(table) == bool(twin)
    assert table.keys() == list(twin) and list(table) == list(twin)
    assert all(a is b for a, b in zip(table.values(), twin.values()))
    assert table.items() == list(twin.items())


@needs_compiled
def test_the_table_owns_one_reference_per_flight():
    flight = object()
    base = sys.getrefcount(flight)
    table = queues.InflightTable()
    for h in range(1000):
        table[h << 20] = flight
    table[5 << 20] = flight  # (replaced: still one)
    assert sys.getrefcount(flight) == base + 1000
    for h in range(990):
        assert table.pop(h << 20) is flight
    assert sys.getrefcount(flight) == base + 10
    table.clear()
    assert sys.getrefcount(flight) == base and not table
    table[1] = flight
    del table
    assert sys.getrefcount(flight) == base


@needs_compiled
def test_the_table_keeps_every_hash_reachable_through_many_removals():
    """A small table (30 to 40 hashes live, 128 slots) put and taken from at random many
    times: its probe runs wrap past the last slot and are shifted back on removals over and
    over, and every hash held is still found (the dict says which)."""
    import random

    rng = random.Random(11)
    table, twin = queues.InflightTable(), {}
    for _ in range(30_000):
        if len(twin) < 30 or (len(twin) < 40 and rng.random() < 0.5):
            h = rng.getrandbits(64)
            table[h] = twin[h] = h
        else:
            h = rng.choice(list(twin))
            assert table.pop(h) == twin.pop(h)
    assert len(table) == len(twin) and all(table.get(h) == h for h in twin)
    assert sys.getsizeof(table) < 10_000  # (it stayed small: 128 slots)
