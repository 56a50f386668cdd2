"""The capture pipeline: captures -> frames/, messages/, sessions/ (Parquet) + report.html.

::

    from nbmq.spark.pipeline import run
    summary = run(["dealer.pcap"], "out/")            # local[*]
    summary = run(None, "hdfs://nn/out", master="spark://host:7077")   # the bundled captures

One plan, chosen from where the output lives; users choose nothing internal. With a local
output directory one Spark job decodes each capture partition once, writes its frames and the
messages complete inside it, and a small combine finishes the keys seen in several partitions
(:mod:`nbmq.spark.onepass`). With a Hadoop-compatible output (``hdfs://``, ``s3a://``, ...,
where executors share no local file system) Spark writes ``frames/`` from the ``nbmq`` source
and :func:`nbmq.spark.messages_local.build_messages_local` reassembles it with the same local
pass and combine. The sessions are summarised from both tables; small aggregates feed the
summary and the report. Malformed datagrams and unreadable capture records are rows and
counts, never a failure.

The input's size decides the rest: local captures within one split and
:data:`DRIVER_INPUT_BYTES` (the bundled ones, everyday captures) are decoded by the one-pass
tasks in the driver's threads, and the stream tables' jobs run with :data:`SMALL_INPUT_CONF`.
The sessions table, the summary and the report's aggregates never start a Spark job for a local
output (:mod:`nbmq.spark.report.passes`: pyarrow on the driver over the files just written), so
Spark's fixed cost is paid once, at start-up.

Runs survive faults and never mix: local masters retry a failed task
(:func:`nbmq.spark.spark_session.with_task_retries`), the tasks write their part files under
fixed names (a retry replaces what a killed attempt left), and everything is written into a
staging directory beside ``out_dir`` that replaces it only when the run succeeded
(:mod:`nbmq.spark.output`). Every timestamp column is written as TIMESTAMP(MICROS) in UTC.

BQSP and rqueue over TCP: when a capture holds TCP segments on the configured ports
(``rqueue_ports``, default 6567; ``bqsp_ports``, none by default since BQSP names no port), the
``nbmq_bqsp`` / ``nbmq_rqueue`` sources also write ``bqsp/`` and ``rqueue/`` and the summary
gains a ``streams`` entry and a printed line each. Which files hold such traffic is decided on
the driver by :func:`nbmq.capture.tcp.segments.has_tcp_traffic` (a record walk and a vectorised header
filter, dpkt only on candidate packets), and only those files are read: captures without it cost
a few milliseconds and produce nothing new. That walk, the byte-range plan and the steps' imports
run in a thread while the Spark JVM starts (:mod:`nbmq.spark.prestart`).

The command line is :mod:`nbmq.cli.pipeline` (``nbmq pipeline``, ``python -m nbmq.cli.pipeline``);
this module never imports it (no import circle).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .prestart import Prestart

__all__ = ["run", "default_captures", "SUMMARY_COLUMNS"]

SUMMARY_COLUMNS = [
    "capture",
    "datagrams",
    "error_rows",
    "capture_errors",
    "data_frames",
    "control_frames",
    "messages_complete",
    "messages_incomplete",
    "duplicates",
    "rejected",
    "sessions",
    "secure_sessions",  # secure mode's sessions (docs/secure.md)
    "sealed_frames",  # their frames whose content is encrypted: not reassembled, not malformed
]

#: Default TCP service ports of the stream tables (BQSP names no port: decoded only when given).
DEFAULT_RQUEUE_PORTS = (6567,)


#: Inputs of at most this many bytes (and within one split) are small: decoded by the one-pass
#: tasks in the driver's threads (a Spark job's scheduling and its Python workers' start cost
#: more there), the stream tables' jobs run with :data:`SMALL_INPUT_CONF`.
DRIVER_INPUT_BYTES = 64 * 1024 * 1024
#: On a local master (``local``, ``local[N]``: Spark's tasks run in this machine's Python
#: workers anyway) local inputs of at most this many bytes are also decoded in the driver's
#: threads, a thread per byte range. The run's first Spark job pays for starting the Python
#: workers and warming the JVM: 1M heartbeat-heavy datagrams (230 MB, 2 ranges, local[2], load
#: ~3, same session) took 5.7 s as that job and 2.1 s in driver threads (warm: 2.1 and 1.1 s).
#: Larger inputs go through the Spark job, whose tasks are retried when a worker dies.
LOCAL_DRIVER_INPUT_BYTES = 1024 * 1024 * 1024
#: Spark SQL settings for the Spark jobs of such an input (the stream tables'): one shuffle partition,
#: no adaptive re-planning, expressions interpreted instead of compiled. Each new query shape
#: otherwise pays for Janino compiling its generated code, more than the work on a few
#: thousand rows (bundled captures, same session, medians of 2 at load ~9: sessions step 1.2
#: against 3.1 s, report 7.3 against 10.3 s).
SMALL_INPUT_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

#: Spark settings for the reassembly job only. Spark measures an Arrow batch's byte size after
#: every row it adds while maxBytesPerBatch is set (64 MiB by default): ~7% of that job's JVM time
#: here. Its input rows are valid data frames (chunks <= 466 bytes), so the 10,000-row cap
#: alone bounds a batch to a few MB and the byte check can be off (Int.MaxValue turns it off).
_MESSAGES_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}


#: The largest byte range one task decodes by default: a frames file holds at most one range's
#: rows, and the driver's passes read a file per thread, so their memory (and a decoding task's)
#: stays bounded whatever the capture's size.
MAX_SPLIT_BYTES = 128 * 1024 * 1024


def _split_for(files: Sequence[str], cores: int) -> int:
    """Split size giving the largest capture one byte range per core, between 64 MiB and
    :data:`MAX_SPLIT_BYTES` (more ranges than cores past ``cores * MAX_SPLIT_BYTES``).

    Each Spark task of the frames job has a fixed cost (a Python runner, its first batch
    decoded before the JVM gets rows), so on 2 cores two ranges of a 442 MB capture read in
    0.93 s where eight took 1.10 s (medians of 6, same session); more ranges than cores only
    pay off when cores are uneven or busy.
    """
    from .datasource import DEFAULT_SPLIT_BYTES
    from .inputs import file_size, splittable

    largest = max((file_size(f) for f in files if splittable(f)), default=0)
    return min(MAX_SPLIT_BYTES, max(DEFAULT_SPLIT_BYTES, -(-largest // max(1, cores))))


def _small_input(files: Sequence[str], split_bytes: int) -> bool:
    """True when the local captures together fit in one split and in :data:`DRIVER_INPUT_BYTES`:
    less than one task's share of work (a remote capture never counts as small)."""
    from .inputs import file_size, is_local

    if not all(is_local(f) for f in files):
        return False
    limit = min(split_bytes, DRIVER_INPUT_BYTES) if split_bytes > 0 else DRIVER_INPUT_BYTES  # 0: never split
    return sum(file_size(f) for f in files) <= limit


