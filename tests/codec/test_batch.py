"""parse_frames: many datagrams in one buffer into FRAME_DTYPE rows, on both twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.codec_targets import as_plain
from nbmq.errors import DecodeError
from nbmq.wire import FRAME_DTYPE, FRAME_ERROR_REASONS, SECURE_COUNTER_SIZE, SECURE_OVERHEAD, DataFrame, FrameError

HEADER = ("session_id", "message_id", "part_count", "part_index", "message_size", "part_size", "chunk_offset")

# The codec fixture only selects a module: nothing to reset between examples.
FIXTURE_OK = [HealthCheck.function_scoped_fixture]


def expected_row(codec, buffer: bytes, start: int, length: int) -> dict:
    """What parse_frames must say about one row, from parse_frame and the header bytes."""
    if start < 0 or length < 0 or start + length > len(buffer):
        return {"error": FrameError.OUT_OF_BUFFER}
    raw = buffer[start : start + length]
    row = {"version": raw[0], "kind": raw[1]} if length >= 2 else {}
    plain, sealed = as_plain(raw)  # a secure frame is read as its plain twin, payload inside the seal
    skip, length = (SECURE_COUNTER_SIZE, length - SECURE_OVERHEAD) if sealed else (0, length)
    start += skip
    try:
        frame = codec.parse_frame(plain)
    except DecodeError as e:
        code = next(c for c, r in FRAME_ERROR_REASONS.items() if r == e.reason and c)
        if sealed and code == FrameError.TOO_LARGE:
            code = FrameError.SEALED_TOO_LARGE
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


#: plain frames and secure mode's (docs/secure.md)
VERSIONS = st.sampled_from([1, 0x81])


@st.composite
def batches(draw):
    datagrams = []
    for _ in range(draw(st.integers(0, 12))):
        choice = draw(st.integers(0, 3))
        if choice == 0:
            datagrams.append(draw(st.binary(max_size=60)))
        elif choice == 1:  # a data header of random fields, then a random body
            datagrams.append(
                bytes([draw(VERSIONS), draw(st.integers(0, 6))])
                + draw(st.binary(min_size=32, max_size=32))
                + bytes(draw(st.integers(0, 40)))
            )
        else:
            chunk = draw(st.binary(max_size=50))
            raw_sealed = draw(st.booleans())  # counter and tag after the chunk (version 0x81 reads them)
            raw = bytearray(
                bytes([draw(VERSIONS), 0])
                + draw(st.binary(min_size=16, max_size=16))
                + bytes([2, 1])
                + (200).to_bytes(4, "big")
                + (100).to_bytes(4, "big")
                + len(chunk).to_bytes(2, "big")
                + draw(st.integers(0, 60)).to_bytes(4, "big")
                + chunk
                + draw(st.binary(min_size=24, max_size=24) if raw_sealed else st.just(b""))
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


def test_sealed_frames_decode_their_clear_headers(codec):
    """Secure mode's frames as the engine seals them: the header fields in clear, the payload
    the ciphertext between counter and tag; a secure handshake frame is a control frame."""
    pytest.importorskip("cryptography")
    from nbmq.engine.secure import session_keys

    keys = session_keys(bytes(range(32)), bytes(32), bytes(32))
    sharded = codec.shard_message([bytes(1000), b"xyz"], 7, 11)
    plain = [sharded.buffer[o : o + n].tobytes() for o, n in zip(sharded.offsets, sharded.lengths)]
    plain.append(codec.encode_control_frame(4, 7))  # a heartbeat
    sealed = [keys.seal(f) for f in plain]
    sealed.append(bytes((0x81, 1)) + bytes(8) + bytes(96))  # Connect: a Noise message, no seal
    oversized = bytearray(sealed[0]) + bytes(1)  # 525 bytes
    sealed.append(bytes(oversized))
    rows = check_rows(codec, b"".join(sealed), np.cumsum([0] + [len(g) for g in sealed[:-1]]), [len(g) for g in sealed])
    # four data frames (466 + 466 + 68 bytes, then b"xyz"), a heartbeat, a Connect, one too large
    assert rows["version"].tolist() == [0x81] * 7
    assert rows["error"].tolist() == [0] * 6 + [FrameError.SEALED_TOO_LARGE]
    assert rows["session_id"][:6].tolist() == [7] * 5 + [0]
    assert rows["message_id"][:4].tolist() == [11] * 4
    assert rows["chunk_size"][:4].tolist() == rows["payload_length"][:4].tolist() == [466, 466, 68, 3]
    assert rows["payload_length"][4:6].tolist() == [0, 96]  # a heartbeat has no payload
    first = rows["payload_offset"][0]
    assert first == 34 + 8 and b"".join(sealed)[first : first + 466] == sealed[0][42:-16]
    assert codec.parse_frames(b"".join(sealed[:1]), [0], [500])["error"].tolist() == [FrameError.CHUNK_SIZE]
    with pytest.raises(DecodeError, match="wrong version"):  # a plain peer refuses them
        codec.parse_frame(sealed[0])
