"""The aggregates behind the sessions table, the summary and the report, computed on the driver.

::

    passes = Passes(spark, {"frames": "out/frames", "messages": "out/messages"})
    sessions = passes.sessions()           # pandas, the sessions table
    rows = passes.summary_rows(["a.pcap"], SUMMARY_COLUMNS)  # the pipeline summary's per-capture rows

One read of each frames file (:func:`nbmq.spark.scan.scan`: pyarrow in driver threads for a
local table, ``mapInArrow`` in Spark's executors for a remote one) groups the frames per
(capture, session, source, destination, kind, error reason, time bin) and keeps the few
control frames and each sender's runs of heartbeats (not the heartbeats); one read of each messages file groups the messages per
(capture, session, sender, time bin, incomplete reason). Each piece's partial aggregates are
merged here: sums, minima and maxima of groups are the same in any order, so the rows equal the
Spark SQL aggregations they replace (``tests/spark/test_sessions_passes.py`` compares the
sessions table and the summary with Spark's). The report adds two conditional reads
(:meth:`Passes.acks` for SafeDealer captures, :meth:`Passes.busy` when heartbeats have
long gaps). No Spark job runs for a local table: Spark's fixed cost is paid once, at start-up.

The time axis (first and last frame of each capture, which the bins need before the pass) is read
from the frames table's Parquet footers when every row group holds one capture with statistics;
else a narrow read of ``capture`` and ``ts_ns`` computes it.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...wire import SEALED_KINDS
from .units import nice_bin_width

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Passes", "Jobs", "footer_spans", "ranked", "BINS", "MESSAGE_TTL_S", "GAP_FACTOR", "HEARTBEAT_INTERVAL_S"]

#: Time bins per capture on the report's charts.
BINS = 120
#: The reference's default uncompleted_message_ttl (nbmq.options), seconds.
MESSAGE_TTL_S = 10.0
#: The reference's default peer_heartbeat_ivl (nbmq.options), seconds.
HEARTBEAT_INTERVAL_S = 1.0
#: A heartbeat gap is reported past this multiple of the interval (one lost heartbeat).
GAP_FACTOR = 1.5
#: Control frames (Connect, Connected, Disconnected) kept for the flow graph, first by time.
MAX_CONTROL_ROWS = 4000
#: Heartbeat gaps checked for other traffic (the longest are reported).
MAX_GAP_CANDIDATES = 5000
_DATA, _CONNECT, _DISCONNECTED, _HEARTBEAT, _ACK = 0, 1, 3, 4, 5
_CONTROL = (1, 2, 3)


class Jobs:
    """Runs Spark jobs a few at a time (threads on one session): each is small, so their
    scheduling and driver round trips, not the work, dominate; overlapping them hides that.
    The report's BQSP and rqueue tables use it."""

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
    """``df`` collected into pandas through Python rows (nulls as None, ids as Decimal)."""
    return _rows([r.asDict() for r in df.collect()], columns, exact)


def _rows(rows: list[dict[str, Any]], columns: list[str], exact: tuple[str, ...] = ()) -> pd.DataFrame:
    """pandas frame of ``rows`` (Python values). pandas stores an integer column with a null as
    float64, which loses nanoseconds since the epoch (53-bit mantissa); the ``exact`` columns
    are nullable ``Int64`` instead."""
    import pandas as pd

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
        values a min/max over the rows would give; None when the footers cannot tell (another
        file system, a row group without statistics or holding several captures, unreadable files).
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
    except (OSError, ValueError):  # an unreadable or foreign file: read the rows instead
        return None


def _span_piece(table: pa.Table) -> dict[str, pa.Table]:
    """Each capture's min and max ``ts_ns`` in one piece of ``frames/``."""
    return {"spans": table.group_by("capture").aggregate([("ts_ns", "min"), ("ts_ns", "max")])}


def _empty(table: str, columns: list[str]) -> pa.Table:
    """An empty pyarrow table of ``columns`` of the pipeline's ``frames`` or ``messages`` table."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from ..schema import frames_schema, messages_schema

    schema = to_arrow_schema(
        frames_schema(payload=True) if table == "frames" else messages_schema(False), timezone="UTC"
    )
    return schema.empty_table().select(columns)


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
    "secure",
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
_ENDPOINTS = ["src_addr", "src_port", "dst_addr", "dst_port"]
_GROUP_KEYS = ["capture", "session_id", *_ENDPOINTS, "kind", "kind_name", "reason", "bin", "unreadable", "secure"]
#: Columns of ``frames/`` the frames pass reads.
FRAME_COLUMNS = [
    "capture",
    "frame_number",
    "ts_ns",
    *_ENDPOINTS,
    "length",
    "kind",
    "kind_name",
    "session_id",
    "error",
    "secure",
]
#: Columns of ``messages/`` the messages pass reads.
MESSAGE_COLUMNS = [
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
]
_ROWS = ["capture", "session_id", *_ENDPOINTS, "kind_name", "ts_ns"]
#: The latency metric of message assembly (first -> last frame of a complete message).
ASSEMBLY = "message assembly (first -> last frame)"
ACK_LATENCY = "SafeDealer ack (data frame -> its Ack)"
#: Fine log10 buckets per decade of the latency histograms (about 2.3% wide).
FINE_PER_DECADE = 100
#: The fine bucket of values <= 0.
ZERO_BUCKET = -(10**6)


def _axis(caps: dict[str, tuple[float, float, float]], capture: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of the string column ``capture``: its capture's t0, bin width and end (epoch s,
    s, epoch s), NaN for a capture without an axis."""
    import pyarrow as pa
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(capture)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks() if enc.num_chunks else pa.array([], pa.dictionary(pa.int32(), pa.string()))
    values = np.array(
        [caps.get(c, (np.nan, np.nan, np.nan)) for c in enc.dictionary.to_pylist()] + [(np.nan,) * 3], np.float64
    ).reshape(-1, 3)
    codes = enc.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
    return values[codes, 0], values[codes, 1], values[codes, 2]


