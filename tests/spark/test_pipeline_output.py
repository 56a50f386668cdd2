"""The pipeline's output survives faults and never mixes runs: a staging directory swapped into
``--out`` on success, ``_SUCCESS`` on a finished output, task retries on local masters, and one
timestamp type (TIMESTAMP(MICROS) in UTC) in every table."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

_QUIET = {"progress": False, "print_summary": False}
#: the capture the kill tests cut into byte ranges (2.7 MB in 0.25 MB ranges: 11 tasks)
_KILL_CAPTURE = CAPTURES / "dealer.pcap"
_KILL_SPLIT_MB = "0.25"
_TABLES = ("frames", "messages", "sessions", "findings")


def _listing(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _table_rows(path: Path) -> list:
    """A table's rows (pyarrow, no Spark), sorted, with the row count."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)


def _pipeline_cmd(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nbmq.cli.pipeline",
        str(_KILL_CAPTURE),
        "--out",
        str(out),
        "--quiet",
        "--no-report",
        "--master",
        "local[2]",
        "--split-mb",
        _KILL_SPLIT_MB,
        *extra,
    ]


def _stop_group(proc: subprocess.Popen) -> None:
    """End the process group this test started (the driver and its JVM)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


# -- checks before Spark starts -------------------------------------------------------------------


@pytest.mark.parametrize("case", ["file", "parent_is_a_file", "foreign_directory"])
def test_unusable_out_is_one_line_exit_2_before_spark(tmp_path, capsys, monkeypatch, case):
    """--out a file, under a file, or a directory holding other things: one line naming the
    path, exit 2, nothing created, no Spark session asked for."""
    pytest.importorskip("pyspark")
    from nbmq.cli.pipeline import main
    from nbmq.spark import spark_session

    def no_spark(*_a, **_k):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(spark_session, "build_session", no_spark)

    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    out = {"file": blocker, "parent_is_a_file": blocker / "out", "foreign_directory": tmp_path / "mine"}[case]
    if case == "foreign_directory":
        out.mkdir()
        (out / "notes.txt").write_text("keep")
    before = _listing(tmp_path)
    assert main([str(CAPTURES / "dealer.pcap"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err
    assert _listing(tmp_path) == before


def test_output_swaps_in_on_commit_and_leaves_out_on_abandon(tmp_path):
    """Output alone (no Spark): a committed run replaces --out whole and marks it; an abandoned
    one leaves --out and no staging directory; a dead run's moved-aside output comes back."""
    from nbmq.spark.output import SUCCESS, Output

    out = tmp_path / "out"
    first = Output(out)
    first.prepare()
    first.write_bytes(None, "summary.json", b"1")
    first.commit(None)
    assert sorted(p.name for p in out.iterdir()) == [SUCCESS, "summary.json"]
    second = Output(out)
    second.prepare()
    Path(second.path("stale-free")).write_text("x")
    second.abandon(None)
    assert (out / "summary.json").read_bytes() == b"1" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # a run killed between the swap's two renames: --out missing, the previous output aside
    dead = 2**22 + 1  # above the default pid_max: no such process
    out.rename(tmp_path / f".out.nbmq-{dead}-0000-previous")
    (tmp_path / f".out.nbmq-{dead}-1111").mkdir()
    Output(out).prepare()
    assert (out / "summary.json").read_bytes() == b"1"
    assert [p.name for p in tmp_path.iterdir() if p.name != "out"][0].startswith(f".out.nbmq-{os.getpid()}-")


def test_task_retries_on_local_masters():
    """Local masters get retries; explicit attempts, local clusters and clusters are left alone."""
    from nbmq.spark.spark_session import TASK_ATTEMPTS, cores_of_master, with_task_retries

    assert with_task_retries("local") == f"local[1,{TASK_ATTEMPTS}]"
    assert with_task_retries("local[2]") == f"local[2,{TASK_ATTEMPTS}]"
    assert with_task_retries("local[*]") == f"local[*,{TASK_ATTEMPTS}]"
    for kept in ("local[2,1]", "local-cluster[2,1,1024]", "spark://h:7077", "yarn"):
        assert with_task_retries(kept) == kept
    assert cores_of_master(with_task_retries("local[3]")) == 3


# -- runs in this process (the shared session) ---------------------------------------------------


@pytest.mark.spark
def test_reused_out_holds_only_this_run(spark, tmp_path):
    """An --out of an earlier run with stream tables and a report: after a run without them,
    only this run's tables, summary and ``_SUCCESS`` are there, and no staging directory."""
    from nbmq.spark.pipeline import run

    out = tmp_path / "out"
    for stale in ("rqueue", "bqsp", "frames"):
        (out / stale).mkdir(parents=True)
        (out / stale / "part-0.parquet").write_bytes(b"stale")
    (out / "report.html").write_text("stale")
    (out / "summary.json").write_text("{}")
    summary = run([CAPTURES / "safe_dealer.pcap"], out, spark=spark, report=False, **_QUIET)
    assert sorted(p.name for p in out.iterdir()) == [
        "_SUCCESS",
        "findings",
        "frames",
        "messages",
        "sessions",
        "summary.json",
    ]
    assert json.loads((out / "summary.json").read_text())["totals"] == summary["totals"]
    assert summary["tables"] == {t: str(out / t) for t in _TABLES}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.spark
