"""Passes over a Parquet table written by the pipeline: a function per piece, small results merged
on the driver.

::

    pieces = scan(spark, "out/frames", count_kinds, ["kind", "error"])   # [{name: pyarrow.Table}, ...]

A local table (a plain path or ``file:`` URI) is read by the driver with pyarrow, a file per
thread: pyarrow reads and computes without the GIL, memory holds a file per thread, and no Spark
job is scheduled (a job's fixed cost is most of a small pass's time). A table on a
Hadoop-compatible store (``hdfs://``, ``s3a://``, ...) is read by Spark's executors, the same
function run in ``mapInArrow`` on each partition, its tables sent back as Arrow IPC bytes.

A pass whose rows must meet by a key wherever they sit in the table (a SafeDealer data frame
and its Ack in two files) is :func:`scan_shuffled`: each piece's rows are cut into hash
buckets of the key, and each bucket is reduced alone, so memory holds a bucket (a share of
the table that shrinks as the table grows) instead of the whole table's rows::

    pieces = scan_shuffled(spark, "out/frames", keep_rows, ["kind", "ts_ns"], "h", reduce_bucket)
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["scan", "scan_files", "scan_file_groups", "scan_shuffled", "merge", "release_freed", "ROWS_PER_BUCKET"]

#: Output of a piece: named pyarrow tables (the same names and schemas from every piece).
Piece = dict[str, "pa.Table"]
#: Rows of the scanned table per hash bucket of :func:`scan_shuffled` on the driver: a bucket
#: holds what at most this many rows keep, so its memory stays flat whatever the table's size.
ROWS_PER_BUCKET = 250_000


def scan_files(
    path: str,
    per_file: Callable[[Any], Any],
    columns: Sequence[str],
    where: Any = None,
    row_groups: bool = False,
) -> list[Any]:
    """``per_file(table)`` of each Parquet file of the local table at ``path`` (only ``columns``,
    rows matching the pyarrow expression ``where``), files read on a thread pool.

    Args:
        path: the table's directory (a plain path or ``file:`` URI).
        per_file: called with each file's pyarrow Table; its results are returned in file order.
        columns: the columns read.
        where: a pyarrow dataset filter expression, or None for every row.
        row_groups: call ``per_file`` on each row group instead of each file, so memory holds
            a row group per thread whatever the files' size (for passes whose results merge
            the same from any cut of the rows).

    Returns:
        The results of ``per_file``, one per file (or row group), in table order (none for a
        table without files).
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.dataset as ds

    from .inputs import local_path

    fragments = list(ds.dataset(local_path(path), format="parquet").get_fragments())
    if row_groups:
        fragments = [g for f in fragments for g in f.split_by_row_group()]

    def read(fragment: Any) -> Any:
        result = per_file(fragment.to_table(columns=list(columns), filter=where))
        release_freed()  # before the thread's next piece: peaks stay a piece's, not a pass's
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(len(fragments), os.cpu_count() or 1))) as pool:
        return list(pool.map(read, fragments))