def _seconds_since(ts_ns: Any, t0: np.ndarray) -> np.ndarray:
    """``ts_ns / 1e9 - t0`` per row (float64, NaN for a null time): the doubles Spark's
    ``ts_ns / 1e9 - t0`` gives."""
    import pyarrow.compute as pc

    valid = pc.is_valid(ts_ns).to_numpy(zero_copy_only=False)
    s = ts_ns.fill_null(0).to_numpy(zero_copy_only=False) / 1e9 - t0
    s[~valid] = np.nan
    return s


def _bins(seconds: np.ndarray, width: np.ndarray) -> Any:
    """int32 array of ``floor(seconds / width)``, null where either is NaN."""
    import pyarrow as pa

    b = np.floor(seconds / width)
    ok = np.isfinite(b)
    return pa.array(np.where(ok, b, 0).astype(np.int32), mask=~ok)


def _frames_piece(caps: dict[str, tuple[float, float, float]], table: pa.Table) -> dict[str, pa.Table]:
    """One piece of ``frames/`` (:data:`FRAME_COLUMNS`): its frame groups, Connect, control and
    heartbeat rows (see :class:`Passes`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t0, width, _ = _axis(caps, table["capture"])
    seconds = _seconds_since(table["ts_ns"], t0)
    keyed = table.select(["capture", "session_id", *_ENDPOINTS, "kind", "kind_name"]).append_column(
        "reason", pc.replace_substring_regex(table["error"], pattern="[0-9]+", replacement="N")
    )
    keyed = keyed.append_column("bin", _bins(seconds, width))
    keyed = keyed.append_column("unreadable", pc.is_null(table["frame_number"]))
    keyed = keyed.append_column("secure", pc.fill_null(table["secure"], False))
    keyed = keyed.append_column("length", table["length"]).append_column("ts_ns", table["ts_ns"])
    groups = keyed.group_by(_GROUP_KEYS).aggregate(
        [([], "count_all"), ("length", "sum"), ("ts_ns", "min"), ("ts_ns", "max")]
    )
    kind = table["kind"].fill_null(-1).to_numpy(zero_copy_only=False)
    valid = pc.is_null(table["error"]).to_numpy(zero_copy_only=False) & (kind >= 0)
    rows = table.select(_ROWS)
    control = rows.filter(pa.array(valid & np.isin(kind, _CONTROL)))
    if control.num_rows > MAX_CONTROL_ROWS:  # the first by (capture, time) are kept
        control = control.sort_by([("capture", "ascending"), ("ts_ns", "ascending")]).slice(0, MAX_CONTROL_ROWS)
    beats = valid & (kind == _HEARTBEAT) & ~np.isnan(t0)
    return {
        "groups": groups,
        "bundled": _bundled_piece(table),
        "connects": rows.filter(pa.array(valid & (kind == _CONNECT))),
        "control": control,
        **_beats_piece(rows.filter(pa.array(beats)), seconds[beats]),
    }


def _bundled_piece(table: pa.Table) -> pa.Table:
    """Per capture of a piece: ``repeats``, its rows that share the capture record (frame number)
    of the row before them (a sealed bundle's frames after its first), and the piece's ``first``
    and ``last`` frame numbers, so that :func:`bundled_rows` can tell a bundle cut by a piece."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = pa.schema([("capture", pa.string()), ("repeats", pa.int64()), ("first", pa.int64()), ("last", pa.int64())])
    if not table.num_rows:
        return schema.empty_table()
    codes = pc.dictionary_encode(table["capture"].combine_chunks())
    cap = codes.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    fn = table["frame_number"].fill_null(-1).to_numpy(zero_copy_only=False)
    repeat = np.zeros(len(fn), bool)
    repeat[1:] = (fn[1:] == fn[:-1]) & (cap[1:] == cap[:-1]) & (fn[1:] >= 0)
    names = codes.dictionary.to_pylist()
    rows: dict[str, list[Any]] = {"capture": [], "repeats": [], "first": [], "last": []}
    for code in np.unique(cap[cap >= 0]):
        mine = (cap == code) & (fn >= 0)
        if not mine.any():
            continue
        numbers = fn[mine]
        rows["capture"].append(names[code])
        rows["repeats"].append(int(repeat[cap == code].sum()))
        rows["first"].append(int(numbers[0]))
        rows["last"].append(int(numbers[-1]))
    return pa.table(rows, schema=schema)


def bundled_rows(pieces: pa.Table) -> dict[str, int]:
    """capture -> rows of the frames table that are not their capture record's first (the frames
    of a sealed bundle after its first): the ``repeats`` of :func:`_bundled_piece`'s pieces, plus
    one wherever a piece begins with the record the piece before it ended with."""
    out: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    for capture, repeats, first, last in zip(*(pieces[k].to_pylist() for k in ("capture", "repeats", "first", "last"))):
        out[capture] = out.get(capture, 0) + repeats
        spans.setdefault(capture, []).append((first, last))
    for capture, runs in spans.items():
        runs.sort()
        out[capture] += sum(1 for (_, end), (start, _) in zip(runs, runs[1:]) if start == end)
    return out


#: A sender's heartbeats, seconds since t0: the columns that say whose they are, then a run.
_SENDER = ["capture", "session_id", "src_addr", "src_port"]


def _sender_codes(table: pa.Table) -> np.ndarray:
    """int64 code per row of ``table``'s :data:`_SENDER` columns, in order of first appearance."""
    import pandas as pd
    import pyarrow.compute as pc

    from ..messages import _u64

    codes = [
        pc.dictionary_encode(table[c].combine_chunks()).indices.fill_null(-1).to_numpy()
        for c in ("capture", "src_addr")
    ]
    return (
        pd.DataFrame(
            {
                "c": codes[0],
                "sid": _u64(table["session_id"].fill_null(0)),
                "a": codes[1],
                "p": table["src_port"].fill_null(0),
            }
        )
        .groupby(["c", "sid", "a", "p"], sort=False)
        .ngroup()
        .to_numpy()
    )


def _beats_piece(rows: pa.Table, at: np.ndarray) -> dict[str, pa.Table]:
    """One piece's valid heartbeats (:data:`_ROWS` columns; ``at``: seconds since their
    capture's t0) reduced: ``beat_pairs``, per (capture, session_id, endpoints) their count and
    first and last ``at_s``; ``beat_runs``, per sender (:data:`_SENDER`) its runs of heartbeats
    at most :data:`GAP_FACTOR` intervals apart (``start_s``, ``end_s``). Runs of all pieces,
    joined where they overlap or come closer than that, give the gaps between one sender's
    consecutive heartbeats (:meth:`Passes.heartbeats`) with the same seconds."""
    import pyarrow as pa

    pairs = (
        rows.select(["capture", "session_id", *_ENDPOINTS])
        .append_column("at_s", pa.array(at, pa.float64()))
        .group_by(["capture", "session_id", *_ENDPOINTS])
        .aggregate([([], "count_all"), ("at_s", "min"), ("at_s", "max")])
    )
    rows, at = rows.filter(pa.array(~np.isnan(at))), at[~np.isnan(at)]  # no time: in no run
    sender = _sender_codes(rows) if rows.num_rows else np.zeros(0, np.int64)
    order = np.lexsort((at, sender))
    s, t = sender[order], at[order]
    split = np.r_[True, (s[1:] != s[:-1]) | (t[1:] - t[:-1] > GAP_FACTOR * HEARTBEAT_INTERVAL_S)]
    first = np.flatnonzero(split[: s.size])
    last = np.r_[first[1:] - 1, s.size - 1][: first.size]
    runs = rows.take(pa.array(order[first], pa.int64())).select(_SENDER)
    runs = runs.append_column("start_s", pa.array(t[first], pa.float64()))
    return {"beat_pairs": pairs, "beat_runs": runs.append_column("end_s", pa.array(t[last], pa.float64()))}


def _message_piece(caps: dict[str, tuple[float, float, float]], table: pa.Table) -> dict[str, pa.Table]:
    """One file of ``messages/`` (:data:`MESSAGE_COLUMNS`): its message groups and the fine
    histogram of complete messages' assembly times."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t0, width, t_end = _axis(caps, table["capture"])
    first = _micros_seconds(table["first_ts"])
    last = _micros_seconds(table["last_ts"])
    complete = table["complete"].fill_null(False).to_numpy(zero_copy_only=False)
    rejected = table["rejected"].fill_null(0).to_numpy(zero_copy_only=False) > 0
    expired = (t_end - last) > MESSAGE_TTL_S  # NaN compares False, as Spark's null
    reason = np.where(
        rejected,
        "rejected frames (conflicting or hostile headers)",
        np.where(
            expired,
            f"expired: no frame for over {MESSAGE_TTL_S:g} s (the default TTL) before the capture ended",
            "missing bytes at the capture's end (still in flight)",
        ),
    ).astype(object)
    reason[complete] = None
    size = table["message_size"].fill_null(0).to_numpy(zero_copy_only=False)
    missing = table["missing_bytes"]
    keyed = pa.table(
        {
            "capture": table["capture"],
            "session_id": table["session_id"],
            "src": table["src"],
            "bin": _bins(first - t0, width),
            "reason": pa.array(reason, pa.string()),
            "m_complete": pa.array(complete.astype(np.int64)),
            "m_bytes": pa.array(np.where(complete, size, 0).astype(np.int64)),
            "duplicates": table["duplicates"],
            "rejected": table["rejected"],
            "m_incomplete": pa.array((~complete).astype(np.int64)),
            "m_missing": pc.if_else(pa.array(complete), 0, pc.cast(missing, pa.int64())).fill_null(0),
        }
    )
    groups = keyed.group_by(MESSAGE_GROUPS[:5]).aggregate(
        [(c, "sum") for c in ("m_complete", "m_bytes", "duplicates", "rejected", "m_incomplete", "m_missing")]
    )
    v = last - first
    ok = complete & ~np.isnan(v) & (v >= 0)
    return {"groups": groups, "assembly": _fine_groups(table["capture"].filter(pa.array(ok)), v[ok])}


def _micros_seconds(ts: Any) -> np.ndarray:
    """A timestamp column as float64 seconds since the epoch (micros / 1e6, Spark's cast to
    double), NaN for null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    micros = pc.cast(pc.cast(ts, pa.timestamp("us", tz="UTC"), safe=False), pa.int64())
    out = micros.fill_null(0).to_numpy(zero_copy_only=False) / 1e6
    out[~pc.is_valid(micros).to_numpy(zero_copy_only=False)] = np.nan
    return out


def fine_bucket(v: np.ndarray) -> np.ndarray:
    """The latency histogram's fine bucket of each value (seconds, >= 0): ``floor(log10(v) *
    100)``, :data:`ZERO_BUCKET` for 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(v <= 0, ZERO_BUCKET, np.floor(np.log10(np.where(v > 0, v, 1)) * FINE_PER_DECADE)).astype(
            np.int64
        )


def _fine_groups(capture: Any, v: np.ndarray) -> pa.Table:
    """(capture, fine, n, lo, hi) of the values ``v`` (seconds) per capture and fine bucket."""
    import pyarrow as pa

    t = pa.table({"capture": capture, "fine": pa.array(fine_bucket(v)), "v": pa.array(v, pa.float64())})
    g = t.group_by(["capture", "fine"]).aggregate([([], "count_all"), ("v", "min"), ("v", "max")])
    return pa.table(
        {"capture": g["capture"], "fine": g["fine"], "n": g["count_all"], "lo": g["v_min"], "hi": g["v_max"]}
    )


def ranked(n: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: float) -> float:
    """The ``q`` quantile of a fine histogram (buckets in order: counts ``n``, each bucket's
    min ``lo`` and max ``hi``) by nearest rank, interpolated linearly inside the bucket holding
    the rank between its own min and max (exact when the bucket holds one value; at most one
    bucket, ~2.3%, off otherwise)."""
    cum = np.cumsum(n)
    rank = max(1.0, float(np.ceil(q * cum[-1])))  # nearest rank, 1-based
    i = int(np.searchsorted(cum, rank))
    before = cum[i - 1] if i else 0.0
    frac = 0.0 if n[i] <= 1 else (rank - before - 1) / (n[i] - 1)
    return float(lo[i] + (hi[i] - lo[i]) * min(max(frac, 0.0), 1.0))


#: Columns of :func:`_ack_piece`'s rows: a (capture, session, ack hash) group of one piece.
_ACK_KEY = ["capture", "session_id", "h"]


def _ack_piece(acked: Any, clients: pd.DataFrame, has_hash: bool, table: pa.Table) -> pa.Table:
    """One piece of ``frames/``: its data frames of the ``acked`` sessions (uint64 ids) and its
    Acks, grouped by (capture, session_id, ack hash ``h``): ``sent_ns`` and ``last_ns`` (first
    and last send), ``sends``, ``acked_ns`` (first Ack), ``c2s`` (1 when a data frame of it came
    from its session's client in ``clients``: capture, sid (uint64), addr, port)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..messages import _u64

    kind = table["kind"].fill_null(-1).to_numpy(zero_copy_only=False)
    ok = pc.is_null(table["error"]).to_numpy(zero_copy_only=False)
    sid = _u64(pc.cast(table["session_id"], pa.decimal128(20, 0)).fill_null(0)) if table.num_rows else np.zeros(0)
    data = ok & (kind == _DATA) & np.isin(sid, acked)
    if has_hash:
        h = table["ack_hash"]
        ack = ok & (kind == _ACK) & pc.is_valid(h).to_numpy(zero_copy_only=False)
        hashes = h.fill_null(0).to_numpy(zero_copy_only=False)
    else:  # a frames table written before the column: the hash from the header and payload
        payload = table["payload"]
        sizes = pc.binary_length(payload).fill_null(0).to_numpy(zero_copy_only=False)
        ack = ok & (kind == _ACK) & (sizes == 8)
        hashes = np.zeros(table.num_rows, np.int64)
        if ack.any():
            body = b"".join(payload.filter(pa.array(ack)).to_pylist())
            hashes[ack] = np.frombuffer(body, ">u8").astype(np.uint64).view(np.int64)
        if data.any():
            hashes[data] = _frame_hashes(table.filter(pa.array(data)))
    keep = data | ack
    is_ack = pa.array(ack[keep])
    ts = table["ts_ns"].filter(pa.array(keep))
    rows = pa.table(
        {
            "capture": table["capture"].filter(pa.array(keep)),
            "session_id": table["session_id"].filter(pa.array(keep)),
            "h": pa.array(hashes[keep], pa.int64()),
            "data_ns": pc.if_else(is_ack, pa.scalar(None, pa.int64()), ts),
            "ack_ns": pc.if_else(is_ack, ts, pa.scalar(None, pa.int64())),
            "c2s": pa.array(_from_client(clients, table, sid, data)[keep], mask=ack[keep]),
        }
    )
    g = rows.group_by(_ACK_KEY).aggregate(
        [("data_ns", "min"), ("data_ns", "max"), ("data_ns", "count"), ("ack_ns", "min"), ("c2s", "max")]
    )
    return _ack_rows(g, ("data_ns_min", "data_ns_max", "data_ns_count", "ack_ns_min", "c2s_max"))


def _from_client(clients: pd.DataFrame, table: pa.Table, sid: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """int8 per row of ``table``: 1 where ``rows`` is set and the row's source is its session's
    client in ``clients`` (capture, sid as uint64, addr, port), else 0."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    out = np.zeros(table.num_rows, np.int8)
    at = np.flatnonzero(rows)
    if not at.size or not len(clients):
        return out
    picked = pa.array(at)
    known = pd.MultiIndex.from_arrays([clients["capture"], clients["sid"].to_numpy(np.uint64)])
    which = known.get_indexer(
        pd.MultiIndex.from_arrays([table["capture"].take(picked).to_numpy(zero_copy_only=False), sid[at]])
    )
    found = which >= 0
    port = np.where(found, clients["port"].to_numpy(np.int64)[which], -1)
    same = port == table["src_port"].take(picked).fill_null(-1).to_numpy(zero_copy_only=False)
    addr = pa.array(clients["addr"].tolist(), pa.string()).take(pa.array(np.where(found, which, 0)))
    same &= pc.fill_null(pc.equal(table["src_addr"].take(picked), addr), False).to_numpy(zero_copy_only=False)
    out[at] = (found & same).astype(np.int8)
    return out


def _ack_rows(g: pa.Table, names: tuple[str, str, str, str, str]) -> pa.Table:
    """The key and ``names`` columns of the grouped table ``g`` under :func:`_ack_piece`'s names."""
    import pyarrow as pa

    return pa.table(
        {
            **{k: g[k] for k in _ACK_KEY},
            **{k: g[v] for k, v in zip(("sent_ns", "last_ns", "sends", "acked_ns", "c2s"), names)},
        }
    )


def _ack_reduce(caps: dict[str, tuple[float, float, float]], rows: pa.Table) -> dict[str, pa.Table]:
    """Every :func:`_ack_piece` row of some ack hashes (all rows of each hash): per hash sent by a
    capture with an axis, its round trip (first send -> first Ack, seconds, when acked and not
    before the send) and its resends (sends after the first, at the last send's time bin).

    Returns ``round_trips`` (capture, session_id, c2s, fine, n, lo, hi: the fine histogram per
    session and direction, :func:`fine_bucket`) and ``resends`` (capture, bin, resends)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    g = rows.group_by(_ACK_KEY).aggregate(
        [("sent_ns", "min"), ("last_ns", "max"), ("sends", "sum"), ("acked_ns", "min"), ("c2s", "max")]
    )
    g = _ack_rows(g, ("sent_ns_min", "last_ns_max", "sends_sum", "acked_ns_min", "c2s_max"))
    t0, width, _ = _axis(caps, g["capture"])
    sends = g["sends"].fill_null(0).to_numpy(zero_copy_only=False)
    sent = (sends > 0) & ~np.isnan(t0)  # hashes only acked (their data frame not seen) drop out
    g, t0, width, sends = g.filter(pa.array(sent)), t0[sent], width[sent], sends[sent]
    # the nanosecond difference (NaN without an Ack): a difference of seconds since t0 would
    # carry the epoch-sized doubles' rounding, ~0.1 us
    v = _seconds_since(pc.subtract(g["acked_ns"], g["sent_ns"]), np.zeros(g.num_rows))
    ok = ~np.isnan(v) & (v >= 0)
    keyed = pa.table(
        {
            "capture": g["capture"].filter(pa.array(ok)),
            "session_id": g["session_id"].filter(pa.array(ok)),
            "c2s": g["c2s"].filter(pa.array(ok)),
            "fine": pa.array(fine_bucket(v[ok])),
            "v": pa.array(v[ok], pa.float64()),
        }
    )
    trips = keyed.group_by(["capture", "session_id", "c2s", "fine"]).aggregate(
        [([], "count_all"), ("v", "min"), ("v", "max")]
    )
    again = sends > 1
    bins = np.floor(_seconds_since(g["last_ns"], t0)[again] / width[again]).astype(np.int64)
    resends = (
        pa.table(
            {
                "capture": g["capture"].filter(pa.array(again)),
                "bin": pa.array(bins),
                "resends": pa.array(sends[again] - 1),
            }
        )
        .group_by(["capture", "bin"])
        .aggregate([("resends", "sum")])
    )
    return {
        "round_trips": pa.table(
            {
                **{k: trips[k] for k in ("capture", "session_id", "c2s", "fine")},
                "n": trips["count_all"],
                "lo": trips["v_min"],
                "hi": trips["v_max"],
            }
        ),
        "resends": pa.table({"capture": resends["capture"], "bin": resends["bin"], "resends": resends["resends_sum"]}),
    }


def _frame_hashes(table: pa.Table) -> np.ndarray:
    """int64 ack hash of each data frame row (header fields and ``payload``) of an old frames table."""
    import pandas as pd

    from .ackhash import COLUMNS, _hashes

    cols = []
    for name in COLUMNS:
        col = table[name]
        if name in ("session_id", "message_id"):
            from ..messages import _u64

            cols.append(pd.Series(_u64(col.fill_null(0)).view(np.int64)))
        elif name == "payload":
            cols.append(pd.Series(col.fill_null(b"").to_pylist(), dtype=object))
        else:
            cols.append(pd.Series(col.fill_null(0).to_numpy(zero_copy_only=False)))
    return _hashes(*cols).to_numpy(np.int64)


def _busy_piece(cands: pd.DataFrame, table: pa.Table) -> dict[str, pa.Table]:
    """Which heartbeat-gap candidates of ``cands`` (capture, sid as uint64, src, prev_s, at_s,
    t0, index) saw another valid frame of their sender in one piece of ``frames/``: their indexes."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..messages import _u64
    from ..messages_local import endpoint_text

    kind = table["kind"].fill_null(-1).to_numpy(zero_copy_only=False)
    ok = pc.is_null(table["error"]).to_numpy(zero_copy_only=False) & (kind >= 0) & (kind != _HEARTBEAT)
    sid = _u64(pc.cast(table["session_id"], pa.decimal128(20, 0)).fill_null(0)) if table.num_rows else np.zeros(0)
    ok &= np.isin(sid, cands["sid"].to_numpy(np.uint64))
    hit: list[int] = []
    if ok.any():
        rows = table.filter(pa.array(ok))
        t0, _, _ = _axis({c: (t, 0.0, 0.0) for c, t in zip(cands["capture"], cands["t0"])}, rows["capture"])
        frames = pd.DataFrame(
            {
                "capture": rows["capture"].to_numpy(zero_copy_only=False),
                "sid": sid[ok],
                "src": endpoint_text(rows["src_addr"], rows["src_port"]).to_numpy(zero_copy_only=False),
                "t": _seconds_since(rows["ts_ns"], t0),
            }
        )
        times = {k: np.sort(g["t"].to_numpy()) for k, g in frames.groupby(["capture", "sid", "src"], sort=False)}
        for key, g in cands.groupby(["capture", "sid", "src"], sort=False):
            t = times.get(key)
            if t is None:
                continue
            i = np.searchsorted(t, g["prev_s"].to_numpy(), "right")
            busy = (i < t.size) & (t[np.minimum(i, t.size - 1)] < g["at_s"].to_numpy())
            hit.extend(g["index"].to_numpy()[busy].tolist())
    return {"busy": pa.table({"index": pa.array(hit, pa.int64())})}


def _columns_of(path: str) -> list[str]:
    """Column names of the Parquet table at ``path`` (its first file's footer, or Spark's read)."""
    import pyarrow.dataset as ds

    from ..inputs import is_local, local_path

    if is_local(path):
        return ds.dataset(local_path(path), format="parquet").schema.names

    from ..inputs import _filesystem

    fs, root = _filesystem(path)
    return ds.dataset(root, filesystem=fs, format="parquet").schema.names


class Passes:
    """The aggregates of one frames table and its messages table (module docstring).

    Args:
        spark: the session (reads the tables only when they are not local).
        tables: table name -> Parquet path; ``frames`` and ``messages`` are read.
        on_driver: read the tables with pyarrow here (True) or in Spark's executors (False);
            None: here when they are local (:func:`nbmq.spark.scan.scan`).

    The constructor computes the axis, then reads each table once. Reading errors (OSError,
    pyarrow's ArrowInvalid) surface from it.
    """

    def __init__(self, spark: SparkSession | None, tables: dict[str, str], on_driver: bool | None = None) -> None:
        from functools import partial

        import pyarrow as pa

        from ..messages_local import endpoint_text
        from ..scan import merge, scan

        self.spark, self.tables, self.on_driver = spark, dict(tables), on_driver
        spans = footer_spans(tables["frames"]) if on_driver is not False else None
        if spans is None:
            pieces = scan(spark, tables["frames"], _span_piece, ["capture", "ts_ns"], on_driver)
            t = merge(pieces, "spans", _span_piece(_empty("frames", ["capture", "ts_ns"]))["spans"].schema)
            t = t.group_by("capture").aggregate([("ts_ns_min", "min"), ("ts_ns_max", "max")])
            spans = dict(
                zip(t["capture"].to_pylist(), zip(t["ts_ns_min_min"].to_pylist(), t["ts_ns_max_max"].to_pylist()))
            )
        #: One dict per capture with a timestamped frame: capture, protocol, t0 (epoch s),
        #: span_s, width_s (the report's bin width), sorted by capture.
        self.caps: list[dict[str, Any]] = []
        for capture, (lo, hi) in sorted(spans.items()):
            if lo is None:  # no timestamped row: no axis
                continue
            t0, t1 = lo / 1e9, hi / 1e9
            self.caps.append(
                {
                    "capture": capture,
                    "protocol": "nbmq",
                    "t0": float(t0),
                    "span_s": float(t1 - t0),
                    "width_s": nice_bin_width(float(t1 - t0), BINS),
                }
            )
        #: capture -> (t0, bin width, end): the axis the pieces bin by.
        self.axis = {c["capture"]: (c["t0"], c["width_s"], c["t0"] + c["span_s"]) for c in self.caps}

        frames = scan(spark, tables["frames"], partial(_frames_piece, self.axis), FRAME_COLUMNS, on_driver)
        schema = _frames_piece({}, _empty("frames", FRAME_COLUMNS))
        groups = merge(frames, "groups", schema["groups"].schema)
        groups = groups.group_by(_GROUP_KEYS).aggregate(
            [("count_all", "sum"), ("length_sum", "sum"), ("ts_ns_min", "min"), ("ts_ns_max", "max")]
        )
        out = {
            "capture": groups["capture"],
            "session_id": groups["session_id"],
            "src": endpoint_text(groups["src_addr"], groups["src_port"]),
            "dst": endpoint_text(groups["dst_addr"], groups["dst_port"]),
            **{k: groups[k] for k in ("kind", "kind_name", "reason", "bin", "unreadable", "secure")},
            "frames": groups["count_all_sum"],
            "bytes": groups["length_sum_sum"],
            "first_ns": groups["ts_ns_min_min"],
            "last_ns": groups["ts_ns_max_max"],
        }
        self._frame_groups = _rows(
            pa.table(out).to_pylist(), FRAME_GROUPS, ("kind", "bin", "frames", "bytes", "first_ns", "last_ns")
        )
        #: capture -> frame rows behind the first of their capture record (bundled frames)
        self._bundled = bundled_rows(merge(frames, "bundled", schema["bundled"].schema))
        connects = merge(frames, "connects", schema["connects"].schema)
        self._connects = self._connect_times(connects)
        self._control = merge(frames, "control", schema["control"].schema)
        self._beat_pairs = merge(frames, "beat_pairs", schema["beat_pairs"].schema)
        self._beat_runs = merge(frames, "beat_runs", schema["beat_runs"].schema)

        msgs = scan(spark, tables["messages"], partial(_message_piece, self.axis), MESSAGE_COLUMNS, on_driver)
        mschema = _message_piece({}, _empty("messages", MESSAGE_COLUMNS))
        m = merge(msgs, "groups", mschema["groups"].schema)
        m = m.group_by(MESSAGE_GROUPS[:5]).aggregate(
            [
                (f"{c}_sum", "sum")
                for c in ("m_complete", "m_bytes", "duplicates", "rejected", "m_incomplete", "m_missing")
            ]
        )
        sums = ("m_complete", "m_bytes", "duplicates", "rejected", "m_incomplete", "m_missing")
        m = pa.table(
            {
                **{k: m[k] for k in MESSAGE_GROUPS[:5]},
                **{k: m[f"{s}_sum_sum"] for k, s in zip(MESSAGE_GROUPS[5:], sums)},
            }
        )
        self._message_groups = _rows(m.to_pylist(), MESSAGE_GROUPS)
        a = merge(msgs, "assembly", mschema["assembly"].schema)
        a = a.group_by(["capture", "fine"]).aggregate([("n", "sum"), ("lo", "min"), ("hi", "max")])
        #: capture, fine, n, lo, hi: the fine histogram of complete messages' assembly times.
        self.assembly = pa.table(
            {"capture": a["capture"], "fine": a["fine"], "n": a["n_sum"], "lo": a["lo_min"], "hi": a["hi_max"]}
        ).to_pandas()
        self._sessions: pd.DataFrame | None = None
        self._matching: tuple[pd.DataFrame, pd.DataFrame] | None | bool = False  # False: not yet matched

    @staticmethod
    def _connect_times(rows: pa.Table) -> pd.DataFrame:
        import pyarrow as pa

        from ..messages_local import endpoint_text

        columns = ["capture", "session_id", "src", "dst", "connect_ns"]
        if rows.num_rows == 0:
            return _rows([], columns)
        t = pa.table(
            {
                "capture": rows["capture"],
                "session_id": rows["session_id"],
                "src": endpoint_text(rows["src_addr"], rows["src_port"]),
                "dst": endpoint_text(rows["dst_addr"], rows["dst_port"]),
                "ts_ns": rows["ts_ns"],
            }
        )
        g = t.group_by(columns[:4]).aggregate([("ts_ns", "list")])
        out = g.to_pylist()
        for r in out:
            r["connect_ns"] = sorted(r.pop("ts_ns_list"), key=lambda t: (t is not None, t or 0))  # nulls first
        return _rows(out, columns)

    def frame_groups(self) -> pd.DataFrame:
        """The frames table per (capture, session_id, src, dst, kind, kind_name, reason, bin,
        unreadable, secure): frames, bytes (UDP payload), first_ns, last_ns. ``reason`` is the
        error with digits as N (null: a decoded frame); ``bin`` is null without a timestamp or
        axis; ``unreadable``: the capture record could not be read (no frame number);
        ``secure``: secure mode's frames (version 0x81)."""
        return self._frame_groups

    def message_groups(self) -> pd.DataFrame:
        """The messages table per (capture, session_id, src, bin, reason): complete ``messages``
        and their ``message_bytes``, duplicates, rejected, ``incomplete`` and their missing_bytes;
        ``reason`` null for complete messages; ``bin`` null for captures without an axis."""
        return self._message_groups

    def sessions(self) -> pd.DataFrame:
        """The sessions table (pandas, :data:`nbmq.spark.schema.SESSIONS_SCHEMA` columns), as
        :func:`nbmq.spark.sessions_table.build_sessions` makes it from the same tables."""
        if self._sessions is None:
            from ..sessions_table import sessions_from_groups

            self._sessions = sessions_from_groups(self.frame_groups(), self._connects, self.message_groups())
        return self._sessions

    def acked_sessions(self) -> list[int]:
        """Ids (int) of the sessions of :meth:`sessions` that carry an Ack, either way."""
        s = self.sessions()
        if not len(s):
            return []
        acked = s["acks_c2s"].fillna(0) + s["acks_s2c"].fillna(0)
        return [int(sid) for sid in s.loc[acked > 0, "session_id"]]

    def ack_matching(self) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """:meth:`acks` of :meth:`acked_sessions`, matched once and kept: the findings' in-flight
        window (:meth:`round_trip_medians`) and the report read the same matching.

        Returns:
            :meth:`acks`'s ``(round_trips, resends)``; None when no session carries an Ack or the
            frames table has neither ``ack_hash`` nor ``payload`` to match them by.
        """
        if self._matching is False:
            acked = self.acked_sessions()
            columns = _columns_of(self.tables["frames"]) if acked else []
            if "ack_hash" in columns or "payload" in columns:
                self._matching = self.acks(acked, "ack_hash" in columns)
            else:
                self._matching = None
        return self._matching  # type: ignore[return-value]

    def round_trip_medians(self) -> dict[str, float]:
        """Each capture's median SafeDealer round trip, seconds (:func:`ranked` of its fine
        histogram in :meth:`ack_matching`, the report's ack latency p50); captures without a
        matched Ack are absent."""
        matched = self.ack_matching()
        if matched is None or not len(matched[0]):
            return {}
        out = {}
        for capture, g in matched[0].groupby("capture", sort=True):
            g = g.groupby("fine", sort=True).agg(n=("n", "sum"), lo=("lo", "min"), hi=("hi", "max"))
            out[capture] = ranked(
                g["n"].to_numpy(dtype=float), g["lo"].to_numpy(dtype=float), g["hi"].to_numpy(dtype=float), 0.5
            )
        return out

    def summary_rows(self, names: list[str] | tuple[str, ...], columns: list[str]) -> list[dict[str, Any]]:
        """The pipeline summary's rows (one per capture, sorted; see ``pipeline.SUMMARY_COLUMNS``):
        every capture in the tables, plus a zero row for each of ``names`` without a row."""
        g, m, s = self.frame_groups(), self.message_groups(), self.sessions()
        out: dict[str, dict[str, int]] = {}
        import pandas as pd

        for r in g.itertuples(index=False):
            c = out.setdefault(
                r.capture,
                dict.fromkeys(
                    ("datagrams", "error_rows", "capture_errors", "data_frames", "control_frames", "sealed_frames"), 0
                ),
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
                c["sealed_frames"] += n if r.secure and int(r.kind) in SEALED_KINDS else 0
        for capture, n in self._bundled.items():
            if capture in out:  # a sealed bundle is one datagram, however many rows it gives
                out[capture]["datagrams"] -= n
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
        for capture, n in s.groupby("capture")["secure"].sum().items():
            if capture in out:
                out[capture]["secure_sessions"] = int(n)
        cols = columns
        rows = [{c: (capture if c == "capture" else int(v.get(c, 0))) for c in cols} for capture, v in out.items()]
        for name in names:  # a capture without a single row (no UDP datagram in it)
            if name not in out:
                out[name] = {}
                rows.append({c: (name if c == "capture" else 0) for c in cols})
        return sorted(rows, key=lambda r: r["capture"])

    def _rows_at(self, rows: pa.Table, columns: list[str]) -> pd.DataFrame:
        """``rows`` (:data:`_ROWS` columns) as pandas: capture, session_id (Decimal), at_s
        (seconds since the capture's t0), src, dst, and ``columns`` of ``rows``."""
        import pandas as pd

        from ..messages_local import endpoint_text

        t0, _, _ = _axis(self.axis, rows["capture"])
        return pd.DataFrame(
            {
                "capture": rows["capture"].to_pylist(),
                "session_id": rows["session_id"].to_pylist(),
                "at_s": _seconds_since(rows["ts_ns"], t0),
                "src": endpoint_text(rows["src_addr"], rows["src_port"]).to_pylist(),
                "dst": endpoint_text(rows["dst_addr"], rows["dst_port"]).to_pylist(),
                **{c: rows[c].to_pylist() for c in columns},
            }
        )

    def control(self) -> pd.DataFrame:
        """The valid Connect, Connected and Disconnected frames of captures with an axis, the
        first :data:`MAX_CONTROL_ROWS` by (capture, at_s): capture, session_id, at_s, src, dst,
        kind_name."""
        rows = self._rows_at(self._control, ["kind_name"])
        rows = rows[rows["capture"].isin(self.axis)]
        rows = rows.sort_values(["capture", "at_s"], kind="stable", na_position="first").head(MAX_CONTROL_ROWS)
        return rows.reset_index(drop=True)

    def heartbeats(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The valid heartbeats of captures with an axis, summarised.

        Returns:
            ``(per pair, gaps)``: per (capture, session_id, src, dst) ``n``, ``first_s``,
            ``last_s`` (seconds since the capture's t0); and up to :data:`MAX_GAP_CANDIDATES`
            waits between two heartbeats of one sender (capture, session_id, src) longer than
            :data:`GAP_FACTOR` intervals: capture, session_id, src, prev_s, at_s.
        """
        import pandas as pd
        import pyarrow as pa

        from ..messages_local import endpoint_text

        pairs = ["capture", "session_id", "src", "dst", "n", "first_s", "last_s"]
        gaps = ["capture", "session_id", "src", "prev_s", "at_s"]
        if self._beat_pairs.num_rows == 0:
            return pd.DataFrame(columns=pairs), pd.DataFrame(columns=gaps)
        per_pair = self._beat_pairs.group_by(["capture", "session_id", *_ENDPOINTS]).aggregate(
            [("count_all", "sum"), ("at_s_min", "min"), ("at_s_max", "max")]
        )
        per_pair = pd.DataFrame(
            {
                "capture": per_pair["capture"].to_pylist(),
                "session_id": per_pair["session_id"].to_pylist(),
                "src": endpoint_text(per_pair["src_addr"], per_pair["src_port"]).to_pylist(),
                "dst": endpoint_text(per_pair["dst_addr"], per_pair["dst_port"]).to_pylist(),
                "n": per_pair["count_all_sum"].to_numpy(),
                "first_s": per_pair["at_s_min_min"].to_numpy(),
                "last_s": per_pair["at_s_max_max"].to_numpy(),
            }
        ).sort_values(["capture", "first_s", "src", "dst"], kind="stable", ignore_index=True)
        # each sender's runs in time order: the wait from the latest heartbeat before a run to it
        runs = self._beat_runs.combine_chunks()
        sender = _sender_codes(runs) if runs.num_rows else np.zeros(0, np.int64)
        start = runs["start_s"].to_numpy()
        order = np.lexsort((start, sender))
        s, a = sender[order], start[order]
        reach = pd.Series(runs["end_s"].to_numpy()[order]).groupby(s).cummax().to_numpy()
        wait = np.r_[np.nan, np.where(s[1:] == s[:-1], a[1:] - reach[:-1], np.nan)]
        hit = np.flatnonzero(wait > GAP_FACTOR * HEARTBEAT_INTERVAL_S)[:MAX_GAP_CANDIDATES]
        rows = runs.take(pa.array(order[hit], pa.int64()))
        found = pd.DataFrame(
            {
                "capture": rows["capture"].to_pylist(),
                "session_id": rows["session_id"].to_pylist(),
                "src": endpoint_text(rows["src_addr"], rows["src_port"]).to_pylist(),
                "prev_s": reach[hit - 1],
                "at_s": a[hit],
            },
            columns=gaps,
        )
        return per_pair[pairs], found

    def busy(self, gaps: pd.DataFrame) -> np.ndarray:
        """Which ``gaps`` (:meth:`heartbeats`) saw another valid frame (not a heartbeat) of their
        sender in between: a bool per row. Reads ``frames/`` again (only when there are gaps)."""
        from functools import partial

        from ..messages import _u64
        from ..scan import merge, scan

        if gaps.empty:
            return np.zeros(0, bool)
        import pyarrow as pa

        cands = gaps.assign(
            sid=_u64(pa.array(list(gaps["session_id"]), pa.decimal128(20, 0))),
            t0=[self.axis[c][0] for c in gaps["capture"]],
            index=np.arange(len(gaps)),
        )
        pieces = scan(self.spark, self.tables["frames"], partial(_busy_piece, cands), FRAME_COLUMNS, self.on_driver)
        hit = merge(pieces, "busy", pa.schema([("index", pa.int64())]))["index"].to_numpy()
        out = np.zeros(len(gaps), bool)
        out[hit] = True
        return out

    def acks(self, acked: list[int], has_hash: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
        """SafeDealer matching: each data frame of the ``acked`` sessions and the first Ack
        carrying its hash (same capture and session), by one more read of ``frames/``
        (``ack_hash``, or with ``has_hash`` False the header fields and ``payload`` of a table
        written before that column). A frame and its Ack may sit in different files, so the
        rows meet in hash buckets (:func:`nbmq.spark.scan.scan_shuffled`, spilled beside the
        frames table for a large one): memory holds a bucket, not the capture.

        Returns:
            ``(round_trips, resends)``: per session and direction (capture, session_id as
            Decimal, ``direction``: c2s when the data frames came from the session's client in
            :meth:`sessions`, else s2c) and fine bucket (:func:`fine_bucket`) ``n``, ``lo``, ``hi`` of the
            round trips (first send -> first Ack, seconds, capture point to capture point), of
            hashes sent by a capture with an axis; and per (capture, time bin) the ``resends``
            (data frames sent again, at the last send's bin).
        """
        from functools import partial

        import pandas as pd
        import pyarrow as pa
        import pyarrow.compute as pc

        from ..inputs import is_local, local_path
        from ..scan import merge, scan_shuffled
        from .ackhash import COLUMNS

        extra = ["ack_hash"] if has_hash else [c for c in COLUMNS if c not in ("kind", "session_id")]
        columns = ["capture", "session_id", "kind", "ts_ns", "error", *_ENDPOINTS[:2], *extra]
        ids = np.array(sorted(acked), np.uint64)
        sessions = self.sessions()
        sessions = sessions[sessions["client"].notna()]
        addr_port = sessions["client"].astype(str).str.rsplit(":", n=1, expand=True)
        clients = pd.DataFrame(
            {
                "capture": sessions["capture"].to_numpy(),
                "sid": np.array([int(s) for s in sessions["session_id"]], np.uint64),
                "addr": addr_port[0].str.strip("[]").to_numpy() if len(sessions) else [],
                "port": addr_port[1].astype(np.int64).to_numpy() if len(sessions) else [],
            }
        )
        frames = self.tables["frames"]
        pieces = scan_shuffled(
            self.spark,
            frames,
            partial(_ack_piece, ids, clients, has_hash),
            columns,
            "h",
            partial(_ack_reduce, self.axis),
            self.on_driver,
            str(Path(local_path(frames)).parent) if is_local(frames) else None,
            # only Acks and the acked sessions' frames leave the Parquet reader
            (pc.field("kind") == _ACK)
            | pc.field("session_id").isin(pa.array(ids, pa.uint64()).cast(pa.decimal128(20, 0))),
        )
        empty = _ack_reduce({}, _ack_piece(ids, clients, has_hash, _empty("frames", columns)))
        trips = merge(pieces, "round_trips", empty["round_trips"].schema)
        trips = trips.group_by(["capture", "session_id", "c2s", "fine"]).aggregate(
            [("n", "sum"), ("lo", "min"), ("hi", "max")]
        )
        resends = merge(pieces, "resends", empty["resends"].schema)
        resends = (
            resends.group_by(["capture", "bin"])
            .aggregate([("resends", "sum")])
            .sort_by([("capture", "ascending"), ("bin", "ascending")])
        )
        return (
            pd.DataFrame(
                {
                    **{k: trips[k].to_pylist() for k in ("capture", "session_id")},
                    "direction": np.where(trips["c2s"].to_numpy(zero_copy_only=False) == 1, "c2s", "s2c"),
                    "fine": trips["fine"].to_numpy(),
                    "n": trips["n_sum"].to_numpy(),
                    "lo": trips["lo_min"].to_numpy(),
                    "hi": trips["hi_max"].to_numpy(),
                }
            ),
            pd.DataFrame(
                {
                    "capture": resends["capture"].to_pylist(),
                    "bin": resends["bin"].to_numpy(),
                    "resends": resends["resends_sum"].to_numpy(),
                }
            ),
        )
