"""The Cython Reassembler completes a one-frame message (one part, one chunk: the common small
message) without its incomplete-message bookkeeping when the message's claim fits the budgets. The twin always takes the general path: results, counters, charges and
evictions must still agree, on both sides of the fit check."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

from nbmq.errors import DecodeError
from nbmq.wire import DataFrame

py = importlib.import_module("nbmq._codec_py")
try:
    c = importlib.import_module("nbmq._codec")
except ImportError:
    if os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        raise
    c = None

pytestmark = [
    pytest.mark.c_extension,
    pytest.mark.skipif(c is None, reason="the Cython codec is not built"),
]
OVERHEAD = py.MESSAGE_OVERHEAD


@pytest.fixture(autouse=True)
def _c_extension_wanted(request):
    if not request.config.getoption("c_extensions"):
        pytest.skip("the Cython case is off (--no-c-extensions / NBMQ_NO_EXTENSIONS)")


def whole(sid, mid, size):
    return DataFrame(sid, mid, 1, 0, size, size, 0, bytes([mid % 256]) * size)


def half(sid, mid, size):  # the first half of a two-chunk message: stays incomplete
    return DataFrame(sid, mid, 1, 0, size, size, 0, bytes(size // 2))


def run(module, frames, total, peer, cap=1 << 20):
    r = module.Reassembler(cap, total, peer)
    log = []
    for frame in frames:
        try:
            parts = r.add(frame, 1.0)
            got = None if parts is None else [(p.dtype.str, p.flags.owndata, bytes(p)) for p in parts]
        except DecodeError as exc:
            got = (type(exc).__name__, exc.offset, exc.reason)
        log.append(
            (
                got,
                len(r),
                r.incomplete_bytes,
                r.frames,
                r.completed,
                r.evicted,
                r.duplicates,
                tuple(r.take_evicted()),
                r.owner_bytes(frame.session_id),
            )
        )
    return log


@pytest.mark.parametrize("peer", [None, 3 * OVERHEAD + 700, 2 * OVERHEAD + 400])
@pytest.mark.parametrize("slack", [-1, 0, 1])
def test_whole_frames_match_the_twin_at_the_budget_edge(peer, slack):
    # two incomplete 200 B claims from session 1, then whole messages whose claim fits the
    # socket budget exactly (slack 0), by one byte, or misses it by one (general path:
    # eviction or refusal)
    total = 2 * (OVERHEAD + 200) + OVERHEAD + 100 + slack
    frames = [
        half(1, 1, 200),
        half(1, 2, 200),
        whole(1, 3, 100),
        whole(2, 4, 100),
        whole(1, 5, 0),
        whole(1, 6, 466),
        whole(3, 7, 1),
        half(2, 8, 200),
        whole(2, 9, 100),
    ]
    frames.append(DataFrame(1, 10, 1, 0, 2 << 20, 2 << 20, 0, bytes(10)))  # over max_message_size
    a, b = run(py, frames, total, peer), run(c, frames, total, peer)
    assert a == b
    delivered = [entry[0][0][2] for entry in a if isinstance(entry[0], list)]
    assert bytes([3]) * 100 in delivered and bytes([6]) * 466 in delivered
    # one byte short of the socket budget, or a peer budget of two claims: the general path
    # evicts session 1's oldest message for message 3
    assert a[2][5] == (1 if slack < 0 or peer == 2 * OVERHEAD + 400 else 0)


def test_whole_frame_parts_own_a_copy():
    r = c.Reassembler()
    chunk = bytearray(b"x" * 50)
    (part,) = r.add(DataFrame(5, 6, 1, 0, 50, 50, 0, memoryview(chunk)), 0.0)
    chunk[:] = bytes(50)
    assert part.dtype == np.uint8 and part.flags.owndata and bytes(part) == b"x" * 50
    assert (r.frames, r.completed, len(r), r.incomplete_bytes) == (1, 1, 0, 0)


@pytest.mark.parametrize("lazy", [False, True], ids=["small", "lazy"])
def test_drop_owner_releases_one_owner_in_both_twins(lazy):
    # Engine: a removed peer's incomplete messages are dropped at once (drop_owner), oldest
    # first; other owners, the counters and later messages of the same owner are untouched.
    size = (2 << 20) if lazy else 1000
    results = []
    for mod in (py, c):
        r = mod.Reassembler()
        for mid in (5, 3, 9):
            r.add(half(1, mid, size), 0.0, (1, mid))
        r.add(half(2, 1, size), 0.0, (2, 1))
        before = r.incomplete_bytes
        keys = r.drop_owner(1)
        assert r.drop_owner(1) == [] and r.drop_owner(77) == []
        results.append(
            (keys, len(r), r.owner_bytes(1), r.owner_bytes(2), before - r.incomplete_bytes, r.expired, r.evicted)
        )
        done = r.add(whole(1, 4, 8), 0.0, (1, 4))  # the owner's next message still works
        assert done is not None and bytes(done[0]) == bytes([4]) * 8
    assert results[0] == results[1]
    keys, held, owned, other, released, expired, evicted = results[0]
    assert keys == [(1, 5), (1, 3), (1, 9)]
    assert held == 1 and owned == 0 and other > 0 and released > 0
    assert expired == 0 and evicted == 0
