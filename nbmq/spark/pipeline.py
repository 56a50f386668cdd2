"""The capture pipeline: captures -> frames/, messages/, sessions/ (Parquet) + report.html.

::

    from nbmq.spark.pipeline import run
    summary = run(["dealer.pcap"], "out/")            # local[*]
    summary = run(None, "out/", master="spark://host:7077")   # the bundled captures

Steps, each a Spark job: with a local output directory (``plan="onepass"``, the default there)
one job decodes each capture partition once, writes its frames and the messages complete inside
it, and a small combine finishes the keys seen in several partitions (:mod:`nbmq.spark.onepass`);
otherwise (``plan="steps"``) the ``nbmq`` data source decodes the captures, the frames table is
written and the messages are reassembled from that Parquet copy (so the captures are decoded
once). The sessions are summarised from both tables; small aggregates feed the summary and the
report.
Malformed datagrams and unreadable capture records are rows and counts, never a failure.

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
    "capture", "datagrams", "error_rows", "capture_errors", "data_frames", "control_frames",
    "messages_complete", "messages_incomplete", "duplicates", "rejected", "sessions",
]

#: Default TCP service ports of the stream tables (BQSP names no port: decoded only when given).
DEFAULT_RQUEUE_PORTS = (6567,)


#: Spark settings for the reassembly job only. Spark measures an Arrow batch's byte size after
#: every row it adds while maxBytesPerBatch is set (64 MiB by default): ~7% of that job's JVM time
#: here. Its input rows are valid data frames (chunks <= 466 bytes), so the 10,000-row cap
#: alone bounds a batch to a few MB and the byte check can be off (Int.MaxValue turns it off).
_MESSAGES_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}


def _split_for(files: Sequence[str], cores: int) -> int:
    """Split size giving the largest capture one byte range per core (never under 64 MiB).

    Each Spark task of the frames job has a fixed cost (a Python runner, its first batch
    decoded before the JVM gets rows), so on 2 cores two ranges of a 442 MB capture read in
    0.93 s where eight took 1.10 s (medians of 6, same session); more ranges than cores only
    pay off when cores are uneven or busy.
    """
    from .datasource import DEFAULT_SPLIT_BYTES
    from .inputs import file_size, splittable

    largest = max((file_size(f) for f in files if splittable(f)), default=0)
    return max(DEFAULT_SPLIT_BYTES, -(-largest // max(1, cores)))


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


def _choose_plan(plan: str | None, out_dir: str | Path, messages: str | None, frames_writer: str | None) -> str:
    """``run``'s ``plan`` argument resolved: ``"onepass"`` or ``"steps"`` (see ``run``)."""
    remote = "://" in str(out_dir)
    if plan is None:
        return "steps" if remote or messages is not None or frames_writer is not None else "onepass"
    if plan not in ("onepass", "steps"):
        raise ValueError(f"plan must be 'onepass' or 'steps', got {plan!r}")
    if plan == "onepass" and remote:
        raise ValueError(f"plan 'onepass' writes local output directories only, not {str(out_dir)!r}")
    if plan == "onepass" and (messages is not None or frames_writer is not None):
        raise ValueError("plan 'onepass' takes neither messages nor frames_writer (they choose the steps plan's jobs)")
    return plan


