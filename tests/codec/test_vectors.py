"""Every case of the Rust reference's golden vectors (tests/data/nbmq_v0_2_0.json), on both twins.

Where the reference's observed behaviour is a bug we do not copy (tests/data/VECTORS.md,
"Reference behaviour worth knowing"; ARCHITECTURE.md, "deliberately better"), the test asserts
our behaviour and says why. The rules we add: encoders refuse malformed frames (ValueError); the
parser raises DecodeError where the reference returns nothing or hands a malformed frame on to a
receive queue that later panics; an empty part travels as one zero-length chunk.
"""

from __future__ import annotations

import pytest

from nbmq.errors import DecodeError
from nbmq.wire import FrameError, FrameKind

VARIANTS = {
    "Connect": FrameKind.CONNECT,
    "Connected": FrameKind.CONNECTED,
    "Disconnected": FrameKind.DISCONNECTED,
    "Heartbeat": FrameKind.HEARTBEAT,
    "Ack": FrameKind.ACK,
}
HEADER_FIELDS = (
    "session_id",
    "message_id",
    "part_count",
    "part_index",
    "message_size",
    "part_size",
    "chunk_offset",
)


def cases(vectors: dict, kind: str) -> list[dict]:
    found = [c for c in vectors["cases"] if c["kind"] == kind]
    assert found, kind
    return found


def test_constants(codec, vectors):
    import nbmq.wire as wire

    k = vectors["constants"]
    assert (wire.VERSION, wire.DATA_HEADER_SIZE, wire.CONTROL_HEADER_SIZE) == (
        k["VERSION"],
        k["DATA_HEADER_SIZE"],
        k["CONTROL_HEADER_SIZE"],
    )
    assert (wire.MAX_FRAME_SIZE, wire.MAX_CHUNK_SIZE) == (k["MAX_FRAME_SIZE"], k["MAX_DATA_SIZE"])
    assert codec.fnv1a64(b"") == k["FNV1A64_OFFSET_BASIS"] == wire.FNV_OFFSET_BASIS
    assert wire.FNV_PRIME == k["FNV1A64_PRIME"]


# -- data_frame --------------------------------------------------------------------------------

# Reference vectors our encoder refuses and our parser rejects: (FrameError, offset).
MALFORMED_DATA_FRAMES = {
    # part_count 0: the reference's RecvQueue panics on it (recv_part_count_zero).
    "data_frame_all_zero_empty_chunk": (FrameError.PART_COUNT, 18),
    # part_size 0x41424344 > message_size 0x31323334: a part cannot be larger than its message.
    "data_frame_byte_order": (FrameError.PART_SIZE, 24),
    # part_index 255 == part_count: the reference's RecvQueue panics on it.
    "data_frame_max_everything": (FrameError.PART_INDEX, 19),
    # header says 466 chunk bytes, 3 follow: the reference panics in copy_from_slice.
    "data_frame_chunk_size_field_mismatch": (FrameError.CHUNK_SIZE, 28),
    # kind 7 does not exist; the reference's parser returns nothing.
    "data_frame_nonzero_kind": (FrameError.KIND, 1),
}


def _encode_args(f: dict) -> tuple:
    return (
        f["session_id"],
        f["message_id"],
        f["part_count"],
        f["part_index"],
        f["message_size"],
        f["part_size"],
        f["chunk_offset"],
        bytes.fromhex(f["chunk_hex"]),
    )


