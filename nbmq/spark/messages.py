"""The messages table: data frames reassembled per (capture, session_id, sender, message_id).

Frames are shuffled by (a hash of) that key and sorted by key and capture time inside each
Spark partition (``repartition`` + ``sortWithinPartitions``); ``mapInArrow`` then walks each partition's Arrow
batches once, cutting groups where the key changes (a group may span batches) and feeding each
group's frames, in capture order, to the codec's ``Reassembler``.

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
  parts are empty (the Rust reference sends no frame for an empty part; the codec's rule,
  issue 11). Both paths below give such messages their empty parts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .schema import messages_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["KEY", "build_messages", "reassemble_batches", "addr_port"]

KEY = ["capture", "session_id", "src", "message_id"]
_MAX_U32 = 0xFFFFFFFF
_OUT_ROWS = 4096


def addr_port(addr_col: str, port_col: str) -> Any:
    """Spark column ``addr:port`` (``[addr]:port`` for IPv6)."""
    from pyspark.sql import functions as F

    addr = F.col(addr_col)
    return F.when(addr.contains(":"), F.concat(F.lit("["), addr, F.lit("]:"), F.col(port_col))).otherwise(
        F.concat(addr, F.lit(":"), F.col(port_col))
    )


def build_messages(frames: DataFrame, *, parts: bool = False, max_message_size: int = _MAX_U32) -> DataFrame:
    """Reassemble the valid data frames of a frames table into the messages table.

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
    data = frames.where((F.col("error").isNull()) & (F.col("kind") == 0)).select(
        "capture",
        "session_id",
        addr_port("src_addr", "src_port").alias("src"),
        "message_id",
        addr_port("dst_addr", "dst_port").alias("dst"),
        "part_count",
        "part_index",
        "message_size",
        "part_size",
        "chunk_offset",
        "payload",
        "ts_ns",
        "frame_number",
    )
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

    Groups (one key's frames) that ``_bulk_reassemble`` completes in one step become message
    rows column-wise (one record batch per input batch); the others -- duplicates, rejections,
    incomplete messages, groups that continue in the next batch -- go frame by frame through
    ``_finish``. Both give the same rows (tests compare them); only the row order differs.

    Args:
        batches: Arrow batches with the columns :func:`build_messages` selects.
        arrow_schema: the output schema.
        parts: fill the ``parts`` column.
        max_message_size: bytes.

    Yields:
        Record batches of ``arrow_schema``, one row per key.
    """
    import pyarrow.compute as pc

    out = _Output(arrow_schema, parts)
    group: _Group | None = None
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        col = batch.column
        names = batch.schema.names
        capture = col(names.index("capture"))
        src = col(names.index("src"))
        sid = _u64(col(names.index("session_id")))
        mid = _u64(col(names.index("message_id")))
        # Group boundaries, vectorised: a row starts a group when its key differs from the row before.
        starts = np.zeros(n, dtype=bool)
        starts[0] = True
        if n > 1:
            changed = (sid[1:] != sid[:-1]) | (mid[1:] != mid[:-1])
            changed |= pc.not_equal(capture.slice(1), capture.slice(0, n - 1)).to_numpy(zero_copy_only=False)
            changed |= pc.not_equal(src.slice(1), src.slice(0, n - 1)).to_numpy(zero_copy_only=False)
            starts[1:] = changed
        bounds = np.flatnonzero(starts).tolist() + [n]
        data, offsets = _binary_views(col(names.index("payload")))
        first_key = (capture[0].as_py(), int(sid[0]), src[0].as_py(), int(mid[0]))
        cont = group is not None and group.key == first_key
        bulk = _bulk_reassemble(batch, names, sid, mid, data, offsets, bounds, cont, max_message_size)
        if bulk:
            yield _bulk_rows(batch, names, bounds, bulk, arrow_schema, parts)
        slow = [g for g in range(len(bounds) - 1) if g not in bulk]
        if not slow:
            continue
        firsts = [bounds[g] for g in slow]
        capture_l = capture.take(firsts).to_pylist()
        src_l = src.take(firsts).to_pylist()
        dst_l = col(names.index("dst")).take(firsts).to_pylist()
        sid_l = sid[firsts].tolist()
        mid_l = mid[firsts].tolist()
        fields = [
            col(names.index(c)).to_numpy(zero_copy_only=False)
            for c in ("part_count", "part_index", "message_size", "part_size", "chunk_offset", "ts_ns")
        ]
        for j, g in enumerate(slow):
            a, b = bounds[g], bounds[g + 1]
            key = (capture_l[j], sid_l[j], src_l[j], mid_l[j])
            rows = list(zip(*(f[a:b].tolist() for f in fields)))
            offs = offsets[a : b + 1].tolist()
            # a view per chunk: Arrow buffers are never reused, so views stay valid across batches
            chunks = [data[x:y] for x, y in zip(offs[:-1], offs[1:])]
            if group is not None and group.key == key:
                group.rows.extend(rows)
                group.chunks.extend(chunks)
                continue
            if group is not None:
                out.add(_finish(group, parts, max_message_size))
                if out.full():
                    yield out.flush()
            group = _Group(key, dst_l[j])
            group.rows.extend(rows)
            group.chunks.extend(chunks)
    if group is not None:
        out.add(_finish(group, parts, max_message_size))
    if out.rows:
        yield out.flush()


def _bulk_rows(
    batch: pa.RecordBatch,
    names: list[str],
    bounds: list[int],
    done: dict[int, list[Any]],
    arrow_schema: pa.Schema,
    want_parts: bool,
) -> pa.RecordBatch:
    """The message rows of groups completed with no duplicate or rejection, built column-wise.

    Same values as ``_complete_row`` per group: the key columns and ``dst`` from the group's
    first frame, part sizes and sha256 of the completed parts, first/last capture time.
    """
    col = batch.column
    groups = sorted(done)
    b = np.asarray(bounds, dtype=np.int64)
    gi = np.asarray(groups, dtype=np.int64)
    firsts = b[gi]
    m = len(groups)
    ts = col(names.index("ts_ns")).to_numpy(zero_copy_only=False)
    first_ts = np.minimum.reduceat(ts, b[:-1])[gi] // 1000
    last_ts = np.maximum.reduceat(ts, b[:-1])[gi] // 1000
    flat = [p for g in groups for p in done[g]]
    counts = np.fromiter((len(done[g]) for g in groups), np.int64, m)
    list_offsets = np.zeros(m + 1, dtype=np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    sizes = np.fromiter((len(p) for p in flat), np.int64, len(flat))
    message_size = np.add.reduceat(sizes, list_offsets[:-1]) if len(flat) else np.zeros(m, np.int64)
    message_size[counts == 0] = 0
    sha = pa.array([hashlib.sha256(p).hexdigest() for p in flat], pa.string())
    zeros = pa.array(np.zeros(m, np.int64))
    take = pa.array(firsts)
    cols: dict[str, pa.Array] = {
        "capture": col(names.index("capture")).take(take),
        "session_id": col(names.index("session_id")).take(take),
        "src": col(names.index("src")).take(take),
        "dst": col(names.index("dst")).take(take),
        "message_id": col(names.index("message_id")).take(take),
        "part_count": pa.array(counts.astype(np.int32)),
        "message_size": pa.array(message_size),
        "part_sizes": pa.ListArray.from_arrays(pa.array(list_offsets), pa.array(sizes)),
        "part_sha256": pa.ListArray.from_arrays(pa.array(list_offsets), sha),
        "complete": pa.array(np.ones(m, bool)),
        "missing_bytes": zeros,
        "frames": pa.array(np.diff(b)[gi]),
        "duplicates": zeros,
        "rejected": zeros,
        "first_ts": pa.array(first_ts),
        "last_ts": pa.array(last_ts),
    }
    if "parts" in arrow_schema.names:
        if want_parts:
            blobs = pa.array([bytes(p) for p in flat], pa.binary())
            cols["parts"] = pa.ListArray.from_arrays(pa.array(list_offsets), blobs)
        else:
            cols["parts"] = pa.nulls(m, arrow_schema.field("parts").type)
    arrays = [cols[f.name].cast(f.type) if cols[f.name].type != f.type else cols[f.name] for f in arrow_schema]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _coverage(rows: list[tuple], chunks: list) -> tuple[dict[int, int], int]:
    """Per part index its size (first frame seen), and the distinct bytes the frames cover."""
    sizes: dict[int, int] = {}
    ranges: dict[int, list[tuple[int, int]]] = {}
    for (_, index, _, psize, offset, _), chunk in zip(rows, chunks):
        sizes.setdefault(index, psize)
        if psize != sizes[index]:
            continue
        end = min(offset + len(chunk), psize)
        if end > offset:
            ranges.setdefault(index, []).append((offset, end))
    covered = 0
    for spans in ranges.values():
        spans.sort()
        reach = 0
        for a, b in spans:
            if b > reach:
                covered += b - max(a, reach)
                reach = b
    return sizes, covered


def _finish(group: _Group, want_parts: bool, max_message_size: int) -> tuple:
    capture, sid, src, mid = group.key
    rows = group.rows
    chunks = group.chunks
    part_count, _, message_size, _, _, _ = rows[0]
    if len(rows) == 1:
        first = last = rows[0][5]
    else:
        ts = [r[5] for r in rows]
        first, last = min(ts), max(ts)
    done: list[Any] | None = None
    duplicates = 0
    rejected = 0
    if (
        len(rows) == 1
        and part_count == 1
        and rows[0][4] == 0
        and len(chunks[0]) == rows[0][3] == message_size <= max_message_size
    ):
        done = [chunks[0]]  # a whole message in one frame (the codec checked its header)
    elif sum(len(c) for c in chunks) >= message_size:
        done, duplicates, rejected = _reassemble(sid, mid, rows, chunks, max_message_size)
    else:
        # Can never complete: duplicates are exact repeats of (part, offset, bytes).
        seen: set[tuple[int, int, bytes]] = set()
        for (_, pindex, _, _, coffset, _), chunk in zip(rows, chunks):
            ident = (pindex, coffset, bytes(chunk))
            if ident in seen:
                duplicates += 1
            seen.add(ident)
    if done is not None:
        if duplicates == rejected == 0:
            return _complete_row(group.key, group.dst, rows, done, want_parts)
        part_sizes: list[int | None] = [len(p) for p in done]
        sha = [hashlib.sha256(p).hexdigest() for p in done]
        missing = 0
        parts = [bytes(p) for p in done] if want_parts else None
        message_size = sum(part_sizes)  # type: ignore[arg-type]
        part_count = len(done)
    else:
        sizes, covered = _coverage(rows, chunks)
        part_sizes = [sizes.get(i) for i in range(part_count)]
        sha = None
        missing = max(0, message_size - covered)
        parts = None
    return (
        capture, sid, src, group.dst, mid, part_count, message_size, part_sizes, sha,
        done is not None, missing, len(rows), duplicates, rejected, first // 1000, last // 1000,
        parts,
    )


def _complete_row(key: tuple, dst: str, rows: list[tuple], done: list[Any], want_parts: bool) -> tuple:
    """The messages row of a key whose frames completed ``done`` with no duplicate or rejection."""
    capture, sid, src, mid = key
    if len(rows) == 1:
        first = last = rows[0][5]
    else:
        ts = [r[5] for r in rows]
        first, last = min(ts), max(ts)
    part_sizes = [len(p) for p in done]
    return (
        capture, sid, src, dst, mid, len(done), sum(part_sizes), part_sizes,
        [hashlib.sha256(p).hexdigest() for p in done], True, 0, len(rows), 0, 0,
        first // 1000, last // 1000, [bytes(p) for p in done] if want_parts else None,
    )


#: struct of a data frame's header (``nbmq.wire``: version, kind, session_id, message_id,
#: part_count, part_index, message_size, part_size, chunk_size, chunk_offset), 34 bytes.
_DATA_HEADER = np.dtype([
    ("version", "u1"), ("kind", "u1"), ("session_id", ">u8"), ("message_id", ">u8"),
    ("part_count", "u1"), ("part_index", "u1"), ("message_size", ">u4"), ("part_size", ">u4"),
    ("chunk_size", ">u2"), ("chunk_offset", ">u4"),
])


def _bulk_reassemble(
    batch: pa.RecordBatch,
    names: list[str],
    sid: np.ndarray,
    mid: np.ndarray,
    data: memoryview,
    offsets: np.ndarray,
    bounds: list[int],
    continues: bool,
    max_message_size: int,
) -> dict[int, list[Any]]:
    """Complete the plain groups of one batch at once: whole one-frame messages as they are,
    multi-frame groups with one ``add_datagrams`` call.

    A one-frame group qualifies when its frame is the whole message (one part, offset 0,
    chunk = part = message size, at most ``max_message_size``; the codec checked the header
    when the frames table was decoded). Any other group qualifies when it lies wholly inside the batch (not the first one if it continues
    the previous batch's last group, never the last one, which may continue in the next),
    is not such a one-frame message (a single frame of several parts qualifies: the reference
    sends no frame for an empty part), no two frames with the same (part_index, chunk_offset), chunks adding
    up exactly to its message_size (at most ``max_message_size``), and a (session_id,
    message_id) no other qualifying group of the batch has. Such a group completes at its last
    frame with no duplicate, or a frame is rejected; the frames are rebuilt as datagrams
    (34-byte header + chunk, vectorised) and fed in row order, each group completing before
    the next starts. If the counters show anything else (a duplicate, a rejection, a group not
    completing once), every held message is dropped and the batch's groups take the frame at a
    time path (``_finish``), which gives the reference results; otherwise the results are the
    same by the argument above.

    Returns:
        Group index -> the completed parts, for the groups done here.
    """
    n_groups = len(bounds) - 1
    if n_groups < 3 and not (n_groups == 2 and not continues):
        return {}
    b = np.asarray(bounds, dtype=np.int64)
    firsts, nframes = b[:-1], np.diff(b)
    col = batch.column
    num = {c: col(names.index(c)).to_numpy(zero_copy_only=False) for c in (
        "part_count", "part_index", "message_size", "part_size", "chunk_offset")}
    lengths = np.diff(offsets).astype(np.int64)
    glen = np.add.reduceat(lengths, firsts)
    msize = num["message_size"][firsts].astype(np.int64)
    edge = np.zeros(n_groups, dtype=bool)  # may continue in the next / from the previous batch
    edge[-1] = True
    edge[0] |= continues
    # a whole message in one frame (one part, at offset 0, all of it): done as it is
    whole = (
        (nframes == 1) & ~edge & (num["part_count"][firsts] == 1) & (num["chunk_offset"][firsts] == 0)
        & (lengths[firsts] == msize) & (num["part_size"][firsts] == msize) & (msize <= max_message_size)
    )
    singles: dict[int, list[Any]] = {
        g: [data[x : x + k]] for g, x, k in zip(
            np.flatnonzero(whole).tolist(), offsets[firsts[whole]].tolist(), lengths[firsts[whole]].tolist()
        )
    }
    cand = ~whole & (glen == msize) & (msize <= max_message_size) & ~edge
    if not cand.any():
        return singles
    gid = np.repeat(np.arange(n_groups), nframes)
    # repeated (part_index, chunk_offset) inside a group: leave the group to the frame path
    order = np.lexsort((num["chunk_offset"], num["part_index"], gid))
    g_s, p_s, c_s = gid[order], num["part_index"][order], num["chunk_offset"][order]
    rep = (g_s[1:] == g_s[:-1]) & (p_s[1:] == p_s[:-1]) & (c_s[1:] == c_s[:-1])
    cand[g_s[1:][rep]] = False
    # a (session_id, message_id) shared by two candidate groups: both take the frame path
    cg = np.flatnonzero(cand)
    ks, km = sid[firsts[cg]], mid[firsts[cg]]
    order = np.lexsort((km, ks))
    same = (ks[order][1:] == ks[order][:-1]) & (km[order][1:] == km[order][:-1])
    if same.any():
        cand[cg[order[1:][same]]] = False
        cand[cg[order[:-1][same]]] = False
        cg = np.flatnonzero(cand)
    if cg.size == 0:
        return singles
    rows = np.flatnonzero(cand[gid])
    m = rows.size
    hdr = np.zeros(m, dtype=_DATA_HEADER)
    hdr["version"] = 1
    hdr["session_id"] = sid[rows]
    hdr["message_id"] = mid[rows]
    for name in ("part_count", "part_index", "message_size", "part_size", "chunk_offset"):
        hdr[name] = num[name][rows]
    lens = lengths[rows]
    hdr["chunk_size"] = lens
    size = _DATA_HEADER.itemsize
    dlen = lens + size
    doff = np.zeros(m, dtype=np.int64)
    np.cumsum(dlen[:-1], out=doff[1:])
    from ..capture.datagrams.batch import gather_ranges

    # header i then chunk i, for every row: one memcpy per range out of [headers | batch payload]
    # (only the batch's own span of the payload buffer: a sliced batch shares a larger one)
    heads = hdr.view(np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    source = np.concatenate([heads, np.frombuffer(data, dtype=np.uint8)[lo:hi]])
    ranges = np.empty(2 * m, dtype=np.int64)
    ranges[0::2] = np.arange(m, dtype=np.int64) * size
    ranges[1::2] = heads.shape[0] - lo + offsets[:-1][rows].astype(np.int64)
    widths = np.empty(2 * m, dtype=np.int64)
    widths[0::2] = size
    widths[1::2] = lens
    buf = gather_ranges(source, ranges, widths)

    reassembler = _reassembler(max_message_size)
    reassembler.drop(0)
    counters = ("duplicates", "rejected", "malformed", "dropped_too_large")
    before = [getattr(reassembler, c) for c in counters]
    held = len(reassembler)
    done = reassembler.add_datagrams(buf, doff, dlen)
    keys = list(zip(sid[firsts[cg]].tolist(), mid[firsts[cg]].tolist()))
    by_key = dict(zip(keys, cg.tolist()))
    clean = (
        [getattr(reassembler, c) for c in counters] == before
        and len(reassembler) == held
        and len(done) == len(keys)
        and len({k for k, _ in done}) == len(keys)
        and all(k in by_key for k, _ in done)
    )
    if not clean:
        for key in keys:
            reassembler.drop(key)
        return singles
    singles.update({by_key[k]: p for k, p in done})
    return singles


def _reassemble(
    sid: int, mid: int, rows: list[tuple], chunks: list[memoryview], max_message_size: int
) -> tuple[list[Any] | None, int, int]:
    """Feed one key's frames, in capture order, to the codec's Reassembler.

    Returns:
        (parts or None, duplicates, rejected). Frames after completion count as duplicates.
    """
    from ..errors import DecodeError
    from ..wire import DataFrame

    reassembler = _reassembler(max_message_size)
    reassembler.drop(0)  # whatever a rejected or incomplete predecessor left
    before = reassembler.duplicates
    done = None
    duplicates = rejected = 0
    for (pcount, pindex, msize, psize, coffset, _), chunk in zip(rows, chunks):
        if done is not None:
            duplicates += 1
            continue
        try:
            result = reassembler.add(DataFrame(sid, mid, pcount, pindex, msize, psize, coffset, chunk), 0.0, 0)
        except DecodeError:
            rejected += 1
            continue
        if result is not None:
            done = result
    if done is None:
        reassembler.drop(0)
    return done, duplicates + reassembler.duplicates - before, rejected


_REASSEMBLERS: dict[int, Any] = {}


def _reassembler(max_message_size: int) -> Any:
    """One Reassembler per worker and size limit, reused for every key (key 0, one at a time)."""
    found = _REASSEMBLERS.get(max_message_size)
    if found is None:
        from .. import codec

        found = codec.Reassembler(
            max_message_size=max_message_size,
            max_incomplete_bytes=max_message_size + codec.MESSAGE_OVERHEAD,
        )
        _REASSEMBLERS[max_message_size] = found
    return found


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
        names = [
            "capture", "session_id", "src", "dst", "message_id", "part_count", "message_size",
            "part_sizes", "part_sha256", "complete", "missing_bytes", "frames", "duplicates",
            "rejected", "first_ts", "last_ts", "parts",
        ]
        by_name = dict(zip(names, cols))
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
