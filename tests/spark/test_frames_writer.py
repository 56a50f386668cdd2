"""frames_writer="arrow" (pyarrow in the tasks) writes the same frames table as Spark (issue 14)."""

from __future__ import annotations

import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("payload", [True, False])
def test_arrow_writer_gives_spark_writers_table(spark, tmp_path, payload):
    from nbmq.spark.frames_writer import write_frames_arrow

    paths = ",".join(str(CAPTURES / n) for n in ("dealer.pcap", "safe_dealer.pcap", "dealer.pcapng"))
    options = {"paths": paths, "split_bytes": str(1 << 20)}  # dealer.pcap in 3 ranges
    source = spark.read.format("nbmq").options(**options).load()
    (source if payload else source.drop("payload")).write.mode("overwrite").parquet(str(tmp_path / "spark"))
    rows = write_frames_arrow(spark, options, payload, tmp_path / "arrow")
    ours = spark.read.parquet(str(tmp_path / "arrow"))
    theirs = spark.read.parquet(str(tmp_path / "spark"))
    assert ours.schema == theirs.schema
    assert rows == theirs.count() > 0
    assert ours.exceptAll(theirs).count() == 0 and theirs.exceptAll(ours).count() == 0
    assert ours.orderBy("capture", "frame_number").collect() == theirs.orderBy("capture", "frame_number").collect()


def test_arrow_writer_refuses_remote_paths(spark):
    from nbmq.spark.frames_writer import write_frames_arrow

    with pytest.raises(ValueError, match="local paths only"):
        write_frames_arrow(spark, {"paths": str(CAPTURES / "dealer.pcap")}, True, "hdfs://x/frames")


def test_pipeline_tables_same_with_arrow_writer(spark, bundled_run, tmp_path):
    from nbmq.spark.pipeline import run

    code, out, _ = bundled_run
    assert code == 0
    summary = run(None, tmp_path / "out", spark=spark, frames_writer="arrow", report=False, progress=False,
                  print_summary=False)
    before = __import__("json").loads((out / "summary.json").read_text())
    assert summary["totals"] == before["totals"]
    for table in ("frames", "messages", "sessions"):
        ours = spark.read.parquet(str(tmp_path / "out" / table))
        theirs = spark.read.parquet(str(out / table))
        assert ours.schema == theirs.schema, table
        assert ours.exceptAll(theirs).count() == 0 and theirs.exceptAll(ours).count() == 0, table