def run(
    captures: Sequence[str | Path] | None,
    out_dir: str | Path,
    master: str | None = None,
    *,
    spark: SparkSession | None = None,
    payload: bool = True,
    parts: bool = False,
    messages: str | None = None,
    pcapng: bool = False,
    split_bytes: int | None = None,
    conf: dict[str, str] | None = None,
    report: bool = True,
    progress: bool = True,
    print_summary: bool = True,
    bqsp_ports: Sequence[int] | None = None,
    rqueue_ports: Sequence[int] | None = DEFAULT_RQUEUE_PORTS,
    frames_writer: str | None = None,
    plan: str | None = None,
) -> dict[str, Any]:
    """Run the pipeline.

    Args:
        captures: pcap / pcapng files, directories or globs; None or empty: the bundled
            captures. The driver plans the reads, so it must see the files as well as the
            executors (same path on a shared file system).
        out_dir: output directory; ``frames/``, ``messages/``, ``sessions/``, ``findings/``
            (Parquet, replaced if present; :mod:`nbmq.spark.findings`), ``report.html`` and
            ``summary.json`` are written there. With a
            cluster master it must be a path every executor can write (shared file system,
            ``hdfs://``, ``s3a://``); the report and summary are written by the driver.
        master: Spark master URL; None: ``spark-submit``'s, else ``local[*]``.
        spark: use this session instead of building one (``master`` and ``conf`` then ignored).
        payload: keep the ``payload`` column in ``frames/``.
        parts: add the ``parts`` column (the message bytes) to ``messages/``.
        messages: the steps plan's messages step: ``"shuffle"`` (its default):
            :func:`nbmq.spark.messages.build_messages`, every data frame shuffled by key;
            ``"local"``: :func:`nbmq.spark.messages_local.build_messages_local`, reassembly
            inside each frames partition, only message rows shuffled (about as fast on
            local[2], see README). Same table (issue 14, item 5). Giving it selects the steps plan.
        pcapng: with no ``captures``, also read the bundled ``dealer.pcapng`` (same packets as
            ``dealer.pcap``, so its messages and sessions appear twice under another name).
        split_bytes: byte-range split size for large classic pcap files (default: one range per
            core for the largest file, at least 64 MiB; see ``_split_for``).
        conf: extra Spark configuration for a new session.
        report: write ``report.html``.
        progress: show progress on stderr (rich).
        print_summary: print the summary table on stdout (rich).
        bqsp_ports: TCP ports whose connections are decoded as BQSP into ``bqsp/`` (None or
            empty: no BQSP table).
        rqueue_ports: TCP ports decoded as rqueue into ``rqueue/`` (default 6567; None or
            empty: no rqueue table). Either table is written only when some capture holds TCP
            traffic on its ports.
        frames_writer: the steps plan's frames step: ``"spark"`` (its default): Spark writes
            ``frames/`` from the ``nbmq`` source; ``"arrow"``: each task writes its partition
            with pyarrow (:mod:`nbmq.spark.frames_writer`, local output directories only; the
            same table, a fraction of the JVM time; issue 14). Giving it selects the steps plan.
        plan: ``"onepass"``: one job decodes each partition once, writes its frames and the
            messages complete inside it, and only keys seen in several partitions (or twice)
            are combined afterwards (:mod:`nbmq.spark.onepass`; local ``out_dir`` only; step
            ``frames`` is that job, ``messages`` the combine); ``"steps"``: a frames job, then
            a messages job reading ``frames/``. None (default): ``"onepass"`` when ``out_dir``
            is a local path and neither ``messages`` nor ``frames_writer`` is given, else
            ``"steps"``. Same tables either way (issue 14, item 5).

    Returns:
        ``{"out_dir", "master", "captures": [per-capture counts], "totals", "seconds",
        "plan", "steps": {step: wall seconds}, "tables": {name: path}, "findings": {"rows",
        "severity", "kind"}}`` (steps: start, frames, messages, findings, sessions, streams,
        summary, report), plus ``"streams": {"bqsp"|"rqueue": {"files", "rows",
        "error_rows", "connections"}}`` when a stream table was written, and with the onepass
        plan ``"onepass"``: :meth:`nbmq.spark.onepass.OnePass.counts`; also written to
        ``summary.json``.

    Raises:
        FileNotFoundError: a capture path matches nothing (checked before Spark starts).
        ValueError: ``messages`` is neither ``"local"`` nor ``"shuffle"``; ``frames_writer`` is
            neither ``"spark"`` nor ``"arrow"``; ``plan`` is neither ``"onepass"`` nor
            ``"steps"``, or ``"onepass"`` with a non-local ``out_dir``, ``messages`` or
            ``frames_writer``.
        NotADirectoryError: ``out_dir`` is a local path naming an existing non-directory.
    """
    plan = _choose_plan(plan, out_dir, messages, frames_writer)
    messages, frames_writer = messages or "shuffle", frames_writer or "spark"
    if messages not in ("local", "shuffle"):
        raise ValueError(f"messages must be 'local' or 'shuffle', got {messages!r}")
    if frames_writer not in ("spark", "arrow"):
        raise ValueError(f"frames_writer must be 'spark' or 'arrow', got {frames_writer!r}")
    started = time.perf_counter()
    lap = _Laps()
    out = Path(out_dir)
    from .inputs import expand_paths

    paths = [str(p) for p in captures] if captures else default_captures(pcapng)
    files = expand_paths(paths)  # the driver plans the reads, so it must see the files too
    tables = {name: str(out / name) for name in ("frames", "messages", "sessions")}
    if not (str(out_dir).startswith(("hdfs://", "s3a://", "s3://", "gs://", "abfs://"))):
        if out.exists() and not out.is_dir():  # mkdir would say only "File exists"
            raise NotADirectoryError(f"output directory {str(out_dir)!r} exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)

    with _Steps(spark, progress) as steps, _prestart(files, spark, master, conf, split_bytes, report,
                                                     {"bqsp": bqsp_ports, "rqueue": rqueue_ports}) as prep:
        if spark is None:  # the JVM launches while ``prep`` imports, plans and walks (issue 14)
            from .spark_session import build_session

            spark = build_session(master, conf=conf)
        else:
            from . import register

            register(spark)
        from .messages import build_messages
        from .messages_local import build_messages_local

        build = build_messages_local if messages == "local" else build_messages
        steps.attach(spark)
        steps.advance()
        lap("start")

        reader = spark.read.format("nbmq").option("paths", ",".join(files))
        if split_bytes is None:
            split_bytes = _split_for(files, spark.sparkContext.defaultParallelism)
        reader = reader.option("split_bytes", str(int(split_bytes)))
        source = reader.load()
        options = {"paths": ",".join(files), "split_bytes": str(int(split_bytes))}
        if plan == "onepass":
            from .onepass import finish_messages, write_parts

            steps.step(f"decoding {len(files)} capture(s) -> frames/, messages/")
            one = write_parts(spark, options, tables["frames"], tables["messages"], payload=payload, parts=parts)
            frames = spark.read.parquet(tables["frames"])
            steps.advance()
            lap("frames")
            steps.step("combining keys across partitions -> messages/")
            with _session_conf(spark, _MESSAGES_CONF):
                finish_messages(spark, one, frames if payload else source, parts=parts)
            plan_counts = {"onepass": one.counts()}
            messages = spark.read.parquet(tables["messages"])
            steps.advance()
            lap("messages")
        else:
            plan_counts = {}
            steps.step(f"decoding {len(files)} capture(s) -> frames/")
            if frames_writer == "arrow":
                from .frames_writer import write_frames_arrow

                write_frames_arrow(spark, options, payload, tables["frames"])
            else:
                (source if payload else source.drop("payload")).write.mode("overwrite").parquet(tables["frames"])
            frames = spark.read.parquet(tables["frames"])
            steps.advance()
            lap("frames")

            steps.step("reassembling -> messages/")
            with _session_conf(spark, _MESSAGES_CONF):
                build(frames if payload else source, parts=parts).write.mode("overwrite").parquet(
                    tables["messages"]
                )
            messages = spark.read.parquet(tables["messages"])
            steps.advance()
            lap("messages")

        steps.step("diagnosing -> findings/")
        from .findings import write_findings

        messages, findings = write_findings(spark, frames, tables, files)  # adds messages.suspect
        lap("findings")

        steps.step("summarising -> sessions/")
        # One aggregation per table feeds the sessions table, the summary and the report (issue 14).
        from .report.passes import Passes
        from .sessions_table import sessions_frame

        passes = Passes(spark, frames, messages, tables["frames"])
        sessions_frame(spark, passes.sessions()).write.mode("overwrite").parquet(tables["sessions"])
        steps.advance()
        lap("sessions")

        streams = _stream_tables(spark, files, out, tables, steps, payload, bqsp_ports, rqueue_ports, prep)
        lap("streams")

        steps.step("summary and report")
        rows = _summary_rows(passes, [Path(p).name for p in files])
        lap("summary")
        totals = {c: sum(r[c] for r in rows) for c in SUMMARY_COLUMNS if c != "capture"}
        summary: dict[str, Any] = {
            "out_dir": str(out_dir),
            "master": spark.sparkContext.master,
            "captures": rows,
            "totals": totals,
            "tables": tables,
            "plan": plan,
            "findings": findings,
            **plan_counts,
        }
        if streams:
            summary["streams"] = streams
        if report:
            from .report import collect, write_report

            summary["steps"] = dict(lap.seconds)  # the page counts these and its own step
            report_started = time.perf_counter()
            try:  # a report bug must not cost the tables and summary.json
                write_report(out / "report.html", summary, collect(spark, tables, passes=passes), started=report_started)
                summary["report"] = str(out / "report.html")
            except Exception as exc:  # noqa: BLE001 -- reported in the summary and on stderr
                summary["report_error"] = f"{type(exc).__name__}: {exc}"
                print(f"nbmq pipeline: the report failed: {summary['report_error']}", file=sys.stderr)
            lap("report")
        passes.close()  # collect() closed it already: this frees it when there is no report
        steps.advance()
    summary["steps"] = lap.seconds
    summary["seconds"] = time.perf_counter() - started
    try:
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    except OSError:
        pass
    if print_summary:
        print_table(summary)
    return summary


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
    out: Path,
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
        tables[protocol] = str(out / protocol)
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

        r = spark.read.parquet(tables[protocol]).agg(
            F.count(F.lit(1)).alias("rows"),
            F.count("error").alias("error_rows"),
            F.countDistinct("capture", "client", "server").alias("connections"),
        ).collect()[0]
        counts[protocol] = {"files": len(with_traffic), "rows": int(r["rows"]),
                            "error_rows": int(r["error_rows"]), "connections": int(r["connections"])}
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

