"""Frames and messages from one read of the captures (``nbmq pipeline`` with a local ``--out``).

One Spark job decodes the captures and reassembles the messages: its tasks are the ``nbmq``
source's partitions (one file, or one byte range of a large pcap). Each task

1. reads its partition (:meth:`nbmq.spark.datasource.NbmqReader.read`, payload included) and
   writes every batch to ``frames/part-NNNNN.parquet`` with pyarrow (without ``payload`` when
   the table is to have none);
2. tees the valid data frames (:func:`nbmq.spark.messages_local.data_frames`) into
   :func:`nbmq.spark.messages_local._local_pass`, which reassembles them in capture order;
3. writes its *row records* (messages complete inside the partition) straight to
   ``messages/part-NNNNN.parquet``, and its *frame records* (keys that may continue in another
   partition) to a staging directory;
4. returns small things only: row counts and the uint64 key hashes (:func:`key_hashes`) of its
   row records and of its frame records.

The driver then finds the *conflict hashes*: the hash of any frame record, and any hash that
two row records share (a key completed in two partitions, or twice in one, a message resent
whole). The row records under a conflict hash are moved from their messages part file to the
staging directory (only the affected files are rewritten, streamed, by driver threads), and
the staging directory is combined by the rule of
:func:`nbmq.spark.messages_local.build_messages_local`, its rows appended to ``messages/``:

- small (at most :data:`DRIVER_COMBINE_BYTES` of Parquet, the usual case: a few thousand
  records per million frames) in the driver, sorted by key and capture order and fed to
  ``messages_local._combine`` (a Spark job's scheduling cost more than this work: 3.7 s against
  ~0.1 s on 1M datagrams at a load of 10);
- otherwise, or when some key needs the redo path, by Spark
  (:func:`nbmq.spark.messages_local.combine_records`: shuffle by key hash, sort, settle; the
  rare keys it cannot settle reassembled whole again by the local pass from the
  frames filtered to them).

The staging directory is then removed.

Correctness never rests on the 64-bit hash being unique: a key whose hash happens to equal a
conflict hash only goes through the combine too, where a lone row record passes unchanged.
Every record of a conflicting key is in the staging directory (its frame records were written
there, its row records are moved there), so the combine sees the key whole.

The tables are those the pipeline writes to a Hadoop-compatible output (Spark's writer and
:func:`nbmq.spark.messages_local.build_messages_local`; ``tests/spark/test_onepass.py``
compares them, and the messages with :func:`nbmq.spark.messages.build_messages`), row for row.
Local output directories only (a path every executor sees).

A task writes its part files under names fixed by its partition index and returns only small
values, so a retried task (a Python worker killed mid-task) replaces what the lost attempt left.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["key_hashes", "write_parts", "finish_messages", "conflict_hashes", "OnePass", "HASH_MASK"]

#: Bits of :func:`key_hashes` kept (all 64). Tests narrow it to force hash collisions; the
#: driver reads it when it plans the job and hands it to the tasks as a value.
HASH_MASK = 0xFFFF_FFFF_FFFF_FFFF
#: rows per row group of a messages part file
MESSAGES_ROW_GROUP_ROWS = 65536
#: messages columns dictionary-encoded (few distinct values; sha256 digests and ids are not)
MESSAGES_DICTIONARY = ("capture", "src", "dst", "part_count", "complete")
#: staged records of at most this many bytes (Parquet files) are combined in the driver
#: (:func:`_combine_here`); more go through Spark (:func:`nbmq.spark.messages_local.combine_records`)
DRIVER_COMBINE_BYTES = 64 * 1024 * 1024
_STAGING = "_onepass"  # under the output directory; removed at the end
_U64 = np.uint64


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 values (wrapping arithmetic)."""
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _string_hashes(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """uint64 per value of a string column: an 8-byte blake2b of each distinct value (few:
    captures and peers), gathered by dictionary code. Stable across processes. Null hashes as 0."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(column)
    chunks = enc.chunks if isinstance(enc, pa.ChunkedArray) else [enc]
    out = []
    for chunk in chunks:
        values = chunk.dictionary.to_pylist()
        table = np.array(
            [int.from_bytes(hashlib.blake2b(v.encode(), digest_size=8).digest(), "little") for v in values] + [0],
            dtype=np.uint64,
        )
        codes = chunk.indices.fill_null(len(values)).to_numpy(zero_copy_only=False)
        out.append(table[codes])
    return np.concatenate(out) if out else np.zeros(0, np.uint64)


def key_hashes(batch: pa.RecordBatch | pa.Table, mask: int = HASH_MASK) -> np.ndarray:
    """The uint64 hash of each row's message key (capture, session_id, src, message_id).

    Args:
        batch: rows with those columns (local-pass records or its input).
        mask: bits kept (:data:`HASH_MASK`).

    Returns:
        ``(rows,)`` uint64. Equal keys give equal hashes in every process (blake2b of the
        strings, splitmix64 to combine them with the ids); unequal keys may collide.
    """
    from .messages import _u64

    if batch.num_rows == 0:
        return np.zeros(0, np.uint64)
    sid = _u64(batch.column("session_id")).astype(np.uint64)
    mid = _u64(batch.column("message_id")).astype(np.uint64)
    h = _mix(
        _string_hashes(batch.column("capture")) ^ _mix(_string_hashes(batch.column("src")) ^ _mix(sid ^ _mix(mid)))
    )
    return h & _U64(mask)


@dataclass
class OnePass:
    """What the one job left behind, for :func:`finish_messages`.

    Attributes:
        frames_dir, messages_dir, staging: local directories.
        frames_rows: rows written to ``frames/`` (capture-error rows included).
        row_records: message rows the tasks wrote to ``messages/``.
        frame_records: frame records the tasks wrote to the staging directory.
        frame_hashes: sorted distinct uint64 hashes of the frame records.
        tasks: per task ``(index, row record hashes, distinct frame record hashes)`` (uint64
            arrays), in task order.
        conflicts: sorted uint64 conflict hashes (set by :func:`finish_messages`).
        moved: row records moved to the staging directory (set by :func:`finish_messages`).
        combine: where the staged records were combined (set by :func:`finish_messages`).
        decoded: where the tasks ran: ``"spark"`` (a job) or ``"driver"`` (threads here).
    """

    frames_dir: Path
    messages_dir: Path
    staging: Path
    frames_rows: int
    row_records: int
    frame_records: int
    frame_hashes: np.ndarray
    tasks: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)
    conflicts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    moved: int = 0
    combine: str = "none"
    decoded: str = "spark"

    def counts(self) -> dict[str, Any]:
        """The figures for ``summary.json``: tasks, frames rows, records, conflicts, moves, where
        the combine ran (``"none"``, ``"driver"``, ``"spark"``) and where the tasks ran."""
        return {
            "tasks": len(self.tasks),
            "frames_rows": self.frames_rows,
            "row_records": self.row_records,
            "frame_records": self.frame_records,
            "conflict_hashes": int(self.conflicts.size),
            "moved_rows": self.moved,
            "combine": self.combine,
            "decoded": self.decoded,
        }


def _local(out: str | Path) -> Path:
    if "://" in str(out):
        raise ValueError(f"the one-pass job writes local paths only, not {str(out)!r}")
    return Path(out).resolve()


def _fresh(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def write_parts(
    spark: SparkSession,
    options: dict[str, str],
    frames_out: str | Path,
    messages_out: str | Path,
    *,
    payload: bool = True,
    parts: bool = False,
    max_message_size: int | None = None,
    segment_rows: int | None = None,
    in_driver: bool = False,
) -> OnePass:
    """The one job: decode every partition, write ``frames/`` and the partition-complete
    message rows to ``messages/``, stage the rest (module docstring, steps 1-4).

    Args:
        spark: the session (its executors decode, reassemble and write).
        options: the ``nbmq`` source's options (``paths``, ``split_bytes``, ...).
        frames_out, messages_out: local output directories, replaced if present; the staging
            directory is ``_onepass`` beside ``messages_out``.
        payload: keep the ``payload`` column in ``frames/`` (the reassembly always has it).
        parts: the messages table's ``parts`` column.
        max_message_size: larger claimed messages are rejected, bytes (default: u32 max).
        segment_rows: the local pass's segment (default its own; smaller only in tests).
        in_driver: run the tasks in this process (threads, one per core) instead of a Spark
            job: for inputs too small to repay a job's scheduling and Python workers' start
            (the same task function, so the same files).

    Returns:
        An :class:`OnePass` for :func:`finish_messages`. ``messages/`` is not complete before that.

    Raises:
        ValueError: an output path is not local; the source's own errors (no path, ...).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from .datasource import NbmqReader
    from .frames_writer import FRAMES_DICTIONARY, FRAMES_ROW_GROUP_ROWS, PartWriter
    from .messages import _MAX_U32
    from .messages_local import _SEGMENT_ROWS, ROW, _local_pass, _record_schema, data_frames
    from .schema import frames_schema, messages_schema

    frames_dir, messages_dir = _local(frames_out), _local(messages_out)
    staging = messages_dir.parent / _STAGING
    for d in (frames_dir, messages_dir, staging):
        _fresh(d)
    (staging / "records").mkdir()
    (staging / "order").mkdir()
    read_schema = frames_schema(payload=True)
    reader = NbmqReader(dict(options), read_schema)
    jobs = list(enumerate(reader.partitions()))
    frames_arrow = to_arrow_schema(frames_schema(payload=payload), timezone="UTC")
    out_schema = to_arrow_schema(messages_schema(parts), timezone="UTC")
    rec_schema = to_arrow_schema(_record_schema(parts), timezone="UTC")
    limit = _MAX_U32 if max_message_size is None else int(max_message_size)
    segment = _SEGMENT_ROWS if segment_rows is None else int(segment_rows)
    mask, keep_payload, want_parts = int(HASH_MASK), payload, parts
    fdir, mdir, sdir = str(frames_dir), str(messages_dir), str(staging)

    def task(job: tuple[int, Any]) -> tuple[int, int, int, int, bytes, bytes]:
        index, part = job
        name = f"part-{index:05d}"
        frames = PartWriter(
            os.path.join(fdir, name + ".parquet"), frames_arrow, FRAMES_ROW_GROUP_ROWS, FRAMES_DICTIONARY
        )
        rows = PartWriter(
            os.path.join(mdir, name + ".parquet"), out_schema, MESSAGES_ROW_GROUP_ROWS, MESSAGES_DICTIONARY
        )
        edges: PartWriter | None = None
        row_h: list[np.ndarray] = []
        order: list[np.ndarray] = []
        frame_h: list[np.ndarray] = []

        def tee() -> Iterator[pa.RecordBatch]:  # frames/ gets every batch; the local pass its data frames
            for batch in reader.read(part):
                frames.write(batch if keep_payload else batch.drop_columns(["payload"]))
                data = data_frames(batch)
                if data.num_rows:
                    yield data

        try:
            for rec in _local_pass(tee(), rec_schema, want_parts, limit, out_schema, segment):
                if rec.num_rows == 0:
                    continue
                h = key_hashes(rec, mask)
                is_row = rec.column("_kind").to_numpy(zero_copy_only=False) == ROW
                if is_row.any():
                    r = rec.filter(pa.array(is_row)) if not is_row.all() else rec
                    rows.write(pa.RecordBatch.from_arrays([r.column(f.name) for f in out_schema], schema=out_schema))
                    row_h.append(h[is_row])
                    order.append(
                        np.column_stack(
                            [h[is_row].view(np.int64)]
                            + [
                                r.column(c).to_numpy(zero_copy_only=False).astype(np.int64)
                                for c in ("_t0", "_f0", "_t1", "_f1")
                            ]
                        )
                    )
                if not is_row.all():
                    if edges is None:
                        edges = PartWriter(
                            os.path.join(sdir, "records", name + ".parquet"), rec_schema, MESSAGES_ROW_GROUP_ROWS
                        )
                    edges.write(rec.filter(pa.array(~is_row)) if is_row.any() else rec)
                    frame_h.append(np.unique(h[~is_row]))
        finally:
            frames.close()
            rows.close()
            if edges is not None:
                edges.close()
        if order:
            np.save(os.path.join(sdir, "order", name + ".npy"), np.concatenate(order))
        hashes = np.concatenate(row_h) if row_h else np.zeros(0, np.uint64)
        fh = np.unique(np.concatenate(frame_h)) if frame_h else np.zeros(0, np.uint64)
        return index, frames.rows, rows.rows, edges.rows if edges is not None else 0, hashes.tobytes(), fh.tobytes()

    if in_driver:
        from concurrent.futures import ThreadPoolExecutor

        workers = max(1, min(len(jobs), spark.sparkContext.defaultParallelism))
        with ThreadPoolExecutor(workers, thread_name_prefix="nbmq-onepass") as pool:
            done = list(pool.map(task, jobs))
    else:
        done = spark.sparkContext.parallelize(jobs, max(1, len(jobs))).map(task).collect()
    done.sort()
    for d in (frames_dir, messages_dir):
        (d / "_SUCCESS").touch()
    frame_hashes = [np.frombuffer(r[5], np.uint64) for r in done]
    return OnePass(
        frames_dir=frames_dir,
        messages_dir=messages_dir,
        staging=staging,
        decoded="driver" if in_driver else "spark",
        frames_rows=sum(r[1] for r in done),
        row_records=sum(r[2] for r in done),
        frame_records=sum(r[3] for r in done),
        frame_hashes=np.unique(np.concatenate(frame_hashes)) if frame_hashes else np.zeros(0, np.uint64),
        tasks=[(r[0], np.frombuffer(r[4], np.uint64), fh) for r, fh in zip(done, frame_hashes)],
    )


def conflict_hashes(run: OnePass) -> np.ndarray:
    """Sorted uint64: the frame records' hashes and every hash two row records share."""
    rows = np.sort(np.concatenate([h for _, h, _ in run.tasks])) if run.tasks else np.zeros(0, np.uint64)
    shared = np.unique(rows[1:][rows[1:] == rows[:-1]])
    return np.union1d(run.frame_hashes, shared).astype(np.uint64)


def finish_messages(
    spark: SparkSession,
    run: OnePass,
    frames: Callable[[], DataFrame],
    *,
    parts: bool = False,
    max_message_size: int | None = None,
) -> OnePass:
    """Move the conflicting row records to the staging directory, combine it into ``messages/``
    (appended: ``part-combined.parquet`` from the driver, Spark's part files from Spark) and
    remove it (module docstring).

    Args:
        spark: the session.
        run: :func:`write_parts`' result.
        frames: returns the frames table with ``payload`` (the redo path reads it, filtered
            to its few keys): ``frames/`` when it has the payload, else the ``nbmq`` source.
            Called only when Spark combines: building either DataFrame costs a cold session
            seconds (a Python planner for the source, a listing for Parquet).
        parts, max_message_size: as given to :func:`write_parts`.

    Returns:
        ``run``, with ``conflicts`` and ``moved`` set.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from .messages import _MAX_U32
    from .messages_local import ROW, _record_schema, combine_records
    from .schema import messages_schema

    run.conflicts = conflict_hashes(run)
    affected = [index for index, h, _ in run.tasks if h.size and np.isin(h, run.conflicts).any()]
    out_schema = to_arrow_schema(messages_schema(parts), timezone="UTC")
    rec_schema = to_arrow_schema(_record_schema(parts), timezone="UTC")
    if affected:  # a few part files, streamed: pyarrow's reads and writes leave the GIL
        from concurrent.futures import ThreadPoolExecutor

        conflicts, mdir, sdir = run.conflicts, str(run.messages_dir), str(run.staging)

        def move(index: int) -> int:
            return _move_rows(index, conflicts, mdir, sdir, out_schema, rec_schema, ROW)

        workers = max(1, min(len(affected), spark.sparkContext.defaultParallelism, os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            run.moved = sum(pool.map(move, affected))
    limit = _MAX_U32 if max_message_size is None else int(max_message_size)
    files = sorted((run.staging / "records").glob("*.parquet"))
    if run.frame_records or run.moved:
        staged = sum(f.stat().st_size for f in files)
        if staged <= DRIVER_COMBINE_BYTES and _combine_here(
            files, run.messages_dir, out_schema, rec_schema, parts, limit
        ):
            run.combine = "driver"
        else:
            records = spark.read.schema(_record_schema(parts)).parquet(*[str(f) for f in files])
            combined = combine_records(records, frames(), parts=parts, max_message_size=limit)
            combined.write.mode("append").parquet(str(run.messages_dir))
            run.combine = "spark"
    shutil.rmtree(run.staging, ignore_errors=True)
    return run


def _combine_here(
    files: list[Path], messages_dir: Path, out_schema: pa.Schema, rec_schema: pa.Schema, parts: bool, limit: int
) -> bool:
    """Combine small staged records in this process with ``messages_local._combine`` (a Spark
    job's scheduling costs more than the work here) and write ``messages/part-combined.parquet``.

    Returns:
        False, writing nothing, when some key needs the redo path (the caller then runs
        :func:`nbmq.spark.messages_local.combine_records`, which has it).
    """
    import pyarrow.parquet as pq

    from .frames_writer import PartWriter
    from .messages import _u64
    from .messages_local import _codes, _combine

    table = pa.concat_tables([pq.read_table(f, schema=rec_schema) for f in files]).combine_chunks()
    if table.num_rows == 0:
        return True
    h = key_hashes(table, HASH_MASK)  # the tasks' hash (tests narrow it: keys then share it here too)
    order = np.lexsort(
        (
            table.column("_f0").to_numpy(),
            table.column("_t0").to_numpy(),
            _u64(table.column("message_id")),
            _u64(table.column("session_id")),
            _codes(table.column("src")),
            _codes(table.column("capture")),
            h,
        )
    )
    table = table.take(pa.array(order)).append_column("_h", pa.array(h[order].view(np.int64)))
    out = [b for b in _combine(iter(table.to_batches(max_chunksize=65536)), out_schema, parts, limit) if b.num_rows]
    if any(b.column("_redo").to_numpy(zero_copy_only=False).any() for b in out):
        return False
    with PartWriter(
        messages_dir / "part-combined.parquet", out_schema, MESSAGES_ROW_GROUP_ROWS, MESSAGES_DICTIONARY
    ) as writer:
        for b in out:
            writer.write(pa.RecordBatch.from_arrays([b.column(f.name) for f in out_schema], schema=out_schema))
    return True


def _move_rows(
    index: int, conflicts: np.ndarray, mdir: str, sdir: str, out_schema: pa.Schema, rec_schema: pa.Schema, row_kind: int
) -> int:
    """Rewrite ``messages/part-<index>.parquet`` without its rows under a conflict hash and
    write those rows, as row records, to the staging directory; return how many moved.
    Streams the file a batch at a time."""
    import pyarrow.parquet as pq

    from .frames_writer import PartWriter

    name = f"part-{index:05d}"
    path = os.path.join(mdir, name + ".parquet")
    order = np.load(os.path.join(sdir, "order", name + ".npy"))
    hashes = order[:, 0].view(np.uint64)
    tmp = os.path.join(mdir, "." + name + ".parquet.tmp")  # hidden: never read as a part
    moved = 0
    seen = 0
    with (
        PartWriter(tmp, out_schema, MESSAGES_ROW_GROUP_ROWS, MESSAGES_DICTIONARY) as kept,
        PartWriter(
            os.path.join(sdir, "records", "rows-" + name[5:] + ".parquet"), rec_schema, MESSAGES_ROW_GROUP_ROWS
        ) as staged,
    ):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65536):
            n = batch.num_rows
            hit = np.isin(hashes[seen : seen + n], conflicts)
            o = order[seen : seen + n][hit]
            seen += n
            if not hit.any():
                kept.write(batch)
                continue
            kept.write(batch.filter(pa.array(~hit)))
            moving = batch.filter(pa.array(hit))
            m = moving.num_rows
            cols = {f.name: moving.column(f.name) for f in out_schema}
            cols["_kind"] = pa.array(np.full(m, row_kind, np.int64))
            for j, c in enumerate(("_t0", "_f0", "_t1", "_f1"), start=1):
                cols[c] = pa.array(o[:, j])
            arrays = [cols[f.name] if f.name in cols else pa.nulls(m, f.type) for f in rec_schema]
            staged.write(
                pa.RecordBatch.from_arrays(
                    [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, rec_schema)], schema=rec_schema
                )
            )
            moved += m
    if seen != len(hashes):
        raise RuntimeError(f"{path}: {seen} rows, {len(hashes)} in its order file")
    os.replace(tmp, path)
    return moved
