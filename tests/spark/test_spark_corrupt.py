"""Corrupt input: the job completes, bad datagrams and records are counted, no valid frame is lost."""

from __future__ import annotations

import hashlib
import random

import pytest

pytestmark = pytest.mark.spark

CLIENT = ("10.0.0.1", 40000)
SERVER = ("10.0.0.2", 7000)
LONELY = ("10.0.0.3", 40001)
LATE = ("10.0.0.4", 40002)
SID = 0xFEDCBA9876543210  # above 2**63: needs the unsigned representation
SID2 = 12345


def _traffic():
    """Valid traffic plus hostile datagrams. Returns (rows, expected)."""
    from nbmq import codec
    from nbmq.wire import FrameKind

    rng = random.Random(7)
    t = 1_700_000_000.0
    rows = []

    def put(src, dst, data):
        nonlocal t
        t += 0.001
        rows.append((t, src[0], src[1], dst[0], dst[1], bytes(data)))

    put(CLIENT, SERVER, codec.encode_control_frame(FrameKind.CONNECT, 0))
    put(SERVER, CLIENT, codec.encode_control_frame(FrameKind.CONNECTED, SID))
    put(CLIENT, SERVER, codec.encode_control_frame(FrameKind.HEARTBEAT, SID))
    messages = {}
    data_frames = 0
    duplicates = 0
    for nonce in range(30):
        sizes = [rng.choice([0, 1, 465, 466, 467, 3000]) for _ in range(rng.randint(1, 3))]
        parts = [rng.randbytes(n) for n in sizes]
        mid = codec.message_id(parts, nonce)
        frames = codec.shard_message_bytes(parts, SID, mid)
        data_frames += len(frames)
        rng.shuffle(frames)
        received, complete = 0, False
        for frame in frames:
            put(CLIENT, SERVER, frame)
            duplicates += complete  # an empty part's chunk after the message completed
            received += len(frame) - 34
            complete = received == sum(sizes)  # absent parts can only be empty
        if nonce % 5 == 0:  # a resend after completion (SafeDealer style)
            put(CLIENT, SERVER, frames[0])
            data_frames += 1
            duplicates += 1
        messages[mid] = [hashlib.sha256(p).hexdigest() for p in parts]
    garbage = [
        b"",
        b"\x01",
        b"\x02\x00" + bytes(40),  # wrong version
        b"\x01\x09" + bytes(40),  # unknown kind
        b"\x01\x00" + bytes(10),  # truncated data header
        bytes([1, 0]) + bytes(600),  # over 500 bytes
        rng.randbytes(77),
    ]
    hostile_ok = 0
    # part_index >= part_count, and a chunk past its part: the codec flags them
    header = bytearray(codec.encode_data_frame(SID, 99, 2, 0, 10, 5, 0, b"abcde"))
    header[19] = 7
    garbage.append(bytes(header))
    header = bytearray(codec.encode_data_frame(SID, 98, 1, 0, 10, 10, 0, b"abcde"))
    header[30:34] = (8).to_bytes(4, "big")
    garbage.append(bytes(header))
    for g in garbage:
        put(CLIENT, SERVER, g)
    # well-formed frames with a hostile claim: 4 GiB message, 5 bytes present (never allocated)
    put(CLIENT, SERVER, codec.encode_data_frame(SID, 97, 1, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0, b"hello"))
    hostile_ok += 1
    # two frames of one message that disagree on part_count: the second is rejected
    put(CLIENT, SERVER, codec.encode_data_frame(SID, 96, 2, 0, 10, 5, 0, b"abcde"))
    put(CLIENT, SERVER, codec.encode_data_frame(SID, 96, 3, 1, 10, 5, 0, b"fghij"))
    hostile_ok += 2
    put(SERVER, CLIENT, codec.encode_control_frame(FrameKind.DISCONNECTED, SID))
    # a Connect nobody answered, and a session caught after its handshake
    put(LONELY, SERVER, codec.encode_control_frame(FrameKind.CONNECT, 0))
    for _ in range(3):
        put(LATE, SERVER, codec.encode_control_frame(FrameKind.HEARTBEAT, SID2))
        put(SERVER, LATE, codec.encode_control_frame(FrameKind.HEARTBEAT, SID2))
    rng.shuffle(garbage)
    expected = {
        "messages": messages,
        "data_frames": data_frames + hostile_ok,
        "duplicates": duplicates,
        "garbage": len(garbage),
        "valid": len(rows) - len(garbage),
    }
    return rows, expected


