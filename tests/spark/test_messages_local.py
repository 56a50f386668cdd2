"""Partition-local reassembly: one read of the frames gives exactly the
shuffled messages table, also when messages straddle byte ranges and frames come late."""

from __future__ import annotations

import random

import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

SPLIT = str(64 * 1024)  # small byte ranges: many messages straddle a range boundary


def _rows(df) -> list:
    """All rows, sorted (a few thousand here): each table is computed once."""
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _late_capture(path, seed=5, messages=300):
    """Messages of 0..2 KB from two senders, with frames lost, resent before completion,
    resent long after completion (another byte range), and whole messages resent early
    and late, so each mix of row and frame records across ranges occurs."""
    from nbmq import codec
    from nbmq.capture import write_pcap

    rng = random.Random(seed)
    rows, t, late = [], 1_700_000_000.0, []
    for nonce in range(1, messages + 1):
        parts = [rng.randbytes(rng.randrange(0, 900)) for _ in range(rng.randrange(1, 4))]
        mid = codec.message_id(parts, nonce=nonce)
        src = "10.0.0.1" if nonce % 2 else "10.0.0.3"
        frames = [bytes(f) for f in codec.shard_message(parts, session_id=77, message_id=mid).frames()]
        if nonce % 13 == 0 and len(frames) > 1:
            frames.pop(0)  # lost: incomplete unless a late resend brings it
        if nonce % 7 == 0:
            frames.insert(1, frames[0])  # resent before completion
        if nonce % 5 == 0:
            late.append((src, frames[-1]))  # resent after completion, far later
        if nonce % 9 == 0:
            late.append((src, frames[0]))  # a first frame again, after completion
        if nonce % 23 == 0:
            late.extend((src, f) for f in frames)  # the whole message again, later
        if nonce % 29 == 0:
            late.insert(0, (src, frames[0]))  # the tail of an earlier range gets it back soon
        for f in frames:
            t += 0.001
            rows.append((t, src, 40000, "10.0.0.2", 5555, f))
        if nonce % 40 == 0:  # flush the late frames in the middle of the capture
            for s, f in late:
                t += 0.001
                rows.append((t, s, 40000, "10.0.0.2", 5555, f))
            late = []
    # a few frames whose capture time goes backwards (a merged capture): interleaved times
    for s, f in late:
        rows.append((t - 0.5 * rng.random(), s, 40000, "10.0.0.2", 5555, f))
    return write_pcap(path, rows)


@pytest.mark.spark
def test_local_reassembly_equals_the_shuffled_one(spark, tmp_path):
    """Every bundled capture and two generated ones, cut into 64 KiB ranges: same rows."""
    from test_streaming import _generated_capture

    from nbmq.spark.messages import build_messages
    from nbmq.spark.messages_local import build_messages_local

    _generated_capture(tmp_path / "gen.pcap", messages=400)
    _late_capture(tmp_path / "late.pcap")
    paths = [str(CAPTURES / n) for n in ("dealer.pcap", "dealer.pcapng", "radio_dish.pcap", "safe_dealer.pcap")]
    paths += [str(tmp_path / "gen.pcap"), str(tmp_path / "late.pcap")]
    frames = spark.read.format("nbmq").option("split_bytes", SPLIT).load(paths)
    assert frames.rdd.getNumPartitions() > 8
    local = _rows(build_messages_local(frames))
    assert len(local) > 1000
    assert local == _rows(build_messages(frames))
    # the parts column too, on the capture with late frames
    late = spark.read.format("nbmq").option("split_bytes", SPLIT).load(str(tmp_path / "late.pcap"))
    assert _rows(build_messages_local(late, parts=True)) == _rows(build_messages(late, parts=True))


@pytest.mark.spark
def test_local_reassembly_reads_parquet_frames_itself(spark, tmp_path):
    """The pipeline's case: frames/ as Parquet (here eight files). The local pass reads the row
    groups with pyarrow, in segments of 50 frames (keys carried across segments, and across
    files as frame records): same rows as the shuffled path."""
    from nbmq.spark.messages import build_messages
    from nbmq.spark.messages_local import _parquet_pieces, build_messages_local

    _late_capture(tmp_path / "late.pcap")
    paths = [str(CAPTURES / "safe_dealer.pcap"), str(tmp_path / "late.pcap")]
    spark.read.format("nbmq").load(paths).repartition(8).write.parquet(str(tmp_path / "frames"))
    frames = spark.read.parquet(str(tmp_path / "frames"))
    pieces = _parquet_pieces(frames)
    assert pieces is not None and len(pieces) == 8
    assert _parquet_pieces(frames.where("kind = 0")) is None  # not a bare scan: Spark reads it
    want = _rows(build_messages(frames))
    assert len(want) > 300
    assert _rows(build_messages_local(frames, segment_rows=50)) == want


