"""The messages table without shuffling the frames: reassembly inside each frames partition.

:func:`nbmq.spark.messages.build_messages` shuffles every data frame (payload included) by its
key. Most keys, though, live in one frames partition (one file, or one byte range of a large
pcap). :func:`build_messages_local` gives the same rows shuffling only small records:

1. **Local pass** (``mapInArrow``, no shuffle of the frames). When ``frames`` is a bare scan of
   local Parquet files (``spark.read.parquet(dir)``, the pipeline's ``frames/``), the Python
   workers read its row groups themselves with pyarrow, so Spark never turns the payloads into
   rows and Arrow; any other ``frames`` goes through Spark as usual. The data frames are taken
   in segments of ``segment_rows`` (file order), each sorted by key and capture order (as
   indices: the payloads stay where they are) and reassembled by the batch step's group loop
   (:func:`nbmq.spark.messages.group_rows`, as :func:`~nbmq.spark.messages.reassemble_batches`
   uses it). A key complete there
   becomes one *row record* (the message row, plus the (ts_ns, frame_number) of its first and
   last frame). An incomplete key carries its frames into the next segment while new frames of
   it keep coming; otherwise, and at the partition's end, it leaves as *frame records*
   (payload included): it may continue in another partition.
2. **Combine** (shuffle of the records by key hash, sort by key and capture order,
   ``mapInArrow``): a key with one row record passes as it is; frame records only are
   reassembled exactly as ``build_messages`` does; a row record followed, strictly later in
   capture order, by other records of its key becomes the row with those frames added as
   duplicates (today's rule: a frame after completion is a duplicate). The combined rows are
   kept on the executors (``localCheckpoint``).
3. **Redo** (rare): any other mix with a row record (earlier frames of the key in another
   partition, interleaved capture times) cannot be finished without the row record's frames.
   Such key hashes come back as marks, every combined row under them is dropped (two keys may
   share a hash) and they are recomputed from ``frames`` filtered to them: all their data
   frames in one partition and one segment of the local pass, so each key is reassembled whole
   in capture order (as ``build_messages``, the tests' oracle, does), then combined.

Measured in README (``benchmarks/bench_pipeline.py --messages``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .messages import (
    _MAX_U32,
    FRAME_COLUMNS,
    KEY,
    _Group,
    _key_starts,
    _Output,
    _u64,
    addr_port,
    group_rows,
    message_row,
    reassembled_frames,
)
from .schema import messages_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["build_messages_local", "combine_records", "data_frames"]

ROW, FRAME = 0, 1
#: columns of a frame record beside the key and dst (frames-table names, prefixed ``f_``)
_FRAME_COLS = ["part_count", "part_index", "message_size", "part_size", "chunk_offset", "payload"]
_ORDER = ["_t0", "_f0"]


#: columns of the frames table the local pass reads (:func:`~nbmq.spark.messages.reassembled_frames`' inputs)
_READ_COLS = [
    "capture",
    "session_id",
    "src_addr",
    "src_port",
    "message_id",
    "dst_addr",
    "dst_port",
    "part_count",
    "part_index",
    "message_size",
    "part_size",
    "chunk_offset",
    "payload",
    "ts_ns",
    "frame_number",
    "kind",
    "error",
    "secure",
]


def _parquet_pieces(frames: DataFrame) -> list[tuple[str, int]] | None:
    """(local path, row group) of every row group of ``frames`` if it is a bare scan of local
    Parquet files (``spark.read.parquet(dir)``, as the pipeline reads ``frames/``), else None.

    The local pass then reads those files with pyarrow in the Python workers: Spark never
    decodes the frames into rows (the JVM's Parquet -> row -> Arrow conversion of every payload
    was most of the step's time on the shuffled path as on the local one).
    """
    from urllib.parse import unquote, urlparse

    import pyarrow.parquet as pq

    try:
        plan = frames._jdf.queryExecution().optimizedPlan()
        if plan.getClass().getSimpleName() != "LogicalRelation":
            return None
        rel = plan.relation()
        if rel.getClass().getSimpleName() != "HadoopFsRelation" or rel.fileFormat().toString() != "Parquet":
            return None
        if not rel.partitionSchema().isEmpty() or not set(_READ_COLS) <= set(frames.columns):
            return None
        pieces = []
        for uri in frames.inputFiles():
            url = urlparse(uri)
            if url.scheme not in ("file", ""):
                return None
            path = unquote(url.path)
            pieces += [(path, i) for i in range(pq.ParquetFile(path).metadata.num_row_groups)]
        return pieces
    except Exception:  # noqa: BLE001 -- any doubt (Spark Connect, another plan shape): the Spark read
        return None


def endpoint_text(addr: Any, port: Any) -> pa.Array:
    """:func:`nbmq.spark.messages.addr_port`'s rule in Arrow: ``addr:port``, ``[addr]:port`` for
    IPv6, null where either is.

    Args:
        addr: string Array or ChunkedArray of addresses.
        port: integer Array or ChunkedArray of ports, as long as ``addr``.

    Returns:
        A string Array. Built once per distinct (address, port) pair (a capture has few peers)
        and gathered, when neither column has a null.
    """
    import pyarrow.compute as pc

    if isinstance(addr, pa.ChunkedArray):
        addr = addr.combine_chunks()
    if isinstance(port, pa.ChunkedArray):
        port = port.combine_chunks()
    if len(addr) and not addr.null_count and not port.null_count:
        enc = pc.dictionary_encode(addr)
        pair = (enc.indices.to_numpy(zero_copy_only=False).astype(np.int64) << 17) | port.to_numpy(
            zero_copy_only=False
        ).astype(np.int64)
        uniq, inverse = np.unique(pair, return_inverse=True)
        names = enc.dictionary.to_pylist()
        texts = [
            (f"[{a}]:{p}" if ":" in a else f"{a}:{p}")
            for a, p in ((names[int(u >> 17)], int(u & 0x1FFFF)) for u in uniq.tolist())
        ]
        return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1)))
    text = pc.cast(port, pa.string())
    v6 = pc.binary_join_element_wise("[", addr, "]:", text, "")
    v4 = pc.binary_join_element_wise(addr, ":", text, "")
    return pc.if_else(pc.match_substring(addr, ":"), v6, v4)


def data_frames(b: pa.RecordBatch) -> pa.RecordBatch:
    """A frames-table batch (at least :data:`_READ_COLS`) -> its valid data frames (``error``
    null, ``kind`` 0, not ``secure``: :func:`~nbmq.spark.messages.reassembled_frames`' rule)
    with the columns ``reassembled_frames`` selects, ``src``/``dst`` as ``addr:port``: the local pass's
    input. Zero rows when there is none."""
    import pyarrow.compute as pc

    keep = pc.and_(pc.is_null(b.column("error")), pc.fill_null(pc.equal(b.column("kind"), 0), False))
    keep = pc.and_(keep, pc.invert(pc.fill_null(b.column("secure"), False)))
    if keep.false_count:
        b = b.filter(keep)
    c = b.column
    return pa.RecordBatch.from_arrays(
        [
            c("capture"),
            c("session_id"),
            endpoint_text(c("src_addr"), c("src_port")),
            c("message_id"),
            endpoint_text(c("dst_addr"), c("dst_port")),
            c("part_count"),
            c("part_index"),
            c("message_size"),
            c("part_size"),
            c("chunk_offset"),
            c("payload"),
            c("ts_ns"),
            c("frame_number"),
        ],
        names=[*KEY[:3], *FRAME_COLUMNS],
    )


def _read_pieces(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """(path, row_group) rows -> the data frames of those row groups, as ``reassembled_frames`` selects them."""
    import pyarrow.parquet as pq

    for task in batches:
        for path, group in zip(task.column("path").to_pylist(), task.column("row_group").to_pylist()):
            f = pq.ParquetFile(path)
            for b in f.iter_batches(batch_size=65536, row_groups=[group], columns=_READ_COLS):
                b = data_frames(b)
                if b.num_rows:
                    yield b


def _record_schema(parts: bool) -> Any:
    """Spark schema of the local pass's records: message row columns, order columns, frame columns."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

    fields = list(messages_schema(parts).fields)
    fields += [StructField(n, LongType()) for n in ("_kind", "_t0", "_f0", "_t1", "_f1")]
    types = {"part_count": IntegerType(), "part_index": IntegerType(), "payload": BinaryType()}
    fields += [StructField("f_" + c, types.get(c, LongType())) for c in _FRAME_COLS]
    return StructType(fields)


#: frames per local-pass segment: a segment is sorted and reassembled at once; keys still
#: incomplete at its end carry their frames into the next one (memory: one segment, not a partition)
_SEGMENT_ROWS = 131072


def _local_pass(
    batches: Iterator[pa.RecordBatch],
    record_schema: pa.Schema,
    parts: bool,
    limit: int,
    out_schema: pa.Schema,
    segment_rows: int = _SEGMENT_ROWS,
) -> Iterator[pa.RecordBatch]:
    """One frames partition, in file order, -> row records and frame records (module docstring, step 1).

    The frames are taken in segments of about ``_SEGMENT_ROWS``; a key left incomplete by a
    segment is tried again with the next one (its frames carried over) while new frames of it
    keep coming, otherwise (and at the partition's end) it leaves as frame records.
    """
    pending: list[pa.RecordBatch] = []
    count = 0
    carry: pa.Table | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        count += batch.num_rows
        if count >= segment_rows:
            carry = yield from _segment(pending, carry, False, record_schema, parts, limit, out_schema)
            pending, count = [], 0
    if pending or carry is not None:
        yield from _segment(pending, carry, True, record_schema, parts, limit, out_schema)


def _codes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Integer codes of a string column (equal strings, equal codes; one dictionary for all chunks)."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(column)
    if isinstance(enc, pa.ChunkedArray):
        return (
            np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in enc.chunks])
            if enc.num_chunks
            else np.zeros(0, np.int64)
        )
    return enc.indices.to_numpy(zero_copy_only=False)


