"""parse_frames: many datagrams in one buffer into FRAME_DTYPE rows, on both twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.errors import DecodeError
from nbmq.wire import FRAME_DTYPE, FRAME_ERROR_REASONS, DataFrame, FrameError

HEADER = ("session_id", "message_id", "part_count", "part_index", "message_size", "part_size", "chunk_offset")

# The codec fixture only selects a module: nothing to reset between examples.
FIXTURE_OK = [HealthCheck.function_scoped_fixture]


def expected_row(codec, buffer: bytes, start: int, length: int) -> dict:
    """What parse_frames must say about one row, from parse_frame and the header bytes."""
    if start < 0 or length < 0 or start + length > len(buffer):
        return {"error": FrameError.OUT_OF_BUFFER}
    raw = buffer[start : start + length]
    row = {"version": raw[0], "kind": raw[1]} if length >= 2 else {}
    try:
        frame = codec.parse_frame(raw)
    except DecodeError as e:
        code = next(c for c, r in FRAME_ERROR_REASONS.items() if r == e.reason and c)
        row["error"] = code
        if FrameError.PART_COUNT <= code <= FrameError.CHUNK_BOUNDS:  # header read, then refused
            row.update(
                session_id=int.from_bytes(raw[2:10], "big"),
                message_id=int.from_bytes(raw[10:18], "big"),
                part_count=raw[18],
                part_index=raw[19],
                message_size=int.from_bytes(raw[20:24], "big"),
                part_size=int.from_bytes(raw[24:28], "big"),
                chunk_size=int.from_bytes(raw[28:30], "big"),
                chunk_offset=int.from_bytes(raw[30:34], "big"),
                payload_offset=start + 34,
                payload_length=length - 34,
            )
        return row
    row["error"] = FrameError.OK
    if isinstance(frame, DataFrame):
        row.update(
            {k: getattr(frame, k) for k in HEADER},
            chunk_size=frame.chunk_size,
            payload_offset=start + 34,
            payload_length=length - 34,
        )
    else:
        row.update(session_id=frame.session_id, payload_offset=start + 10, payload_length=length - 10)
    return row


def check_rows(codec, buffer: bytes, offsets, lengths):
    rows = codec.parse_frames(buffer, offsets, lengths)
    assert rows.dtype == FRAME_DTYPE and rows.shape == (len(offsets),)
    for row, start, length in zip(rows, offsets, lengths):
        want = expected_row(codec, buffer, int(start), int(length))
        got = {name: int(row[name]) for name in FRAME_DTYPE.names}
        assert got == {name: int(want.get(name, 0)) for name in FRAME_DTYPE.names}
    return rows


@st.composite
def batches(draw):
    datagrams = []
    for _ in range(draw(st.integers(0, 12))):
        choice = draw(st.integers(0, 3))
        if choice == 0:
            datagrams.append(draw(st.binary(max_size=60)))
        elif choice == 1:  # a data header of random fields, then a random body
            datagrams.append(
                bytes([1, draw(st.integers(0, 6))])
                + draw(st.binary(min_size=32, max_size=32))
                + bytes(draw(st.integers(0, 40)))
            )
        else:
            chunk = draw(st.binary(max_size=50))
            raw = bytearray(
                bytes([1, 0])
                + draw(st.binary(min_size=16, max_size=16))
                + bytes([2, 1])
                + (200).to_bytes(4, "big")
                + (100).to_bytes(4, "big")
                + len(chunk).to_bytes(2, "big")
                + draw(st.integers(0, 60)).to_bytes(4, "big")
                + chunk
            )
            for _ in range(draw(st.integers(0, 2))):
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
            datagrams.append(bytes(raw))
    buffer = b"".join(datagrams)
    offsets, lengths, pos = [], [], 0
    for d in datagrams:
        offsets.append(pos)
        lengths.append(len(d))
        pos += len(d)
    for _ in range(draw(st.integers(0, 3))):  # rows that lie (partly) outside the buffer
        offsets.append(draw(st.integers(-5, len(buffer) + 5)))
        lengths.append(draw(st.integers(-5, 60)))
    return buffer, offsets, lengths


@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURE_OK)
@given(batches())
def test_rows_agree_with_parse_frame(codec, batch):
    buffer, offsets, lengths = batch
    check_rows(codec, buffer, np.array(offsets, np.int64), np.array(lengths, np.int64))


def test_sharded_message_rows(codec):
    sharded = codec.shard_message([bytes(1000), b"", b"xyz"], 5, 6)
    rows = check_rows(codec, sharded.buffer.tobytes(), sharded.offsets, sharded.lengths)
    assert (rows["error"] == 0).all() and rows["part_index"].tolist() == [0, 0, 0, 1, 2]
    assert rows["payload_length"].tolist() == [466, 466, 68, 0, 3]
    start = rows["payload_offset"][4]
    assert sharded.buffer[start : start + 3].tobytes() == b"xyz"


def test_offsets_dtypes_and_buffers(codec):
    frame = codec.encode_control_frame(2, 9)
    buffer = frame * 3
    for offsets, lengths in [
        ([0, 10, 20], [10, 10, 10]),
        (np.array([0, 10, 20], np.uint32), np.array([10, 10, 10], np.int16)),
        (np.array([0, 10, 20], np.int32), np.array([10, 10, 10], np.int32)),
        (np.array([0, 0, 10, 20])[1:], np.array([10, 10, 10, 10])[1:]),
    ]:
        for buf in (buffer, bytearray(buffer), np.frombuffer(buffer, np.uint8), memoryview(buffer)):
            rows = codec.parse_frames(buf, offsets, lengths)
            assert rows["session_id"].tolist() == [9, 9, 9] and not rows["error"].any()
    rows = codec.parse_frames(buffer, np.array([2**63, 0], np.uint64), np.array([10, 2**64 - 1], np.uint64))
    assert rows["error"].tolist() == [FrameError.OUT_OF_BUFFER] * 2
    assert codec.parse_frames(b"", [], []).shape == (0,)
    assert codec.parse_frames(buffer, [0], [0])["error"].tolist() == [FrameError.TRUNCATED]


def test_argument_errors(codec):
    with pytest.raises(ValueError):
        codec.parse_frames(b"", [0, 1], [0])
    with pytest.raises(ValueError):
        codec.parse_frames(b"", [[0]], [[0]])
    with pytest.raises(TypeError):
        codec.parse_frames(b"", [0.0], [1])
    with pytest.raises(TypeError):
        codec.parse_frames(b"", [0], np.array([True]))
    with pytest.raises(TypeError):
        codec.parse_frames("text", [0], [1])