def test_parquet_read_keeps_data_frames_and_the_addr_port_rule(tmp_path):
    """``_read_pieces``: only valid data frames, secure mode's left out, ``addr:port`` and
    ``[addr]:port`` for IPv6, as the Spark path's ``addr_port``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nbmq.spark.messages_local import _READ_COLS, _read_pieces

    n = 5
    cols = {c: pa.array([1] * n, pa.int64()) for c in _READ_COLS}
    cols.update(
        capture=pa.array(["c"] * n),
        src_addr=pa.array(["10.0.0.1", "::1", "fe80::2", "10.0.0.9", "10.0.0.1"]),
        dst_addr=pa.array(["::2", "10.0.0.2", "10.0.0.2", "10.0.0.2", "::2"]),
        src_port=pa.array([40000, 1, 2, 3, 40000], pa.int32()),
        dst_port=pa.array([5555] * n, pa.int32()),
        kind=pa.array([0, 0, 1, None, 0], pa.int32()),
        error=pa.array([None] * n, pa.string()),
        secure=pa.array([False, False, False, False, True]),  # a sealed chunk: ciphertext
        payload=pa.array([b"x"] * n),
        frame_number=pa.array([1, 2, 3, 4, 5], pa.int64()),
    )
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table(cols), path)
    task = pa.RecordBatch.from_pydict({"path": [str(path)], "row_group": [0]})
    got = pa.Table.from_batches(list(_read_pieces(iter([task]))))
    assert got.column("frame_number").to_pylist() == [1, 2]  # control frame, null kind, sealed left out
    assert got.column("src").to_pylist() == ["10.0.0.1:40000", "[::1]:1"]
    assert got.column("dst").to_pylist() == ["[::2]:5555", "10.0.0.2:5555"]


# The combine step's rule per key, without Spark (records as the local pass makes them).


def _records(frames, t0=1_000, kind=None):
    """Frame records of one key (``nbmq.wire`` frames), capture times t0, t0+1, ... ns."""
    from nbmq import codec

    out = []
    for i, f in enumerate(frames):
        d = codec.parse_frame(f)
        out.append(
            {
                "_kind": 1,
                "_t0": t0 + i,
                "_f0": t0 + i,
                "_t1": t0 + i,
                "_f1": t0 + i,
                "dst": "b:2",
                "f_part_count": d.part_count,
                "f_part_index": d.part_index,
                "f_message_size": d.message_size,
                "f_part_size": d.part_size,
                "f_chunk_offset": d.chunk_offset,
                "f_payload": bytes(d.chunk),
            }
        )
    return out


def _settled(recs):
    from nbmq.spark.messages_local import _Pending, _settle

    p = _Pending(("cap", 7, "a:1", 9), 123)
    p.records = recs
    return _settle(p, False, 0xFFFFFFFF)


def _frames_of(n_parts=2, size=1200):
    from nbmq import codec

    parts = [bytes([i]) * size for i in range(n_parts)]
    return [bytes(f) for f in codec.shard_message(parts, session_id=7, message_id=9).frames()]


def _as_row(recs):
    """The row record the local pass makes of ``recs`` (complete, in one partition)."""
    row = _settled(recs)
    names = [
        "capture",
        "session_id",
        "src",
        "dst",
        "message_id",
        "part_count",
        "message_size",
        "part_sizes",
        "part_sha256",
        "complete",
        "missing_bytes",
        "frames",
        "duplicates",
        "rejected",
        "first_ts",
        "last_ts",
        "parts",
    ]
    r = dict(zip(names, row))
    r.update(_kind=0, _t0=recs[0]["_t0"], _f0=recs[0]["_f0"], _t1=recs[-1]["_t1"], _f1=recs[-1]["_f1"])
    return r


def test_settle_frames_only_is_the_shuffled_rule():
    frames = _frames_of()
    recs = _records(frames[1:]) + _records(frames[:1], t0=5_000)  # first frame last: still completes
    row = _settled(sorted(recs, key=lambda r: (r["_t0"], r["_f0"])))
    assert row[9] is True and row[11] == len(frames) and row[12] == 0


def test_settle_adds_late_frames_as_duplicates():
    frames = _frames_of()
    head = _as_row(_records(frames, t0=1_000))
    late = _records(frames[:2], t0=900_000)  # another partition, after completion
    row = _settled([head] + late)
    assert row[9] is True
    assert row[11] == len(frames) + 2 and row[12] == 2  # frames, duplicates
    assert row[15] == (900_000 + 1) // 1000  # last_ts, us


def test_settle_leaves_earlier_or_interleaved_frames_to_the_redo_path():
    frames = _frames_of()
    head = _as_row(_records(frames, t0=1_000))
    assert _settled(_records(frames[:1], t0=10) + [head]) is None  # earlier frame elsewhere
    inter = _records(frames[:1], t0=1_001)
    inter[0]["_f0"] = inter[0]["_f1"] = 0  # same time as the row's frames, earlier number
    assert _settled([head] + inter) is None