def scan_file_groups(
    path: str,
    per_group: Callable[[Any], Any],
    per_file: Callable[[list[Any]], Any],
    columns: Sequence[str],
) -> list[Any]:
    """``per_file`` of each Parquet file of the local table at ``path``, from ``per_group`` of
    each of its row groups read in order: a pass whose result is defined per file (samples
    spread over a file's rows, rows in a file's order) with memory of a row group per thread.

    Args:
        path: the table's directory (a plain path or ``file:`` URI).
        per_group: called with each row group's pyarrow Table of ``columns``, in file order.
        per_file: called with the list of ``per_group``'s results of one file; its result is
            that file's.
        columns: the columns read.

    Returns:
        The results of ``per_file``, one per file, in table order (none for a table without files).
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.dataset as ds

    from .inputs import local_path

    files = list(ds.dataset(local_path(path), format="parquet").get_fragments())

    def read(fragment: Any) -> Any:
        groups = []
        for group in fragment.split_by_row_group():
            groups.append(per_group(group.to_table(columns=list(columns))))
            release_freed()
        result = per_file(groups)
        release_freed()
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(len(files), os.cpu_count() or 1))) as pool:
        return list(pool.map(read, files))


def release_freed() -> None:
    """Give the memory a piece or a pass has freed back to the operating system: glibc keeps
    freed heap pages (numpy's and pandas' arrays, in one arena per reading thread) and pyarrow's
    pool keeps its own, so without this each piece's peak adds to the leftovers of the pieces
    before it (a frames file's pass per thread: 578 MiB at 2.5M datagrams, 628 at 5M; a row
    group at a time with this after each, 300 and 312; capping glibc's arenas at 2 instead gave
    536 and 594). A few milliseconds; nothing to do where glibc is absent."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (not Linux, or another C library such as musl)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None  # runs ldconfig: once
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def _ipc(table: pa.Table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _in_spark(per_piece: Callable[[Any], Piece], batches: Iterator[Any]) -> Iterator[Any]:
    """``per_piece`` over one Spark partition (``mapInArrow``): a row per named table."""
    import pyarrow as pa

    batches = list(batches)
    if not batches:
        return
    out = per_piece(pa.Table.from_batches(batches))
    names = sorted(out)
    yield pa.RecordBatch.from_pydict({"name": names, "data": [_ipc(out[n]) for n in names]})


def scan(
    spark: SparkSession | None,
    path: str,
    per_piece: Callable[[Any], Piece],
    columns: Sequence[str],
    on_driver: bool | None = None,
) -> list[Piece]:
    """``per_piece`` over every piece of the Parquet table at ``path``.

    Args:
        spark: the session (used only for a table the driver does not read itself).
        path: the table (a local path, ``file:`` URI or Hadoop-compatible URI).
        per_piece: called with a pyarrow Table of ``columns`` (a file, or a Spark partition);
            returns named pyarrow tables, small (aggregates, a few selected rows); their
            merge must not depend on where the rows were cut (on the driver a piece is a
            Parquet row group, so memory holds a row group per thread).
        columns: the columns the pass reads.
        on_driver: read with pyarrow here (True) or in Spark's executors (False); None: here when
            ``path`` is local.

    Returns:
        One dict of named tables per piece.
    """
    from .inputs import is_local

    if on_driver is None:
        on_driver = is_local(path)
    if on_driver:
        return scan_files(path, per_piece, columns, row_groups=True)

    assert spark is not None, "a Spark session reads a table the driver does not"
    from functools import partial

    rows = (
        spark.read.parquet(path)
        .select(*columns)
        .mapInArrow(partial(_in_spark, per_piece), "name string, data binary")
        .collect()
    )
    return _pieces(rows)


def _pieces(rows: list[Any]) -> list[Piece]:
    """The pieces of :func:`_in_spark`'s collected rows (name, Arrow IPC data)."""
    import pyarrow as pa

    pieces: list[Piece] = []
    current: Piece = {}
    for r in rows:  # a partition's rows come together, names sorted: a repeated name starts the next
        if r["name"] in current:
            pieces.append(current)
            current = {}
        current[r["name"]] = pa.ipc.open_stream(bytes(r["data"])).read_all()
    if current:
        pieces.append(current)
    return pieces


def _bucket_of(table: pa.Table, key: str, buckets: int) -> Any:
    """Each row's bucket (int64 numpy) of the integer column ``key`` (nulls in bucket 0):
    the key's 64 bits modulo ``buckets`` (an FNV-1a hash is spread well enough as it is)."""
    import numpy as np

    bits = table[key].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return (bits.view(np.uint64) % np.uint64(buckets)).astype(np.int64)


def scan_shuffled(
    spark: SparkSession | None,
    path: str,
    per_piece: Callable[[Any], Any],
    columns: Sequence[str],
    key: str,
    reduce: Callable[[Any], Piece],
    on_driver: bool | None = None,
    spill_dir: str | None = None,
    where: Any = None,
) -> list[Piece]:
    """``reduce`` over each hash bucket of ``key`` of the rows ``per_piece`` keeps from the Parquet
    table at ``path``: every row with the same ``key`` value meets in one bucket.

    Args:
        spark: the session (used only for a table the driver does not read itself).
        path: the table (a local path, ``file:`` URI or Hadoop-compatible URI).
        per_piece: called with a pyarrow Table of ``columns`` (a row group, or a Spark
            partition); returns one pyarrow Table (the same schema from every piece), best
            already grouped by ``key`` within the piece.
        columns: the columns the pass reads.
        key: an integer column of ``per_piece``'s tables (a hash): the rows that must meet.
        reduce: called with all of one bucket's rows (a pyarrow Table); returns named tables,
            small (aggregates); their merge must not depend on how keys were cut into buckets.
        on_driver: read with pyarrow here (True) or in Spark's executors (False); None: here
            when ``path`` is local.
        spill_dir: an existing local directory for the driver's bucket files (default: the
            system's temporary directory); they are removed when the scan ends.
        where: on the driver, a pyarrow dataset filter expression: ``per_piece`` sees only the
            rows matching it (a shortcut: ``per_piece`` must keep the same rows without it).

    Returns:
        One dict of named tables per non-empty bucket.

    On the driver the table's row count (Parquet footers) sets the buckets, one per
    :data:`ROWS_PER_BUCKET` rows: a table within one bucket is reduced in memory (no file
    written); a larger one spills each piece's rows into a file (Arrow IPC, one record batch
    per bucket) and reduces the buckets a thread each, reading its batch of every file. In Spark the rows are repartitioned by ``key``
    (a shuffle into as many partitions as the table's read) and reduced in ``mapInArrow``.
    """
    from .inputs import is_local, local_path

    if on_driver is None:
        on_driver = is_local(path)
    if not on_driver:
        return _shuffled_in_spark(spark, path, per_piece, columns, key, reduce)
    import itertools
    import tempfile

    import pyarrow as pa
    import pyarrow.dataset as ds

    rows = ds.dataset(local_path(path), format="parquet").count_rows()
    buckets = max(1, -(-rows // ROWS_PER_BUCKET))
    if buckets == 1:
        kept = [t for t in scan_files(path, per_piece, columns, where, row_groups=True) if t.num_rows]
        return [reduce(pa.concat_tables(kept))] if kept else []
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="nbmq-buckets-", dir=spill_dir) as tmp:
        counter = itertools.count()  # next() on it is atomic under the GIL: a unique name per piece

        def spill(table: pa.Table) -> str | None:
            """The piece's kept rows sorted by bucket into one file, a record batch per bucket."""
            kept = per_piece(table)
            if not kept.num_rows:
                return None
            which = _bucket_of(kept, key, buckets)
            order = np.argsort(which, kind="stable")
            starts = np.searchsorted(which[order], np.arange(buckets + 1))
            (rows,) = kept.take(pa.array(order)).combine_chunks().to_batches()
            name = os.path.join(tmp, f"{next(counter)}.arrow")
            with pa.OSFile(name, "wb") as sink, pa.ipc.new_file(sink, kept.schema) as writer:
                for b in range(buckets):  # empty batches too: batch b is bucket b in every file
                    writer.write_batch(rows.slice(starts[b], starts[b + 1] - starts[b]))
            return name

        files = [f for f in scan_files(path, spill, columns, where, row_groups=True) if f is not None]

        def reduce_bucket(b: int) -> Piece | None:
            parts = []
            for name in files:
                with pa.memory_map(name) as source:
                    batch = pa.ipc.open_file(source).get_batch(b)
                    if batch.num_rows:
                        parts.append(batch)
            result = reduce(pa.Table.from_batches(parts)) if parts else None
            del parts
            release_freed()  # before the thread's next bucket
            return result

        # a bucket per thread: memory holds as many buckets as there are threads
        with ThreadPoolExecutor(max_workers=max(1, min(buckets, os.cpu_count() or 1))) as pool:
            out = [r for r in pool.map(reduce_bucket, range(buckets)) if r is not None]
        release_freed()
        return out


def _shuffled_in_spark(
    spark: SparkSession | None,
    path: str,
    per_piece: Callable[[Any], Any],
    columns: Sequence[str],
    key: str,
    reduce: Callable[[Any], Piece],
) -> list[Piece]:
    """:func:`scan_shuffled` in Spark's executors: ``per_piece`` per partition, a shuffle by
    ``key``, ``reduce`` per partition after it."""
    from functools import partial

    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    assert spark is not None, "a Spark session reads a table the driver does not"
    frames = spark.read.parquet(path).select(*columns)
    schema = per_piece(to_arrow_schema(frames.schema, timezone="UTC").empty_table()).schema
    kept = frames.mapInArrow(partial(_kept_in_spark, per_piece), from_arrow_schema(schema))
    rows = (
        kept.repartition(max(1, frames.rdd.getNumPartitions()), key)
        .mapInArrow(partial(_in_spark, reduce), "name string, data binary")
        .collect()
    )
    return _pieces(rows)


def _kept_in_spark(per_piece: Callable[[Any], Any], batches: Iterator[Any]) -> Iterator[Any]:
    """``per_piece`` over one Spark partition (``mapInArrow``): its kept rows."""
    import pyarrow as pa

    batches = list(batches)
    if batches:
        yield from per_piece(pa.Table.from_batches(batches)).to_batches()


def merge(pieces: Sequence[Piece], name: str, empty: pa.Schema) -> pa.Table:
    """The ``name`` tables of ``pieces`` in one table (``empty``'s schema when there are none)."""
    import pyarrow as pa

    tables = [p[name] for p in pieces if name in p]
    return pa.concat_tables(tables, promote_options="permissive") if tables else empty.empty_table()
