"""The messages table reading the frames once: reassembly inside each frames partition (issue 14, item 5).

:func:`nbmq.spark.messages.build_messages` shuffles every data frame (payload included) by its
key. Most keys, though, live in one frames partition (one file, or one byte range of a large
pcap). :func:`build_messages_local` gives the same rows with one read of ``frames``:

1. **Local pass** (``mapInArrow``, no shuffle): each partition sorts its data frames by key and
   capture order and runs the batch step :func:`nbmq.spark.messages.reassemble_batches`. A key
   whose frames complete its message here becomes one *row record* (the message row, plus the
   (ts_ns, frame_number) of its first and last frame). A key left incomplete sends its frames
   as *frame records* (payload included): it may continue in another partition.
2. **Find the keys to combine**: the records are kept on the executors (``localCheckpoint``,
   so the frames are never read again); a JVM aggregate collects the key hashes with more
   than one record or a frame record (keys cut by a range boundary, late resends, incomplete
   messages). Every other row record is final as it is.
3. **Combine** those keys only (shuffle by key hash, sort by key and capture order,
   ``mapInArrow``): frame records only are reassembled exactly as ``build_messages`` does; a
   row record followed, strictly later in capture order, by other records of its key becomes
   the row with those frames added as duplicates (today's rule: a frame after completion is a
   duplicate).
4. **Redo** (rare): any other mix with a row record (earlier frames of the key in another
   partition, interleaved capture times) cannot be finished without the row record's frames.
   Such key hashes are collected, every combined row under them is dropped (two keys may
   share a hash) and ``build_messages`` recomputes them from ``frames`` filtered to them.

Only the combined keys' records are shuffled. Measured (README): slower than the shuffled path
on ``local[2]`` so far, so ``nbmq pipeline`` keeps ``build_messages`` by default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .messages import _MAX_U32, _Group, _Output, _finish, _u64, addr_port, reassemble_batches
from .schema import messages_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["build_messages_local"]

ROW, FRAME = 0, 1
#: columns of a frame record beside the key and dst (frames-table names, prefixed ``f_``)
_FRAME_COLS = ["part_count", "part_index", "message_size", "part_size", "chunk_offset", "payload"]
_ORDER = ["_t0", "_f0"]


def _data(frames: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return frames.where((F.col("error").isNull()) & (F.col("kind") == 0)).select(
        "capture",
        "session_id",
        addr_port("src_addr", "src_port").alias("src"),
        "message_id",
        addr_port("dst_addr", "dst_port").alias("dst"),
        "part_count", "part_index", "message_size", "part_size", "chunk_offset",
        "payload", "ts_ns", "frame_number",
    )


def _record_schema(parts: bool) -> Any:
    """Spark schema of the local pass's records: message row columns, order columns, frame columns."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

    fields = list(messages_schema(parts).fields)
    fields += [StructField(n, LongType()) for n in ("_kind", "_t0", "_f0", "_t1", "_f1")]
    types = {"part_count": IntegerType(), "part_index": IntegerType(), "payload": BinaryType()}
    fields += [StructField("f_" + c, types.get(c, LongType())) for c in _FRAME_COLS]
    return StructType(fields)