def test_data_frames(codec, vectors):
    for case in cases(vectors, "data_frame"):
        f, raw, exp = case["fields"], bytes.fromhex(case["hex"]), case["expected"]
        assert len(raw) == exp["length"]
        # The hash and the Ack are defined over any bytes, malformed or not.
        assert codec.ack_hash(raw) == codec.fnv1a64(raw) == exp["fnv1a64_of_frame"]
        if "hash" in exp:
            assert exp["hash"] == exp["fnv1a64_of_frame"]
            assert exp["hash_hex"] == exp["hash"].to_bytes(8, "big").hex()
            ack = codec.encode_control_frame(FrameKind.ACK, f["session_id"], exp["hash"].to_bytes(8, "big"))
            assert ack.hex() == exp["ack_hex"], case["name"]
        row = codec.parse_frames(raw, [0], [len(raw)])[0]
        if case["name"] in MALFORMED_DATA_FRAMES:
            code, offset = MALFORMED_DATA_FRAMES[case["name"]]
            with pytest.raises(DecodeError) as info:
                codec.parse_frame(raw)
            assert (info.value.offset, row["error"]) == (offset, code), case["name"]
            if code == FrameError.CHUNK_SIZE:
                # Our encoder takes chunk_size from the chunk, so it cannot write this mismatch.
                ours = codec.encode_data_frame(*_encode_args(f))
                assert codec.parse_frame(ours).chunk_size == len(ours) - 34 != f["chunk_size"]
            elif f["kind"] == 0:
                with pytest.raises(ValueError):
                    codec.encode_data_frame(*_encode_args(f))
                # The batch decoder still reports every header field, proving the byte order.
                assert [int(row[k]) for k in HEADER_FIELDS] == [f[k] for k in HEADER_FIELDS]
                assert row["chunk_size"] == f["chunk_size"]
            continue
        assert exp["chunk_size_consistent"] and exp["parse_roundtrip"]
        assert codec.encode_data_frame(*_encode_args(f)) == raw, case["name"]
        out = bytearray(len(raw) + 3)
        assert codec.encode_data_frame_into(out, 3, *_encode_args(f)) == len(raw)
        assert bytes(out[3:]) == raw
        frame = codec.parse_frame(raw)
        assert [getattr(frame, k) for k in HEADER_FIELDS] == [f[k] for k in HEADER_FIELDS]
        assert frame.chunk.tobytes().hex() == f["chunk_hex"] and frame.chunk_size == f["chunk_size"]
        assert row["error"] == FrameError.OK and row["payload_length"] == f["chunk_size"]


def test_control_frames(codec, vectors):
    for case in cases(vectors, "control_frame"):
        f, raw, exp = case["fields"], bytes.fromhex(case["hex"]), case["expected"]
        kind = VARIANTS[f["variant"]]
        assert kind == exp["kind_byte"] and len(raw) == exp["length"]
        session = f["session_id"] or 0  # Connect carries session id 0
        payload = bytes.fromhex(f["data_hex"])
        assert codec.encode_control_frame(kind, session, payload) == raw, case["name"]
        frame = codec.parse_frame(raw)
        assert frame.kind is VARIANTS[exp["parse_roundtrip_variant"]]
        assert (frame.session_id, frame.payload.tobytes()) == (session, payload)


# -- hashes and identifiers --------------------------------------------------------------------


def test_fnv1a64(codec, vectors):
    for case in cases(vectors, "fnv1a64"):
        data = bytes.fromhex(case["fields"]["input_hex"])
        value = case["expected"]["value"]
        assert codec.fnv1a64(data) == value
        assert value.to_bytes(8, "big").hex() == case["hex"]
        if case["fields"]["input_ascii"] is not None:
            assert data == case["fields"]["input_ascii"].encode()


def test_message_ids(codec, vectors):
    for case in cases(vectors, "message_id"):
        parts = [bytes.fromhex(p) for p in case["fields"]["parts_hex"]]
        exp = case["expected"]
        mid = codec.message_id(parts, case["fields"]["nonce"])
        assert mid == exp["message_id"] and mid.to_bytes(8, "big").hex() == case["hex"]
        if not parts:
            # No parts: the reference queues a message that never leaves; we refuse it.
            with pytest.raises(ValueError):
                codec.shard_message(parts, 1, mid)
            continue
        frames = [codec.parse_frame(f) for f in codec.shard_message_bytes(parts, 1, mid)]
        assert {f.message_id for f in frames} == {mid}
        # The reference emits no frame for an empty part (so the message never completes);
        # we carry it as one zero-length chunk. Non-empty parts frame the same.
        empty = sum(1 for p in parts if not p)
        assert len(frames) == exp["frames_produced"] + empty
        assert exp["message_id_in_frames"] == [mid] * exp["frames_produced"]


def test_session_ids(codec, vectors):
    for case in cases(vectors, "session_id"):
        f, exp = case["fields"], case["expected"]
        sid = codec.session_id(exp["rng_sample"], f["peer_addr"])
        assert sid == exp["session_id"] and sid.to_bytes(8, "big").hex() == case["hex"]


# -- sharding ----------------------------------------------------------------------------------


