"""The messages table without shuffling every payload: reassembly inside each frames partition.

:func:`nbmq.spark.messages.build_messages` shuffles every data frame (payload included) by its
key. Most keys, though, live in one frames partition (one file, or one byte range of a large
pcap): their frames are already together. :func:`build_messages_local` gives the same table
(same rows; order differs) in three steps:

1. Which keys ``(capture, session_id, src, message_id)`` appear in more than one frames
   partition: a shuffle of the distinct keys per partition (no payload), collected on the
   driver (only keys that straddle a range boundary, usually few).
2. Every other key is reassembled inside its partition (``mapInArrow``, no shuffle): the
   partition's data frames are sorted by key and capture time with Arrow and handed to the
   batch step :func:`nbmq.spark.messages.reassemble_batches`, so a row is computed exactly as
   today.
3. The straddling keys' frames (a broadcast semi-join) go through
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


def straddling_keys(frames: DataFrame) -> DataFrame:
    """Message keys whose data frames lie in more than one partition of ``frames`` (runs a job).

    Returns:
        A small local DataFrame of the ``KEY`` columns (materialised on the driver).
    """
    from pyspark.sql import functions as F

    data = frames.where((F.col("error").isNull()) & (F.col("kind") == 0)).select(
        "capture", "session_id", addr_port("src_addr", "src_port").alias("src"), "message_id",
        F.spark_partition_id().alias("_p"),
    )
    keys = data.distinct().groupBy(*KEY).count().where("count > 1").select(*KEY)
    spark = frames.sparkSession
    return spark.createDataFrame(keys.collect(), keys.schema)


def build_messages_local(
    frames: DataFrame, *, parts: bool = False, max_message_size: int = _MAX_U32
) -> DataFrame:
    """The messages table of ``frames``, reassembling inside partitions where it can.

    Args:
        frames: a frames table (the ``nbmq`` source) with ``payload``; its partitioning must be
            the same on every read (the source's plan is: files and byte ranges).
        parts: add the ``parts`` column.
        max_message_size: larger claimed messages are rejected, bytes.

    Returns:
        A DataFrame of :func:`nbmq.spark.schema.messages_schema` with the rows of
        :func:`nbmq.spark.messages.build_messages` (in another order).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = messages_schema(parts)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    multi = straddling_keys(frames)
    n_multi = multi.count()
    data = _data(frames)
    if n_multi:
        marked = data.join(F.broadcast(multi.withColumn("_multi", F.lit(True))), KEY, "left")
        local = marked.where(F.col("_multi").isNull()).drop("_multi")
    else:
        local = data
    want_parts = parts
    limit = max_message_size

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        order = [(c, "ascending") for c in (*KEY, "ts_ns", "frame_number")]
        table = table.sort_by(order)
        yield from reassemble_batches(iter(table.to_batches()), arrow_schema, parts=want_parts, max_message_size=limit)

    # mapInArrow keeps the frames' partitioning (a broadcast join does not shuffle the frames)
    rows = local.select(*data.columns).mapInArrow(run, schema)
    if not n_multi:
        return rows
    crossing = (
        frames.withColumn("src", addr_port("src_addr", "src_port"))
        .join(F.broadcast(multi), KEY, "left_semi")
        .drop("src")
    )
    return rows.unionByName(build_messages(crossing, parts=parts, max_message_size=max_message_size))

