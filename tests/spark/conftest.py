"""One SparkSession (local[2]) for every Spark test, and the bundled captures' pipeline run."""

from __future__ import annotations

import pytest

BUNDLED = ["dealer.pcap", "radio_dish.pcap", "safe_dealer.pcap"]


@pytest.fixture(scope="session")
def spark():
    """A quiet local[2] session with the ``nbmq`` data source registered (stopped at the end)."""
    pytest.importorskip("pyspark")
    from nbmq.spark.spark_session import build_session

    session = build_session("local[2]", app_name="nbmq-tests", conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def bundled_run(spark, tmp_path_factory):
    """``nbmq pipeline --out DIR`` on the bundled captures, in this process (shared session).

    Returns (exit code, out dir, captured stdout text).
    """
    import contextlib
    import io

    from nbmq.cli.pipeline import main

    out = tmp_path_factory.mktemp("bundled") / "out"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["--out", str(out), "--quiet"])
    return code, out, buf.getvalue()
