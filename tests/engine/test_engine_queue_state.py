"""The queues' and the engine socket's fields as C fields (``nbmq.engine._queue_state.
SendQueueState``, ``RecvQueueState`` and ``SocketState``, cimported by the compiled engine) and
their pure-Python twins (``queues.SendQueueStatePy``, ``RecvQueueStatePy``,
``sockets.SocketStatePy``): the same names, the ones chosen by the
extension policy, and values that behave as Python attributes either way (the rest of the
engine suite runs on whichever is built, and again with NBMQ_NO_EXTENSIONS=1)."""

from __future__ import annotations

import os

import pytest

from nbmq.engine import queues
from nbmq.engine.queues import RecvQueue, RecvQueueStatePy, SendQueue, SendQueueStatePy

PAIRS = [(SendQueue, SendQueueStatePy, "SendQueueState"), (RecvQueue, RecvQueueStatePy, "RecvQueueState")]


def _compiled_class(name: str):
    from nbmq.engine import _queue_state

    return getattr(_queue_state, name)


@pytest.mark.parametrize("queue, twin, compiled", PAIRS)
def test_the_queue_derives_from_the_chosen_fields_class(queue, twin, compiled):
    base = queue.__mro__[1]
    if queues.COMPILED:
        assert base is _compiled_class(compiled)
    else:
        assert base is twin
    if os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        assert queues.COMPILED


@pytest.mark.skipif(not queues.COMPILED, reason="nbmq.engine._queue_state is not built")
@pytest.mark.parametrize("queue, twin, compiled", PAIRS)
def test_compiled_fields_are_the_twins_slots(queue, twin, compiled):
    cls = _compiled_class(compiled)
    names = {name for name, value in vars(cls).items() if type(value).__name__ == "getset_descriptor"}
    assert names == set(twin.__slots__)
    assert not set(queue.__slots__) & names  # each field declared once


def test_fields_read_and_write_as_attributes():
    q = SendQueue(send_hwm=3, safe=True, resend_ivl=0.25, congestion=True)
    assert (q.held, q.send_hwm, q.pushed, q.safe, q.congestion, q.resend_ivl) == (0, 3, 0, True, True, 0.25)
    assert len(q._queue) == 0 and len(q._inflight) == 0 and q.windows == {}
    q.push_small(b"x", 1)
    q.push_small(b"y", 2)
    assert (q.held, q.pushed, len(q)) == (2, 2, 2)
    q.send_hwm = 2
    assert q.full()
    q.took(5, 2, 80, 1)
    assert (q._rr, q.held, q.frames_out, q.bytes_out) == (5, 1, 2, 80)
    with pytest.raises((TypeError, AttributeError)):
        q.not_a_field = 1  # slots on both: no stray attributes


def test_receive_fields_read_and_write_as_attributes():
    q = RecvQueue(recv_hwm=2, dedup_ttl=1.5, refuse_when_full=True)
    assert (q.recv_hwm, q.completed, q.dropped_hwm, q.refuse_when_full, q.dedup_ttl) == (2, 0, 0, True, 1.5)
    assert len(q._ready) == 0 and len(q._dedup) == 0 and q.reassembler is not None
    assert RecvQueue().dedup_ttl is None and RecvQueue()._dedup is None
    q._ready.append([b"m"])
    q.completed += 1
    assert (len(q), q.pulled, q.pull()) == (1, 0, [b"m"])
    assert q.pulled == 1


def test_the_socket_derives_from_the_chosen_fields_class():
    from nbmq.engine import sockets

    base = sockets.Socket.__mro__[2]  # (after Connection)
    assert sockets.Socket.__mro__[1].__name__ == "Connection"
    if queues.COMPILED:
        assert base is _compiled_class("SocketState")
        names = {name for name, value in vars(base).items() if type(value).__name__ == "getset_descriptor"}
        assert names == set(sockets.SocketStatePy.__slots__)
    else:
        assert base is sockets.SocketStatePy


def test_socket_fields_read_and_write_as_attributes():
    from nbmq.engine import Dealer, SafeDealer

    for kind, first in ((Dealer, 1), (SafeDealer, 0)):
        engine = kind.connecting(("127.0.0.1", 9), 0.5)
        assert (engine._closed, engine._now, engine._nonce) == (False, 0.5, first)
        assert isinstance(engine._sendq, SendQueue) and engine._opts.send_hwm == 1000
        engine.send([b"m"], 0.75)  # the compiled send where built: the same fields
        assert (engine._now, engine._nonce, len(engine._sendq)) == (0.75, first + 1, 1)
        engine.close(1.0)
        assert engine._closed is True and engine.closed


def test_the_nonce_reads_back_any_int_it_was_given():
    """The compiled field holds a u64 in C and keeps any other value as given (2**64 once the
    last u64 was used; the twin's slot holds any int), so both read back what was set."""
    from nbmq.engine import Dealer

    engine = Dealer.connecting(("127.0.0.1", 9), 0.0)
    for value in (0, 7, 2**64 - 1, 2**64, 2**70, -1, 3):
        engine._nonce = value
        assert engine._nonce == value and type(engine._nonce) is int


def test_reference_compat_follows_set_option_in_the_send_path():
    """``send`` reads the engine's copy of ``reference_compat``: ``set_option`` changes it at
    once (an empty part is refused while it is set), the options object alone does not."""
    from nbmq.engine import Dealer, SafeDealer
    from nbmq.errors import InteropError

    for kind in (Dealer, SafeDealer):
        engine = kind.connecting(("127.0.0.1", 9), 0.0)
        engine.set_option("reference_compat", True)
        assert engine._reference_compat is True
        with pytest.raises(InteropError):
            engine.send([b""], 0.0)
        engine.set_option("reference_compat", False)
        engine.send([b""], 0.0)
        assert engine._reference_compat is False and engine.pending_messages == 1


def test_high_water_marks_past_a_machine_word_mean_no_bound_in_both_twins():
    from nbmq.engine import Dealer, SafeDealer
    from nbmq.options import SocketOptions

    huge = 2**70  # the options accept any count >= 1
    for kind in (Dealer, SafeDealer):
        engine = kind.connecting(("127.0.0.1", 9), 0.0, SocketOptions(send_hwm=huge, recv_hwm=huge))
        for i in range(50):
            engine.send([b"m%d" % i], 0.0)  # no peer: all held, none refused
        assert engine.send_ready and engine.pending_messages == 50
        engine.set_option("send_hwm", 2)
        assert not engine.send_ready
        engine.set_option("recv_hwm", huge)
        engine.set_option("send_hwm", huge)
        assert engine.send_ready
        assert engine.option("send_hwm") == huge  # the option keeps the value given
