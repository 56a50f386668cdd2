"""The compiled engine (``nbmq.engine._fast``) and the Python engine it twins, in lockstep
(``fuzz/engine_targets.py``): the same datagrams out, events, messages, counters and deadlines
after every step of random scripts, and for batches whose offsets, lengths and address lists
hold extreme values or differ in length (a batch never raises for bad input)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import engine_targets
from nbmq import codec
from nbmq.engine import sockets
from nbmq.wire import FrameKind

needs_fast = pytest.mark.skipif(sockets._fast is None, reason="nbmq.engine._fast is not built")
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
I64 = 2**63 - 1
extreme = st.sampled_from([0, -1, 1, 2**31, -(2**31), 2**31 - 1, I64, -I64, -I64 - 1, 34, 35, 500, 501]) | st.integers(
    -I64 - 1, I64
)


@needs_fast
@pytest.mark.parametrize("seed", range(len(engine_targets.engine_seeds())))
def test_the_seed_scripts_run_alike(seed):
    engine_targets.engine_twins(engine_targets.engine_seeds()[seed])


@needs_fast
@SETTINGS
@given(st.binary(min_size=2, max_size=600))
def test_random_scripts_run_alike(data):
    engine_targets.engine_twins(data)


def _connected(kind: int) -> tuple:
    """Both sockets of ``kind`` with peer 0 connected; its session id."""
    compiled, python = engine_targets._sockets(kind, {}, 7)
    addr = engine_targets.PEERS[0]
    sid = None
    for s in (compiled, python):
        s.receive_datagram(bytes(codec.encode_control_frame(FrameKind.CONNECT, 0)), addr, 1.0)
        ((reply, _),) = s.datagrams_to_send(1.0)
        sid = codec.parse_frame(reply).session_id
        s.receive_datagram(bytes(codec.encode_data_frame(sid, 1, 1, 0, 1, 1, 0, b"z")), addr, 1.0)
    return compiled, python, sid


@needs_fast
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy rows: both twins wrap alike
@SETTINGS
@given(
    st.integers(0, 2),
    st.lists(extreme, min_size=1, max_size=4),
    st.lists(extreme, min_size=1, max_size=4),
    st.integers(0, 5),
    st.sampled_from(["list", "int64"]),
)
def test_batches_with_extreme_rows_run_alike(kind, offsets, lengths, n_addrs, container):
    """Rows outside the buffer (negative, past its end, start + length past 2**63) and lists of
    different lengths: both engines take the same rows (the shortest list sets the count), as
    slicing the buffer would, and neither raises."""
    compiled, python, sid = _connected(kind)
    frame = bytes(codec.encode_data_frame(sid, 2, 1, 0, 3, 3, 0, b"abc"))
    buf = frame * 3
    offsets = [len(frame), *offsets]
    lengths = [len(frame), *lengths]
    if container == "int64":
        offsets, lengths = np.array(offsets, np.int64), np.array(lengths, np.int64)
    addrs = [engine_targets.PEERS[0]] * (n_addrs + 1)
    states = []
    for s in (compiled, python):
        with engine_targets._python_engine() if s is python else engine_targets._nothing():
            s.receive_datagrams(memoryview(buf), offsets, lengths, addrs, 1.5)
            states.append(engine_targets._state(s, 1.5))
    assert states[0] == states[1]
    assert states[0][3]["messages_in"] >= 2  # the valid row went through


NUMERIC_OPTIONS = (
    "send_hwm",
    "recv_hwm",
    "max_tick_send",
    "max_message_size",
    "max_incomplete_bytes",
    "max_peer_incomplete_bytes",
    "safe_resend_limit",
    "safe_resend_ivl",
    "uncompleted_message_ttl",
)


@needs_fast
@SETTINGS
@given(st.integers(0, 2), st.sampled_from(NUMERIC_OPTIONS), extreme, st.binary(min_size=0, max_size=200))
def test_option_changes_to_extreme_values_run_alike(kind, name, value, script):
    """An option set to an extreme value (refused or taken) reaches the compiled send, take and
    receive as it reaches the Python ones: the same error, then the same script results."""
    compiled, python, _ = _connected(kind)
    results = []
    for s in (compiled, python):
        try:
            s.set_option(name, value)
            results.append("ok")
        except Exception as e:  # OptionError: the same for both
            results.append((type(e).__name__, str(e)))
    assert results[0] == results[1]
    for step in range(3):
        states = []
        for s in (compiled, python):
            with engine_targets._python_engine() if s is python else engine_targets._nothing():
                try:
                    if kind != 2:
                        s.send([script] * (1 + step), 2.0 + step)
                    err = None
                except Exception as e:
                    err = (type(e).__name__, str(e))
                s.tick(2.0 + step)
                states.append((err, engine_targets._state(s, 2.0 + step)))
        assert states[0] == states[1]


@needs_fast
@pytest.mark.parametrize("kind", [0, 1], ids=["Dealer", "SafeDealer"])
@pytest.mark.parametrize("batch", [True, False], ids=["batch", "one"])
def test_a_tie_after_the_owner_sweep_evicts_alike(kind, batch):
    """The compiled engine completes one-frame messages without the reassembler; it records
    their owner as add() would, so after the idle owners are swept (past 64) the owner table,
    whose order picks the victim of a tie, is the same in both engines."""
    logs = []
    for which in (0, 1):
        s = engine_targets._sockets(kind, {"max_incomplete_bytes": 3000, "max_message_size": 1500}, 7)[which]
        peers = [(f"10.1.0.{k + 1}", 5000 + k) for k in range(70)]
        sids = []
        with engine_targets._python_engine() if which == 1 else engine_targets._nothing():

            def feed(k: int, frame: bytes) -> None:
                if batch:
                    s.receive_datagrams(memoryview(frame), [0], [len(frame)], [peers[k]], 1.1)
                else:
                    s.receive_datagram(frame, peers[k], 1.1)

            for k in range(70):  # past 64 owners: the idle ones are swept
                s.receive_datagram(bytes(codec.encode_control_frame(FrameKind.CONNECT, 0)), peers[k], 1.0)
                reply = next(bytes(d) for d, _ in s.datagrams_to_send(1.0) if d[1] == FrameKind.CONNECTED)
                sids.append(codec.parse_frame(reply).session_id)
                feed(k, bytes(codec.encode_data_frame(sids[k], 1, 1, 0, 5, 5, 0, b"hello")))
            while s.recv_ready():
                s.recv()
            feed(1, bytes(codec.encode_data_frame(sids[1], 2, 1, 0, 5, 5, 0, b"again")))  # whole: its owner
            feed(2, bytes(codec.encode_data_frame(sids[2], 3, 4, 0, 944, 236, 0, b"x" * 236)))
            feed(1, bytes(codec.encode_data_frame(sids[1], 4, 4, 0, 944, 236, 0, b"x" * 236)))  # a tie
            feed(3, bytes(codec.encode_data_frame(sids[3], 5, 2, 0, 700, 350, 0, b"x" * 350)))  # needs room
            logs.append(engine_targets._state(s, 1.1))
    assert logs[0] == logs[1]
    assert any("EVICTED" in e and f"session_id={sids[1]}," in e for e in logs[0][1])