def test_failed_run_leaves_the_previous_output(spark, tmp_path, monkeypatch):
    """A step that fails: the previous output is byte for byte what it was, the staging
    directory is gone, the error reaches the caller."""
    from nbmq.spark import pipeline, sessions_table

    out = tmp_path / "out"
    pipeline.run([CAPTURES / "safe_dealer.pcap"], out, spark=spark, report=False, **_QUIET)
    before = _listing(out)

    def broken(*_a, **_k):
        raise RuntimeError("sessions step broke")

    monkeypatch.setattr(sessions_table, "write_sessions", broken)
    with pytest.raises(RuntimeError, match="sessions step broke"):
        pipeline.run([CAPTURES / "dealer.pcap"], out, spark=spark, report=False, **_QUIET)
    assert _listing(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.spark
def test_every_timestamp_is_micros_utc(bundled_run):
    """Every timestamp column of every table (every part file) is timestamp[us, tz=UTC]."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    code, out, _ = bundled_run
    assert code == 0 and (out / "_SUCCESS").exists()
    seen = 0
    for table in sorted(p for p in out.iterdir() if p.is_dir()):
        for part in sorted(table.glob("*.parquet")):
            for f in pq.read_schema(part):
                if pa.types.is_timestamp(f.type):
                    assert f.type == pa.timestamp("us", tz="UTC"), (part, f)
                    seen += 1
    assert seen >= 3  # frames, messages and sessions all have some


# -- faults: a killed Python worker, a killed driver ----------------------------------------------

_KILLING_WORKER = '''
"""A PySpark worker that SIGKILLs itself in the middle of reading one capture partition: the
first worker to create the marker file dies after its first decoded batch."""
import os
import runpy
import signal

from nbmq.spark import datasource

_read = datasource.read_partition
MARKER = {marker!r}


def read_partition(*args, **kwargs):
    for i, batch in enumerate(_read(*args, **kwargs)):
        yield batch
        if i == 0:
            try:
                fd = os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)


datasource.read_partition = read_partition
runpy.run_module("pyspark.worker", run_name="__main__")
'''


@pytest.mark.spark
def test_killed_python_worker_is_retried_and_the_tables_equal_an_undisturbed_run(spark, tmp_path):
    """A Python worker SIGKILLed mid-task (one of 11 byte-range tasks): the run completes, and
    its tables equal an undisturbed run's row for row."""
    from nbmq.spark.pipeline import run

    with contextlib.redirect_stdout(io.StringIO()):
        calm = run(
            [_KILL_CAPTURE],
            tmp_path / "calm",
            spark=spark,
            report=False,
            split_bytes=int(float(_KILL_SPLIT_MB) * 1024 * 1024),
            **_QUIET,
        )
    assert calm["onepass"]["tasks"] >= 8
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    marker = tmp_path / "killed"
    (hooks / "killing_worker.py").write_text(textwrap.dedent(_KILLING_WORKER.format(marker=str(marker))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])))
    cmd = _pipeline_cmd(
        tmp_path / "out",
        "--conf",
        "spark.python.use.daemon=false",
        "--conf",
        "spark.python.worker.module=killing_worker",
    )
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=600)
    finally:
        _stop_group(proc)
    assert proc.returncode == 0, err[-3000:]
    assert marker.exists()  # a worker was killed
    for table in _TABLES:
        assert _table_rows(tmp_path / "out" / table) == _table_rows(tmp_path / "calm" / table), table


@pytest.mark.spark
def test_killed_driver_leaves_the_previous_output(spark, tmp_path):
    """The driver SIGKILLed while its tables are being written: --out is the previous run's,
    byte for byte; the next run removes the dead run's staging directory."""
    from nbmq.spark.pipeline import run

    out = tmp_path / "out"
    with contextlib.redirect_stdout(io.StringIO()):
        run([CAPTURES / "safe_dealer.pcap"], out, spark=spark, report=False, **_QUIET)
    before = _listing(out)
    proc = subprocess.Popen(
        _pipeline_cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        staged: list[Path] = []
        while time.monotonic() < deadline and proc.poll() is None:
            staged = [p for p in tmp_path.glob(".out.nbmq-*") if (p / "frames").exists()]
            if staged:
                break
            time.sleep(0.05)
        assert staged, "the run never started writing its tables"
    finally:
        _stop_group(proc)
    assert _listing(out) == before
    with contextlib.redirect_stdout(io.StringIO()):
        run([CAPTURES / "safe_dealer.pcap"], out, spark=spark, report=False, **_QUIET)
    assert not list(tmp_path.glob(".out.nbmq-*"))
