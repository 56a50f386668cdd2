"""The pipeline builds sessions/ and the summary from the report's aggregates (one pass
per table): both must equal what the Spark-side definitions give on the same frames and messages."""

from __future__ import annotations

import shutil

import pytest

from nbmq.examples import CAPTURE_DIR

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]  # one pipeline run in the fixture


@pytest.fixture(scope="module")
def hostile_run(spark, tmp_path_factory):
    """The pipeline (no report) on the bundled captures, a hostile capture, its truncated copy,
    a non-capture and the health capture (orphan Connect, late session, gaps, malformed rows)."""
    import random

    from test_report_spans import _health  # tests/spark is on sys.path (pytest's rootdir-less prepend mode)
    from test_spark_corrupt import _traffic

    from nbmq.capture import write_pcap
    from nbmq.spark.pipeline import run

    d = tmp_path_factory.mktemp("passes")
    for name in ("dealer.pcap", "radio_dish.pcap", "safe_dealer.pcap"):
        shutil.copy(CAPTURE_DIR / name, d / name)
    write_pcap(d / "hostile.pcap", _traffic()[0])
    data = (d / "hostile.pcap").read_bytes()
    (d / "cut.pcap").write_bytes(data[: len(data) - 20])  # the last record loses its tail
    (d / "noise.pcap").write_bytes(random.Random(1).randbytes(3000))
    write_pcap(d / "health.pcap", _health())
    summary = run([str(d)], d / "out", spark=spark, report=False, progress=False, print_summary=False)
    return summary


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def test_sessions_equal_build_sessions(spark, hostile_run):
    from nbmq.spark.sessions_table import build_sessions

    tables = hostile_run["tables"]
    frames, messages = spark.read.parquet(tables["frames"]), spark.read.parquet(tables["messages"])
    written = spark.read.parquet(tables["sessions"])
    expected = build_sessions(frames, messages)
    assert written.schema == expected.schema
    got, want = _rows(written), _rows(expected)
    assert len(got) >= 10 and any(r[1] == 0 for r in got)  # an orphan Connect row is among them
    assert got == want


def test_summary_equals_spark_counts(spark, hostile_run):
    from pyspark.sql import functions as F

    tables = hostile_run["tables"]
    frames, messages = spark.read.parquet(tables["frames"]), spark.read.parquet(tables["messages"])
    sessions = spark.read.parquet(tables["sessions"])
    f = {
        r["capture"]: r.asDict()
        for r in frames.groupBy("capture")
        .agg(
            F.count("frame_number").alias("datagrams"),
            F.count(F.when(F.col("error").isNotNull() & F.col("frame_number").isNotNull(), 1)).alias("error_rows"),
            F.count(F.when(F.col("frame_number").isNull(), 1)).alias("capture_errors"),
            F.count(F.when(F.col("error").isNull() & (F.col("kind") == 0), 1)).alias("data_frames"),
            F.count(F.when(F.col("error").isNull() & (F.col("kind") > 0), 1)).alias("control_frames"),
        )
        .collect()
    }
    m = {
        r["capture"]: r.asDict()
        for r in messages.groupBy("capture")
        .agg(
            F.count(F.when(F.col("complete"), 1)).alias("messages_complete"),
            F.count(F.when(~F.col("complete"), 1)).alias("messages_incomplete"),
            F.coalesce(F.sum("duplicates"), F.lit(0)).alias("duplicates"),
            F.coalesce(F.sum("rejected"), F.lit(0)).alias("rejected"),
        )
        .collect()
    }
    s = {r["capture"]: r["count"] for r in sessions.groupBy("capture").count().collect()}
    rows = {r["capture"]: r for r in hostile_run["captures"]}
    assert rows["noise.pcap"]["datagrams"] == 0  # a file without a record still has its row
    assert rows["cut.pcap"]["capture_errors"] == 1 and rows["hostile.pcap"]["error_rows"] > 0
    for capture, counts in f.items():
        want = {
            **counts,
            **{k: v for k, v in m.get(capture, {}).items() if k != "capture"},
            "sessions": s.get(capture, 0),
        }
        want.setdefault("messages_complete", 0)
        assert {k: rows[capture][k] for k in want} == want, capture


def test_executor_passes_equal_driver_passes(spark, hostile_run):
    """A remote table's passes run in Spark's executors (mapInArrow, per partition); a local
    one's on the driver (pyarrow, per file): the same groups, sessions, control frames and
    heartbeats, and the same SafeDealer matching."""
    from nbmq.spark.report.passes import Passes

    tables = hostile_run["tables"]
    here, there = Passes(spark, tables, on_driver=True), Passes(spark, tables, on_driver=False)

    def same(a, b):
        key = list(a.columns)
        a = a.astype(object).where(a.notna(), None).sort_values(key, key=lambda c: c.astype(str))
        b = b.astype(object).where(b.notna(), None).sort_values(key, key=lambda c: c.astype(str))
        return a.reset_index(drop=True).equals(b.reset_index(drop=True))

    assert len(here.frame_groups()) > 20 and same(here.frame_groups(), there.frame_groups())
    assert same(here.message_groups(), there.message_groups())
    assert same(here.sessions(), there.sessions())
    assert len(here.control()) and same(here.control(), there.control())
    (pairs, gaps), (pairs2, gaps2) = here.heartbeats(), there.heartbeats()
    assert len(pairs) and same(pairs, pairs2) and same(gaps, gaps2)
    assert len(gaps) and list(here.busy(gaps)) == list(there.busy(gaps))
    acked = [int(s) for s in here.sessions()["session_id"]]
    (trips, resends), (trips2, resends2) = here.acks(acked, True), there.acks(acked, True)
    assert len(trips) and same(trips, trips2) and same(resends, resends2)


def test_ack_matching_is_the_same_in_any_number_of_buckets(hostile_run, monkeypatch):
    """A large frames table's ack matching spills its rows into hash buckets beside the table and
    reduces them one by one: the same round trips and resends as one bucket in memory, and
    nothing left behind."""
    from pathlib import Path

    from nbmq.spark import scan
    from nbmq.spark.report.passes import Passes

    tables = hostile_run["tables"]
    passes = Passes(None, tables, on_driver=True)
    acked = [int(s) for s in passes.sessions()["session_id"]]
    trips, resends = passes.acks(acked, True)
    monkeypatch.setattr(scan, "ROWS_PER_BUCKET", 7)  # hundreds of buckets
    trips2, resends2 = passes.acks(acked, True)
    key = ["capture", "session_id", "direction", "fine"]
    assert len(trips) and trips.sort_values(key).reset_index(drop=True).equals(
        trips2.sort_values(key).reset_index(drop=True)
    )
    assert resends.equals(resends2)
    out = Path(tables["frames"]).parent
    assert not [p.name for p in out.iterdir() if p.name.startswith("nbmq-buckets-")]
