"""The messages table: data frames reassembled per (capture, session_id, sender, message_id).

Frames are shuffled by (a hash of) that key and sorted by key and capture time inside each
Spark partition (``repartition`` + ``sortWithinPartitions``); ``mapInArrow`` then walks each partition's Arrow
batches once, cutting groups where the key changes (a group may span batches). The groups of a
batch are reassembled in one call of ``reassemble_groups``: the compiled loop
(``nbmq.spark._reassemble``, the codec ``Reassembler``'s rules in C, payloads read in place) or
its Python twin (``nbmq.spark._reassemble_py``, the reference: each group's frames, in capture
order, fed to the codec's ``Reassembler``); a test keeps the two equal.

Counting rules:

- ``frames``: valid data frames with the key (duplicates included).
- ``duplicates``: an exact repeat of a chunk already held (a SafeDealer resend, a capture that
  saw a frame twice), and every frame that arrives after its message completed (the
  reassembler would otherwise start a new message from it).
- ``rejected``: frames the reassembler refused (a header that disagrees with earlier frames of
  the message, overlapping chunks with different bytes, claims past ``max_message_size``); a
  rejection drops what was held and later frames start over, as on a live socket.
- A group whose frames together carry fewer bytes than its claimed ``message_size`` can never
  complete and is not handed to the reassembler at all, so a hostile size claim allocates
  nothing; its byte accounting is computed from the frame headers.
- ``missing_bytes``: 0 when complete, else ``message_size`` minus the distinct bytes the
  frames cover (overlaps counted once).
- A message whose received parts' sizes add up to ``message_size`` is complete; the absent
  parts are empty (the Rust reference sends no frame for an empty part; the codec's rule). Both paths below give such messages their empty parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .. import extensions
from ._reassemble_py import reassemble_groups as _reassemble_groups_py
from .datasource import _u64_decimal
from .schema import messages_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["KEY", "FRAME_COLUMNS", "build_messages", "reassemble_batches", "addr_port", "reassembled_frames"]

KEY = ["capture", "session_id", "src", "message_id"]
#: A data frame's columns as reassembly reads them after its peer's (capture, session_id, src):
#: the columns the stateful streaming step keeps, and the local pass's input after the peer's.
FRAME_COLUMNS = [
    "message_id",
    "dst",
    "part_count",
    "part_index",
    "message_size",
    "part_size",
    "chunk_offset",
    "payload",
    "ts_ns",
    "frame_number",
]
#: Order of the values in a messages row tuple (:func:`message_row`), the table's columns.
MESSAGE_ROW_FIELDS = [
    "capture",
    "session_id",
    "src",
    "dst",
    "message_id",
    "part_count",
    "message_size",
    "part_sizes",
    "part_sha256",
    "complete",
    "missing_bytes",
    "frames",
    "duplicates",
    "rejected",
    "first_ts",
    "last_ts",
    "parts",
]
_MAX_U32 = 0xFFFFFFFF
_OUT_ROWS = 4096

_compiled = extensions.load("nbmq.spark._reassemble")
_reassemble_groups_c = None if _compiled is None else _compiled.reassemble_groups

#: True when the groups are reassembled by the compiled loop (``nbmq.spark._reassemble``).
COMPILED = _reassemble_groups_c is not None
#: ``reassemble_groups`` in use: the compiled one, else the Python twin (the reference)
_KERNEL = _reassemble_groups_c if _reassemble_groups_c is not None else _reassemble_groups_py


def addr_port(addr_col: str, port_col: str) -> Any:
    """Spark column ``addr:port`` (``[addr]:port`` for IPv6)."""
    from pyspark.sql import functions as F

    addr = F.col(addr_col)
    return F.when(addr.contains(":"), F.concat(F.lit("["), addr, F.lit("]:"), F.col(port_col))).otherwise(
        F.concat(addr, F.lit(":"), F.col(port_col))
    )


def reassembled_frames(frames: DataFrame) -> DataFrame:
    """The frames reassembly reads: valid data frames, secure mode's left out (their chunks are
    ciphertext; the sessions table and the summary count them as ``sealed_frames``), as
    ``capture``, ``session_id``, ``src`` and :data:`FRAME_COLUMNS` (``src``/``dst`` as
    ``addr:port``, :func:`addr_port`)."""
    from pyspark.sql import functions as F

    valid = frames.where(F.col("error").isNull() & (F.col("kind") == 0) & ~F.col("secure"))
    columns = [addr_port("dst_addr", "dst_port").alias("dst") if c == "dst" else c for c in FRAME_COLUMNS]
    return valid.select("capture", "session_id", addr_port("src_addr", "src_port").alias("src"), *columns)


def build_messages(frames: DataFrame, *, parts: bool = False, max_message_size: int = _MAX_U32) -> DataFrame:
    """Reassemble the valid data frames of a frames table (not secure mode's) into the messages table.

    Args:
        frames: a frames table (the ``nbmq`` source or its Parquet copy) with ``payload``.
        parts: add the ``parts`` column (array<binary>, the message's parts when complete).
        max_message_size: larger claimed messages are rejected, bytes.

    Returns:
        A DataFrame of :func:`nbmq.spark.schema.messages_schema` (lazy).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = messages_schema(parts)
    data = reassembled_frames(frames)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    want_parts = parts
    limit = max_message_size

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from reassemble_batches(batches, arrow_schema, parts=want_parts, max_message_size=limit)

    # Shuffle and sort on a 64-bit hash of the key first: comparing DECIMAL(20,0) ids makes the
    # JVM build BigIntegers per comparison (a quarter of the step's JVM time in a JFR profile);
    # the hash's 8-byte sort prefix settles nearly every comparison, and equal keys still end
    # up adjacent (the key columns follow it in the sort order).
    return (
        data.withColumn("_key_hash", F.xxhash64(*KEY))
        .repartition("_key_hash")
        .sortWithinPartitions("_key_hash", *KEY, "ts_ns", "frame_number")
        .drop("_key_hash")
        .mapInArrow(run, schema)
    )


def _u64(arr: pa.Array) -> np.ndarray:
    """decimal128(20, 0) values known to fit a u64 -> uint64 (the low 8 bytes)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    buf = np.frombuffer(arr.buffers()[1], dtype="<u8")
    return buf[2 * arr.offset : 2 * (arr.offset + len(arr)) : 2]


def _binary_views(arr: pa.Array) -> tuple[memoryview, np.ndarray]:
    if pa.types.is_large_binary(arr.type):
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)
    else:
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    offsets = offsets[arr.offset : arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    return memoryview(data if data is not None else b""), offsets


class _Group:
    """The frames of one key seen so far (a group may continue in the next batch)."""

    __slots__ = ("key", "dst", "rows", "chunks")

    def __init__(self, key: tuple, dst: str) -> None:
        self.key = key
        self.dst = dst
        self.rows: list[tuple] = []
        self.chunks: list[memoryview] = []


def reassemble_batches(
    batches: Iterator[pa.RecordBatch],
    arrow_schema: pa.Schema,
    *,
    parts: bool = False,
    max_message_size: int = _MAX_U32,
) -> Iterator[pa.RecordBatch]:
    """Reassemble frames sorted by (capture, session_id, src, message_id, ts_ns, frame_number).

    The groups (one key's frames) of each batch are reassembled at once by
    ``reassemble_groups`` (compiled, or its Python twin, the reference) and become message rows
    column-wise; the last group of a batch waits for the next batch, which may continue it.

    Args:
        batches: Arrow batches with the columns :func:`build_messages` selects.
        arrow_schema: the output schema.
        parts: fill the ``parts`` column.
        max_message_size: bytes.

    Yields:
        Record batches of ``arrow_schema``, one row per key.
    """
    pending: list[pa.RecordBatch] = []
    pending_key: tuple | None = None
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        bounds = np.append(np.flatnonzero(_key_starts(batch)), n)
        first = 0
        if pending and _row_key(batch, 0) == pending_key:
            pending.append(batch.slice(0, int(bounds[1])))
            if len(bounds) == 2:
                continue  # the whole batch continues the open group
            first = int(bounds[1])
        if pending:
            yield _rows_batch(pa.Table.from_batches(pending), arrow_schema, parts, max_message_size)
        last = int(bounds[-2])
        if last > first:
            yield _rows_batch(batch.slice(first, last - first), arrow_schema, parts, max_message_size)
        pending, pending_key = [batch.slice(last)], _row_key(batch, last)
    if pending:
        yield _rows_batch(pa.Table.from_batches(pending), arrow_schema, parts, max_message_size)


def _row_key(batch: pa.RecordBatch, i: int) -> tuple:
    return (
        batch.column("capture")[i].as_py(),
        int(_u64(batch.column("session_id"))[i]),
        batch.column("src")[i].as_py(),
        int(_u64(batch.column("message_id"))[i]),
    )


def _key_starts(batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Bool per row of frames sorted by key: its key differs from the row before's (row 0: True)."""
    import pyarrow.compute as pc

    n = batch.num_rows
    starts = np.ones(n, dtype=bool)
    if n > 1:
        sid, mid = _u64(batch.column("session_id")), _u64(batch.column("message_id"))
        changed = (sid[1:] != sid[:-1]) | (mid[1:] != mid[:-1])
        for name in ("capture", "src"):
            c = batch.column(name)
            changed |= pc.not_equal(c.slice(1), c.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        starts[1:] = changed
    return starts


def _rows_batch(frames: pa.Table | pa.RecordBatch, arrow_schema: pa.Schema, parts: bool, limit: int) -> pa.RecordBatch:
    """Frames sorted by key and capture order -> their message rows (one per key), a record batch."""
    starts = np.flatnonzero(_key_starts(frames))
    _, cols = group_rows(frames, None, starts, arrow_schema, parts, limit)
    return pa.RecordBatch.from_arrays([cols[f.name] for f in arrow_schema], schema=arrow_schema)


def _numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return column.to_numpy() if isinstance(column, pa.ChunkedArray) else column.to_numpy(zero_copy_only=False)


def _payload_ranges(column: pa.Array | pa.ChunkedArray) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """A binary column -> (its data buffers, buffer index, start and length of every value)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    buffers, ids, starts, lengths = [], [], [], []
    for i, arr in enumerate(chunks):
        data, offsets = _binary_views(arr)
        buffers.append(data)
        offsets = offsets.astype(np.int64)
        starts.append(offsets[:-1])
        lengths.append(np.diff(offsets))
        ids.append(np.full(len(arr), i, np.int64))
    if not chunks:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return buffers, np.concatenate(ids), np.concatenate(starts), np.concatenate(lengths)


#: the two lowercase hex digits of every byte value, as one uint16 (memory order: high digit first)
_HEX = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), np.uint16)


def _hex(digests: np.ndarray) -> pa.Array:
    """uint8 (m, 32) sha256 digests -> their lowercase hex, a string array of m values."""
    text = _HEX[digests.reshape(-1)]
    m = len(digests)
    offsets = np.arange(m + 1, dtype=np.int32) * 64
    return pa.StringArray.from_buffers(m, pa.py_buffer(offsets), pa.py_buffer(text))


def group_rows(
    frames: pa.Table | pa.RecordBatch,
    order: np.ndarray | None,
    starts: np.ndarray,
    arrow_schema: pa.Schema,
    parts: bool,
    limit: int,
    complete_only: bool = False,
) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """Reassemble every group of ``frames`` at once and build its message row column-wise.

    Args:
        frames: data frames with the columns :func:`build_messages` selects (any row order).
        order: int64 (n,), the rows in key and capture order (None: already in that order).
        starts: int64 (g,), where each group (key) starts in that order (``starts[0] == 0``).
        arrow_schema: the messages schema (its ``parts`` field, if any, is filled when ``parts``).
        parts: fill ``parts`` with the completed parts.
        limit: ``max_message_size``, bytes.
        complete_only: build the columns of the completed groups only.

    Returns:
        (bool (g,) complete flags of every group, the message row's columns by name: one value
        per group, or per completed group with ``complete_only``).
    """
    n = frames.num_rows

    def sorted_(name: str) -> np.ndarray:
        values = _numpy(frames.column(name))
        return values if order is None else values[order]

    buffers, ids, cstart, clen = _payload_ranges(frames.column("payload"))
    if order is not None:
        ids, cstart, clen = ids[order], cstart[order], clen[order]
    bounds = np.append(np.asarray(starts, np.int64), n)
    (complete, count, size, dups, rejected, missing, slots, slot_size, slot_start, digests, data) = _KERNEL(
        bounds,
        sorted_("part_count"),
        sorted_("part_index"),
        sorted_("message_size"),
        sorted_("part_size"),
        sorted_("chunk_offset"),
        buffers,
        ids,
        cstart,
        clen,
        limit,
        parts,
    )
    flags = done = complete.astype(bool)
    ts = sorted_("ts_ns")
    g = len(starts)
    per_group = np.diff(slots)
    first_ts = np.minimum.reduceat(ts, starts) // 1000 if g else ts[:0]
    last_ts = np.maximum.reduceat(ts, starts) // 1000 if g else ts[:0]
    nframes = np.diff(bounds)
    firsts = starts if order is None else order[starts]
    if complete_only and not done.all():  # leave the others out before building any column
        sel = np.flatnonzero(done)
        slot_keep = np.repeat(done, per_group)
        slot_size, slot_start, digests = slot_size[slot_keep], slot_start[slot_keep], digests[slot_keep]
        count, size, dups, rejected, missing = count[sel], size[sel], dups[sel], rejected[sel], missing[sel]
        first_ts, last_ts, nframes, firsts, per_group = (
            first_ts[sel],
            last_ts[sel],
            nframes[sel],
            firsts[sel],
            per_group[sel],
        )
        done = done[sel]
        g = sel.size
        slots = np.zeros(g + 1, np.int64)
        np.cumsum(per_group, out=slots[1:])
    take = pa.array(firsts)
    field = {f.name: f.type for f in arrow_schema}
    cols: dict[str, pa.Array] = {}
    for name in ("capture", "src", "dst"):
        c = frames.column(name).take(take)
        cols[name] = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
    for name in ("session_id", "message_id"):
        cols[name] = _u64_decimal(_u64(frames.column(name))[firsts], None, field[name])
    slot_offsets = pa.array(slots.astype(np.int32))
    cols["part_count"] = pa.array(count, pa.int32())
    cols["message_size"] = pa.array(size, pa.int64())
    cols["part_sizes"] = pa.ListArray.from_arrays(slot_offsets, pa.array(slot_size, pa.int64(), mask=slot_size < 0))
    # complete groups' slots only: their parts, back to back in ``data``
    if done.all():
        done_offsets, mask, d_start, d_size, d_digests = slot_offsets, None, slot_start, slot_size, digests
    else:
        done_offsets = np.zeros(g + 1, np.int32)
        np.cumsum(np.where(done, per_group, 0), out=done_offsets[1:])
        done_offsets = pa.array(done_offsets)
        mask = pa.array(~done)
        keep = np.repeat(done, per_group)
        d_start, d_size, d_digests = slot_start[keep], slot_size[keep], digests[keep]
    cols["part_sha256"] = pa.ListArray.from_arrays(done_offsets, _hex(d_digests), mask=mask)
    cols["complete"] = pa.array(done)
    cols["missing_bytes"] = pa.array(missing, pa.int64())
    cols["frames"] = pa.array(nframes, pa.int64())
    cols["duplicates"] = pa.array(dups, pa.int64())
    cols["rejected"] = pa.array(rejected, pa.int64())
    cols["first_ts"] = pa.array(first_ts).cast(field["first_ts"])
    cols["last_ts"] = pa.array(last_ts).cast(field["last_ts"])
    if "parts" in field:
        if parts:
            blob_offsets = np.append(d_start, d_start[-1] + d_size[-1] if d_size.size else 0)
            if blob_offsets[-1] < 2**31:
                blobs = pa.BinaryArray.from_buffers(
                    pa.binary(), len(d_size), [None, pa.py_buffer(blob_offsets.astype(np.int32)), pa.py_buffer(data)]
                )
            else:
                blobs = pa.LargeBinaryArray.from_buffers(
                    pa.large_binary(), len(d_size), [None, pa.py_buffer(blob_offsets), pa.py_buffer(data)]
                ).cast(pa.binary())
            cols["parts"] = pa.ListArray.from_arrays(done_offsets, blobs, mask=mask)
        else:
            cols["parts"] = pa.nulls(g, field["parts"])
    for name, type_ in field.items():
        if cols[name].type != type_:
            cols[name] = cols[name].cast(type_)
    return flags, cols


def message_row(group: _Group, want_parts: bool, max_message_size: int) -> tuple:
    """One key's frames (``group``, in capture order) -> its messages row as a tuple.

    The same reassembly as every other path (:func:`group_rows`, one call for this group):
    the streaming messages and the combine of :mod:`nbmq.spark.messages_local` use it, so a
    row there equals the batch table's row of the same frames.

    Args:
        group: the key ``(capture, session_id, src, message_id)`` (u64 ids as ints), ``dst``,
            ``rows`` of (part_count, part_index, message_size, part_size, chunk_offset, ts_ns)
            and ``chunks`` (the payloads), in capture order.
        want_parts: fill the tuple's last value with the completed parts (bytes); else None.
        max_message_size: larger claimed messages are rejected, bytes.

    Returns:
        capture, session_id, src, dst, message_id, part_count, message_size, part_sizes,
        part_sha256, complete, missing_bytes, frames, duplicates, rejected, first_ts and
        last_ts (int microseconds), parts.
    """
    capture, sid, src, mid = group.key
    n = len(group.rows)
    pc, pi, ms, ps, co, ts = (list(c) for c in zip(*group.rows))
    ids = np.empty(n, np.uint64)
    frames = pa.table(
        {
            "capture": pa.array([capture] * n, pa.string()),
            "src": pa.array([src] * n, pa.string()),
            "dst": pa.array([group.dst] * n, pa.string()),
            "session_id": _u64_decimal(np.full_like(ids, sid), None, _U64_TYPE),
            "message_id": _u64_decimal(np.full_like(ids, mid), None, _U64_TYPE),
            "part_count": pa.array(pc, pa.int32()),
            "part_index": pa.array(pi, pa.int32()),
            "message_size": pa.array(ms, pa.int64()),
            "part_size": pa.array(ps, pa.int64()),
            "chunk_offset": pa.array(co, pa.int64()),
            "payload": pa.array([bytes(c) for c in group.chunks], pa.binary()),
            "ts_ns": pa.array(ts, pa.int64()),
        }
    )
    _, cols = group_rows(frames, None, np.zeros(1, np.int64), _row_schema(want_parts), want_parts, max_message_size)
    value = {name: col[0].as_py() for name, col in cols.items()}
    first, last = (int(cols[c].cast(pa.int64())[0].as_py()) for c in ("first_ts", "last_ts"))
    return (
        capture,
        sid,
        src,
        value["dst"],
        mid,
        value["part_count"],
        value["message_size"],
        value["part_sizes"],
        value["part_sha256"],
        value["complete"],
        value["missing_bytes"],
        value["frames"],
        value["duplicates"],
        value["rejected"],
        first,
        last,
        value.get("parts") if want_parts else None,
    )


_U64_TYPE = pa.decimal128(20, 0)


def _row_schema(parts: bool) -> pa.Schema:
    """The messages table's Arrow schema (with ``parts`` or not)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(messages_schema(parts), timezone="UTC")


class _Output:
    """Accumulates message rows and turns them into Arrow record batches."""

    def __init__(self, schema: pa.Schema, parts: bool) -> None:
        self.schema = schema
        self.parts = parts
        self.rows: list[tuple] = []

    def add(self, row: tuple) -> None:
        self.rows.append(row)

    def full(self) -> bool:
        return len(self.rows) >= _OUT_ROWS

    def flush(self) -> pa.RecordBatch:
        cols = list(zip(*self.rows))
        self.rows = []
        by_name = dict(zip(MESSAGE_ROW_FIELDS, cols))
        arrays = []
        for field in self.schema:
            values = by_name[field.name]
            if field.name in ("session_id", "message_id"):
                u = np.array(values, dtype=np.uint64)
                wide = np.zeros((len(u), 2), dtype="<u8")
                wide[:, 0] = u
                arrays.append(pa.Array.from_buffers(field.type, len(u), [None, pa.py_buffer(wide)]))
            elif pa.types.is_timestamp(field.type):
                arrays.append(pa.array(np.array(values, dtype=np.int64)).view(field.type))
            else:
                arrays.append(pa.array(list(values), field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
