"""The messages table without shuffling every payload: reassembly inside each frames partition.

:func:`nbmq.spark.messages.build_messages` shuffles every data frame (payload included) by its
key. Most keys, though, live in one frames partition (one file, or one byte range of a large
pcap): their frames are already together. :func:`build_messages_local` gives the same table
(same rows; order differs) in three steps:

1. Which keys ``(capture, session_id, src, message_id)`` appear in more than one frames
   partition: each partition sends the distinct 64-bit hashes of its keys to the driver (no
   shuffle, no payload), which keeps the hashes seen in two or more partitions (usually few).
2. Every other key is reassembled inside its partition (``mapInArrow``, no shuffle): the
   partition's data frames are sorted by key and capture time with Arrow and handed to the
   batch step :func:`nbmq.spark.messages.reassemble_batches`, so a row is computed exactly as
   today.
3. The straddling keys' frames (a filter on the key hash) go through
   :func:`~nbmq.spark.messages.build_messages` (shuffle and sort), and the two are unioned.

The frames source is read twice (keys, then frames); a Python data source's read costs far
less than shuffling its payloads. Step 1 runs a Spark job when the DataFrame is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from .messages import _MAX_U32, KEY, addr_port, build_messages, reassemble_batches
from .schema import messages_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["build_messages_local", "straddling_keys"]


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


def straddling_keys(frames: DataFrame) -> list[int]:
    """64-bit hashes (Spark ``xxhash64`` of the ``KEY`` columns) of the message keys whose data
    frames lie in more than one partition of ``frames``; runs a job, no shuffle.

    Each partition sends the distinct hashes of its keys (8 bytes each) to the driver, which
    keeps those seen in two or more partitions. A hash collision only sends an extra key down
    the shuffled path, which computes the same row, so the table stays exact.
    """
    import numpy as np
    from pyspark.sql import functions as F

    hashes = frames.where((F.col("error").isNull()) & (F.col("kind") == 0)).select(
        F.xxhash64("capture", "session_id", addr_port("src_addr", "src_port"), "message_id").alias("h")
    )

    def unique(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [b.column(0).to_numpy(zero_copy_only=False) for b in batches if b.num_rows]
        if parts:
            yield pa.RecordBatch.from_arrays([pa.array(np.unique(np.concatenate(parts)))], names=["h"])

    table = hashes.mapInArrow(unique, "h long").toArrow()
    values, counts = np.unique(table.column("h").to_numpy(), return_counts=True)
    return values[counts > 1].tolist()


def build_messages_local(
    frames: DataFrame,
    *,
    parts: bool = False,
    max_message_size: int = _MAX_U32,
    keys_from: DataFrame | None = None,
) -> DataFrame:
    """The messages table of ``frames``, reassembling inside partitions where it can.

    Args:
        frames: a frames table (the ``nbmq`` source) with ``payload``; its partitioning must be
            the same on every read (the source's plan is: files and byte ranges).
        parts: add the ``parts`` column.
        max_message_size: larger claimed messages are rejected, bytes.
        keys_from: the same read as ``frames`` with a narrow schema (``capture, session_id,
            src_addr, src_port, message_id, kind, error``) for step 1: a Python data source gets
            no column pruning, so this saves building the payloads once. Default ``frames``.

    Returns:
        A DataFrame of :func:`nbmq.spark.schema.messages_schema` with the rows of
        :func:`nbmq.spark.messages.build_messages` (in another order).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = messages_schema(parts)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    multi = straddling_keys(frames if keys_from is None else keys_from)
    data = _data(frames)
    key_hash = F.xxhash64(*KEY)
    local = data.where(~key_hash.isin(multi)) if multi else data
    want_parts = parts
    limit = max_message_size

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        order = [(c, "ascending") for c in (*KEY, "ts_ns", "frame_number")]
        table = table.sort_by(order)
        yield from reassemble_batches(iter(table.to_batches()), arrow_schema, parts=want_parts, max_message_size=limit)

    # a filter and mapInArrow keep the frames' partitioning: no shuffle on this side
    rows = local.select(*data.columns).mapInArrow(run, schema)
    if not multi:
        return rows
    crossing = frames.where(
        F.xxhash64("capture", "session_id", addr_port("src_addr", "src_port"), "message_id").isin(multi)
    )
    return rows.unionByName(build_messages(crossing, parts=parts, max_message_size=max_message_size))