@pytest.fixture(scope="module")
def corrupt_run(spark, tmp_path_factory):
    from nbmq.capture import write_pcap
    from nbmq.spark.pipeline import run

    rows, expected = _traffic()
    d = tmp_path_factory.mktemp("corrupt")
    good = d / "hostile.pcap"
    write_pcap(good, rows)
    cut = d / "cut.pcap"
    data = good.read_bytes()
    cut.write_bytes(data[: len(data) - 20])  # the last record loses its tail
    (d / "noise.pcap").write_bytes(random.Random(1).randbytes(3000))  # not a capture at all
    summary = run([str(d)], d / "out", spark=spark, progress=False, print_summary=False)
    return summary, expected, d / "out"


def test_job_completes_and_counts(corrupt_run):
    summary, expected, _ = corrupt_run
    by = {c["capture"]: c for c in summary["captures"]}
    assert set(by) == {"hostile.pcap", "cut.pcap", "noise.pcap"}
    h = by["hostile.pcap"]
    assert h["error_rows"] == expected["garbage"] and h["capture_errors"] == 0
    assert h["datagrams"] == expected["garbage"] + expected["valid"]
    assert h["data_frames"] == expected["data_frames"]
    c = by["cut.pcap"]
    assert c["capture_errors"] >= 1 and c["datagrams"] == h["datagrams"] - 1
    assert by["noise.pcap"]["capture_errors"] == 1 and by["noise.pcap"]["datagrams"] == 0
    assert summary["totals"]["sessions"] == 6  # 3 each in hostile.pcap and cut.pcap


def test_no_valid_frame_lost(spark, corrupt_run):
    _, expected, out = corrupt_run
    frames = spark.read.parquet(str(out / "frames")).where("capture = 'hostile.pcap'")
    errors = {r.error for r in frames.where("error IS NOT NULL").collect()}
    assert "wrong version" in errors and "unknown kind" in errors and "part_index >= part_count" in errors
    assert frames.where("error IS NULL").count() == expected["valid"]
    messages = spark.read.parquet(str(out / "messages")).where("capture = 'hostile.pcap'")
    done = {int(r.message_id): list(r.part_sha256) for r in messages.where("complete").collect()}
    assert done == expected["messages"]
    assert messages.where("complete").groupBy().sum("duplicates").first()[0] == expected["duplicates"]
    big = messages.where("message_id = 97").first()
    assert not big.complete and big.missing_bytes == 0xFFFFFFFF - 5 and big.part_sha256 is None
    clash = messages.where("message_id = 96").first()
    assert not clash.complete and clash.frames == 2
    s = spark.read.parquet(str(out / "sessions")).where("capture = 'hostile.pcap'").first()
    assert int(s.session_id) == SID and s.client == "10.0.0.1:40000" and s.server == "10.0.0.2:7000"
    assert s.connects == 1 and s.connecteds == 1 and s.disconnected_s2c == 1
    assert s.messages_complete_c2s == len(expected["messages"])


def test_sessions_without_handshake(spark, corrupt_run):
    _, _, out = corrupt_run
    rows = {
        int(r.session_id): r
        for r in spark.read.parquet(str(out / "sessions")).where("capture = 'hostile.pcap'").collect()
    }
    orphan = rows[0]
    assert (orphan.client, orphan.server) == ("10.0.0.3:40001", "10.0.0.2:7000")
    assert orphan.connects == 1 and orphan.frames_c2s == 1 and orphan.connected_ts is None
    assert orphan.duration_s == 0 and orphan.throughput_bytes_per_s is None
    late = rows[SID2]
    assert (late.client, late.server) == ("10.0.0.4:40002", "10.0.0.2:7000")  # the server seen elsewhere
    assert late.heartbeats_c2s == 3 and late.heartbeats_s2c == 3 and late.connects == 0
