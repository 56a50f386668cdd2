"""Registering the ``nbmq`` Python data sources on a Spark session.

Its own module so that :mod:`nbmq.spark.spark_session` (``build_session(register=True)``) and the
package's ``nbmq.spark.register`` share it without importing each other (no import circle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``nbmq``, ``nbmq_bqsp`` and ``nbmq_rqueue`` Python data sources (idempotent).

    After it, ``spark.read.format("nbmq").load(paths)`` reads captures into the frames table,
    ``spark.readStream.format("nbmq").load(DIR)`` follows a folder of growing captures
    (:mod:`nbmq.spark.streaming`), ``format("nbmq_bqsp")`` / ``format("nbmq_rqueue")`` read
    TCP connections into the BQSP packets / rqueue messages tables
    (:mod:`nbmq.spark.tcp_source`).
    """
    from .streaming.source import NbmqStreamingDataSource
    from .tcp_source import BqspDataSource, RqueueDataSource

    if getattr(spark, "_nbmq_registered", False):  # re-registering makes Spark warn
        return
    spark.dataSource.register(NbmqStreamingDataSource)  # the batch source plus streamReader
    spark.dataSource.register(BqspDataSource)
    spark.dataSource.register(RqueueDataSource)
    spark._nbmq_registered = True  # type: ignore[attr-defined]