def _segment(
    new: list[pa.RecordBatch],
    carry: pa.Table | None,
    final: bool,
    record_schema: pa.Schema,
    parts: bool,
    limit: int,
    out_schema: pa.Schema,
):  # type: ignore[no-untyped-def]
    """Reassemble one segment (carried frames first, then ``new``); yield its records and
    return the frames to carry into the next segment (None if none).

    The segment is sorted by key and capture order as indices only: the payloads are read in
    place (``group_rows``), and only the frames of incomplete keys are taken out."""
    tables = ([carry] if carry is not None else []) + ([pa.Table.from_batches(new)] if new else [])
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    n_old = carry.num_rows if carry is not None else 0
    n = table.num_rows
    if n == 0:
        return None
    sid = _u64(table.column("session_id"))
    mid = _u64(table.column("message_id"))
    cap = _codes(table.column("capture"))
    src = _codes(table.column("src"))
    ts = table.column("ts_ns").to_numpy()
    fn = table.column("frame_number").to_numpy()
    order = np.lexsort((fn, ts, mid, sid, src, cap))
    sid, mid, cap, src, ts, fn = sid[order], mid[order], cap[order], src[order], ts[order], fn[order]
    change = np.ones(n, dtype=bool)
    change[1:] = (sid[1:] != sid[:-1]) | (mid[1:] != mid[:-1]) | (cap[1:] != cap[:-1]) | (src[1:] != src[:-1])
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n) - 1
    fresh = np.maximum.reduceat((order >= n_old).astype(np.int8), starts) > 0  # a frame from this segment
    complete, rows = group_rows(table, order, starts, out_schema, parts, limit, complete_only=True)
    sel = np.flatnonzero(complete)
    m = sel.size
    if m:
        cols: dict[str, Any] = dict(rows)
        cols["_kind"] = pa.array(np.full(m, ROW, np.int64))
        for c, v in (
            ("_t0", ts[starts[sel]]),
            ("_f0", fn[starts[sel]]),
            ("_t1", ts[ends[sel]]),
            ("_f1", fn[ends[sel]]),
        ):
            cols[c] = pa.array(v)
        yield _record_batch(cols, m, record_schema)
    # incomplete keys: carried while fresh frames come, else out as frame records
    todo = np.flatnonzero(~complete)
    keep = np.zeros(starts.size, dtype=bool)
    if not final:
        keep[todo[fresh[todo]]] = True
    out = np.zeros(starts.size, dtype=bool)
    out[todo] = True
    out &= ~keep
    carried = None
    if keep.any():
        carried = table.take(pa.array(order[_rows_of(starts, ends, np.flatnonzero(keep))])).combine_chunks()
    if out.any():
        frames = table.take(pa.array(order[_rows_of(starts, ends, np.flatnonzero(out))]))
        k = frames.num_rows
        cols = {c: frames.column(c) for c in ("capture", "session_id", "src", "dst", "message_id")}
        cols["_kind"] = pa.array(np.full(k, FRAME, np.int64))
        cols["_t0"] = cols["_t1"] = frames.column("ts_ns")
        cols["_f0"] = cols["_f1"] = frames.column("frame_number")
        for c in _FRAME_COLS:
            cols["f_" + c] = frames.column(c)
        yield _record_batch(cols, k, record_schema)
    return carried


