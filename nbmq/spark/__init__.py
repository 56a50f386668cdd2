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

from .registration import register

__all__ = ["register", "build_session"]


def build_session(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Shortcut for :func:`nbmq.spark.spark_session.build_session` (same arguments)."""
    from .spark_session import build_session as _build

    return _build(*args, **kwargs)
