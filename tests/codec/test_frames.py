"""Single frames: encode, parse, errors and views, on both twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.errors import DecodeError, FrameTooLarge
from nbmq.wire import FRAME_ERROR_REASONS, ControlFrame, DataFrame, FrameError, FrameKind

U64 = st.integers(0, 2**64 - 1)

# The codec fixture only selects a module: nothing to reset between examples.
FIXTURE_OK = [HealthCheck.function_scoped_fixture]


@st.composite
def data_frames(draw):
    part_count = draw(st.integers(1, 255))
    part_index = draw(st.integers(0, part_count - 1))
    chunk = draw(st.binary(max_size=466))
    part_size = draw(st.integers(len(chunk), 2**32 - 1))
    message_size = draw(st.integers(part_size, 2**32 - 1))
    chunk_offset = draw(st.integers(0, part_size - len(chunk)))
    return (draw(U64), draw(U64), part_count, part_index, message_size, part_size, chunk_offset, chunk)


@settings(max_examples=200, deadline=None, suppress_health_check=FIXTURE_OK)
@given(data_frames())
def test_data_frame_round_trip(codec, args):
    raw = codec.encode_data_frame(*args)
    assert len(raw) == 34 + len(args[-1])
    frame = codec.parse_frame(raw)
    assert type(frame) is DataFrame and frame.kind is FrameKind.DATA
    assert tuple(frame[:7]) == args[:7] and frame.chunk.tobytes() == args[7]
    assert frame.chunk_size == len(args[7])
    # Writing into a larger buffer at an offset gives the same bytes.
    out = np.zeros(len(raw) + 20, np.uint8)
    assert codec.encode_data_frame_into(out, 7, *args) == len(raw)
    assert out[7 : 7 + len(raw)].tobytes() == raw and not out[:7].any() and not out[7 + len(raw) :].any()


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.integers(1, 5), U64, st.binary(max_size=490))
def test_control_frame_round_trip(codec, kind, session_id, payload):
    raw = codec.encode_control_frame(kind, session_id, payload)
    assert raw[:2] == bytes([1, kind]) and len(raw) == 10 + len(payload)
    frame = codec.parse_frame(raw)
    assert type(frame) is ControlFrame and frame.kind is FrameKind(kind)
    assert (frame.session_id, frame.payload.tobytes()) == (session_id, payload)
    out = bytearray(len(raw) + 1)
    assert codec.encode_control_frame_into(out, 1, kind, session_id, payload) == len(raw)
    assert bytes(out[1:]) == raw


def test_views_not_copies(codec):
    raw = bytearray(codec.encode_data_frame(1, 2, 1, 0, 5, 5, 0, b"hello"))
    frame = codec.parse_frame(raw)
    assert isinstance(frame.chunk, memoryview) and frame.chunk.obj is raw
    raw[-1] = ord("O")
    assert frame.chunk.tobytes() == b"hellO"  # a view into the datagram, no copy
    ctrl = bytearray(codec.encode_control_frame(5, 9, b"12345678"))
    assert codec.parse_frame(ctrl).payload.obj is ctrl


@pytest.mark.parametrize(
    "wrap",
    [
        bytes,
        bytearray,
        memoryview,
        lambda b: np.frombuffer(b, np.uint8),
        lambda b: memoryview(b).cast("c"),
        lambda b: np.frombuffer(b, np.int8),
    ],
)
def test_any_contiguous_buffer(codec, wrap):
    raw = codec.encode_data_frame(7, 8, 2, 1, 10, 5, 0, b"world")
    frame = codec.parse_frame(wrap(raw))
    assert frame.session_id == 7 and frame.chunk.tobytes() == b"world" and frame.chunk.format == "B"
    assert codec.encode_data_frame(7, 8, 2, 1, 10, 5, 0, wrap(b"world")) == raw


def test_non_contiguous_and_non_buffers(codec):
    raw = codec.encode_data_frame(7, 8, 2, 1, 10, 5, 0, b"world") * 2
    with pytest.raises(TypeError):
        codec.parse_frame(memoryview(raw)[::2])
    for bad in ("text", 5, None, [1, 0]):
        with pytest.raises(TypeError):
            codec.parse_frame(bad)


def _data(**change) -> bytearray:
    fields = dict(sid=1, mid=2, pc=3, pi=1, msize=30, psize=10, csize=4, coff=6)
    fields.update(change)
    raw = bytearray([1, 0])
    raw += fields["sid"].to_bytes(8, "big") + fields["mid"].to_bytes(8, "big")
    raw += bytes([fields["pc"], fields["pi"]])
    raw += fields["msize"].to_bytes(4, "big") + fields["psize"].to_bytes(4, "big")
    raw += fields["csize"].to_bytes(2, "big") + fields["coff"].to_bytes(4, "big")
    return raw + bytes(change.get("body", 4))


@pytest.mark.parametrize(
    "raw, code, offset",
    [
        (b"", FrameError.TRUNCATED, 0),
        (b"\x01", FrameError.TRUNCATED, 1),
        (b"\x02\x00" + bytes(40), FrameError.VERSION, 0),
        (b"\x00\x04" + bytes(8), FrameError.VERSION, 0),
        (b"\x01\x06" + bytes(8), FrameError.KIND, 1),
        (b"\x01\xff", FrameError.KIND, 1),
        (b"\x01\x00" + bytes(31), FrameError.TRUNCATED, 33),
        (b"\x01\x04" + bytes(7), FrameError.TRUNCATED, 9),
        (b"\x01\x04" + bytes(499), FrameError.TOO_LARGE, 500),
        (bytes(_data(pc=0, pi=0)), FrameError.PART_COUNT, 18),
        (bytes(_data(pi=3)), FrameError.PART_INDEX, 19),
        (bytes(_data(psize=31)), FrameError.PART_SIZE, 24),
        (bytes(_data(csize=5)), FrameError.CHUNK_SIZE, 28),
        (bytes(_data(body=3)), FrameError.CHUNK_SIZE, 28),
        (bytes(_data(coff=7)), FrameError.CHUNK_BOUNDS, 30),
        (bytes(_data(coff=2**32 - 1, msize=2**32 - 1, psize=2**32 - 1)), FrameError.CHUNK_BOUNDS, 30),
    ],
)
def test_parse_errors(codec, raw, code, offset):
    with pytest.raises(DecodeError) as info:
        codec.parse_frame(raw)
    assert type(info.value) is (FrameTooLarge if code == FrameError.TOO_LARGE else DecodeError)
    assert (info.value.offset, info.value.reason) == (offset, FRAME_ERROR_REASONS[code])
    assert info.value == type(info.value)(offset, FRAME_ERROR_REASONS[code])


def test_valid_edges(codec):
    assert codec.parse_frame(bytes(_data())).chunk_offset == 6
    frame = codec.parse_frame(codec.encode_data_frame(1, 2, 1, 0, 0, 0, 0, b""))  # empty message
    assert (frame.message_size, frame.part_size, frame.chunk_size) == (0, 0, 0)
    big = codec.encode_data_frame(2**64 - 1, 0, 255, 254, 2**32 - 1, 2**32 - 1, 2**32 - 467, bytes(466))
    assert len(big) == 500 and codec.parse_frame(big).chunk_offset == 2**32 - 467
    assert codec.parse_frame(codec.encode_control_frame(4, 1, bytes(490))).kind is FrameKind.HEARTBEAT


ARGS = dict(
    session_id=1, message_id=2, part_count=3, part_index=1, message_size=30, part_size=10, chunk_offset=0, chunk=b"abc"
)


@pytest.mark.parametrize(
    "change, error",
    [
        ({"session_id": -1}, OverflowError),
        ({"message_id": 2**64}, OverflowError),
        ({"part_count": 0}, ValueError),
        ({"part_count": 256}, ValueError),
        ({"part_index": 3}, ValueError),
        ({"part_index": -1}, ValueError),
        ({"part_size": 31}, ValueError),
        ({"message_size": 2**32, "part_size": 10}, ValueError),
        ({"part_size": -1}, ValueError),
        ({"chunk": bytes(467), "part_size": 500, "message_size": 500}, ValueError),
        ({"chunk_offset": 8}, ValueError),
        ({"chunk_offset": -1}, ValueError),
        ({"part_count": 1.0}, TypeError),
        ({"session_id": "1"}, TypeError),
        ({"chunk": "abc"}, TypeError),
        ({"chunk": 3}, TypeError),
    ],
)
def test_encode_data_frame_refuses(codec, change, error):
    with pytest.raises(error):
        codec.encode_data_frame(**{**ARGS, **change})
    with pytest.raises(error):
        codec.encode_data_frame_into(bytearray(600), 0, **{**ARGS, **change})


def test_encode_into_buffer_errors(codec):
    with pytest.raises(ValueError):
        codec.encode_data_frame_into(bytearray(36), 0, **ARGS)  # 37 bytes needed
    with pytest.raises(ValueError):
        codec.encode_data_frame_into(bytearray(100), -1, **ARGS)
    with pytest.raises(ValueError):
        codec.encode_data_frame_into(bytearray(100), 2**70, **ARGS)
    with pytest.raises(TypeError):
        codec.encode_data_frame_into(bytes(100), 0, **ARGS)  # read-only
    with pytest.raises(TypeError):
        codec.encode_data_frame_into(bytearray(100), 0.0, **ARGS)
    with pytest.raises(ValueError):
        codec.encode_control_frame_into(bytearray(17), 0, 5, 1, bytes(8))
    with pytest.raises(TypeError):
        codec.encode_control_frame_into(b"x" * 20, 0, 5, 1, bytes(8))
    assert codec.encode_control_frame_into(bytearray(18), 0, 5, 1, bytes(8)) == 18


@pytest.mark.parametrize(
    "kind, session_id, payload, error",
    [
        (0, 1, b"", ValueError),
        (6, 1, b"", ValueError),
        (1, -1, b"", OverflowError),
        (1, 2**64, b"", OverflowError),
        (1, 0, bytes(491), ValueError),
        (1.0, 0, b"", TypeError),
        (1, 0, "x", TypeError),
    ],
)
def test_encode_control_frame_refuses(codec, kind, session_id, payload, error):
    with pytest.raises(error):
        codec.encode_control_frame(kind, session_id, payload)
    with pytest.raises(error):
        codec.encode_control_frame_into(bytearray(600), 0, kind, session_id, payload)
