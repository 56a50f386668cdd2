"""Byte ranges of a damaged classic pcap add up to the whole-file read, errors included.

The rule under test (``RecordScanner.walk_range``): a range owns the whole-file walk's records
whose header starts in it and the framing errors those records own. Readers with
``first_frame`` (the Spark path) find their way in by looking back from the range start;
readers without it walk from byte 24. Both must agree with the whole read on any damage.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.capture import DatagramBatch, first_frames, plan_splits, range_starts, read_datagrams
from nbmq.capture.files.errorlog import ErrorLog
from nbmq.capture.files.formats import parse_pcap_header
from nbmq.capture.files.records import RecordScanner

DELETED_AT = 2_098_474  # the byte deleted from dealer.pcap for this test


def _union(data: bytes, splits, engine: str = "fast", mode: str = "walk") -> DatagramBatch:
    """Read every range: ``walk`` (no hints: walk from byte 24), ``frames`` (first_frames:
    resynchronise before the start) or ``starts`` (range_starts: walk from the planned record)."""
    n = len(splits)
    frames = first_frames(data, splits) if mode == "frames" else [None] * n
    starts = range_starts(data, splits) if mode == "starts" else [(None, None)] * n
    return DatagramBatch.concat(
        [
            read_datagrams(data, start=s, end=e, engine=engine, first_frame=f if r is None else rf, walk_from=r)
            for (s, e), f, (r, rf) in zip(splits, frames, starts)
        ]
    )


def _assert_same(union: DatagramBatch, whole: DatagramBatch) -> None:
    np.testing.assert_array_equal(union.frame_number, whole.frame_number)  # no loss, no duplicate
    assert union.same_rows(whole)
    assert (union.errors, union.packets, union.skipped) == (whole.errors, whole.packets, whole.skipped)
    if whole.errors < 16:  # every reason is kept: the same ones, each once
        assert sorted(union.error_reasons) == sorted(whole.error_reasons)


@pytest.fixture(scope="module")
def head_of_dealer(captures_dir) -> bytes:
    """The first ~40 KB of dealer.pcap, cut at a record boundary (small enough for 64-byte ranges)."""
    data = (captures_dir / "dealer.pcap").read_bytes()
    scanner = RecordScanner(data, len(data), parse_pcap_header(data, len(data)))
    offsets = scanner.walk(24, len(data), ErrorLog())
    cut = int(offsets[int(np.searchsorted(offsets, 40_000))])
    del scanner
    return data[:cut]


def test_deleted_byte_in_a_pcap_record_costs_one_error_in_every_split(captures_dir):
    data = (captures_dir / "dealer.pcap").read_bytes()
    damaged = data[:DELETED_AT] + data[DELETED_AT + 1 :]
    whole = read_datagrams(damaged)
    # one error; the record after the cut-short one is found again inside its claimed length
    assert whole.errors == 1 and "implausible record header" in whole.error_reasons[0]
    assert len(whole) == len(read_datagrams(data))
    splits = plan_splits(damaged, 256 * 1024)
    assert len(splits) > 8
    for mode in ("walk", "frames", "starts"):
        _assert_same(_union(damaged, splits, mode=mode), whole)
    _assert_same(_union(damaged, splits, engine="dpkt", mode="starts"), read_datagrams(damaged, engine="dpkt"))


_DAMAGE = st.tuples(
    st.sampled_from(["delete", "insert", "flip", "zero", "overwrite"]),
    st.integers(24, 10**9),  # position, taken modulo the size
    st.integers(1, 2000),  # span or bit
    st.binary(min_size=1, max_size=64),
)


def _damage(data: bytes, ops) -> bytes:
    out = bytearray(data)
    for kind, pos, n, blob in ops:
        at = 24 + pos % (len(out) - 24)
        if kind == "delete":
            del out[at : at + 1 + n % 8]
        elif kind == "insert":
            out[at:at] = blob
        elif kind == "flip":
            out[at] ^= 1 << (n % 8)
        elif kind == "zero":
            out[at : at + n] = bytes(len(out[at : at + n]))
        else:
            out[at : at + len(blob)] = blob[: len(out) - at]
    return bytes(out)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    ops=st.lists(_DAMAGE, min_size=1, max_size=3),
    target=st.integers(64, 20_000),
    engine=st.sampled_from(["fast", "dpkt"]),
)
def test_ranges_add_up_under_random_damage(head_of_dealer, ops, target, engine):
    damaged = _damage(head_of_dealer, ops)
    whole = read_datagrams(damaged, engine=engine)
    splits = plan_splits(damaged, target)
    _assert_same(_union(damaged, splits, engine=engine, mode="frames"), whole)
    if engine == "fast":  # the other two ways in must agree as well
        _assert_same(_union(damaged, splits, mode="walk"), whole)
        _assert_same(_union(damaged, splits, mode="starts"), whole)


def test_range_starts_are_the_whole_walks_records(head_of_dealer):
    data = head_of_dealer
    scanner = RecordScanner(data, len(data), parse_pcap_header(data, len(data)))
    offsets = scanner.walk(24, len(data), ErrorLog()).tolist()
    del scanner
    a = offsets[1] + 1  # mid-record
    splits = [
        (0, a),
        (a, offsets[5]),
        (offsets[5], offsets[5] + 1),
        (offsets[5] + 1, len(data)),
        (len(data), len(data)),
    ]
    want = [(24, 1), (offsets[1], 3), (offsets[4], 6), (offsets[5], 7), (offsets[-1], len(offsets) + 1)]
    assert range_starts(data, splits) == want
    with pytest.raises(ValueError, match="walk_from"):
        read_datagrams(data, start=a, first_frame=3, walk_from=len(data) + 1)
