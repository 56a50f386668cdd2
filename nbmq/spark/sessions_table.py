"""The sessions table: one row per (capture, session_id), both directions summarised.

Spark first aggregates the valid frames per (capture, session_id, src, dst, kind) and the
messages per (capture, session_id, src): a few rows per session, however long the capture. Each
capture's aggregates are then cogrouped into one pandas step that decides who is who:

- The **server** (bound side) is the sender of the session's Connected frames; failing that
  (the capture started after the handshake), an address that sent Connected or received
  Connect anywhere in the capture; failing that, the address seen in more sessions of the
  capture; on a tie, the lower port. The **client** is the other address of the session (its
  busiest address pair, should stray addresses reuse the id).
- **Connect** carries session id 0, so each Connect is attributed by its address pair: to the
  session with that client and server whose first frame is the first at or after the Connect
  (a re-Connect that got no answer goes to the last earlier session). Connects no session
  answered become a row with ``session_id`` 0 per (client, server) pair.
- A frame is client-to-server (``_c2s``) when its source is the client, else ``_s2c``.
- ``bytes_*`` count UDP payload bytes of every valid frame; ``throughput_bytes_per_s`` is their
  sum over ``duration_s`` (last minus first frame), null for a zero duration.
- A session is ``secure`` when its frames are secure mode's (version 0x81, docs/secure.md);
  ``sealed_frames`` counts those whose content is encrypted (every kind but the handshake's
  Connect and Connected). Their data frames are not reassembled, so they are in ``data_*`` but
  in no ``messages_*`` count.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..wire import SEALED_KINDS
from .schema import SESSIONS_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["build_sessions", "sessions_from_groups", "sessions_frame", "summarise_capture", "write_sessions"]

_CONNECT, _CONNECTED, _DISCONNECTED, _HEARTBEAT, _ACK, _DATA = 1, 2, 3, 4, 5, 0
_DIRECTIONAL = {_DATA: "data", _HEARTBEAT: "heartbeats", _ACK: "acks", _DISCONNECTED: "disconnected"}


def build_sessions(frames: DataFrame, messages: DataFrame) -> DataFrame:
    """The sessions table (lazy) from a frames table and its messages table."""
    from pyspark.sql import functions as F

    from .messages import addr_port

    valid = frames.where(F.col("error").isNull() & F.col("kind").isNotNull())
    # Grouped on the raw columns; the id and endpoint text are built per group, not per frame
    # (addr:port is one-to-one, so the groups are the same): measured on 5M datagrams.
    keys = ["capture", "session_id", "src_addr", "src_port", "dst_addr", "dst_port", "kind"]
    # The Connect times come from their own aggregation over the few Connect frames: a
    # collect_list among the counts made Spark aggregate every frame without code generation
    # (ObjectHashAggregate), 3.1 against 1.6 JVM core-s on 1M frames, same rows.
    connect_ns = (
        valid.where(F.col("kind") == _CONNECT)
        .groupBy(*keys)
        .agg(F.sort_array(F.collect_list("ts_ns")).alias("connect_ns"))
    )
    per_kind = (
        valid.groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("frames"),
            F.sum("length").alias("bytes"),
            F.min("ts_ns").alias("first_ns"),
            F.max("ts_ns").alias("last_ns"),
            F.sum(F.col("secure").cast("long")).alias("secure"),
        )
        .join(connect_ns, keys, "left")
        .select(
            "capture",
            F.col("session_id").cast("string").alias("session_id"),
            addr_port("src_addr", "src_port").alias("src"),
            addr_port("dst_addr", "dst_port").alias("dst"),
            "kind",
            "frames",
            "bytes",
            "first_ns",
            "last_ns",
            "secure",
            F.coalesce("connect_ns", F.array().cast("array<bigint>")).alias("connect_ns"),
        )
    )
    per_sender = (
        messages.select(
            "capture",
            F.col("session_id").cast("string").alias("session_id"),
            "src",
            "complete",
            "message_size",
        )
        .groupBy("capture", "session_id", "src")
        .agg(
            F.sum(F.col("complete").cast("long")).alias("complete"),
            F.sum((~F.col("complete")).cast("long")).alias("incomplete"),
            F.sum(F.when(F.col("complete"), F.col("message_size")).otherwise(0)).alias("message_bytes"),
        )
    )
    out_schema = SESSIONS_SCHEMA

    def summarise(frames_pdf: pd.DataFrame, messages_pdf: pd.DataFrame) -> pd.DataFrame:
        return summarise_capture(frames_pdf, messages_pdf)

    return (
        per_kind.groupBy("capture").cogroup(per_sender.groupBy("capture")).applyInPandas(summarise, schema=out_schema)
    )


def sessions_from_groups(
    frame_groups: pd.DataFrame, connects: pd.DataFrame, message_groups: pd.DataFrame
) -> pd.DataFrame:
    """The sessions table (pandas) from the report's aggregates, the rows :func:`build_sessions` gives.

    The pipeline aggregates the frames and messages once for the sessions table, the summary and
    the report (:class:`nbmq.spark.report.passes.Passes`); this sums those groups into the inputs
    of :func:`summarise_capture` and runs it per capture, on the driver (the groups hold a few
    rows per session and time bin, as the report's traffic table always did).

    Args:
        frame_groups: columns capture, session_id (Decimal), src, dst, kind, reason (null for a
            decoded frame), secure (bool), frames, bytes, first_ns, last_ns, any number of rows
            per key.
        connects: columns capture, session_id, src, dst, connect_ns (the Connect frames' times).
        message_groups: columns capture, session_id, src, messages (complete), incomplete,
            message_bytes (of the complete ones), any number of rows per key.

    Returns:
        A pandas DataFrame with the columns of :data:`~nbmq.spark.schema.SESSIONS_SCHEMA`, each
        capture's sessions sorted by first_ts then session_id.
    """
    columns = SESSIONS_SCHEMA.fieldNames()
    g = frame_groups[frame_groups["reason"].isna() & frame_groups["kind"].notna()]
    keys = ["capture", "session_id", "src", "dst", "kind"]
    kinds = pd.DataFrame(
        {
            "capture": g["capture"],
            "session_id": [None if s is None else str(s) for s in g["session_id"]],
            "src": g["src"],
            "dst": g["dst"],
            "kind": g["kind"].astype("int64"),
            "frames": g["frames"],
            "bytes": g["bytes"],
            "first_ns": g["first_ns"],
            "last_ns": g["last_ns"],
            "secure": g["frames"].where(g["secure"].astype(bool), 0),
        },
        columns=keys + ["frames", "bytes", "first_ns", "last_ns", "secure"],
    )
    kinds = (
        kinds.groupby(keys, dropna=False, sort=False)
        .agg(
            frames=("frames", "sum"),
            bytes=("bytes", "sum"),
            first_ns=("first_ns", "min"),
            last_ns=("last_ns", "max"),
            secure=("secure", "sum"),
        )
        .reset_index()
    )
    times = {
        (r.capture, None if r.session_id is None else str(r.session_id), r.src, r.dst): list(r.connect_ns)
        for r in connects.itertuples(index=False)
    }
    kinds["connect_ns"] = [
        times.get((c, s, a, b), []) if k == _CONNECT else []
        for c, s, a, b, k in zip(kinds["capture"], kinds["session_id"], kinds["src"], kinds["dst"], kinds["kind"])
    ]
    m = message_groups
    senders = pd.DataFrame(
        {
            "capture": m["capture"],
            "session_id": [None if s is None else str(s) for s in m["session_id"]],
            "src": m["src"],
            "complete": m["messages"],
            "incomplete": m["incomplete"],
            "message_bytes": m["message_bytes"],
        },
        columns=["capture", "session_id", "src", "complete", "incomplete", "message_bytes"],
    )
    senders = (
        senders.groupby(["capture", "session_id", "src"], dropna=False, sort=False)
        .agg(
            complete=("complete", "sum"),
            incomplete=("incomplete", "sum"),
            message_bytes=("message_bytes", "sum"),
        )
        .reset_index()
    )
    out = []
    by_kinds = dict(iter(kinds.groupby("capture", sort=True)))
    by_senders = dict(iter(senders.groupby("capture", sort=True)))
    for capture in sorted(set(by_kinds) | set(by_senders)):
        empty_k, empty_s = kinds.iloc[:0], senders.iloc[:0]
        part = summarise_capture(by_kinds.get(capture, empty_k), by_senders.get(capture, empty_s))
        if len(part):
            out.append(part)
    if not out:
        return pd.DataFrame(columns=columns)
    return pd.concat(out, ignore_index=True)[columns]


def sessions_frame(spark: Any, table: pd.DataFrame) -> DataFrame:
    """The pandas sessions table (:func:`sessions_from_groups`) as a Spark DataFrame of
    :data:`~nbmq.spark.schema.SESSIONS_SCHEMA`, to be written as ``sessions/``."""
    return spark.createDataFrame(table, schema=SESSIONS_SCHEMA)


def write_sessions(spark: Any, table: pd.DataFrame, path: str) -> None:
    """Write the pandas sessions table as the Parquet table ``path`` (replaced).

    A local ``path`` is written by pyarrow in this process (one part file and ``_SUCCESS``; a
    table of one row per session does not repay a Spark job); a URI by Spark
    (:func:`sessions_frame`). Either way the columns are :data:`~nbmq.spark.schema.SESSIONS_SCHEMA`,
    timestamps TIMESTAMP(MICROS) in UTC.
    """
    from .output import is_remote

    if is_remote(path):
        sessions_frame(spark, table).write.mode("overwrite").parquet(path)
        return
    import shutil
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    target = Path(path)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    schema = to_arrow_schema(SESSIONS_SCHEMA, timezone="UTC")
    pq.write_table(
        pa.Table.from_pandas(table, schema=schema, preserve_index=False),
        target / "part-00000.parquet",
        compression="snappy",
    )
    (target / "_SUCCESS").touch()


def _port(endpoint: str) -> int:
    try:
        return int(endpoint.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


def summarise_capture(kinds: pd.DataFrame, senders: pd.DataFrame) -> pd.DataFrame:
    """One capture's sessions from its per-kind frame aggregates and per-sender message counts.

    Args:
        kinds: columns capture, session_id (decimal text), src, dst, kind, frames, bytes,
            first_ns, last_ns, secure (how many of the frames are secure mode's), connect_ns
            (sorted Connect times for kind 1, else empty).
        senders: columns capture, session_id, src, complete, incomplete, message_bytes.

    Returns:
        A pandas DataFrame with the columns of :data:`~nbmq.spark.schema.SESSIONS_SCHEMA`.
    """
    columns = SESSIONS_SCHEMA.fieldNames()
    if kinds.empty and senders.empty:
        return pd.DataFrame(columns=columns)
    capture = kinds["capture"].iloc[0] if not kinds.empty else senders["capture"].iloc[0]
    records = kinds.to_dict("records")
    connects = [r for r in records if r["kind"] == _CONNECT]
    others = [r for r in records if r["kind"] != _CONNECT]

    # Addresses known to be servers anywhere in this capture.
    known_servers = {r["src"] for r in others if r["kind"] == _CONNECTED} | {r["dst"] for r in connects}
    by_session: dict[str, list[dict]] = defaultdict(list)
    for r in others:
        by_session[r["session_id"]].append(r)
    sessions_of: Counter[str] = Counter()
    for rows in by_session.values():
        for ep in {x for r in rows for x in (r["src"], r["dst"])}:
            sessions_of[ep] += 1

    info: dict[str, dict[str, Any]] = {}
    for sid, rows in by_session.items():
        pairs: Counter[frozenset] = Counter()
        for r in rows:
            pairs[frozenset((r["src"], r["dst"]))] += int(r["frames"])
        pair = sorted(pairs.items(), key=lambda kv: (-kv[1], sorted(kv[0])))[0][0]
        endpoints = sorted(pair)
        connected = Counter({r["src"]: int(r["frames"]) for r in rows if r["kind"] == _CONNECTED})
        server = None
        if connected:
            server = connected.most_common(1)[0][0]
        else:
            candidates = [ep for ep in endpoints if ep in known_servers]
            if len(candidates) == 1:
                server = candidates[0]
            else:
                server = sorted(endpoints, key=lambda ep: (-sessions_of[ep], _port(ep), ep))[0]
        client = next((ep for ep in endpoints if ep != server), server)
        info[sid] = {
            "client": client,
            "server": server,
            "first_ns": min(int(r["first_ns"]) for r in rows),
            "rows": rows,
            "connects": [],
        }

    # Attribute every Connect by its address pair.
    candidates_by_pair: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    for sid, s in info.items():
        candidates_by_pair[(s["client"], s["server"])].append((s["first_ns"], sid))
    for cands in candidates_by_pair.values():
        cands.sort()
    orphans: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)  # (ts, bytes)
    secure_pairs = {(r["src"], r["dst"]) for r in connects if r.get("secure")}
    for r in connects:
        times = [int(t) for t in r["connect_ns"]]
        per_frame = int(r["bytes"]) // max(1, int(r["frames"]))
        cands = candidates_by_pair.get((r["src"], r["dst"]))
        for t in times:
            if not cands:
                orphans[(r["src"], r["dst"])].append((t, per_frame))
                continue
            i = bisect.bisect_left(cands, (t, ""))
            sid = cands[i][1] if i < len(cands) else cands[-1][1]
            info[sid]["connects"].append((t, per_frame))
        # The exact per-frame byte split does not matter: every Connect is 10 bytes on the wire.

    sent: dict[tuple[str, str], dict[str, int]] = {}
    for r in senders.to_dict("records"):
        sent[(r["session_id"], r["src"])] = r

    out = []
    for sid, s in info.items():
        client, server = s["client"], s["server"]
        row = _counts(columns)
        row["secure"] = False  # from its own frames: the Connected and everything after it
        first = []
        last = []
        for r in s["rows"]:
            way = "c2s" if r["src"] == client and client != server else "s2c"
            kind = int(r["kind"])
            n = int(r["frames"])
            row[f"frames_{way}"] += n
            row[f"bytes_{way}"] += int(r["bytes"])
            if kind in _DIRECTIONAL:
                row[f"{_DIRECTIONAL[kind]}_{way}"] += n
            elif kind == _CONNECTED:
                row["connecteds"] += n
            secure = int(r.get("secure") or 0)
            row["secure"] = row["secure"] or secure > 0
            row["sealed_frames"] += secure if kind in SEALED_KINDS else 0
            first.append(int(r["first_ns"]))
            last.append(int(r["last_ns"]))
        for t, nbytes in s["connects"]:
            row["connects"] += 1
            row["frames_c2s"] += 1
            row["bytes_c2s"] += nbytes
            first.append(t)
            last.append(t)
        for way, ep in (("c2s", client), ("s2c", server)):
            m = sent.get((sid, ep))
            if m is not None and not (way == "s2c" and client == server):
                row[f"messages_complete_{way}"] = int(m["complete"] or 0)
                row[f"messages_incomplete_{way}"] = int(m["incomplete"] or 0)
                row[f"message_bytes_{way}"] = int(m["message_bytes"] or 0)
        kinds_first = {}
        for r in s["rows"]:
            kinds_first.setdefault(int(r["kind"]), []).append(int(r["first_ns"]))
        row.update(
            capture=capture,
            session_id=sid,
            client=client,
            server=server,
            connect_ns=min((t for t, _ in s["connects"]), default=None),
            connected_ns=min(kinds_first.get(_CONNECTED, []), default=None),
            first_heartbeat_ns=min(kinds_first.get(_HEARTBEAT, []), default=None),
            first_ns=min(first),
            last_ns=max(last),
        )
        out.append(row)
    for (client, server), hits in orphans.items():
        row = _counts(columns)
        row["secure"] = (client, server) in secure_pairs
        times = [t for t, _ in hits]
        row.update(
            capture=capture,
            session_id="0",
            client=client,
            server=server,
            connects=len(hits),
            frames_c2s=len(hits),
            bytes_c2s=sum(b for _, b in hits),
            connect_ns=min(times),
            connected_ns=None,
            first_heartbeat_ns=None,
            first_ns=min(times),
            last_ns=max(times),
        )
        out.append(row)
    return _finalise(out, columns)


def _counts(columns: list[str]) -> dict[str, Any]:
    """A session row's counters, all 0: the directional ones, connects, connecteds, sealed_frames."""
    return {c: 0 for c in columns if c.endswith(("_c2s", "_s2c")) or c in ("connects", "connecteds", "sealed_frames")}


def _finalise(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    from decimal import Decimal

    if not rows:
        return pd.DataFrame(columns=columns)
    df = pd.DataFrame(rows)
    df["session_id"] = [Decimal(s) for s in df["session_id"]]
    for name in ("connect", "connected", "first_heartbeat", "first", "last"):
        ns = df.pop(f"{name}_ns")
        df[f"{name}_ts"] = pd.to_datetime(ns.astype("Int64") // 1000, unit="us", utc=True)
    duration = (df["last_ts"] - df["first_ts"]).dt.total_seconds()
    df["duration_s"] = duration
    total = (df["bytes_c2s"] + df["bytes_s2c"]).astype(np.float64)
    df["throughput_bytes_per_s"] = (total / duration.where(duration > 0)).astype(np.float64)  # NaN -> null
    df = df.sort_values(["first_ts", "session_id"], kind="stable").reset_index(drop=True)
    return df[columns]