def _decode_in_driver(files: Sequence[str], split_bytes: int, master: str, cores: int) -> bool:
    """True when the one-pass tasks run in the driver's threads: a :func:`_small_input`, or on
    a local master local captures of at most :data:`LOCAL_DRIVER_INPUT_BYTES` in at most one
    byte range per core (one wave of tasks; a finer split asked for gets Spark's scheduling and
    task retries)."""
    from .inputs import file_size, is_local, splittable

    if _small_input(files, split_bytes):
        return True
    if not (master == "local" or master.startswith("local[")) or not all(is_local(f) for f in files):
        return False
    sizes = [file_size(f) for f in files]
    ranges = sum(
        max(1, -(-size // split_bytes)) if split_bytes > 0 and splittable(f) else 1 for f, size in zip(files, sizes)
    )
    return sum(sizes) <= LOCAL_DRIVER_INPUT_BYTES and ranges <= max(1, cores)


@contextmanager
def _session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Set runtime SQL settings for the duration of a ``with`` block, then restore them."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


class _Laps:
    """Wall seconds of each step, for ``summary["steps"]``: ``lap(name)`` closes the step
    running since the previous call (``"start"``: Spark start-up since ``_Laps()``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._last, 3)
        self._last = now


def default_captures(pcapng: bool = False) -> list[str]:
    """The bundled captures (classic pcap only, unless ``pcapng``: dealer.pcapng repeats dealer.pcap)."""
    from ..examples import bundled_captures

    return [str(p) for p in bundled_captures(pcapng=pcapng)]


class _Steps:
    """rich progress on stderr: one line per step, plus the running Spark stage's task count."""

    def __init__(self, spark: SparkSession | None, enabled: bool) -> None:
        self.enabled = enabled
        self.spark = spark
        self.progress: Any = None
        self.task: Any = None
        self._label = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Steps:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task("starting Spark", total=5)
        return self

    def attach(self, spark: SparkSession) -> None:
        self.spark = spark
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="nbmq-progress", daemon=True)
            self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            try:
                tracker = self.spark.sparkContext.statusTracker()  # type: ignore[union-attr]
                done = total = 0
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
                suffix = f"  [dim](tasks {done}/{total})[/dim]" if total else ""
                self.progress.update(self.task, description=self._label + suffix)
            except Exception:  # the tracker is best effort; never break the job for it
                pass

    def step(self, label: str) -> None:
        self._label = label
        if self.enabled:
            self.progress.update(self.task, description=label)

    def advance(self) -> None:
        if self.enabled:
            self.progress.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self.enabled:
            self.progress.update(self.task, description="done" if exc[0] is None else "failed")
            self.progress.stop()


def _summary_rows(passes: Any, names: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The summary's rows (:data:`SUMMARY_COLUMNS`), from the aggregates the sessions table was
    built from (:class:`nbmq.spark.report.passes.Passes`): no Spark job of their own."""
    return passes.summary_rows(list(names), SUMMARY_COLUMNS)


def run(
    captures: Sequence[str | Path] | None,
    out_dir: str | Path,
    master: str | None = None,
    *,
    spark: SparkSession | None = None,
    payload: bool = True,
    parts: bool = False,
    pcapng: bool = False,
    split_bytes: int | None = None,
    conf: dict[str, str] | None = None,
    report: bool = True,
    progress: bool = True,
    print_summary: bool = True,
    bqsp_ports: Sequence[int] | None = None,
    rqueue_ports: Sequence[int] | None = DEFAULT_RQUEUE_PORTS,
) -> dict[str, Any]:
    """Run the pipeline.

    Args:
        captures: pcap / pcapng files, directories or globs; None or empty: the bundled
            captures. The driver plans the reads, so it must see the files as well as the
            executors (same path on a shared file system).
        out_dir: output directory (a local path, or a Hadoop-compatible URI such as
            ``hdfs://``, ``s3a://``, ``file://``): ``frames/``, ``messages/``, ``sessions/``,
            ``findings/`` (Parquet; :mod:`nbmq.spark.findings`), ``report.html``,
            ``summary.json`` and ``_SUCCESS``. The run writes into
            a staging directory beside it and replaces ``out_dir`` whole only when it succeeds
            (:mod:`nbmq.spark.output`). With a cluster master it must be a path every executor
            can write; the report and summary are written by the driver.
        master: Spark master URL; None: ``spark-submit``'s, else ``local[*]`` (local masters
            get task retries, :func:`nbmq.spark.spark_session.with_task_retries`).
        spark: use this session instead of building one (``master`` and ``conf`` then ignored).
        payload: keep the ``payload`` column in ``frames/``.
        parts: add the ``parts`` column (the message bytes) to ``messages/``.
        pcapng: with no ``captures``, also read the bundled ``dealer.pcapng`` (same packets as
            ``dealer.pcap``, so its messages and sessions appear twice under another name).
        split_bytes: byte-range split size for large classic pcap files (default: one range per
            core for the largest file, 64 to 128 MiB; see ``_split_for``).
        conf: extra Spark configuration for a new session.
        report: write ``report.html``.
        progress: show progress on stderr (rich).
        print_summary: print the summary table on stdout (rich).
        bqsp_ports: TCP ports whose connections are decoded as BQSP into ``bqsp/`` (None or
            empty: no BQSP table).
        rqueue_ports: TCP ports decoded as rqueue into ``rqueue/`` (default 6567; None or
            empty: no rqueue table). Either table is written only when some capture holds TCP
            traffic on its ports.

    The plan follows from ``out_dir`` (module docstring): a local path gets the one decoding
    job of :mod:`nbmq.spark.onepass`; a URI gets Spark's writer for ``frames/`` and
    :func:`nbmq.spark.messages_local.build_messages_local` for ``messages/``. Same tables.

    Returns:
        ``{"out_dir", "master", "captures": [per-capture counts], "totals", "seconds",
        "plan", "steps": {step: wall seconds}, "tables": {name: final path}, "findings": {"rows",
        "severity", "kind"}}`` (steps: start, frames, messages, sessions, findings, streams,
        summary, report), plus ``"streams": {"bqsp"|"rqueue":
        {"files", "rows", "error_rows", "connections"}}`` when a stream table was written, and
        for a local ``out_dir`` ``"onepass"``: :meth:`nbmq.spark.onepass.OnePass.counts`; with
        the report, ``"round_trips"``: SafeDealer round trips per peer
        (:func:`nbmq.spark.report.aggregate.round_trip_rows`); also written to ``summary.json``.

    Raises:
        FileNotFoundError: a capture path matches nothing (checked before Spark starts).
        nbmq.spark.output.OutputError: ``out_dir`` is a file, a non-empty directory that is no
            pipeline output, or cannot be written (local paths: before Spark starts).
    """
    started = time.perf_counter()
    lap = _Laps()
    from .inputs import expand_paths
    from .output import Output
    from .spark_session import PARQUET_TIMESTAMPS

    paths = [str(p) for p in captures] if captures else default_captures(pcapng)
    files = expand_paths(paths)  # the driver plans the reads, so it must see the files too
    output = Output(out_dir)
    output.prepare()
    try:
        with (
            _Steps(spark, progress) as steps,
            _prestart(
                files, spark, master, conf, split_bytes, report, {"bqsp": bqsp_ports, "rqueue": rqueue_ports}
            ) as prep,
        ):
            spark = _session(spark, master, conf)
            output.prepare_remote(spark)
            steps.attach(spark)
            steps.advance()
            lap("start")
            if split_bytes is None:
                split_bytes = _split_for(files, spark.sparkContext.defaultParallelism)
            small = _small_input(files, split_bytes)
            with _session_conf(spark, {**PARQUET_TIMESTAMPS, **(SMALL_INPUT_CONF if small else {})}):
                summary = _steps(
                    spark,
                    files,
                    output,
                    steps,
                    lap,
                    started,
                    payload=payload,
                    parts=parts,
                    split_bytes=split_bytes,
                    small=small,
                    in_driver=_decode_in_driver(
                        files, split_bytes, spark.sparkContext.master, spark.sparkContext.defaultParallelism
                    ),
                    report=report,
                    bqsp_ports=bqsp_ports,
                    rqueue_ports=rqueue_ports,
                    prep=prep,
                )
            summary["steps"] = lap.seconds
            summary["seconds"] = time.perf_counter() - started
            output.write_bytes(spark, "summary.json", json.dumps(summary, indent=1, default=str).encode())
            output.commit(spark)
    except BaseException:
        output.abandon(spark)
        raise
    if print_summary:
        print_table(summary)
    return summary


def _session(spark: SparkSession | None, master: str | None, conf: dict[str, str] | None) -> SparkSession:
    """``spark`` with the ``nbmq`` sources registered, or a new session (the JVM launches while
    the prestart thread imports, plans and walks)."""
    if spark is None:
        from .spark_session import build_session

        return build_session(master, conf=conf)
    from . import register

    register(spark)
    return spark


def _steps(
    spark: SparkSession,
    files: list[str],
    output: Any,
    steps: _Steps,
    lap: _Laps,
    started: float,
    *,
    payload: bool,
    parts: bool,
    split_bytes: int,
    small: bool,
    in_driver: bool,
    report: bool,
    bqsp_ports: Sequence[int] | None,
    rqueue_ports: Sequence[int] | None,
    prep: Prestart,
) -> dict[str, Any]:
    """The pipeline's steps, each writing into ``output``'s staging directory; returns the summary.
    ``small``: :func:`_small_input` (Spark SQL tuned for few rows); ``in_driver``:
    :func:`_decode_in_driver`."""
    tables = {name: output.path(name) for name in ("frames", "messages", "sessions")}
    options = {"paths": ",".join(files), "split_bytes": str(int(split_bytes))}

    steps.step(f"decoding {len(files)} capture(s) -> frames/, messages/")
    plan_counts = _frames_and_messages(
        spark, options, tables, output.local, steps, lap, payload=payload, parts=parts, in_driver=in_driver
    )

    steps.step("summarising -> sessions/")
    # One aggregation per table feeds the sessions table, the findings, the summary and the report.
    from .report.passes import Passes
    from .sessions_table import write_sessions

    passes = Passes(spark, tables)
    write_sessions(spark, passes.sessions(), tables["sessions"])
    steps.advance()
    lap("sessions")

    steps.step("diagnosing -> findings/")
    from .findings import write_findings

    findings = write_findings(spark, tables, files, passes=passes)  # adds messages.suspect
    lap("findings")

    streams = _stream_tables(spark, files, output, tables, steps, payload, bqsp_ports, rqueue_ports, prep)
    lap("streams")

    steps.step("summary and report")
    rows = _summary_rows(passes, [Path(p).name for p in files])
    lap("summary")
    totals = {c: sum(r[c] for r in rows) for c in SUMMARY_COLUMNS if c != "capture"}
    summary: dict[str, Any] = {
        "out_dir": output.final,
        "master": spark.sparkContext.master,
        "captures": rows,
        "totals": totals,
        "tables": {name: output.final_path(name) for name in tables},
        "plan": "onepass" if output.local else "steps",
        "small_input": small,
        "findings": findings,
        **plan_counts,
    }
    if streams:
        summary["streams"] = streams
    if report:
        summary["steps"] = dict(lap.seconds)  # the page counts these and its own step
        _write_report(spark, output, summary, tables, passes)
        lap("report")
    steps.advance()
    return summary


def _frames_and_messages(
    spark: SparkSession,
    options: dict[str, str],
    tables: dict[str, str],
    local: bool,
    steps: _Steps,
    lap: _Laps,
    *,
    payload: bool,
    parts: bool,
    in_driver: bool = False,
) -> dict[str, Any]:
    """Write ``frames/`` and ``messages/``; return the plan's counts.

    A local output: one job decodes each partition once and writes its frames and the messages
    complete in it, a combine finishes the keys seen in several (:mod:`nbmq.spark.onepass`);
    no Spark DataFrame of either table is built unless the combine needs Spark (building one
    costs a cold session seconds). A Hadoop-compatible output (executors may not share a local
    file system): Spark writes the frames table from the ``nbmq`` source and
    :func:`~nbmq.spark.messages_local.build_messages_local` reassembles it with the same local
    pass and combine. With ``in_driver`` (:func:`_decode_in_driver`) a local output's tasks run
    in the driver's threads, without a Spark job.
    """

    def source() -> Any:
        return spark.read.format("nbmq").options(**options).load()

    if local:
        from .onepass import finish_messages, write_parts

        one = write_parts(
            spark, options, tables["frames"], tables["messages"], payload=payload, parts=parts, in_driver=in_driver
        )
        steps.advance()
        lap("frames")
        steps.step("combining keys across partitions -> messages/")
        with _session_conf(spark, _MESSAGES_CONF):
            finish_messages(
                spark, one, (lambda: spark.read.parquet(tables["frames"])) if payload else source, parts=parts
            )
        counts = {"onepass": one.counts()}
    else:
        from .messages_local import build_messages_local

        read = source()
        (read if payload else read.drop("payload")).write.mode("overwrite").parquet(tables["frames"])
        frames = spark.read.parquet(tables["frames"])
        steps.advance()
        lap("frames")
        steps.step("reassembling -> messages/")
        with _session_conf(spark, _MESSAGES_CONF):
            build_messages_local(frames if payload else read, parts=parts).write.mode("overwrite").parquet(
                tables["messages"]
            )
        counts = {}
    steps.advance()
    lap("messages")
    return counts


def _write_report(
    spark: SparkSession, output: Any, summary: dict[str, Any], tables: dict[str, str], passes: Any
) -> None:
    """Write ``report.html``; a report bug costs the report only, never the tables and
    ``summary.json`` (its reason goes to ``summary["report_error"]`` and stderr)."""
    from .report import collect, write_report
    from .report.aggregate import round_trip_rows

    started = time.perf_counter()
    try:
        data = collect(spark, tables, passes=passes)
        summary["round_trips"] = round_trip_rows(data.round_trips)
        if output.local:
            write_report(output.path("report.html"), summary, data, started=started, findings=tables.get("findings"))
        else:  # rendered locally, then copied to the store
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                page = write_report(
                    Path(tmp) / "report.html", summary, data, started=started, findings=tables.get("findings")
                )
                output.write_bytes(spark, "report.html", page.read_bytes())
        summary["report"] = output.final_path("report.html")
    except Exception as exc:  # noqa: BLE001 -- reported in the summary and on stderr
        summary["report_error"] = f"{type(exc).__name__}: {exc}"
        print(f"nbmq pipeline: the report failed: {summary['report_error']}", file=sys.stderr)


def _prestart(
    files: Sequence[str],
    spark: SparkSession | None,
    master: str | None,
    conf: dict[str, str] | None,
    split_bytes: int | None,
    report: bool,
    tcp_ports: dict[str, Sequence[int] | None],
) -> Prestart:
    """Start the driver's own work (:class:`~nbmq.spark.prestart.Prestart`) before the session.

    The frames step's split size is predicted as it will be computed: ``split_bytes`` if given,
    else ``_split_for`` with the cores of ``spark`` or of a local ``master`` (a cluster's are
    known only once the session is up: no planning then).
    """
    from .prestart import Prestart
    from .spark_session import cores_of_master

    if split_bytes is not None:
        cores: int | None = None
    elif spark is not None:
        cores = spark.sparkContext.defaultParallelism
    elif master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        from .spark_session import DEFAULT_MASTER

        cores = cores_of_master(DEFAULT_MASTER, conf)
    else:
        cores = cores_of_master(master, conf)
    split = (lambda: split_bytes) if split_bytes is not None else (lambda: _split_for(files, cores) if cores else None)
    return Prestart(files, split=split, tcp_ports=tcp_ports, report=report)


def _stream_tables(
    spark: SparkSession,
    files: Sequence[str],
    output: Any,
    tables: dict[str, str],
    steps: _Steps,
    payload: bool,
    bqsp_ports: Sequence[int] | None,
    rqueue_ports: Sequence[int] | None,
    prep: Prestart | None = None,
) -> dict[str, dict[str, int]]:
    """Write ``bqsp/`` / ``rqueue/`` for the files holding TCP traffic on their ports; return counts.

    Which files hold such traffic comes from ``prep`` (walked while Spark started) when given,
    else from :func:`~nbmq.capture.tcp.segments.has_tcp_traffic` here.
    """
    from ..capture.tcp.segments import has_tcp_traffic
    from .inputs import capture_names, capture_source

    counts: dict[str, dict[str, int]] = {}
    for protocol, ports in (("bqsp", bqsp_ports), ("rqueue", rqueue_ports)):
        if not ports:
            continue
        if prep is not None:
            with_traffic = prep.with_traffic(protocol)
        else:
            with_traffic = [f for f in files if has_tcp_traffic(capture_source(f), ports)]  # driver-side
        if not with_traffic:
            continue
        steps.step(f"decoding {protocol} over TCP -> {protocol}/")
        tables[protocol] = output.path(protocol)
        (
            spark.read.format(f"nbmq_{protocol}")
            .option("paths", ",".join(with_traffic))
            .option("ports", ",".join(str(int(p)) for p in ports))
            .option("payload", "true" if payload else "false")
            .option("capture_names", json.dumps(capture_names(files)))
            .load()
            .write.mode("overwrite")
            .parquet(tables[protocol])
        )
        from pyspark.sql import functions as F

        r = (
            spark.read.parquet(tables[protocol])
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.count("error").alias("error_rows"),
                F.countDistinct("capture", "client", "server").alias("connections"),
            )
            .collect()[0]
        )
        counts[protocol] = {
            "files": len(with_traffic),
            "rows": int(r["rows"]),
            "error_rows": int(r["error_rows"]),
            "connections": int(r["connections"]),
        }
    return counts


def print_table(summary: dict[str, Any], file: Any = None) -> None:
    """Print the per-capture summary as a rich table (stdout by default)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"nbmq pipeline: {summary['out_dir']}  ({summary['seconds']:.1f} s, {summary['master']})")
    for col in SUMMARY_COLUMNS:
        table.add_column(col.replace("_", " "), justify="left" if col == "capture" else "right")
    for r in summary["captures"]:
        table.add_row(*[r[c] if c == "capture" else f"{r[c]:,}" for c in SUMMARY_COLUMNS])
    t = summary["totals"]
    table.add_row("total", *[f"{t[c]:,}" for c in SUMMARY_COLUMNS[1:]], style="bold")
    console = Console(file=file or sys.stdout)
    if not console.is_terminal:  # a pipe or a log: no terminal width to fit, keep columns whole
        console = Console(file=file or sys.stdout, width=200)
    console.print(table)
    for protocol, c in summary.get("streams", {}).items():  # only when a stream table was written
        what = "packets" if protocol == "bqsp" else "messages"
        console.print(
            f"{protocol}: {c['rows'] - c['error_rows']:,} {what}, {c['error_rows']:,} error rows, "
            f"{c['connections']:,} connections in {c['files']} capture(s) -> {summary['tables'][protocol]}"
        )
