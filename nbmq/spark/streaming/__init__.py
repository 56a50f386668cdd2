"""Live traffic on Spark Structured Streaming: growing captures in, frames, messages and sessions out.

- :mod:`.boundaries`: where the whole records of a growing capture end (the source's offsets).
- :mod:`.source`: ``spark.readStream.format("nbmq").load(DIR)`` (registered by ``nbmq.spark.register``).
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
    """Register the ``nbmq`` sources on ``spark``: the same as :func:`nbmq.spark.register`,
    which registers ``nbmq`` for ``spark.read`` and ``spark.readStream`` alike (and
    ``nbmq_bqsp`` / ``nbmq_rqueue``). Idempotent."""
    from ..registration import register as register_all

    register_all(spark)