def _key_change(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Bool per row: its key differs from the previous row's (row 0: True)."""
    import pyarrow.compute as pc

    n = table.num_rows
    out = np.ones(n, dtype=bool)
    if isinstance(table, pa.Table):
        table = table.combine_chunks().to_batches()[0] if n else table
    if n > 1:
        sid, mid = _u64(table.column("session_id")), _u64(table.column("message_id"))
        chg = (sid[1:] != sid[:-1]) | (mid[1:] != mid[:-1])
        for name in ("capture", "src"):
            c = table.column(name)
            chg |= pc.not_equal(c.slice(1), c.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        out[1:] = chg
    return out


def _local_pass(batches: Iterator[pa.RecordBatch], record_schema: pa.Schema, parts: bool, limit: int,
                out_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    got = [b for b in batches if b.num_rows]
    if not got:
        return
    table = pa.Table.from_batches(got)
    order = [(c, "ascending") for c in ("capture", "session_id", "src", "message_id", "ts_ns", "frame_number")]
    table = table.sort_by(order).combine_chunks()
    n = table.num_rows
    starts = np.flatnonzero(_key_change(table))
    ends = np.append(starts[1:], n) - 1
    ts = table.column("ts_ns").to_numpy()
    fn = table.column("frame_number").to_numpy()
    groups = pa.table({
        "capture": table.column("capture").take(starts), "src": table.column("src").take(starts),
        "_sid": pa.array(_u64(table.column("session_id"))[starts]),
        "_mid": pa.array(_u64(table.column("message_id"))[starts]),
        "_t0": ts[starts], "_f0": fn[starts], "_t1": ts[ends], "_f1": fn[ends],
        "_start": starts, "_count": ends - starts + 1,
    })
    rows = pa.Table.from_batches(
        list(reassemble_batches(iter(table.to_batches()), out_schema, parts=parts, max_message_size=limit)),
        schema=out_schema,
    )
    # which group each row is: join the keys only (Acero joins no list columns)
    keys = pa.table({"capture": rows.column("capture"), "src": rows.column("src"),
                     "_sid": pa.array(_u64(rows.column("session_id"))),
                     "_mid": pa.array(_u64(rows.column("message_id"))),
                     "_ri": np.arange(rows.num_rows)})
    link = keys.join(groups, keys=["capture", "src", "_sid", "_mid"], join_type="inner")
    ri = link.column("_ri").to_numpy()
    info = {c: link.column(c).to_numpy() for c in ("_t0", "_f0", "_t1", "_f1", "_start", "_count")}
    complete = rows.column("complete").to_numpy(zero_copy_only=False)[ri]
    sel = np.flatnonzero(complete)
    done = rows.take(ri[sel])
    m = done.num_rows
    if m:
        cols = {f.name: done.column(f.name) for f in out_schema}
        cols["_kind"] = pa.array(np.full(m, ROW, np.int64))
        for c in _ORDER + ["_t1", "_f1"]:
            cols[c] = pa.array(info[c][sel])
        for f in record_schema:
            if f.name not in cols:
                cols[f.name] = pa.nulls(m, f.type)
        yield pa.RecordBatch.from_arrays(
            [cols[f.name].combine_chunks().cast(f.type) if isinstance(cols[f.name], pa.ChunkedArray)
             else cols[f.name].cast(f.type) for f in record_schema], schema=record_schema)
    # the incomplete keys' frames, in sorted order
    todo = np.flatnonzero(~complete)
    if todo.size == 0:
        return
    first, count = info["_start"][todo], info["_count"][todo]
    idx = np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    frames = table.take(np.sort(idx))
    k = frames.num_rows
    cols = {c: frames.column(c) for c in ("capture", "session_id", "src", "dst", "message_id")}
    cols["_kind"] = pa.array(np.full(k, FRAME, np.int64))
    cols["_t0"] = cols["_t1"] = frames.column("ts_ns")
    cols["_f0"] = cols["_f1"] = frames.column("frame_number")
    for c in _FRAME_COLS:
        cols["f_" + c] = frames.column(c)
    for f in record_schema:
        if f.name not in cols:
            cols[f.name] = pa.nulls(k, f.type)
    arrays = []
    for f in record_schema:
        a = cols[f.name]
        a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
        arrays.append(a if a.type == f.type else a.cast(f.type))
    yield pa.RecordBatch.from_arrays(arrays, schema=record_schema)


def _py_key(batch: pa.RecordBatch, i: int) -> tuple:
    return (batch.column("capture")[i].as_py(), int(_u64(batch.column("session_id"))[i]),
            batch.column("src")[i].as_py(), int(_u64(batch.column("message_id"))[i]))


class _Pending:
    """One key's records seen so far in the combine pass (a key may continue in the next batch)."""

    __slots__ = ("key", "h", "records")

    def __init__(self, key: tuple, h: int) -> None:
        self.key = key
        self.h = h
        self.records: list[dict[str, Any]] = []


def _row_tuple(r: dict[str, Any]) -> tuple:
    """A row record (``to_pylist`` dict, timestamps as int us) -> the tuple ``_Output`` takes."""
    return (
        r["capture"], int(r["session_id"]), r["src"], r["dst"], int(r["message_id"]), r["part_count"],
        r["message_size"], r["part_sizes"], r["part_sha256"], r["complete"], r["missing_bytes"],
        r["frames"], r["duplicates"], r["rejected"], r["first_ts"], r["last_ts"], r.get("parts"),
    )


def _settle(p: _Pending, parts: bool, limit: int) -> tuple | None:
    """The messages row of one key's records (sorted by capture order), or None when it needs
    the redo path (a row record not strictly first in capture order)."""
    recs = p.records
    kinds = [r["_kind"] for r in recs]
    if ROW not in kinds:
        g = _Group(p.key, recs[0]["dst"])
        g.rows = [(r["f_part_count"], r["f_part_index"], r["f_message_size"], r["f_part_size"],
                   r["f_chunk_offset"], r["_t0"]) for r in recs]
        g.chunks = [memoryview(r["f_payload"]) for r in recs]
        return _finish(g, parts, limit)
    head = recs[0]
    if head["_kind"] != ROW:
        return None
    if len(recs) == 1:
        return _row_tuple(head)
    if (recs[1]["_t0"], recs[1]["_f0"]) <= (head["_t1"], head["_f1"]):
        return None
    row = list(_row_tuple(head))
    extra = sum(r["frames"] if r["_kind"] == ROW else 1 for r in recs[1:])
    row[11] += extra  # frames
    row[12] += extra  # duplicates: every frame after completion
    row[15] = max(row[15], max(r["_t1"] for r in recs[1:]) // 1000)  # last_ts, us
    return tuple(row)


def _combine(batches: Iterator[pa.RecordBatch], out_schema: pa.Schema, parts: bool,
             limit: int) -> Iterator[pa.RecordBatch]:
    """Records sorted by (_h, key, _t0, _f0) -> message rows (``out_schema`` plus ``_h``)."""
    names = [f.name for f in out_schema]
    with_h = out_schema.append(pa.field("_h", pa.int64())).append(pa.field("_redo", pa.bool_()))
    out = _Output(out_schema, parts)
    hs: list[int] = []
    redo: list[int] = []
    pending: _Pending | None = None

    def flush() -> pa.RecordBatch:
        b = out.flush()
        m = len(hs)
        arr = pa.array(hs, pa.int64())
        hs.clear()
        return pa.RecordBatch.from_arrays([*b.columns, arr, pa.array(np.zeros(m, bool))], schema=with_h)

    def settle(done: _Pending) -> None:  # a key's records are all in: its row, or a redo mark
        row = _settle(done, parts, limit)
        if row is None:
            redo.append(done.h)
        else:
            out.add(row)
            hs.append(done.h)

    def marks() -> pa.RecordBatch:
        m = len(redo)
        cols = [pa.nulls(m, f.type) for f in out_schema]
        return pa.RecordBatch.from_arrays([*cols, pa.array(redo, pa.int64()), pa.array(np.ones(m, bool))],
                                          schema=with_h)

    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        starts = np.flatnonzero(_key_change(batch))
        bounds = np.append(starts, n)
        sizes = np.diff(bounds)
        kind = batch.column("_kind").to_numpy(zero_copy_only=False)
        cont = pending is not None and pending.key == _py_key(batch, 0)
        # one row record, wholly inside this batch: passes through column-wise
        fast = (sizes == 1) & (kind[starts] == ROW)
        fast[-1] = False
        if cont:
            fast[0] = False
        if fast.any():
            take = pa.array(starts[fast])
            cols = [batch.column(c).take(take) for c in names]
            cols = [c if c.type == f.type else c.cast(f.type) for c, f in zip(cols, out_schema)]
            yield pa.RecordBatch.from_arrays(
                [*cols, batch.column("_h").take(take), pa.array(np.zeros(len(take), bool))], schema=with_h)
        slow = np.flatnonzero(~fast)
        if slow.size == 0:
            continue
        # timestamps as integer microseconds (to_pylist would make datetimes)
        plain = pa.RecordBatch.from_arrays(
            [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in batch.columns],
            names=batch.schema.names)
        for g in slow.tolist():
            a, b = int(bounds[g]), int(bounds[g + 1])
            recs = plain.slice(a, b - a).to_pylist()
            key = (recs[0]["capture"], int(recs[0]["session_id"]), recs[0]["src"], int(recs[0]["message_id"]))
            if pending is not None and pending.key == key:
                pending.records.extend(recs)
                continue
            if pending is not None:
                settle(pending)
                if out.full():
                    yield flush()
            pending = _Pending(key, recs[0]["_h"])
            pending.records.extend(recs)
    if pending is not None:
        settle(pending)
    if out.rows:
        yield flush()
    if redo:
        yield marks()


def build_messages_local(
    frames: DataFrame,
    *,
    parts: bool = False,
    max_message_size: int = _MAX_U32,
) -> DataFrame:
    """The messages table of ``frames``, reading ``frames`` once (twice only for redone keys).

    Args:
        frames: a frames table (the ``nbmq`` source or its Parquet copy) with ``payload``.
        parts: add the ``parts`` column (array<binary>).
        max_message_size: larger claimed messages are rejected, bytes.

    Returns:
        A DataFrame of :func:`nbmq.spark.schema.messages_schema` with exactly the rows of
        :func:`nbmq.spark.messages.build_messages` (in another order). Building it runs jobs:
        the local pass (kept in executor storage, memory then disk, for as long as the
        DataFrame is used; a lost executor loses it, as any local checkpoint), the aggregate,
        and the combine of the few keys found (the hash lists go through the driver).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    from .messages import KEY, build_messages

    schema = messages_schema(parts)
    out_schema = to_arrow_schema(schema, timezone="UTC")
    rec_spark = _record_schema(parts)
    rec_schema = to_arrow_schema(rec_spark, timezone="UTC")
    want_parts, limit = parts, max_message_size

    def local(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _local_pass(batches, rec_schema, want_parts, limit, out_schema)

    def combine(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _combine(batches, out_schema, want_parts, limit)

    # one job reads the frames: the records (message rows, incomplete keys' frames) stay on the
    # executors; every later step reads them, never the frames again (Spark would otherwise
    # recompute the local pass for each use)
    records = _data(frames).mapInArrow(local, rec_spark).withColumn("_h", F.xxhash64(*KEY)).localCheckpoint(eager=True)
    # hashes with more than one record or any frame record need the combine step (usually few:
    # keys cut by a range boundary, late resends, incomplete messages)
    multi = [r[0] for r in records.groupBy("_h").agg(F.count(F.lit(1)).alias("n"), F.max("_kind").alias("k"))
             .where((F.col("n") > 1) | (F.col("k") == FRAME)).select("_h").collect()]
    single = records.where(F.col("_kind") == ROW)
    if multi:
        single = single.where(~F.col("_h").isin(multi))
    single = single.select(*schema.names)
    if not multi:
        return single
    grouped = records.where(F.col("_h").isin(multi)).repartition("_h").sortWithinPartitions("_h", *KEY, *_ORDER)
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType

    flagged = StructType([*schema.fields, StructField("_h", LongType()), StructField("_redo", BooleanType())])
    rows = grouped.mapInArrow(combine, flagged)
    marked = [r[0] for r in rows.where(F.col("_redo")).select("_h").distinct().collect()]
    kept = rows.where(~F.col("_redo"))
    if marked:  # a marked hash drops every row under it (two keys may share it)
        kept = kept.where(~F.col("_h").isin(marked))
    out = single.unionByName(kept.select(*schema.names))
    if not marked:
        return out
    key_hash = F.xxhash64("capture", "session_id", addr_port("src_addr", "src_port"), "message_id")
    redo = frames.where(key_hash.isin(marked))
    return out.unionByName(build_messages(redo, parts=parts, max_message_size=max_message_size))
