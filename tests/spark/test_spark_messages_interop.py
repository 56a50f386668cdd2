"""messages: messages of the Rust reference with empty parts (no frame for those parts) are
complete, on the column-wise path and the frame-at-a-time path, and through Spark."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from nbmq import codec
from nbmq.spark import messages
from nbmq.spark.schema import messages_schema

SRC, DST = ("10.0.0.2", 40000), ("10.0.0.1", 8000)
SHAPES = [
    [b"abc", b"", b"xyz"],  # two frames, the middle part absent
    [b"hello", b""],  # one frame of a two-part message
    [b"", b"x" * 1000],  # three frames, the first part absent
    [b"q" * 470, b"", b"", b"r"],
]


def reference_frames(parts: list[bytes], session_id: int, message_id: int) -> list[bytes]:
    """What the reference sends: our frames minus each empty part's zero-length chunk."""
    frames = codec.shard_message_bytes(parts, session_id, message_id)
    return [f for f in frames if codec.parse_frame(f).part_size != 0]


def messages_sent(n: int = 40) -> list[tuple[int, list[bytes], list[bytes]]]:
    """(message id, parts, frames) for n messages of session 7 (the shapes in turn)."""
    out = []
    for mid in range(1, n + 1):
        parts = [p.replace(b"x", bytes([mid])) for p in SHAPES[mid % len(SHAPES)]]
        out.append((mid, parts, reference_frames(parts, 7, mid)))
    return out


def frames_table(sent) -> pa.Table:
    cols: dict[str, list] = {
        k: []
        for k in (
            "capture",
            "session_id",
            "src",
            "message_id",
            "dst",
            "part_count",
            "part_index",
            "message_size",
            "part_size",
            "chunk_offset",
            "payload",
            "ts_ns",
            "frame_number",
        )
    }
    n = 0
    for mid, _, frames in sent:
        for raw in frames:
            f = codec.parse_frame(raw)
            n += 1
            for k, v in (
                ("capture", "ref.pcap"),
                ("session_id", 7),
                ("src", "10.0.0.2:40000"),
                ("message_id", mid),
                ("dst", "10.0.0.1:8000"),
                ("part_count", f.part_count),
                ("part_index", f.part_index),
                ("message_size", f.message_size),
                ("part_size", f.part_size),
                ("chunk_offset", f.chunk_offset),
                ("payload", bytes(f.chunk)),
                ("ts_ns", n * 1000),
                ("frame_number", n),
            ):
                cols[k].append(v)
    return pa.table(
        {
            **cols,
            "session_id": pa.array([Decimal(x) for x in cols["session_id"]], pa.decimal128(20, 0)),
            "message_id": pa.array([Decimal(x) for x in cols["message_id"]], pa.decimal128(20, 0)),
        }
    )


def run(table: pa.Table) -> list[dict]:
    schema = to_arrow_schema(messages_schema(True), timezone="UTC")
    out = messages.reassemble_batches(iter(table.to_batches(max_chunksize=64)), schema, parts=True)
    return sorted(pa.Table.from_batches(list(out), schema=schema).to_pylist(), key=lambda r: r["message_id"])


def expected_rows(sent) -> list[tuple]:
    return [
        (mid, True, [len(p) for p in parts], [hashlib.sha256(p).hexdigest() for p in parts], parts)
        for mid, parts, _ in sent
    ]


def got_rows(rows) -> list[tuple]:
    return [(int(r["message_id"]), r["complete"], r["part_sizes"], r["part_sha256"], r["parts"]) for r in rows]


def test_both_paths_complete_reference_messages(monkeypatch):
    sent = messages_sent()
    table = frames_table(sent)
    fast = run(table)
    assert got_rows(fast) == expected_rows(sent)
    assert all(r["missing_bytes"] == 0 and r["rejected"] == 0 for r in fast)
    monkeypatch.setattr(messages, "_KERNEL", messages._reassemble_groups_py)  # the reference
    assert got_rows(run(table)) == expected_rows(sent)


@pytest.mark.spark
def test_pipeline_completes_reference_messages(spark, tmp_path):
    from nbmq.capture.datagrams.write import write_pcap
    from nbmq.spark.messages import build_messages

    sent = messages_sent(12)
    rows = []
    t = 1_700_000_000.0
    for _, _, frames in sent:
        for raw in frames:
            t += 0.001
            rows.append((t, SRC[0], SRC[1], DST[0], DST[1], raw))
    path = tmp_path / "reference_empty_parts.pcap"
    write_pcap(path, rows)
    frames = spark.read.format("nbmq").load(str(path))
    got = sorted(build_messages(frames, parts=True).collect(), key=lambda r: int(r["message_id"]))
    assert [
        (int(r["message_id"]), r["complete"], list(r["part_sizes"]), [bytes(p) for p in r["parts"]]) for r in got
    ] == [(mid, True, [len(p) for p in parts], parts) for mid, parts, _ in sent]