def test_send_queue_shards(codec, vectors):
    for case in cases(vectors, "send_queue_shard"):
        f, exp = case["fields"], case["expected"]
        parts = [bytes.fromhex(p) for p in f["parts_hex"]]
        if f["part_count"] != len(parts):  # the vectors abbreviate the big cases' parts
            parts = [bytes([i % 256]) for i in range(f["part_count"])]
            assert [p.hex() for p in parts[: len(f["parts_hex"])]] == f["parts_hex"]
        if "error" in exp:
            # 256 parts: the reference refuses too (its message says 256; the limit is 255).
            with pytest.raises(ValueError):
                codec.shard_message(parts, f["session_id"], 0)
            continue
        mid = codec.message_id(parts, f["nonce"])
        assert mid == exp["message_id"]
        if not parts:
            # Zero parts: the reference accepts a message that produces no frame and is lost.
            with pytest.raises(ValueError):
                codec.shard_message(parts, f["session_id"], mid)
            continue
        ours = codec.shard_message_bytes(parts, f["session_id"], mid)
        assert len(ours) == codec.frame_count([len(p) for p in parts])
        # An empty part is one zero-length chunk here and no frame at all in the reference.
        empty = [i for i, p in enumerate(parts) if not p]
        carried = [x for x in ours if codec.parse_frame(x).part_index not in empty]
        assert len(ours) == exp["frame_count"] + len(empty)
        assert [x.hex() for x in carried] == [fr["hex"] for fr in exp["frames"]], case["name"]
        for raw, fr in zip(carried, exp["frames"]):
            frame = codec.parse_frame(raw)
            assert [getattr(frame, k) for k in HEADER_FIELDS] == [fr[k] for k in HEADER_FIELDS]
            assert codec.ack_hash(raw) == fr["hash"]
        sizes = {codec.parse_frame(x).message_size for x in ours}
        assert sizes == {exp["message_size"]}
        for i in empty:
            frame = codec.parse_frame(ours[[codec.parse_frame(x).part_index for x in ours].index(i)])
            assert (frame.part_size, frame.chunk_offset, frame.chunk_size) == (0, 0, 0)


# -- single-datagram parsing -------------------------------------------------------------------

# Datagrams the reference ignores ("none") or parses into something its receive queue cannot
# handle: we raise DecodeError with the offset of the field at fault.
PARSE_ERRORS = {
    "parse_empty": (FrameError.TRUNCATED, 0),
    "parse_one_byte": (FrameError.TRUNCATED, 1),
    "parse_data_frame_version_2": (FrameError.VERSION, 0),
    "parse_data_frame_33_bytes": (FrameError.TRUNCATED, 33),
    "parse_control_9_bytes": (FrameError.TRUNCATED, 9),
    "parse_control_kind_0_version_0": (FrameError.VERSION, 0),
    "parse_control_unknown_kind_6": (FrameError.KIND, 1),
    "parse_control_unknown_kind_255": (FrameError.KIND, 1),
    # The reference parses these and then panics in its receive queue (chunk_size disagreeing
    # with the bytes present) or appends trailing garbage to the chunk.
    "parse_data_frame_header_only": (FrameError.CHUNK_SIZE, 28),
    "parse_data_frame_truncated_chunk": (FrameError.CHUNK_SIZE, 28),
    "parse_data_frame_trailing_garbage": (FrameError.CHUNK_SIZE, 28),
    # part_index 5 >= part_count 2: the reference's receive queue panics on it.
    "parse_data_frame_part_index_ge_part_count": (FrameError.PART_INDEX, 19),
}


