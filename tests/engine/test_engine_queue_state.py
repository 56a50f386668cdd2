"""The send queue's fields as C fields (``nbmq.engine._queue_state.SendQueueState``, cimported
by the compiled engine) and their pure-Python twin (``queues.SendQueueStatePy``): the same
names, the one chosen by the extension policy, and values that behave as Python attributes
either way (the rest of the engine suite runs on whichever is built, and again with
NBMQ_NO_EXTENSIONS=1)."""

from __future__ import annotations

import os

import pytest

from nbmq.engine import queues
from nbmq.engine.queues import SendQueue, SendQueueStatePy


def _compiled_class():
    from nbmq.engine import _queue_state

    return _queue_state.SendQueueState


def test_the_queue_derives_from_the_chosen_fields_class():
    base = SendQueue.__mro__[1]
    if queues.COMPILED:
        assert base is _compiled_class()
    else:
        assert base is SendQueueStatePy
    if os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        assert queues.COMPILED


@pytest.mark.skipif(not queues.COMPILED, reason="nbmq.engine._queue_state is not built")
def test_compiled_fields_are_the_twins_slots():
    cls = _compiled_class()
    names = {name for name, value in vars(cls).items() if type(value).__name__ == "getset_descriptor"}
    assert names == set(SendQueueStatePy.__slots__)
    assert not set(SendQueue.__slots__) & names  # each field declared once


def test_fields_read_and_write_as_attributes():
    q = SendQueue(send_hwm=3, safe=True, resend_ivl=0.25, congestion=True)
    assert (q.held, q.send_hwm, q.pushed, q.safe, q.congestion, q.resend_ivl) == (0, 3, 0, True, True, 0.25)
    assert len(q._queue) == 0 and q._inflight == {} and q.windows == {}
    q.push_small(b"x", 1)
    q.push_small(b"y", 2)
    assert (q.held, q.pushed, len(q)) == (2, 2, 2)
    q.send_hwm = 2
    assert q.full()
    q.took(5, 2, 80, 1)
    assert (q._rr, q.held, q.frames_out, q.bytes_out) == (5, 1, 2, 80)
    with pytest.raises((TypeError, AttributeError)):
        q.not_a_field = 1  # slots on both: no stray attributes
