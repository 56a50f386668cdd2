"""What the report shows, aggregated from the pipeline's tables into small pandas frames.

The nbmq tables' aggregates come from :class:`nbmq.spark.report.passes.Passes` (pyarrow on the
driver for local tables, no Spark job); the BQSP and rqueue tables, when written, are
aggregated by a bounded number of small Spark jobs. Results are small (per capture, session,
direction, kind and time bin; or quantiles and log-scale histograms), so the report's cost stays
a small fraction of the pipeline's. Times are seconds since the capture's first frame (or first
stream record), one axis per capture shared by all its sessions.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .passes import (
    ACK_LATENCY,
    ASSEMBLY,
    BINS,
    FINE_PER_DECADE,
    GAP_FACTOR,
    HEARTBEAT_INTERVAL_S,
    MESSAGE_TTL_S,
    Jobs,
    Passes,
    ranked,
)
from .units import nice_bin_width

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ReportData", "collect", "HEARTBEAT_INTERVAL_S", "MESSAGE_TTL_S", "GAP_FACTOR"]

_MAX_GAPS = 200
_MAX_SESSIONS = 5000
#: log10 histogram buckets per decade for the latency distributions (the quantiles are read
#: from FINE_PER_DECADE buckets, merged into these for the chart).
_PER_DECADE = 5


#: Columns of :attr:`ReportData.round_trips` (and of the summary's ``round_trips`` rows).
ROUND_TRIP_COLUMNS = ["capture", "session_id", "direction", "acks", "min_s", "p50_s", "p99_s"]


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
        round_trips: capture, session_id, direction (of the acked data frames), acks (matched),
            min_s, p50_s, p99_s: SafeDealer round trips per peer, data frame -> its Ack.
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
    round_trips: pd.DataFrame = field(default_factory=lambda: _frame(ROUND_TRIP_COLUMNS))


def round_trip_rows(trips: pd.DataFrame) -> list[dict[str, Any]]:
    """:attr:`ReportData.round_trips` as the summary's ``round_trips`` rows (JSON values:
    session_id as the u64's hex text, seconds as floats)."""
    from .units import hex_id

    return [
        {
            "capture": r["capture"],
            "session_id": hex_id(r["session_id"]),
            "direction": r["direction"],
            "acks": int(r["acks"]),
            **{k: float(r[k]) for k in ("min_s", "p50_s", "p99_s")},
        }
        for r in trips.to_dict("records")
    ]


def _frame(columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(columns=columns)


def collect(spark: SparkSession, tables: dict[str, str], passes: Passes | None = None) -> ReportData:
    """Aggregate the pipeline's Parquet tables for the report.

    Args:
        spark: the pipeline's session (runs the BQSP and rqueue tables' jobs; reads ``frames/``
            and ``messages/`` only when they are not local, :class:`~nbmq.spark.report.passes.Passes`).
        tables: table name -> Parquet path, as the pipeline's summary ``tables``: ``frames``,
            ``messages``, ``sessions`` and, when written, ``bqsp`` / ``rqueue``.
        passes: the pipeline's :class:`~nbmq.spark.report.passes.Passes` over these frames and
            messages tables (its aggregates, already computed for the sessions table and the
            summary, are reused); None: computed here.

    Returns:
        A :class:`ReportData`. SafeDealer ack round trips match data frames and Acks on the
        frames' ``ack_hash`` column (``--no-payload`` tables have it too); a frames table
        written before that column is hashed from its ``payload`` column, and one with neither
        leaves them out, with a note that says so.
    """
    if passes is None:
        passes = Passes(spark, tables)
    jobs = Jobs()
    try:
        return _collect(spark, tables, passes, jobs, [])
    finally:
        jobs.close()


def _collect(spark: SparkSession, tables: dict[str, str], passes: Passes, jobs: Jobs, notes: list[str]) -> ReportData:
    import pandas as pd

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
        _udp(data, passes)
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


def _session_values(sessions: pd.DataFrame) -> pd.DataFrame:
    """capture, metric, v (seconds >= 0) of the three handshake latencies of each session."""
    import numpy as np
    import pandas as pd

    def seconds(column: str) -> np.ndarray:  # Spark's cast of a timestamp to double: micros / 1e6
        ts = pd.to_datetime(sessions[column], utc=True)
        micros = ts.dt.tz_localize(None).astype("datetime64[us]").to_numpy().astype(np.int64) / 1e6
        return np.where(ts.isna().to_numpy(), np.nan, micros)

    out = []
    if len(sessions):
        connect, connected, beat = seconds("connect_ts"), seconds("connected_ts"), seconds("first_heartbeat_ts")
        for metric, v in (
            ("handshake: Connect -> Connected", connected - connect),
            ("handshake: Connected -> first Heartbeat", beat - connected),
            ("handshake: Connect -> first Heartbeat", beat - connect),
        ):
            out.append(pd.DataFrame({"capture": sessions["capture"].to_numpy(), "metric": metric, "v": v}))
    values = pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["capture", "metric", "v"])
    return values[values["v"].notna() & (values["v"] >= 0)]


def _fine_histogram(values: pd.DataFrame, partial: pd.DataFrame) -> pd.DataFrame:
    """capture, metric, fine, n, lo, hi: single values (capture, metric, v) and partial
    histograms (capture, metric, fine, n, lo, hi) merged per fine bucket."""
    import pandas as pd

    from .passes import fine_bucket

    v = values["v"].to_numpy(dtype=float)
    single = pd.DataFrame(
        {"capture": values["capture"].to_numpy(), "metric": values["metric"].to_numpy(), "fine": fine_bucket(v)}
    ).assign(n=1, lo=v, hi=v)
    both = pd.concat([single, partial], ignore_index=True) if len(partial) else single
    if not len(both):
        return pd.DataFrame(columns=["capture", "metric", "fine", "n", "lo", "hi"])
    return (
        both.groupby(["capture", "metric", "fine"], sort=True)
        .agg(n=("n", "sum"), lo=("lo", "min"), hi=("hi", "max"))
        .reset_index()
    )