def test_frame_parse(codec, vectors):
    from nbmq.wire import FRAME_ERROR_REASONS

    for case in cases(vectors, "frame_parse"):
        raw, exp = bytes.fromhex(case["hex"]), case["expected"]
        assert len(raw) == case["fields"]["input_length"]
        row = codec.parse_frames(raw, [0], [len(raw)])[0]
        if case["name"] in PARSE_ERRORS:
            code, offset = PARSE_ERRORS[case["name"]]
            with pytest.raises(DecodeError) as info:
                codec.parse_frame(raw)
            assert (info.value.offset, info.value.reason) == (offset, FRAME_ERROR_REASONS[code])
            assert row["error"] == code
            continue
        frame = codec.parse_frame(raw)
        assert row["error"] == FrameError.OK
        if exp["result"] == "data_frame":
            assert [getattr(frame, k) for k in HEADER_FIELDS] == [exp[k] for k in HEADER_FIELDS]
            assert frame.chunk.tobytes().hex() == exp["chunk_hex"]
            continue
        assert exp["result"] == "control_frame"
        assert frame.kind is VARIANTS[exp["variant"]]
        if exp["session_id"] is not None:
            assert frame.session_id == exp["session_id"]
        else:
            # Connect: the reference ignores the session bytes; we report them as sent (the
            # engine ignores them), so nothing is lost.
            assert frame.session_id == int.from_bytes(raw[2:10], "big")
        if exp["data_hex"] is not None:
            assert frame.payload.tobytes().hex() == exp["data_hex"]
        else:
            # Trailing bytes after a Heartbeat: ignored by the reference, kept here as the payload.
            assert frame.payload.tobytes() == raw[10:]


# -- receive queue -> Reassembler --------------------------------------------------------------

# High-water marks and SafeDealer de-duplication live in the queueing layer, not the codec.
RECV_SKIPPED = {
    "recv_hwm_incoming_full",
    "recv_hwm_complete_full",
    "recv_whole_message_repeated_pull_safe",
}
# Where we differ: {case: {step index: our outcome}}; ("err", offset) is a DecodeError there.
RECV_OURS = {
    # Each reference panic (or error) becomes a DecodeError from the frame's own header checks.
    "recv_part_index_ge_part_count": {0: ("err", 19)},
    "recv_part_count_zero": {0: ("err", 18)},
    "recv_chunk_beyond_part_size": {0: ("err", 30)},
    "recv_chunk_offset_overflow": {0: ("err", 30)},
    "recv_chunk_shorter_than_chunk_size": {0: ("err", 28)},
    # message_size 6 but one 5-byte part: the reference waits forever; we reject the message
    # once all its parts are in (the part sizes do not add up).
    "recv_message_size_larger_than_parts": {0: ("err", 24)},
    # Overlapping chunks with different bytes: the reference counts both and delivers a message
    # with holes; we reject the message and deliver nothing.
    "recv_overlapping_chunks_complete_with_holes": {1: ("err", 30), 2: None},
    # A message completed twice before the application pulls: the reference's completion map
    # keeps one copy; the Reassembler hands out every completion (the queueing layer dedups).
    "recv_whole_message_repeated_before_pull": {7: "again"},
    # The reference sends no frame for an empty part and so never completes such a message;
    # ours completes once the received parts add up to message_size.
    "recv_empty_middle_part_never_completes": {
        2: {"session_id": 10, "message_id": 0x67F10A697F983FBD, "parts_hex": ["61", "", "63"]},
    },
}
RECV_LEFT = {
    "recv_chunk_beyond_part_size": 0,
    "recv_message_size_larger_than_parts": 0,
    "recv_empty_middle_part_never_completes": 0,
}


def test_recv_queue(codec, vectors):
    for case in cases(vectors, "recv_queue"):
        name = case["name"]
        if name in RECV_SKIPPED:
            continue
        ours = RECV_OURS.get(name, {})
        r = codec.Reassembler()
        ready: list[tuple[int, int, list[bytes]]] = []
        delivered = []
        for index, step in enumerate(case["expected"]["steps"]):
            want = ours.get(index, step["result"])
            if step["op"] == "push":
                raw = bytes.fromhex(step["frame_hex"])
                try:
                    parts = r.add_datagram(raw)
                except DecodeError as e:
                    assert want == ("err", e.offset), (name, index)
                    continue
                assert want == "ok", (name, index)
                if parts is not None:
                    frame = codec.parse_frame(raw)
                    ready.append((frame.session_id, frame.message_id, [p.tobytes() for p in parts]))
                continue
            got = ready.pop(0) if ready else None
            if want == "again":
                want = case["expected"]["steps"][6]["result"]
            if want is None:
                assert got is None, (name, index)
                continue
            delivered.append(got[1])
            assert got == (want["session_id"], want["message_id"], [bytes.fromhex(p) for p in want["parts_hex"]]), (
                name,
                index,
            )
        if name not in RECV_OURS:
            assert delivered == case["expected"]["delivered_message_ids"], name
        left = case["expected"]["incomplete_messages_left"]
        assert len(r) == RECV_LEFT.get(name, left or 0), name
