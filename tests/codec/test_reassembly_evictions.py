"""Both codec Reassemblers evict the same messages: the socket's budget evicts from the owner
holding the most bytes, and on a tie from the owner that came first in the owner table. A
message completed by one frame makes its owner's entry in both (the compiled one-frame path
once made none, so the tables were ordered differently and a tie evicted another peer)."""

from __future__ import annotations

import importlib

import pytest

from nbmq import codec

PY = importlib.import_module("nbmq._codec_py")
try:
    C = importlib.import_module("nbmq._codec")
except ImportError:  # not built: only the twin runs (NBMQ_REQUIRE_EXTENSIONS makes it a failure)
    C = None


def _frame(module, sid: int, mid: int, size: int, parts: int = 1):  # type: ignore[no-untyped-def]
    """The first frame of a message of ``size`` bytes in ``parts`` equal parts."""
    return module.parse_frame(
        codec.encode_data_frame(sid, mid, parts, 0, size, size // parts, 0, b"x" * (size // parts))
    )


def _run(module) -> list:  # type: ignore[no-untyped-def]
    r = module.Reassembler(max_incomplete_bytes=2 * (codec.MESSAGE_OVERHEAD + 200) + 100)
    log = [r.add(_frame(module, 2, 1, 10), 0.0) is not None]  # peer 2: a whole message in one frame
    r.add(_frame(module, 1, 2, 200, 2), 0.0)  # peer 1, then peer 2: 456 bytes each, a tie
    r.add(_frame(module, 2, 3, 200, 2), 0.0)
    r.add(_frame(module, 3, 4, 100, 2), 0.0)  # peer 3 needs room: the first owner of the tie goes
    log += [r.take_evicted(), r.evicted, r.owner_bytes(1), r.owner_bytes(2), r.owner_bytes(3), r.incomplete_bytes]
    return log


@pytest.mark.parametrize("module", [PY, C], ids=["python", "compiled"])
def test_a_tie_evicts_the_owner_first_seen(module):
    if module is None:
        pytest.skip("nbmq._codec is not built")
    assert _run(module) == [True, [(2, 3)], 1, 456, 0, 356, 812]


def test_the_twins_evict_alike_after_many_one_frame_messages():
    """Past 64 idle owners the table is swept; the one-frame path sweeps as the twin does."""
    if C is None:
        pytest.skip("nbmq._codec is not built")
    logs = []
    for module in (PY, C):
        r = module.Reassembler(max_incomplete_bytes=3 * (codec.MESSAGE_OVERHEAD + 200))
        log = []
        for sid in range(100, 200):
            r.add(_frame(module, sid, 1, 5), 0.0)
            if sid % 7 == 0:
                r.add(_frame(module, sid % 5, sid, 200, 2), 0.0)
            log.append((r.take_evicted(), r.incomplete_bytes))
        logs.append(log)
    assert logs[0] == logs[1]
