"""FNV-1a 64, the derived identifiers, and sharding, on both twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.wire import FNV_OFFSET_BASIS, FNV_PRIME

# The codec fixture only selects a module: nothing to reset between examples.
FIXTURE_OK = [HealthCheck.function_scoped_fixture]


def reference_fnv(data: bytes, h: int = FNV_OFFSET_BASIS) -> int:
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) % 2**64
    return h


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.binary(max_size=600), st.binary(max_size=50))
def test_fnv_incremental(codec, a, b):
    assert codec.fnv1a64(a + b) == codec.fnv1a64(b, codec.fnv1a64(a)) == reference_fnv(a + b)


def test_fnv_large_and_buffers(codec):
    data = bytes(range(256)) * 40
    assert codec.fnv1a64(data) == reference_fnv(data)
    assert codec.fnv1a64(np.frombuffer(data, np.uint8)) == codec.fnv1a64(bytearray(data))
    assert codec.fnv1a64(memoryview(data).cast("I")) == reference_fnv(data)
    with pytest.raises(OverflowError):
        codec.fnv1a64(b"", -1)
    with pytest.raises(OverflowError):
        codec.fnv1a64(b"", 2**64)
    with pytest.raises(TypeError):
        codec.fnv1a64("text")
    with pytest.raises(TypeError):
        codec.fnv1a64(b"", 1.5)


def test_ids(codec):
    assert codec.message_id([b"hello"], 1) == codec.message_id([b"he", b"llo"], 1)
    assert codec.message_id([], 5) == reference_fnv((5).to_bytes(8, "big"))
    assert codec.message_id(iter([b"a", bytearray(b"b")]), 0) == codec.message_id([b"ab"], 0)
    assert codec.session_id(7, "1.2.3.4:5") == reference_fnv((7).to_bytes(8, "big") + b"1.2.3.4:5")
    frame = codec.encode_data_frame(1, 2, 1, 0, 1, 1, 0, b"x")
    assert codec.ack_hash(frame) == reference_fnv(frame)
    for bad in (-1, 2**64):
        with pytest.raises(OverflowError):
            codec.message_id([b"x"], bad)
        with pytest.raises(OverflowError):
            codec.session_id(bad, "a:1")
    with pytest.raises(TypeError):
        codec.message_id([b"x", 3], 0)
    with pytest.raises(UnicodeEncodeError):
        codec.session_id(1, "é:1")


sizes_st = st.lists(st.integers(0, 1500), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
@given(sizes_st, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_shard_layout(codec, sizes, session_id, message_id):
    parts = [bytes((i * 7 + j) % 256 for j in range(n)) for i, n in enumerate(sizes)]
    sharded = codec.shard_message(parts, session_id, message_id)
    assert sharded.buffer.dtype == np.uint8 and sharded.offsets.dtype == np.int64
    assert sharded.lengths.dtype == np.int32
    assert len(sharded.offsets) == codec.frame_count(sizes)
    assert len(sharded.buffer) == 34 * len(sharded.offsets) + sum(sizes)
    assert sharded.offsets.tolist() == np.concatenate([[0], np.cumsum(sharded.lengths)[:-1]]).tolist()
    frames = [codec.parse_frame(f) for f in sharded.frames()]
    assert [bytes(f) for f in sharded.frames()] == codec.shard_message_bytes(parts, session_id, message_id)
    rebuilt = [bytearray() for _ in parts]
    for f in frames:
        assert (f.session_id, f.message_id, f.part_count) == (session_id, message_id, len(parts))
        assert (f.message_size, f.part_size) == (sum(sizes), sizes[f.part_index])
        assert f.chunk_offset == len(rebuilt[f.part_index])  # in order, part by part
        assert f.chunk_size <= 466
        rebuilt[f.part_index] += f.chunk
    assert [bytes(b) for b in rebuilt] == parts
    assert [f.part_index for f in frames] == sorted(f.part_index for f in frames)


def test_frame_count(codec):
    assert codec.frame_count([0]) == 1 and codec.frame_count([466]) == 1
    assert codec.frame_count([467, 932, 933]) == 2 + 2 + 3
    assert codec.frame_count([]) == 0


def test_shard_inputs(codec):
    a = codec.shard_message([b"ab", bytearray(b"cd"), memoryview(b"ef"), np.frombuffer(b"gh", np.uint8)], 1, 2)
    assert [codec.parse_frame(f).chunk.tobytes() for f in a.frames()] == [b"ab", b"cd", b"ef", b"gh"]
    assert codec.shard_message([b"x"] * 255, 1, 2).offsets.shape == (255,)
    with pytest.raises(ValueError):
        codec.shard_message([b"x"] * 256, 1, 2)
    with pytest.raises(ValueError):
        codec.shard_message([], 1, 2)
    for single in (b"abc", bytearray(b"abc"), memoryview(b"abc"), "abc"):
        with pytest.raises(TypeError):
            codec.shard_message(single, 1, 2)
    with pytest.raises(TypeError):
        codec.shard_message([b"a", 5], 1, 2)
    with pytest.raises(OverflowError):
        codec.shard_message([b"a"], -1, 2)
    with pytest.raises(OverflowError):
        codec.shard_message([b"a"], 1, 2**64)
    with pytest.raises(TypeError):
        codec.shard_message([b"a"], 1.0, 2)
