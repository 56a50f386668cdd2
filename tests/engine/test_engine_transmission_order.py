"""A congestion window's transmission order: the compiled ring of ``(tx, flight)`` C records
(``nbmq.engine._queue_state.TransmissionOrder``) and its twin, the deque of pairs, give the same
results for the same calls, and the ring holds a reference to each flight while it keeps it
and none after (popped, cleared or freed)."""

from __future__ import annotations

import sys
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.engine import congestion

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
