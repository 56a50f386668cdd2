"""The report's time axis from the frames table's Parquet footers, or None so that a
Spark job computes it: no Spark here, pyarrow writes the tables."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _write(path, captures, ts, row_group_size=None):
    table = pa.table({"capture": pa.array(captures, pa.string()), "ts_ns": pa.array(ts, pa.int64())})
    pq.write_table(table, path, row_group_size=row_group_size)


def test_one_capture_per_row_group(tmp_path):
    from nbmq.spark.report.passes import footer_spans

    _write(tmp_path / "part-0.parquet", ["a.pcap"] * 3, [5, 2, 9])
    _write(tmp_path / "part-1.parquet", ["a.pcap", "a.pcap", "b.pcap", "b.pcap"], [1, 3, None, 7], row_group_size=2)
    _write(tmp_path / "part-2.parquet", ["c.pcap"], [None])  # no timestamp at all: no axis
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "_ignored.parquet").write_bytes(b"not parquet")  # Spark skips _ and . names; so do we
    assert footer_spans(str(tmp_path)) == {"a.pcap": (1, 9), "b.pcap": (7, 7), "c.pcap": (None, None)}
    assert footer_spans("file://" + str(tmp_path)) == footer_spans(str(tmp_path))


def test_mixed_row_group_or_foreign_path_is_left_to_spark(tmp_path):
    from nbmq.spark.report.passes import footer_spans

    _write(tmp_path / "part-0.parquet", ["a.pcap", "b.pcap"], [1, 2])  # two captures in one row group
    assert footer_spans(str(tmp_path)) is None
    assert footer_spans("hdfs://host/out/frames") is None
    assert footer_spans(str(tmp_path / "missing")) is None
    (tmp_path / "part-0.parquet").write_bytes(b"PAR1 broken")
    assert footer_spans(str(tmp_path)) is None
