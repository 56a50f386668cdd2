"""What the report shows, aggregated by Spark from the pipeline's tables into small pandas frames.

Every function here runs a bounded number of Spark jobs whose results are small (per capture,
session, direction, kind and time bin; or quantiles and log-scale histograms), so the report's
cost stays a small fraction of the pipeline's. Times are seconds since the capture's first
frame (or first stream record), one axis per capture shared by all its sessions.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .passes import BINS, MESSAGE_TTL_S, Jobs, Passes, with_axis
from .units import nice_bin_width

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ReportData", "collect", "HEARTBEAT_INTERVAL_S", "MESSAGE_TTL_S"]

#: The reference's default peer_heartbeat_ivl (nbmq.options), seconds; MESSAGE_TTL_S: its
#: uncompleted_message_ttl (in .passes, which bins the messages).
HEARTBEAT_INTERVAL_S = 1.0
#: A heartbeat gap is reported past this multiple of the interval (one lost heartbeat).
GAP_FACTOR = 1.5
#: Spark settings while the report's jobs run. On a frames table without the ``ack_hash`` column
#: the ack hash sends every data frame's chunk to a Python UDF through Arrow; with
#: maxBytesPerBatch set Spark sizes the batch after every row. Rows are frames (<= ~500 bytes),
#: so the 10,000-row cap alone keeps a batch to a few MB (as the pipeline's reassembly job,
#: nbmq.spark.pipeline._MESSAGES_CONF).
_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}
_MAX_CONTROL_ROWS = 4000
_MAX_GAPS = 200
_MAX_SESSIONS = 5000
#: log10 histogram buckets per decade for the latency distributions.
_PER_DECADE = 5
#: finer buckets the quantiles are read from (about 2.3% wide), merged into _PER_DECADE for the chart.
_FINE_PER_DECADE = 100


@dataclass
class ReportData:
    """The report's input: small pandas frames (one row per capture / session / bin ...).

    Attributes:
        captures: capture, protocol ("nbmq" | "bqsp" | "rqueue"), t0 (epoch s), span_s, width_s.
        sessions: the sessions table (session_id as int), at most 5,000 rows.
        traffic: capture, session_id, direction, kind_name, bin, frames, bytes (UDP payload).
        messages: capture, session_id, direction, bin, messages, message_bytes, duplicates,
            rejected, incomplete (by the message's first frame).
        latency: capture, metric, n, p50, p90, p99, max (seconds).
        histograms: capture, metric, bucket (log10 seconds x 5), n.
        resends: capture, bin, resends (data frames sent again: same ack hash).
        gaps: capture, session_id, direction, at_s, gap_s (heartbeat gaps > 1.5 intervals).
        incomplete: capture, reason, messages, missing_bytes.
        errors: capture, reason, rows.
        control: capture, session_id, at_s, src, dst, kind_name (Connect/Connected/Disconnected).
        heartbeats: capture, session_id, src, dst, n, first_s, last_s.
        streams: {"bqsp"|"rqueue": frames} from :func:`_streams` (connections, rates, sizes,
            topics or queues).
        notes: strings shown under the report's title (what could not be computed and why).
    """

    captures: pd.DataFrame
    sessions: pd.DataFrame
    traffic: pd.DataFrame
    messages: pd.DataFrame
    latency: pd.DataFrame
    histograms: pd.DataFrame
    resends: pd.DataFrame
    gaps: pd.DataFrame
    incomplete: pd.DataFrame
    errors: pd.DataFrame
    control: pd.DataFrame
    heartbeats: pd.DataFrame
    streams: dict[str, dict[str, pd.DataFrame]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def collect(spark: SparkSession, tables: dict[str, str], passes: Passes | None = None) -> ReportData:
    """Aggregate the pipeline's Parquet tables for the report.

    Args:
        spark: the pipeline's session.
        tables: table name -> Parquet path, as the pipeline's summary ``tables``: ``frames``,
            ``messages``, ``sessions`` and, when written, ``bqsp`` / ``rqueue``.
        passes: the pipeline's :class:`~nbmq.spark.report.passes.Passes` over these frames and
            messages tables (its aggregates, already computed for the sessions table and the
            summary, are reused; it is closed here); None: started here.

    Returns:
        A :class:`ReportData`. SafeDealer ack round trips match data frames and Acks on the
        frames' ``ack_hash`` column (``--no-payload`` tables have it too); a frames table
        written before that column is hashed from its ``payload`` column, and one with neither
        leaves them out, with a note that says so.
    """
    saved = {key: spark.conf.get(key, None) for key in _CONF}
    for key, value in _CONF.items():
        spark.conf.set(key, value)
    try:
        if passes is None:
            passes = Passes(
                spark, spark.read.parquet(tables["frames"]), spark.read.parquet(tables["messages"]), tables["frames"]
            )
        return _collect(spark, tables, passes, [])
    finally:
        if passes is not None:
            passes.close()
        for key, old in saved.items():
            spark.conf.unset(key) if old is None else spark.conf.set(key, old)


def _collect(spark: SparkSession, tables: dict[str, str], passes: Passes, notes: list[str]) -> ReportData:
    import pandas as pd

    jobs = passes.jobs
    stream_spans = {
        protocol: _stream_spans(jobs, spark.read.parquet(tables[protocol]))
        for protocol in ("bqsp", "rqueue")
        if protocol in tables
    }
    # One shared time axis per capture: its first and last frame (Passes.caps).
    caps = [dict(c) for c in passes.caps]
    data = ReportData(
        captures=pd.DataFrame(caps, columns=["capture", "protocol", "t0", "span_s", "width_s"]),
        sessions=_report_sessions(passes.sessions()),
        traffic=pd.DataFrame(columns=["capture", "session_id", "direction", "kind_name", "bin", "frames", "bytes"]),
        messages=pd.DataFrame(
            columns=[
                "capture",
                "session_id",
                "direction",
                "bin",
                "messages",
                "message_bytes",
                "duplicates",
                "rejected",
                "incomplete",
            ]
        ),
        latency=pd.DataFrame(columns=["capture", "metric", "n", "p50", "p90", "p99", "max"]),
        histograms=pd.DataFrame(columns=["capture", "metric", "bucket", "n"]),
        resends=pd.DataFrame(columns=["capture", "bin", "resends"]),
        gaps=pd.DataFrame(columns=["capture", "session_id", "direction", "at_s", "gap_s"]),
        incomplete=pd.DataFrame(columns=["capture", "reason", "messages", "missing_bytes"]),
        errors=pd.DataFrame(columns=["capture", "reason", "rows"]),
        control=pd.DataFrame(columns=["capture", "session_id", "at_s", "src", "dst", "kind_name"]),
        heartbeats=pd.DataFrame(columns=["capture", "session_id", "src", "dst", "n", "first_s", "last_s"]),
        notes=notes,
    )
    streams = {
        protocol: _streams(jobs, spark.read.parquet(tables[protocol]), protocol, data, span.result())
        for protocol, span in stream_spans.items()
    }
    if caps:
        _udp(spark, tables, jobs, data, passes, caps)
    data.streams = {protocol: {k: v.result() for k, v in tables_.items()} for protocol, tables_ in streams.items()}
    return data


def _report_sessions(table: pd.DataFrame) -> pd.DataFrame:
    """The report's sessions: the first ``_MAX_SESSIONS`` by (capture, first_ts), ids as int,
    nulls as None (as rows collected from Spark)."""
    import pandas as pd

    columns = list(table.columns)
    if not len(table):
        return pd.DataFrame(columns=columns)
    top = table.sort_values(["capture", "first_ts"], kind="stable").head(_MAX_SESSIONS)
    rows = top.astype(object).where(top.notna(), None).to_dict("records")
    out = pd.DataFrame(rows, columns=columns)
    out["session_id"] = out["session_id"].map(int)
    return out


def _acked_sessions(sessions: pd.DataFrame) -> Any:
    """Spark condition: the frame's session acks (SafeDealer), so its data frames are matched to Acks.

    Fewer rows into the matching's shuffle; and on a frames table without the ``ack_hash``
    column the hash is a Python UDF whose copy of each chunk into Arrow is the report's largest
    cost (a pandas UDF reading only ``payload`` took 7.5 s on 443k data frames where one reading
    an int column took 1.4 s, local[2], load ~6), so frames of sessions without a single Ack are
    left out. ``sessions`` is the report's sessions table; when it was cut at ``_MAX_SESSIONS``
    rows the condition is true (every frame matched, as before).
    """
    import decimal

    from pyspark.sql import functions as F

    if len(sessions) >= _MAX_SESSIONS:
        return F.lit(True)
    acks = sessions["acks_c2s"].fillna(0) + sessions["acks_s2c"].fillna(0)
    ids = sorted({int(x) for x in sessions.loc[acks > 0, "session_id"]})
    return F.col("session_id").isin([decimal.Decimal(x) for x in ids])


def _udp(
    spark: SparkSession,
    tables: dict[str, str],
    jobs: Jobs,
    data: ReportData,
    passes: Passes,
    caps: list[dict[str, Any]],
) -> None:
    """Fill ``data``'s nbmq tables: the traffic, errors and messages from ``passes``' aggregates;
    then three Spark jobs (latencies with the ack matching and resends; control frames; heartbeats
    from the cached control frames), plus two more when heartbeats have long gaps."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from ..messages import addr_port

    names = {c["capture"] for c in caps}
    groups = passes.frame_groups()
    kinds = {"control": 0, "heartbeats": 0}
    for kind, n in groups[groups["reason"].isna() & groups["kind"].notna()].groupby("kind")["frames"].sum().items():
        if int(kind) in (1, 2, 3):
            kinds["control"] += int(n)
        elif int(kind) == 4:
            kinds["heartbeats"] += int(n)
    frames = spark.read.parquet(tables["frames"])
    f = with_axis(frames, caps)
    t = F.col("ts_ns") / 1e9 - F.col("t0")
    src = addr_port("src_addr", "src_port")
    dst = addr_port("dst_addr", "dst_port")
    valid = F.col("error").isNull()

    # Latency distributions: every metric in one union and one job (a fine histogram), the
    # resends of the SafeDealer matching riding along as rows without a metric.
    def ts(c: str) -> Any:
        return F.col(c).cast("double")

    sessions = spark.read.parquet(tables["sessions"])
    messages = spark.read.parquet(tables["messages"])
    values = [
        sessions.select(
            "capture",
            F.lit("handshake: Connect -> Connected").alias("metric"),
            (ts("connected_ts") - ts("connect_ts")).alias("v"),
        ),
        sessions.select(
            "capture",
            F.lit("handshake: Connected -> first Heartbeat").alias("metric"),
            (ts("first_heartbeat_ts") - ts("connected_ts")).alias("v"),
        ),
        sessions.select(
            "capture",
            F.lit("handshake: Connect -> first Heartbeat").alias("metric"),
            (ts("first_heartbeat_ts") - ts("connect_ts")).alias("v"),
        ),
        messages.where(F.col("complete")).select(
            "capture",
            F.lit("message assembly (first -> last frame)").alias("metric"),
            (ts("last_ts") - ts("first_ts")).alias("v"),
        ),
    ]
    fine = F.when(F.col("v") <= 0, F.lit(-(10**6))).otherwise(F.floor(F.log10("v") * _FINE_PER_DECADE)).cast("int")
    union = values[0]
    for v in values[1:]:
        union = union.unionByName(v)
    union = union.where(F.col("v").isNotNull() & (F.col("v") >= 0)).select(
        "capture", "metric", fine.alias("fine"), "v", F.lit(None).cast("long").alias("w")
    )
    # SafeDealer: data frame -> its Ack, matched by the FNV-1a hash of the whole frame.
    has_acks = bool(len(data.sessions)) and bool(
        (data.sessions["acks_c2s"].fillna(0) + data.sessions["acks_s2c"].fillna(0)).sum() > 0
    )
    matched = False
    if has_acks and ("ack_hash" in frames.columns or "payload" in frames.columns):
        is_ack = F.col("kind") == 5
        if "ack_hash" in frames.columns:
            # The decoder's column: a data frame's hash and the hash an Ack carries,
            # so no payload is read (it was most of the report's time at 5M datagrams).
            hashed_ack, h = is_ack & F.col("ack_hash").isNotNull(), F.col("ack_hash")
        else:  # a frames table written before the column: hash the payload (report/ackhash.py)
            from .ackhash import ack_value, frame_hash

            # The UDF also hashes the (few) Ack rows, unused.
            hashed_ack, h = is_ack & (F.length("payload") == 8), F.when(is_ack, ack_value()).otherwise(frame_hash())
        both = f.where(valid & (((F.col("kind") == 0) & _acked_sessions(data.sessions)) | hashed_ack)).select(
            "capture", "session_id", is_ack.alias("ack"), "ts_ns", h.alias("h")
        )
        # One aggregation per hash: its first and last send, sends, first Ack. Times are kept in
        # ns and turned into seconds after it (the same doubles: min/max commute with the
        # monotonic ns -> s since t0 -> bin).
        data_ns = F.when(~F.col("ack"), F.col("ts_ns"))
        sent = with_axis(
            both.groupBy("capture", "session_id", "h")
            .agg(
                F.min(data_ns).alias("sent_ns"),
                F.max(data_ns).alias("last_ns"),
                F.count(data_ns).alias("sends"),
                F.min(F.when(F.col("ack"), F.col("ts_ns"))).alias("acked_ns"),
            )
            .where(F.col("sends") > 0),
            caps,
        )

        def at(c: str) -> Any:
            return F.col(c) / 1e9 - F.col("t0")

        v = at("acked_ns") - at("sent_ns")
        # Both kinds of row from each hash's one row (two union branches would each aggregate,
        # their column pruning making the two aggregations differ).
        latency = F.when(
            F.col("acked_ns").isNotNull() & v.isNotNull() & (v >= 0),
            F.struct(
                F.lit("SafeDealer ack (data frame -> its Ack)").alias("metric"),
                F.when(v <= 0, F.lit(-(10**6)))
                .otherwise(F.floor(F.log10(v) * _FINE_PER_DECADE))
                .cast("int")
                .alias("fine"),
                v.alias("v"),
                F.lit(None).cast("long").alias("w"),
            ),
        )
        resent = F.when(
            F.col("sends") > 1,
            F.struct(
                F.lit(None).cast("string").alias("metric"),
                F.floor(at("last_ns") / F.col("width")).cast("int").alias("fine"),
                F.lit(None).cast("double").alias("v"),
                (F.col("sends") - 1).alias("w"),
            ),
        )
        union = union.unionByName(
            sent.select("capture", F.explode(F.array(latency, resent)).alias("r"))
            .where(F.col("r").isNotNull())
            .select("capture", "r.metric", "r.fine", "r.v", "r.w")
        )
        matched = True
    elif has_acks:
        data.notes.append(
            "SafeDealer ack round trips need the frames' ack_hash column (or, in tables "
            "written before it, the payload column)."
        )
    # A fine log histogram per (capture, metric) with each bucket's min and max; the quantiles
    # are read from it on the driver (exact at the ends, within a bucket elsewhere).
    hist_job = jobs.submit(
        union.groupBy("capture", "metric", "fine").agg(
            F.count(F.lit(1)).alias("n"), F.min("v").alias("lo"), F.max("v").alias("hi"), F.sum("w").alias("w")
        ),
        ["capture", "metric", "fine", "n", "lo", "hi", "w"],
    )

    # Control frames for the flow graph; heartbeats summarised; silences between heartbeats.
    c = with_axis(passes.control, caps)
    control_job = (
        _empty(data.control.columns)
        if not kinds["control"]
        else jobs.submit(
            c.where(F.col("kind").isin(1, 2, 3))
            .select("capture", "session_id", t.alias("at_s"), src.alias("src"), dst.alias("dst"), "kind_name")
            .orderBy("capture", "at_s")
            .limit(_MAX_CONTROL_ROWS),
            list(data.control.columns),
        )
    )
    hb = c.where(F.col("kind") == 4).select(
        "capture", "session_id", src.alias("src"), dst.alias("dst"), t.alias("at_s")
    )
    w = Window.partitionBy("capture", "session_id", "src").orderBy("at_s")
    hb_gaps = hb.select("capture", "session_id", "src", "dst", "at_s", F.lag("at_s").over(w).alias("prev_s"))
    heartbeats_job = (
        _empty(list(data.heartbeats.columns) + ["long"])
        if not kinds["heartbeats"]
        else jobs.submit(
            hb_gaps.groupBy("capture", "session_id", "src", "dst").agg(
                F.count(F.lit(1)).alias("n"),
                F.min("at_s").alias("first_s"),
                F.max("at_s").alias("last_s"),
                F.sum((F.col("at_s") - F.col("prev_s") > GAP_FACTOR * HEARTBEAT_INTERVAL_S).cast("int")).alias("long"),
            ),
            list(data.heartbeats.columns) + ["long"],
        )
    )

    # Traffic and error reasons, from the frames' groups (the rows with a time or an error).
    g = groups[groups["capture"].isin(names) & (groups["bin"].notna() | groups["reason"].notna())]
    keys = ["capture", "session_id", "src", "kind_name", "bin", "reason"]
    rows = g.groupby(keys, dropna=False, sort=False)[["frames", "bytes"]].sum(min_count=1).reset_index()  # null: as SUM
    rows = pd.DataFrame(
        rows.astype(object).where(rows.notna(), None).to_dict("records"), columns=keys + ["frames", "bytes"]
    )
    bad = rows["reason"].notna()
    data.errors = (
        rows[bad].groupby(["capture", "reason"], as_index=False)["frames"].sum().rename(columns={"frames": "rows"})
    )
    traffic = rows[~bad].drop(columns=["reason"])
    msg = passes.message_groups()
    msg = msg[msg["capture"].isin(names)].reset_index(drop=True)
    inc = msg[msg["reason"].notna()]
    data.incomplete = (
        inc.groupby(["capture", "reason"], as_index=False)[["incomplete", "missing_bytes"]]
        .sum()
        .rename(columns={"incomplete": "messages"})
    )
    msg = msg.drop(columns=["reason", "missing_bytes"])
    # Directions from the sessions' client endpoints (on the driver: these tables are small).
    clients = (
        data.sessions[["capture", "session_id", "client"]]
        if len(data.sessions)
        else pd.DataFrame(columns=["capture", "session_id", "client"])
    )
    data.traffic = _with_direction(traffic, clients)
    data.messages = _with_direction(msg, clients)
    hist = hist_job.result()
    resent = hist["metric"].isna()
    data.latency, data.histograms = _quantiles(hist[~resent].drop(columns=["w"]))
    if matched:
        r = hist[resent]
        data.resends = pd.DataFrame(
            {
                "capture": list(r["capture"]),
                "bin": [None if b is None or b != b else int(b) for b in r["fine"]],
                "resends": [int(x) for x in r["w"]],
            },
            columns=["capture", "bin", "resends"],
        )
    data.control = control_job.result()
    data.heartbeats = heartbeats_job.result()
    gaps = pd.DataFrame(columns=["capture", "session_id", "src", "at_s", "gap_s"])
    if len(data.heartbeats) and data.heartbeats["long"].fillna(0).sum() > 0:
        # A long wait between two heartbeats is a silence only if that side sent nothing else
        # in between (heartbeats go only to peers nothing else was sent to).
        cand = (
            hb_gaps.where(F.col("at_s") - F.col("prev_s") > GAP_FACTOR * HEARTBEAT_INTERVAL_S)
            .select("capture", "session_id", "src", "prev_s", "at_s")
            .limit(5000)
            .collect()
        )
        cands = spark.createDataFrame(
            cand, "capture string, session_id decimal(20,0), src string, prev_s double, gap_end double"
        )
        busy = (
            f.where(valid & (F.col("kind") != 4))
            .select("capture", "session_id", src.alias("src"), t.alias("t"))
            .join(F.broadcast(cands), ["capture", "session_id", "src"])
            .where((F.col("t") > F.col("prev_s")) & (F.col("t") < F.col("gap_end")))
            .select("capture", "session_id", "src", "gap_end")
            .distinct()
            .collect()
        )
        busy_keys = {(r.capture, int(r.session_id), r.src, r.gap_end) for r in busy}
        silent = [
            (r.capture, int(r.session_id), r.src, r.at_s, r.at_s - r.prev_s)
            for r in cand
            if (r.capture, int(r.session_id), r.src, r.at_s) not in busy_keys
        ]
        silent.sort(key=lambda g: -g[4])
        gaps = pd.DataFrame(silent[:_MAX_GAPS], columns=list(gaps.columns))
    data.heartbeats = data.heartbeats.drop(columns=["long"])

    data.gaps = _with_direction(gaps, clients)
    for name in ("control", "heartbeats"):
        table = getattr(data, name)
        if len(table):
            table["session_id"] = _attribute_session(table, clients)


def _empty(columns: Any, rows: list[dict[str, Any]] | None = None) -> Future[pd.DataFrame]:
    """A finished job with ``rows`` (default none), as :func:`.passes.rows_frame` returns them."""
    import pandas as pd

    done: Future[pd.DataFrame] = Future()
    done.set_result(pd.DataFrame(rows, columns=list(columns)) if rows else pd.DataFrame(columns=list(columns)))
    return done


def _quantiles(fine: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(latency rows, chart histogram) from the fine histogram: p50/p90/p99 by nearest rank,
    interpolated linearly inside the bucket holding the rank between that bucket's own min and
    max (exact when the bucket holds one value; at most one bucket, ~2.3%, off otherwise)."""
    import numpy as np
    import pandas as pd

    rows, hist = [], []
    for (capture, metric), g in fine.groupby(["capture", "metric"]):
        g = g.sort_values("fine")
        n = g["n"].to_numpy(dtype=float)
        lo, hi = g["lo"].to_numpy(dtype=float), g["hi"].to_numpy(dtype=float)
        cum = np.cumsum(n)
        total = cum[-1]
        row = {"capture": capture, "metric": metric, "n": int(total), "max": float(hi[-1])}
        for q, name in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            rank = max(1.0, float(np.ceil(q * total)))  # nearest rank, 1-based
            i = int(np.searchsorted(cum, rank))
            before = cum[i - 1] if i else 0.0
            frac = 0.0 if n[i] <= 1 else (rank - before - 1) / (n[i] - 1)
            row[name] = float(lo[i] + (hi[i] - lo[i]) * min(max(frac, 0.0), 1.0))
        rows.append(row)
        positive = g[g["fine"] > -(10**6)]
        coarse = np.floor(positive["fine"].to_numpy() * _PER_DECADE / _FINE_PER_DECADE).astype(int)
        for bucket, count in pd.Series(positive["n"].to_numpy(), index=coarse).groupby(level=0).sum().items():
            hist.append({"capture": capture, "metric": metric, "bucket": int(bucket), "n": int(count)})
    return (
        pd.DataFrame(rows, columns=["capture", "metric", "n", "p50", "p90", "p99", "max"]),
        pd.DataFrame(hist, columns=["capture", "metric", "bucket", "n"]),
    )


def _attribute_session(table: pd.DataFrame, clients: pd.DataFrame) -> pd.Series:
    """session_id, with Connect frames (session 0) given to their client's session."""
    import pandas as pd

    by_client: dict[tuple[str, str], int] = {}
    for r in clients.itertuples():
        if int(r.session_id):
            by_client.setdefault((r.capture, r.client), int(r.session_id))
    # A loop over zipped columns: DataFrame.apply(axis=1) built a Series per row (0.7 s of
    # driver time on the 16k traffic and message rows of 1M datagrams).
    return pd.Series(
        [
            int(s) if s is not None and int(s) else by_client.get((c, src), by_client.get((c, dst), 0))
            for c, s, src, dst in zip(table["capture"], table["session_id"], table["src"], table["dst"])
        ],
        index=table.index,
    )


def _with_direction(table: pd.DataFrame, clients: pd.DataFrame) -> pd.DataFrame:
    """Add ``direction`` (c2s: the source is the session's client) and drop ``src``."""
    if not len(table):
        out = table.drop(columns=["src"])
        out.insert(2, "direction", [])
        return out
    table = table.copy()
    table["session_id"] = [int(s) if s is not None else 0 for s in table["session_id"]]
    if "dst" not in table.columns:
        table["dst"] = ""
    table["session_id"] = _attribute_session(table, clients)
    client = {(r.capture, int(r.session_id)): r.client for r in clients.itertuples()}
    table["direction"] = [
        "c2s" if client.get((c, s)) == src else "s2c"
        for c, s, src in zip(table["capture"], table["session_id"], table["src"])
    ]
    return table.drop(columns=["src", "dst"])


def _stream_spans(jobs: Jobs, table: DataFrame) -> Future[pd.DataFrame]:
    """The first and last decoded record of each capture of a stream table (its time axis)."""
    from pyspark.sql import functions as F

    ok = table.where(F.col("error").isNull() & F.col("timestamp").isNotNull())
    return jobs.submit(
        ok.groupBy("capture").agg(
            F.min(F.col("timestamp").cast("double")).alias("t0"), F.max(F.col("timestamp").cast("double")).alias("t1")
        ),
        ["capture", "t0", "t1"],
    )


def _streams(
    jobs: Jobs, table: DataFrame, protocol: str, data: ReportData, span: pd.DataFrame
) -> dict[str, Future[pd.DataFrame]]:
    """BQSP / rqueue: per connection counts, rates by time bin, sizes, topics or queues (jobs started)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    ok = table.where(F.col("error").isNull() & F.col("timestamp").isNotNull())
    size_col = "length" if protocol == "bqsp" else "content_length"
    caps = [(r.capture, float(r.t0), nice_bin_width(float(r.t1 - r.t0), BINS)) for r in span.itertuples()]
    for r, (_, _, w) in zip(span.itertuples(), caps):
        data.captures.loc[len(data.captures)] = [r.capture, protocol, float(r.t0), float(r.t1 - r.t0), w]
    out: dict[str, Future[pd.DataFrame]] = {}
    if not caps:
        return out
    axis = F.broadcast(table.sparkSession.createDataFrame(caps, "capture string, t0 double, width double"))
    j = ok.join(axis, "capture")
    at = F.col("timestamp").cast("double") - F.col("t0")
    key = ["capture", "client", "server"]
    out["connections"] = jobs.submit(
        table.groupBy(*key)
        .agg(
            F.count(F.when(F.col("error").isNull() & (F.col("direction") == "c2s"), 1)).alias("c2s"),
            F.count(F.when(F.col("error").isNull() & (F.col("direction") == "s2c"), 1)).alias("s2c"),
            F.sum(F.when(F.col("error").isNull(), F.col(size_col))).alias("bytes"),
            F.count("error").alias("errors"),
            F.min(F.col("timestamp").cast("double")).alias("first"),
            F.max(F.col("timestamp").cast("double")).alias("last"),
        )
        .orderBy(*key),
        key + ["c2s", "s2c", "bytes", "errors", "first", "last"],
    )
    out["rates"] = jobs.submit(
        j.groupBy(*key, "direction", F.floor(at / F.col("width")).cast("int").alias("bin")).agg(
            F.count(F.lit(1)).alias("records"), F.sum(size_col).alias("bytes")
        ),
        key + ["direction", "bin", "records", "bytes"],
    )
    out["sizes"] = jobs.submit(
        ok.groupBy(
            "capture",
            "direction",
            F.when(F.col(size_col) <= 0, -1).otherwise(F.floor(F.log2(size_col))).cast("int").alias("bucket"),
        ).count(),
        ["capture", "direction", "bucket", "count"],
    )
    out["errors"] = jobs.submit(
        table.where(F.col("error").isNotNull())
        .groupBy("capture", F.regexp_replace("error", "[0-9]+", "N").alias("reason"))
        .count(),
        ["capture", "reason", "count"],
    )
    if protocol == "rqueue":
        topic = F.col("topic").cast("string")
        kinds = ok.select("capture", "client", "direction", "message_type_name", topic.alias("topic"))
        out["topics"] = jobs.submit(
            kinds.where(F.col("message_type_name") != "DEREGISTER")
            .groupBy("capture", "topic")
            .agg(
                F.countDistinct(F.when(F.col("message_type_name") == "SUBSCRIBE", F.col("client"))).alias(
                    "subscribers"
                ),
                F.count(F.when(F.col("message_type_name") == "SUBSCRIBE", 1)).alias("subscribes"),
                F.count(F.when(F.col("message_type_name") == "REMOVE", 1)).alias("removes"),
                F.count(
                    F.when((F.col("message_type_name") == "NOTIFICATION") & (F.col("direction") == "c2s"), 1)
                ).alias("published"),
                F.count(
                    F.when((F.col("message_type_name") == "NOTIFICATION") & (F.col("direction") == "s2c"), 1)
                ).alias("delivered"),
            )
            .orderBy("capture", "topic"),
            ["capture", "topic", "subscribers", "subscribes", "removes", "published", "delivered"],
        )
        out["types"] = jobs.submit(
            ok.groupBy("capture", "direction", "message_type_name")
            .count()
            .orderBy("capture", "direction", "message_type_name"),
            ["capture", "direction", "message_type_name", "count"],
        )
    else:
        # Request (c2s) n on a queue is answered by response (s2c) n on that queue: seed 002
        # says a response carries its request's queue number, and each side's packets are in order.
        w = Window.partitionBy(*key, "direction", "queue_number").orderBy("stream_offset")
        numbered = ok.select(
            *key,
            "direction",
            "queue_number",
            F.col("timestamp").cast("double").alias("ts"),
            F.row_number().over(w).alias("n"),
        )
        req = numbered.where(F.col("direction") == "c2s").drop("direction")
        rsp = numbered.where(F.col("direction") == "s2c").drop("direction").withColumnRenamed("ts", "rts")
        pairs = req.join(rsp, [*key, "queue_number", "n"], "left")
        out["queues"] = jobs.submit(
            pairs.groupBy("capture", "client", "server", "queue_number")
            .agg(
                F.count(F.lit(1)).alias("requests"),
                F.count("rts").alias("responses"),
                F.percentile_approx(F.col("rts") - F.col("ts"), [0.5, 0.9, 0.99], 10000).alias("q"),
                F.max(F.col("rts") - F.col("ts")).alias("max"),
            )
            .orderBy("capture", "client", "queue_number"),
            ["capture", "client", "server", "queue_number", "requests", "responses", "q", "max"],
        )
        # Queues in flight over time: +1 at each request, -1 at its response.
        events = (
            pairs.select("capture", F.col("ts").alias("at"), F.lit(1).alias("d"))
            .unionByName(
                pairs.where(F.col("rts").isNotNull()).select("capture", F.col("rts").alias("at"), F.lit(-1).alias("d"))
            )
            .join(axis, "capture")
        )
        out["in_flight"] = jobs.submit(
            events.select("capture", (F.col("at") - F.col("t0")).alias("at_s"), "d")
            .orderBy("capture", "at_s", F.desc("d"))
            .limit(20000),
            ["capture", "at_s", "d"],
        )
    return out