def _rows_of(starts: np.ndarray, ends: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Row indices of the given groups (contiguous ranges starts[g]..ends[g]), in order."""
    first, count = starts[groups], ends[groups] - starts[groups] + 1
    return np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))


def _record_batch(cols: dict[str, Any], m: int, record_schema: pa.Schema) -> pa.RecordBatch:
    """Columns by name (missing ones null) -> a record batch of ``record_schema``."""
    arrays = []
    for f in record_schema:
        a = cols.get(f.name)
        if a is None:
            a = pa.nulls(m, f.type)
        a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
        arrays.append(a if a.type == f.type else a.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=record_schema)


def _py_key(batch: pa.RecordBatch, i: int) -> tuple:
    return (
        batch.column("capture")[i].as_py(),
        int(_u64(batch.column("session_id"))[i]),
        batch.column("src")[i].as_py(),
        int(_u64(batch.column("message_id"))[i]),
    )


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
        r["capture"],
        int(r["session_id"]),
        r["src"],
        r["dst"],
        int(r["message_id"]),
        r["part_count"],
        r["message_size"],
        r["part_sizes"],
        r["part_sha256"],
        r["complete"],
        r["missing_bytes"],
        r["frames"],
        r["duplicates"],
        r["rejected"],
        r["first_ts"],
        r["last_ts"],
        r.get("parts"),
    )


def _settle(p: _Pending, parts: bool, limit: int) -> tuple | None:
    """The messages row of one key's records (sorted by capture order), or None when it needs
    the redo path (a row record not strictly first in capture order)."""
    recs = p.records
    kinds = [r["_kind"] for r in recs]
    if ROW not in kinds:
        g = _Group(p.key, recs[0]["dst"])
        g.rows = [
            (r["f_part_count"], r["f_part_index"], r["f_message_size"], r["f_part_size"], r["f_chunk_offset"], r["_t0"])
            for r in recs
        ]
        g.chunks = [memoryview(r["f_payload"]) for r in recs]
        return message_row(g, parts, limit)
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


def _combine(
    batches: Iterator[pa.RecordBatch], out_schema: pa.Schema, parts: bool, limit: int
) -> Iterator[pa.RecordBatch]:
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
        return pa.RecordBatch.from_arrays(
            [*cols, pa.array(redo, pa.int64()), pa.array(np.ones(m, bool))], schema=with_h
        )

    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        starts = np.flatnonzero(_key_starts(batch))
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
                [*cols, batch.column("_h").take(take), pa.array(np.zeros(len(take), bool))], schema=with_h
            )
        slow = np.flatnonzero(~fast)
        if slow.size == 0:
            continue
        # timestamps as integer microseconds (to_pylist would make datetimes)
        plain = pa.RecordBatch.from_arrays(
            [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in batch.columns],
            names=batch.schema.names,
        )
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
    segment_rows: int = _SEGMENT_ROWS,
) -> DataFrame:
    """The messages table of ``frames``, reading ``frames`` once (twice only for redone keys).

    Args:
        frames: a frames table (the ``nbmq`` source or its Parquet copy) with ``payload``.
        parts: add the ``parts`` column (array<binary>).
        max_message_size: larger claimed messages are rejected, bytes.
        segment_rows: frames the local pass sorts and reassembles at once (its memory bound;
            smaller values only move more keys to the carry-over, for tests).

    Returns:
        A DataFrame of :func:`nbmq.spark.schema.messages_schema` with exactly the rows of
        :func:`nbmq.spark.messages.build_messages` (in another order). Building it runs one job:
        the local pass, shuffle and combine, whose rows (one per message) are kept in executor
        storage, memory then disk, for as long as the DataFrame is used (a lost executor loses
        them, as any local checkpoint); the redo marks go through the driver. With a bare
        local Parquet ``frames``, the executors read its files by path (they must see them).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = messages_schema(parts)
    out_schema = to_arrow_schema(schema, timezone="UTC")
    rec_spark = _record_schema(parts)
    rec_schema = to_arrow_schema(rec_spark, timezone="UTC")
    want_parts, limit, segment = parts, max_message_size, segment_rows

    def local(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _local_pass(batches, rec_schema, want_parts, limit, out_schema, segment)

    # One job: the local pass (no shuffle of the frames), then only its records -- a row per
    # message done in its partition, the frames of keys that were not -- are shuffled by key
    # hash and combined; the combined rows (a row per key, or a redo mark) stay on the executors.
    pieces = _parquet_pieces(frames)
    if pieces:
        spark = frames.sparkSession
        tasks = spark.sparkContext.parallelize(pieces, len(pieces)).toDF("path string, row_group int")

        def local_read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            yield from _local_pass(_read_pieces(batches), rec_schema, want_parts, limit, out_schema, segment)

        records = tasks.mapInArrow(local_read, rec_spark)
    else:
        records = reassembled_frames(frames).mapInArrow(local, rec_spark)
    return combine_records(records, frames, parts=parts, max_message_size=max_message_size)


def combine_records(
    records: DataFrame, frames: DataFrame, *, parts: bool = False, max_message_size: int = _MAX_U32
) -> DataFrame:
    """Steps 2 and 3 of the module docstring: the message rows of local-pass records.

    Args:
        records: records of :func:`_record_schema` (``parts`` as given), every record of each
            key they hold (a key's records split between two calls would give two rows).
        frames: the frames table (with ``payload``) the redo path reads, filtered to its keys.
        parts, max_message_size: as :func:`build_messages_local`.

    Returns:
        A DataFrame of :func:`nbmq.spark.schema.messages_schema`, one row per key of ``records``
        (the combine runs when this is called: its rows are locally checkpointed).

    Raises:
        RuntimeError: a redone key still cannot be settled (a bug: every frame of it is then
            reassembled in one segment, which leaves nothing to settle).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = messages_schema(parts)
    rows = _combined(records, parts, max_message_size)
    marked = [r[0] for r in rows.where(F.col("_redo")).select("_h").distinct().collect()]
    kept = rows.where(~F.col("_redo"))
    if marked:  # a marked hash drops every row under it (two keys may share it)
        kept = kept.where(~F.col("_h").isin(marked))
    out = kept.select(*schema.names)
    if not marked:
        return out
    # Redo: every data frame of the marked keys in one partition and one segment, so the local
    # pass reassembles each key whole in capture order, as build_messages does.
    key_hash = F.xxhash64("capture", "session_id", addr_port("src_addr", "src_port"), "message_id")
    rec_spark = _record_schema(parts)
    rec_schema = to_arrow_schema(rec_spark, timezone="UTC")
    out_schema = to_arrow_schema(schema, timezone="UTC")
    want_parts, limit = parts, max_message_size

    def whole(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _local_pass(batches, rec_schema, want_parts, limit, out_schema, _WHOLE)

    again = _combined(
        reassembled_frames(frames.where(key_hash.isin(marked))).coalesce(1).mapInArrow(whole, rec_spark), parts, limit
    )
    if again.where(F.col("_redo")).limit(1).count():
        raise RuntimeError("the combine's redo path left a key unsettled")
    return out.unionByName(again.select(*schema.names))


#: A segment no partition reaches: the redo path's keys are reassembled whole.
_WHOLE = 2**62


def _combined(records: DataFrame, parts: bool, max_message_size: int) -> DataFrame:
    """Step 2: ``records`` shuffled by key hash, sorted by key and capture order and combined
    (:func:`_combine`); rows of the messages schema plus ``_h`` (the key hash) and ``_redo``
    (a mark: the key cannot be settled from its records), locally checkpointed."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType

    from .messages import KEY

    schema = messages_schema(parts)
    out_schema = to_arrow_schema(schema, timezone="UTC")
    want_parts, limit = parts, max_message_size

    def combine(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _combine(batches, out_schema, want_parts, limit)

    flagged = StructType([*schema.fields, StructField("_h", LongType()), StructField("_redo", BooleanType())])
    return (
        records.withColumn("_h", F.xxhash64(*KEY))
        .repartition("_h")
        .sortWithinPartitions("_h", *KEY, *_ORDER)
        .mapInArrow(combine, flagged)
        .localCheckpoint(eager=True)
    )
