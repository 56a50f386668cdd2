"""Multi-process Spark: executors in their own JVMs and Python workers give the same tables.

``local-cluster[2,1,1024]`` (two executor JVMs, one core each) runs in a subprocess, since a
process holds one SparkContext; it reads the bundled captures split into byte ranges, so the
planning (driver side) and every read (executor side) happen in different processes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def test_local_cluster_gives_the_same_tables(spark, bundled_run, tmp_path):
    _, local_out, _ = bundled_run
    out = tmp_path / "cluster"
    env = dict(os.environ, NBMQ_NO_EXTENSIONS=os.environ.get("NBMQ_NO_EXTENSIONS", ""))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbmq.cli.pipeline",
            "--master",
            "local-cluster[2,1,1024]",
            "--out",
            str(out),
            "--quiet",
            "--split-mb",
            "0.5",
            "--no-report",
            "--conf",
            "spark.sql.shuffle.partitions=4",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    if proc.returncode != 0 and "local-cluster" in proc.stderr and "Exception" in proc.stderr:
        pytest.skip(f"local-cluster mode unavailable: {proc.stderr[-500:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for table in ("frames", "messages", "sessions"):
        a = spark.read.parquet(str(local_out / table))
        b = spark.read.parquet(str(out / table))
        assert a.count() == b.count() > 0, table
        assert a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0, table
