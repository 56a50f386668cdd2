"""Spark side of nbmq: the ``nbmq`` Python data source and the capture pipeline.

::

    from nbmq.spark import build_session, register
    spark = build_session()                  # quiet local[*] session, source registered
    register(spark)                          # or register on a session of your own
    frames = spark.read.format("nbmq").load("captures/")

    from nbmq.spark import pipeline
    summary = pipeline.run(["a.pcap"], "out/", master="local[*]")

Needs the ``spark`` extra (pyspark 4, pyarrow, pandas). Executors import this package, so it
must be installed on every worker (``pip install nbmq``) or shipped with ``--py-files``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "build_session"]


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


def build_session(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Shortcut for :func:`nbmq.spark.session.build_session` (same arguments)."""
    from .session import build_session as _build

    return _build(*args, **kwargs)
