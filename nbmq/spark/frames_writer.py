"""Parquet part files written with pyarrow inside the Python tasks (the frames and messages
tables of :mod:`nbmq.spark.onepass`).

The ``nbmq`` source decodes a capture range to Arrow in a Python worker; written through Spark
every batch crosses to the JVM, becomes rows and is encoded again by Spark's row-at-a-time
Parquet writer. On 1M datagrams that costs ~7 JVM core-seconds (~2 of them turning Arrow into
rows, the rest Parquet encoding) against ~0.7 core-seconds of decoding; ``pyarrow.parquet``
writes the same batches in ~0.7 more. The table read back by Spark has the same columns, types
and rows as Spark's own write (timestamps as TIMESTAMP(MICROS, UTC), as Spark writes them with
:data:`nbmq.spark.spark_session.PARQUET_TIMESTAMPS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["PartWriter", "FRAMES_ROW_GROUP_ROWS", "FRAMES_DICTIONARY"]

#: rows per row group of a frames part file written here (see :class:`PartWriter`)
FRAMES_ROW_GROUP_ROWS = 65536
#: frames columns with few distinct values, dictionary-encoded; the others are written plain
#: (pyarrow tries a dictionary on every column by default: 1.28 against 1.88 s to write 500k
#: frames, the file 1% larger)
FRAMES_DICTIONARY = (
    "capture",
    "src_addr",
    "src_port",
    "dst_addr",
    "dst_port",
    "kind",
    "kind_name",
    "version",
    "error",
    "part_count",
    "part_index",
    "truncated",
    "session_id",
)


class PartWriter:
    """One Parquet file (snappy) written batch by batch, in row groups of ``row_group_rows``.

    ``pyarrow.parquet.ParquetWriter.write_batch`` makes each batch a row group; here batches are
    buffered until ``row_group_rows`` rows are held (the last row group may be smaller), so the
    row groups do not depend on the reader's batch size. A context manager; ``rows`` counts the
    rows written.

    Args:
        path: the file (created or replaced).
        schema: the Arrow schema of every batch written.
        row_group_rows: rows per row group (the buffer's bound, so its memory too).
        dictionary: the columns to dictionary-encode (those ``schema`` has); None: all.
    """

    def __init__(
        self,
        path: str | Path,
        schema: Any,
        row_group_rows: int = FRAMES_ROW_GROUP_ROWS,
        dictionary: Sequence[str] | None = None,
    ) -> None:
        import pyarrow.parquet as pq

        self.schema = schema
        self.row_group_rows = max(1, int(row_group_rows))
        self.rows = 0
        self._held: list[Any] = []
        self._count = 0
        use: bool | list[str] = True if dictionary is None else [c for c in dictionary if c in schema.names]
        self._writer = pq.ParquetWriter(str(path), schema, compression="snappy", use_dictionary=use)

    def write(self, batch: Any) -> None:
        """Add one record batch of ``schema`` (empty batches are skipped)."""
        if batch.num_rows == 0:
            return
        self._held.append(batch)
        self._count += batch.num_rows
        self.rows += batch.num_rows
        if self._count >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._count:
            table = pa.Table.from_batches(self._held, schema=self.schema)
            self._writer.write_table(table, row_group_size=self._count)
            self._held, self._count = [], 0

    def close(self) -> None:
        """Write what is held and close the file."""
        self._flush()
        self._writer.close()

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
