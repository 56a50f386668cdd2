"""messages: the batch reassembly path gives exactly the frame-at-a-time results (no Spark job)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from nbmq.examples import CAPTURE_DIR as CAPTURES
from nbmq.spark import messages
from nbmq.spark.datasource import CapturePartition, read_partition
from nbmq.spark.schema import frames_schema, messages_schema


def _data_frames(name: str, repeat_third: bool) -> pa.Table:
    t = pa.Table.from_batches(list(read_partition(CapturePartition(str(CAPTURES / name)), frames_schema(payload=True))))
    t = t.filter(pc.and_(pc.is_null(t["error"]), pc.equal(t["kind"], 0)))
    port = lambda c: pc.cast(t[c], pa.string())  # noqa: E731
    d = pa.table(
        {
            "capture": t["capture"],
            "session_id": t["session_id"],
            "src": pc.binary_join_element_wise(t["src_addr"], port("src_port"), ":"),
            "message_id": t["message_id"],
            "dst": pc.binary_join_element_wise(t["dst_addr"], port("dst_port"), ":"),
            "part_count": t["part_count"],
            "part_index": t["part_index"],
            "message_size": t["message_size"],
            "part_size": t["part_size"],
            "chunk_offset": t["chunk_offset"],
            "payload": t["payload"],
            "ts_ns": t["ts_ns"],
            "frame_number": t["frame_number"],
        }
    )
    if repeat_third:  # duplicates, frames after completion
        d = pa.concat_tables([d, d.slice(0, len(d) // 3)])
    return d.sort_by([(k, "ascending") for k in messages.KEY + ["ts_ns", "frame_number"]])


def _run(table: pa.Table, parts: bool, limit: int, chunk: int) -> pa.Table:
    schema = to_arrow_schema(messages_schema(parts), timezone="UTC")
    out = messages.reassemble_batches(
        iter(table.to_batches(max_chunksize=chunk)), schema, parts=parts, max_message_size=limit
    )
    # row order differs between the paths (bulk rows come out per batch); the table is a set
    return pa.Table.from_batches(list(out), schema=schema).sort_by([(k, "ascending") for k in messages.KEY])


@pytest.mark.parametrize("name", ["dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap"])
@pytest.mark.parametrize("repeat_third", [False, True])
def test_compiled_groups_equal_the_reference(monkeypatch, name, repeat_third):
    """The groups of each batch reassembled by ``_KERNEL`` (compiled when built) give the rows
    of the Python twin, which feeds every group to the codec's Reassembler frame by frame."""
    table = _data_frames(name, repeat_third)
    cases = [(True, 0xFFFFFFFF, 997), (False, 3000, 5000)]
    fast = [_run(table, *case) for case in cases]
    monkeypatch.setattr(messages, "_KERNEL", messages._reassemble_groups_py)
    for case, got in zip(cases, fast):
        assert got.equals(_run(table, *case))
    if repeat_third:  # the repeated frames are counted, not lost
        assert pc.sum(fast[0]["duplicates"]).as_py() > 0
