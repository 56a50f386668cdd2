"""The receive queue's dedup window: the compiled C table (``nbmq.engine._queue_state.DedupWindow``)
and its pure-Python twin (``queues.DedupWindowPy``) give the same results for the same calls,
and both keep the rules ``RecvQueue`` relies on: a key put again moves to the end of the expiry
order, :meth:`expire` forgets oldest-put first up to the first entry not yet due."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.engine import queues
from nbmq.engine.queues import DedupWindowPy, RecvQueue

U64 = 2**64 - 1
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _windows():
    kinds = [DedupWindowPy]
    if queues.COMPILED:
        from nbmq.engine._queue_state import DedupWindow

        kinds.append(DedupWindow)
    return kinds


@pytest.fixture(params=_windows(), ids=lambda cls: cls.__name__)
def window(request):
    return request.param()


def test_a_key_is_remembered_until_it_expires(window):
    assert window.get(1, 2) is None and len(window) == 0 and not window
    window.put(1, 2, 5.0)
    window.put(2, 2, 6.0)
    assert (window.get(1, 2), window.get(2, 2), window.get(1, 3)) == (5.0, 6.0, None)
    assert len(window) == 2 and window
    assert window.expire(4.0) == 0
    assert window.expire(5.0) == 1
    assert (window.get(1, 2), window.get(2, 2), len(window)) == (None, 6.0, 1)


def test_a_key_put_again_moves_to_the_end_of_the_expiry_order(window):
    window.put(1, 1, 3.0)
    window.put(1, 2, 4.0)
    window.put(1, 1, 9.0)  # renewed: now the newest
    assert window.expire(5.0) == 1  # stops at (1, 1): not due
    assert (window.get(1, 1), window.get(1, 2), len(window)) == (9.0, None, 1)


def test_expiry_stops_at_the_first_entry_not_due_even_when_later_ones_are(window):
    window.put(0, 1, 5.0)
    window.put(0, 2, 1.0)  # put later with an earlier until: kept behind the first
    assert window.expire(2.0) == 0
    assert window.expire(5.0) == 2 and len(window) == 0


def test_keys_span_the_whole_u64_range(window):
    for sid, mid in ((0, 0), (U64, U64), (U64, 0), (0, U64)):
        window.put(sid, mid, 1.0)
    assert len(window) == 4 and window.get(U64, U64) == 1.0 and window.get(U64, 1) is None
    with pytest.raises(OverflowError):
        window.put(-1, 0, 1.0)
    with pytest.raises(OverflowError):
        window.get(0, 2**64)


def test_a_steady_stream_keeps_the_live_keys_through_rehashes_of_one_size(window):
    """Expiry as fast as puts: the deleted slots fill the table and each rehash keeps its
    size (the compiled one then reuses the table the previous rehash left)."""
    live = 300
    for i in range(6000):
        window.put(3, i * 0x9E3779B97F4A7C15 & U64, float(i))
        window.expire(float(i - live))
    assert len(window) == live
    assert all(window.get(3, i * 0x9E3779B97F4A7C15 & U64) == float(i) for i in range(6000 - live, 6000))
    assert all(window.get(3, i * 0x9E3779B97F4A7C15 & U64) is None for i in range(6000 - live))


def test_many_keys_grow_and_shrink_the_table(window):
    n = 5000
    for i in range(n):
        window.put(7, i * 0x9E3779B97F4A7C15 & U64, float(i))
    assert len(window) == n
    assert all(window.get(7, i * 0x9E3779B97F4A7C15 & U64) == float(i) for i in range(0, n, 97))
    assert window.expire(n - 11.0) == n - 10
    assert len(window) == 10
    assert window.get(7, (n - 1) * 0x9E3779B97F4A7C15 & U64) == float(n - 1)
    for i in range(n, n + 100):  # still takes keys after shrinking
        window.put(8, i, float(i))
    assert len(window) == 110 and window.expire(float(2 * n)) == 110 and len(window) == 0


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "get", "expire"]),
            st.integers(0, 3),  # a few sessions and message ids: keys repeat
            st.integers(0, 12) | st.integers(0, U64),
            st.floats(0.0, 50.0, allow_nan=False),
        ),
        max_size=300,
    )
)
def test_the_twins_agree_on_any_sequence_of_calls(calls):
    windows = [cls() for cls in _windows()]
    for op, sid, mid, t in calls:
        if op == "put":
            results = [w.put(sid, mid, t) for w in windows]
        elif op == "get":
            results = [w.get(sid, mid) for w in windows]
        else:
            results = [w.expire(t) for w in windows]
        results += [len(w) for w in windows]
        half = len(results) // 2
        assert results[:half] == [results[0]] * half and results[half:] == [results[half]] * half


def test_the_receive_queue_uses_the_chosen_window():
    q = RecvQueue(dedup_ttl=1.0)
    assert type(q._dedup) is queues.DedupWindow
    assert queues.DedupWindow is not DedupWindowPy or not queues.COMPILED
