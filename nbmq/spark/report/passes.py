"""The few Spark passes behind the sessions table, the summary and the report.

::

    passes = Passes(spark, frames, messages, frames_path="out/frames")
    sessions = passes.sessions()           # pandas, the sessions table
    rows = passes.summary_rows(["a.pcap"], SUMMARY_COLUMNS)  # the pipeline summary's per-capture rows

The frames table is aggregated once per (capture, session, source, destination, kind, error
reason, time bin): the sessions table, the summary's counts and the report's traffic and error
tables are all sums over those groups. The messages table is aggregated once per (capture,
session, sender, time bin, incomplete reason) for the same three. The valid control frames and
heartbeats (few) are kept in a narrow cached copy for the Connect times here and the report's
flow graph and heartbeat gaps. The report adds one more pass (SafeDealer acks,
:func:`nbmq.spark.report.aggregate.collect`). Before that, the main pipeline read the frames table
about seven times and the messages table four times.

The time axis (first and last frame of each capture, which the bins need before the pass) is read
from the frames table's Parquet footers when every row group holds one capture with statistics;
else one small Spark job computes it. The jobs run a few at a time (:class:`Jobs`): on a few
cores their scheduling, not their work, is most of a small job's time.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .units import nice_bin_width

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Passes", "Jobs", "footer_spans", "with_axis", "BINS", "MESSAGE_TTL_S"]

#: Time bins per capture on the report's charts.
BINS = 120
#: The reference's default uncompleted_message_ttl (nbmq.options), seconds.
MESSAGE_TTL_S = 10.0
_CONNECT, _HEARTBEAT = 1, 4
#: Literal map lookups (no join per row) for at most this many captures, else a broadcast join.
_MAX_MAP_CAPTURES = 256


class Jobs:
    """Runs Spark jobs a few at a time (threads on one session): each is small, so their
    scheduling and driver round trips, not the work, dominate; overlapping them hides that."""

    def __init__(self, workers: int = 4) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nbmq-report")

    def submit(self, df: DataFrame, columns: list[str], exact: tuple[str, ...] = ()) -> Future[pd.DataFrame]:
        """Collect ``df`` in a thread; the future's result is a pandas frame of ``columns``
        (:func:`rows_frame`; ``exact``: integer columns kept exact as ``Int64``)."""
        return self.pool.submit(rows_frame, df, columns, exact)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def rows_frame(df: DataFrame, columns: list[str], exact: tuple[str, ...] = ()) -> pd.DataFrame:
    """``df`` collected into pandas through Python rows (nulls as None, ids as Decimal).

    pandas stores an integer column with a null as float64, which loses nanoseconds since the
    epoch (53-bit mantissa); the ``exact`` columns are nullable ``Int64`` instead.
    """
    import pandas as pd

    rows = [r.asDict() for r in df.collect()]
    out = pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame(columns=columns)
    for name in exact:
        out[name] = pd.array([r[name] for r in rows], dtype="Int64")
    return out


def footer_spans(path: str) -> dict[str, tuple[int | None, int | None]] | None:
    """Each capture's first and last ``ts_ns`` from the Parquet footers of a local frames table.

    Args:
        path: the frames table's directory (a local path or ``file:`` URI).

    Returns:
        ``{capture: (min ts_ns, max ts_ns)}`` (both None when no row of it has a timestamp), the
        values Spark's min/max would give; None when the footers cannot tell (another file
        system, a row group without statistics or holding several captures, unreadable files).
    """
    import pyarrow.parquet as pq

    if path.startswith("file:"):
        path = path[len("file:") :]
        path = "/" + path.lstrip("/") if path.startswith("//") else path
    if "://" in path:
        return None
    root = Path(path)
    try:
        files = [
            f
            for f in sorted(root.rglob("*.parquet"))
            if not any(p.startswith(("_", ".")) for p in f.relative_to(root).parts)
        ]
        if not files:
            return None
        spans: dict[str, tuple[int | None, int | None]] = {}
        for f in files:
            meta = pq.read_metadata(f)
            names = [meta.schema.column(i).path for i in range(meta.num_columns)]
            if "capture" not in names or "ts_ns" not in names:
                return None
            ci, ti = names.index("capture"), names.index("ts_ns")
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                if group.num_rows == 0:
                    continue
                c, t = group.column(ci).statistics, group.column(ti).statistics
                exact = (
                    c is not None and getattr(c, "is_min_value_exact", True) and getattr(c, "is_max_value_exact", True)
                )
                if not exact or not c.has_min_max or not isinstance(c.min, str) or c.min != c.max or c.null_count != 0:
                    return None
                lo, hi = spans.get(c.min, (None, None))
                if t is not None and t.has_min_max:
                    lo = t.min if lo is None else min(lo, t.min)
                    hi = t.max if hi is None else max(hi, t.max)
                elif t is None or t.null_count != group.num_rows:
                    return None
                spans[c.min] = (lo, hi)
        return spans
    except (OSError, ValueError):  # an unreadable or foreign file: let Spark read it
        return None


def with_axis(df: DataFrame, caps: list[dict[str, Any]], keep: bool = False) -> DataFrame:
    """``df`` with its capture's ``t0``, ``width`` and ``t_end`` columns (epoch s, s, epoch s).

    A literal map lookup for up to 256 captures (no join per row), else a broadcast join. Rows of
    captures without an axis are dropped, or kept with null axis columns when ``keep``.
    """
    from pyspark.sql import functions as F

    if len(caps) > _MAX_MAP_CAPTURES:
        axis = F.broadcast(
            df.sparkSession.createDataFrame(
                [(c["capture"], c["t0"], c["width_s"], c["t0"] + c["span_s"]) for c in caps],
                "capture string, t0 double, width double, t_end double",
            )
        )
        return df.join(axis, "capture", "left" if keep else "inner")
    cols = {}
    for name, key in (("t0", "t0"), ("width", "width_s"), ("t_end", None)):
        pairs = []
        for c in caps:
            value = c["t0"] + c["span_s"] if key is None else c[key]
            pairs += [F.lit(c["capture"]), F.lit(float(value))]
        cols[name] = F.create_map(*pairs)[F.col("capture")] if pairs else F.lit(None).cast("double")
    out = df.withColumns(cols)
    return out if keep else out.where(F.col("t0").isNotNull())


#: Columns of :meth:`Passes.frame_groups`.
FRAME_GROUPS = [
    "capture",
    "session_id",
    "src",
    "dst",
    "kind",
    "kind_name",
    "reason",
    "bin",
    "unreadable",
    "frames",
    "bytes",
    "first_ns",
    "last_ns",
]
#: Columns of :meth:`Passes.message_groups`.
MESSAGE_GROUPS = [
    "capture",
    "session_id",
    "src",
    "bin",
    "reason",
    "messages",
    "message_bytes",
    "duplicates",
    "rejected",
    "incomplete",
    "missing_bytes",
]


class Passes:
    """The aggregation jobs over one frames table and its messages table, started at once.

    Args:
        spark: the session.
        frames: the frames table (its Parquet copy).
        messages: its messages table.
        frames_path: where ``frames`` was read from, for :func:`footer_spans` (None: a Spark job
            computes the time axis).
        jobs: a :class:`Jobs` to run on (default: a new one of 4 threads, closed by :meth:`close`).

    The constructor computes the axis (footers or one job) and starts three jobs; the methods
    wait for the ones they need. Spark errors surface from the method that waits.
    """

    def __init__(
        self,
        spark: SparkSession,
        frames: DataFrame,
        messages: DataFrame,
        frames_path: str | None = None,
        jobs: Jobs | None = None,
    ) -> None:
        from pyspark.sql import functions as F

        from ..messages import addr_port

        self.spark, self.frames, self.messages = spark, frames, messages
        self._own_jobs = jobs is None
        self.jobs = jobs or Jobs()
        spans = footer_spans(frames_path) if frames_path else None
        if spans is None:
            spans = {
                r["capture"]: (r["lo"], r["hi"])
                for r in frames.groupBy("capture").agg(F.min("ts_ns").alias("lo"), F.max("ts_ns").alias("hi")).collect()
            }
        #: One dict per capture with a timestamped frame: capture, protocol, t0 (epoch s),
        #: span_s, width_s (the report's bin width), sorted by capture.
        self.caps: list[dict[str, Any]] = []
        for capture, (lo, hi) in sorted(spans.items()):
            if lo is None:  # no timestamped row: no axis (min() skips nulls)
                continue
            t0, t1 = lo / 1e9, hi / 1e9  # as Spark's min(ts_ns) / 1e9
            self.caps.append(
                {
                    "capture": capture,
                    "protocol": "nbmq",
                    "t0": float(t0),
                    "span_s": float(t1 - t0),
                    "width_s": nice_bin_width(float(t1 - t0), BINS),
                }
            )

        valid = F.col("error").isNull() & F.col("kind").isNotNull()
        f = with_axis(
            frames.select(
                "capture",
                "frame_number",
                "ts_ns",
                "src_addr",
                "src_port",
                "dst_addr",
                "dst_port",
                "length",
                "kind",
                "kind_name",
                "session_id",
                "error",
            ),
            self.caps,
            keep=True,
        )
        binned = F.floor((F.col("ts_ns") / 1e9 - F.col("t0")) / F.col("width")).cast("int")
        # Grouped on the raw columns; endpoint text is built per group (addr:port is one-to-one).
        groups = (
            f.groupBy(
                "capture",
                "session_id",
                "src_addr",
                "src_port",
                "dst_addr",
                "dst_port",
                "kind",
                "kind_name",
                F.regexp_replace("error", "[0-9]+", "N").alias("reason"),
                binned.alias("bin"),
                F.col("frame_number").isNull().alias("unreadable"),
            )
            .agg(
                F.count(F.lit(1)).alias("frames"),
                F.sum("length").alias("bytes"),
                F.min("ts_ns").alias("first_ns"),
                F.max("ts_ns").alias("last_ns"),
            )
            .select(
                "capture",
                "session_id",
                addr_port("src_addr", "src_port").alias("src"),
                addr_port("dst_addr", "dst_port").alias("dst"),
                *FRAME_GROUPS[4:],
            )
        )
        self._frame_groups = self.jobs.submit(
            groups, FRAME_GROUPS, ("kind", "bin", "frames", "bytes", "first_ns", "last_ns")
        )

        # Messages: counts per sender and time bin (by the first frame), incomplete ones with a reason.
        reason = (
            F.when(F.col("complete"), F.lit(None))
            .when(F.col("rejected") > 0, "rejected frames (conflicting or hostile headers)")
            .when(
                F.col("t_end") - F.col("last_ts").cast("double") > MESSAGE_TTL_S,
                f"expired: no frame for over {MESSAGE_TTL_S:g} s (the default TTL) before the capture ended",
            )
            .otherwise("missing bytes at the capture's end (still in flight)")
        )
        mt = F.col("first_ts").cast("double") - F.col("t0")
        m = with_axis(
            messages.select(
                "capture",
                "session_id",
                "src",
                "complete",
                "message_size",
                "duplicates",
                "rejected",
                "missing_bytes",
                "first_ts",
                "last_ts",
            ),
            self.caps,
            keep=True,
        )
        self._message_groups = self.jobs.submit(
            m.groupBy(
                "capture",
                "session_id",
                "src",
                F.floor(mt / F.col("width")).cast("int").alias("bin"),
                reason.alias("reason"),
            ).agg(
                F.count(F.when(F.col("complete"), 1)).alias("messages"),
                F.sum(F.when(F.col("complete"), F.col("message_size")).otherwise(0)).alias("message_bytes"),
                F.sum("duplicates").alias("duplicates"),
                F.sum("rejected").alias("rejected"),
                F.count(F.when(~F.col("complete"), 1)).alias("incomplete"),
                F.sum(F.when(~F.col("complete"), F.col("missing_bytes")).otherwise(0)).alias("missing_bytes"),
            ),
            MESSAGE_GROUPS,
        )

        #: The valid Connect, Connected, Disconnected and Heartbeat frames, narrow and cached
        #: (the Connect times here; the report's flow graph and heartbeat gaps).
        self.control = (
            frames.where(valid & F.col("kind").isin(1, 2, 3, _HEARTBEAT))
            .select(
                "capture",
                "session_id",
                "src_addr",
                "src_port",
                "dst_addr",
                "dst_port",
                "kind",
                "kind_name",
                "ts_ns",
            )
            .persist()
        )
        self._connects = self.jobs.submit(
            self.control.where(F.col("kind") == _CONNECT)
            .groupBy("capture", "session_id", "src_addr", "src_port", "dst_addr", "dst_port")
            .agg(F.sort_array(F.collect_list("ts_ns")).alias("connect_ns"))
            .select(
                "capture",
                "session_id",
                addr_port("src_addr", "src_port").alias("src"),
                addr_port("dst_addr", "dst_port").alias("dst"),
                "connect_ns",
            ),
            ["capture", "session_id", "src", "dst", "connect_ns"],
        )
        self._sessions: pd.DataFrame | None = None

    def frame_groups(self) -> pd.DataFrame:
        """The frames table per (capture, session_id, src, dst, kind, kind_name, reason, bin,
        unreadable): frames, bytes (UDP payload), first_ns, last_ns. ``reason`` is the error with
        digits as N (null: a decoded frame); ``bin`` is null without a timestamp or axis;
        ``unreadable``: the capture record could not be read (no frame number)."""
        return self._frame_groups.result()

    def message_groups(self) -> pd.DataFrame:
        """The messages table per (capture, session_id, src, bin, reason): complete ``messages``
        and their ``message_bytes``, duplicates, rejected, ``incomplete`` and their missing_bytes;
        ``reason`` null for complete messages; ``bin`` null for captures without an axis."""
        return self._message_groups.result()

    def sessions(self) -> pd.DataFrame:
        """The sessions table (pandas, :data:`nbmq.spark.schema.SESSIONS_SCHEMA` columns), as
        :func:`nbmq.spark.sessions_table.build_sessions` makes it from the same tables."""
        if self._sessions is None:
            from ..sessions_table import sessions_from_groups

            self._sessions = sessions_from_groups(self.frame_groups(), self._connects.result(), self.message_groups())
        return self._sessions

    def summary_rows(self, names: list[str] | tuple[str, ...], columns: list[str]) -> list[dict[str, Any]]:
        """The pipeline summary's rows (one per capture, sorted; see ``pipeline.SUMMARY_COLUMNS``):
        every capture in the tables, plus a zero row for each of ``names`` without a row."""
        g, m, s = self.frame_groups(), self.message_groups(), self.sessions()
        out: dict[str, dict[str, int]] = {}
        import pandas as pd

        for r in g.itertuples(index=False):
            c = out.setdefault(
                r.capture,
                dict.fromkeys(("datagrams", "error_rows", "capture_errors", "data_frames", "control_frames"), 0),
            )
            n = int(r.frames)
            ok = pd.isna(r.reason)  # a decoded frame
            if r.unreadable:
                c["capture_errors"] += n
            else:
                c["datagrams"] += n
                c["error_rows"] += 0 if ok else n
            if ok and not pd.isna(r.kind):
                c["data_frames" if int(r.kind) == 0 else "control_frames"] += n
        for r in m.itertuples(index=False):
            if r.capture in out:
                c = out[r.capture]
                c["messages_complete"] = c.get("messages_complete", 0) + int(r.messages or 0)
                c["messages_incomplete"] = c.get("messages_incomplete", 0) + int(r.incomplete or 0)
                for col in ("duplicates", "rejected"):
                    v = getattr(r, col)
                    c[col] = c.get(col, 0) + (0 if pd.isna(v) else int(v))
        for capture, n in s.groupby("capture").size().items():
            if capture in out:
                out[capture]["sessions"] = int(n)
        cols = columns
        rows = [{c: (capture if c == "capture" else int(v.get(c, 0))) for c in cols} for capture, v in out.items()]
        for name in names:  # a capture without a single row (no UDP datagram in it)
            if name not in out:
                out[name] = {}
                rows.append({c: (name if c == "capture" else 0) for c in cols})
        return sorted(rows, key=lambda r: r["capture"])

    def close(self) -> None:
        """Wait for the jobs started here, then free the cached control frames."""
        if self._own_jobs:
            self.jobs.close()
        self.control.unpersist()  # a second call does nothing
