"""Registering the ``nbmq`` Python data sources on a Spark session.

Its own module so that :mod:`nbmq.spark.session` (``build_session(register=True)``) and the
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
    ``format("nbmq_bqsp")`` / ``format("nbmq_rqueue")`` their TCP connections into the BQSP
    packets / rqueue messages tables (:mod:`nbmq.spark.streams_source`).
    """
    from .datasource import NbmqDataSource
    from .streams_source import BqspDataSource, RqueueDataSource

    if getattr(spark, "_nbmq_registered", False):  # re-registering makes Spark warn
        return
    spark.dataSource.register(NbmqDataSource)
    spark.dataSource.register(BqspDataSource)
    spark.dataSource.register(RqueueDataSource)
    spark._nbmq_registered = True  # type: ignore[attr-defined]
