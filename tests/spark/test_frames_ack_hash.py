"""The frames table's ack_hash column: last in the schema, the same with and without
payload, and what the report matches SafeDealer acks on (``--no-payload`` keeps the figures)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType

from nbmq import _codec_py as py
from nbmq.examples import CAPTURE_DIR
from nbmq.spark.datasource import CapturePartition, read_partition
from nbmq.spark.schema import FRAMES_SCHEMA, frames_schema

SAFE = CAPTURE_DIR / "safe_dealer.pcap"


def test_ack_hash_and_secure_are_the_last_frames_columns():
    """Appended: every column before them keeps its position (readers by position, old tables)."""
    for schema in (FRAMES_SCHEMA, frames_schema(payload=False)):
        assert schema.fieldNames()[-3:] == ["error", "ack_hash", "secure"]
        assert schema["ack_hash"].dataType == LongType() and schema["ack_hash"].nullable
    names = FRAMES_SCHEMA.fieldNames()
    assert names[:-2] == [f for f in names if f not in ("ack_hash", "secure")]


def _table(path, payload: bool) -> pa.Table:
    return pa.Table.from_batches(list(read_partition(CapturePartition(str(path)), frames_schema(payload=payload))))


@pytest.mark.parametrize("name", ["safe_dealer.pcap", "dealer.pcapng"])
def test_ack_hash_column_with_and_without_payload(name):
    with_payload, without = _table(CAPTURE_DIR / name, True), _table(CAPTURE_DIR / name, False)
    assert "payload" not in without.column_names
    assert with_payload["ack_hash"].equals(without["ack_hash"])
    d = with_payload.to_pydict()
    for kind, error, payload, h in zip(d["kind"], d["error"], d["payload"], d["ack_hash"]):
        if error is None and kind == 0:  # the datagram is the 34-byte header and the chunk
            assert h is not None and h % 2**64 != 0
        elif error is None and kind == 5 and len(payload) == 8:
            assert h % 2**64 == int.from_bytes(payload, "big")
        else:
            assert h is None
    if name == "safe_dealer.pcap":  # each Ack names one data frame of the capture
        data = {h for k, e, h in zip(d["kind"], d["error"], d["ack_hash"]) if k == 0 and e is None}
        acks = [h for k, e, h in zip(d["kind"], d["error"], d["ack_hash"]) if k == 5 and e is None]
        assert len(acks) > 1000 and set(acks) <= data


def test_data_frame_hash_is_the_codecs():
    from nbmq.capture import read_datagrams

    b = read_datagrams(SAFE)
    d = _table(SAFE, False).to_pydict()
    for i in range(len(b)):
        if d["kind"][i] == 0 and d["error"][i] is None:
            assert d["ack_hash"][i] % 2**64 == py.ack_hash(b.payload_at(i))


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_report_acks_without_payload_match_the_payload_hash(spark, tmp_path):
    """``--no-payload``: the report's SafeDealer ack figures come from ``ack_hash`` and equal those
    of a frames table without the column (hashed from ``payload``, as older tables need)."""
    from nbmq.spark.pipeline import run
    from nbmq.spark.report import collect

    out = tmp_path / "out"
    summary = run([str(SAFE)], out, spark=spark, payload=False, progress=False, print_summary=False)
    tables = summary["tables"]
    assert "payload" not in spark.read.parquet(tables["frames"]).columns
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "SafeDealer ack (data frame -&gt; its Ack)</td><td class=l>safe_dealer.pcap</td>" in page

    old = str(tmp_path / "frames_old")  # payload, no ack_hash: a table written before the column
    spark.read.format("nbmq").load(str(SAFE)).drop("ack_hash").write.parquet(old)
    new, before = collect(spark, tables), collect(spark, {**tables, "frames": old})
    safe = next(r for r in summary["captures"] if r["capture"] == "safe_dealer.pcap")
    acks = new.latency[new.latency["metric"] == "SafeDealer ack (data frame -> its Ack)"]
    assert list(acks["n"]) == [safe["data_frames"]]  # every data frame acked once, all matched
    for name in ("latency", "histograms", "resends"):
        a, b = getattr(new, name), getattr(before, name)
        assert (
            a.sort_values(list(a.columns))
            .reset_index(drop=True)
            .equals(b.sort_values(list(b.columns)).reset_index(drop=True))
        ), name
    assert not [n for n in new.notes if "ack" in n]
