"""Live traffic on Spark Structured Streaming: growing captures in, frames, messages and sessions out.

- :mod:`.boundaries`: where the whole records of a growing capture end (the source's offsets).
- :mod:`.source`: ``spark.readStream.format("nbmq").load(DIR)`` (register with :func:`register`).
- :mod:`.messages`: stateful reassembly across micro-batches (``applyInPandasWithState``).
- :mod:`.sessions`: per session and window health (frames by kind, messages, bytes, resends,
  heartbeat gaps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register ``nbmq`` as a batch *and* streaming source (plus ``nbmq_bqsp`` / ``nbmq_rqueue``).

    Registers :class:`~nbmq.spark.streaming.source.NbmqStreamingDataSource` under the name
    ``nbmq``; it is the batch source with ``streamReader`` added, so ``spark.read`` is unchanged.
    """
    from .. import register as register_batch
    from .source import NbmqStreamingDataSource

    register_batch(spark)
    if getattr(spark, "_nbmq_streaming_registered", False):
        return
    spark.dataSource.register(NbmqStreamingDataSource)
    spark._nbmq_streaming_registered = True  # type: ignore[attr-defined]