def _udp(data: ReportData, passes: Passes) -> None:
    """Fill ``data``'s nbmq tables from ``passes``: traffic, errors and messages from its
    groups; latencies, control frames, heartbeats and their silent gaps; the SafeDealer ack
    matching and resends (one more read of ``frames/`` when some session acks)."""
    import pandas as pd

    names = {c["capture"] for c in passes.caps}
    groups = passes.frame_groups()

    # Latency distributions: a fine histogram per (capture, metric); quantiles read from it.
    values = [_session_values(passes.sessions())]
    partial = passes.assembly.assign(metric=ASSEMBLY)
    matched = passes.ack_matching()  # the findings' in-flight window read the same matching
    if matched is not None:
        trips, resends = matched
        data.round_trips = _peer_round_trips(trips)
        if len(trips):
            per_capture = trips.groupby(["capture", "fine"], as_index=False).agg(
                n=("n", "sum"), lo=("lo", "min"), hi=("hi", "max")
            )
            partial = pd.concat([partial, per_capture.assign(metric=ACK_LATENCY)], ignore_index=True)
        if len(resends):
            data.resends = resends
    elif passes.acked_sessions():
        data.notes.append(
            "SafeDealer ack round trips need the frames' ack_hash column (or, in tables "
            "written before it, the payload column)."
        )
    hist = _fine_histogram(pd.concat(values, ignore_index=True), partial)
    data.latency, data.histograms = _quantiles(hist)

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

    # Control frames for the flow graph; heartbeats summarised; silences between heartbeats.
    data.control = passes.control()
    data.heartbeats, long = passes.heartbeats()
    gaps = pd.DataFrame(columns=["capture", "session_id", "src", "at_s", "gap_s"])
    if len(long):
        # A long wait between two heartbeats is a silence only if that side sent nothing else
        # in between (heartbeats go only to peers nothing else was sent to).
        silent = long[~passes.busy(long)]
        silent = pd.DataFrame(
            {
                "capture": silent["capture"].to_numpy(),
                "session_id": [int(s) for s in silent["session_id"]],
                "src": silent["src"].to_numpy(),
                "at_s": silent["at_s"].to_numpy(),
                "gap_s": (silent["at_s"] - silent["prev_s"]).to_numpy(),
            }
        )
        gaps = silent.sort_values("gap_s", ascending=False, kind="stable").head(_MAX_GAPS).reset_index(drop=True)

    data.gaps = _with_direction(gaps, clients)
    for name in ("control", "heartbeats"):
        table = getattr(data, name)
        if len(table):
            table["session_id"] = _attribute_session(table, clients)


def _quantiles(fine: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(latency rows, chart histogram) from the fine histogram: p50/p90/p99 (:func:`~nbmq.spark.report.passes.ranked`)."""
    import numpy as np
    import pandas as pd

    rows, hist = [], []
    for (capture, metric), g in fine.groupby(["capture", "metric"]):
        g = g.sort_values("fine")
        n = g["n"].to_numpy(dtype=float)
        lo, hi = g["lo"].to_numpy(dtype=float), g["hi"].to_numpy(dtype=float)
        row = {"capture": capture, "metric": metric, "n": int(n.sum()), "max": float(hi[-1])}
        for q, name in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            row[name] = ranked(n, lo, hi, q)
        rows.append(row)
        positive = g[g["fine"] > -(10**6)]
        coarse = np.floor(positive["fine"].to_numpy() * _PER_DECADE / FINE_PER_DECADE).astype(int)
        for bucket, count in pd.Series(positive["n"].to_numpy(), index=coarse).groupby(level=0).sum().items():
            hist.append({"capture": capture, "metric": metric, "bucket": int(bucket), "n": int(count)})
    return (
        pd.DataFrame(rows, columns=["capture", "metric", "n", "p50", "p90", "p99", "max"]),
        pd.DataFrame(hist, columns=["capture", "metric", "bucket", "n"]),
    )


def _peer_round_trips(trips: pd.DataFrame) -> pd.DataFrame:
    """:data:`ROUND_TRIP_COLUMNS` rows from :meth:`Passes.acks`'s fine histograms per session and
    direction: the matched acks, the minimum (exact) and the median and p99 (:func:`~nbmq.spark.report.passes.ranked`),
    seconds; sorted by capture, session and direction."""
    import pandas as pd

    rows = []
    for (capture, session_id, direction), g in trips.groupby(["capture", "session_id", "direction"], sort=False):
        g = g.sort_values("fine")
        n = g["n"].to_numpy(dtype=float)
        lo, hi = g["lo"].to_numpy(dtype=float), g["hi"].to_numpy(dtype=float)
        rows.append(
            {
                "capture": capture,
                "session_id": int(session_id),
                "direction": direction,
                "acks": int(n.sum()),
                "min_s": float(lo[0]),
                "p50_s": ranked(n, lo, hi, 0.5),
                "p99_s": ranked(n, lo, hi, 0.99),
            }
        )
    out = pd.DataFrame(rows, columns=ROUND_TRIP_COLUMNS)
    return out.sort_values(["capture", "session_id", "direction"], kind="stable").reset_index(drop=True)


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
