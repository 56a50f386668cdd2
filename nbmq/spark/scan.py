"""Passes over a Parquet table written by the pipeline: a function per piece, small results merged
on the driver.

::

    pieces = scan(spark, "out/frames", count_kinds, ["kind", "error"])   # [{name: pyarrow.Table}, ...]

A local table (a plain path or ``file:`` URI) is read by the driver with pyarrow, a file per
thread: pyarrow reads and computes without the GIL, memory holds a file per thread, and no Spark
job is scheduled (a job's fixed cost is most of a small pass's time). A table on a
Hadoop-compatible store (``hdfs://``, ``s3a://``, ...) is read by Spark's executors, the same
function run in ``mapInArrow`` on each partition, its tables sent back as Arrow IPC bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["scan", "scan_files", "merge"]

#: Output of a piece: named pyarrow tables (the same names and schemas from every piece).
Piece = dict[str, "pa.Table"]


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
    with ThreadPoolExecutor(max_workers=max(1, min(len(fragments), os.cpu_count() or 1))) as pool:
        return list(pool.map(lambda f: per_file(f.to_table(columns=list(columns), filter=where)), fragments))


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
    import pyarrow as pa

    assert spark is not None, "a Spark session reads a table the driver does not"
    from functools import partial

    rows = (
        spark.read.parquet(path)
        .select(*columns)
        .mapInArrow(partial(_in_spark, per_piece), "name string, data binary")
        .collect()
    )
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


def merge(pieces: Sequence[Piece], name: str, empty: pa.Schema) -> pa.Table:
    """The ``name`` tables of ``pieces`` in one table (``empty``'s schema when there are none)."""
    import pyarrow as pa

    tables = [p[name] for p in pieces if name in p]
    return pa.concat_tables(tables, promote_options="permissive") if tables else empty.empty_table()
