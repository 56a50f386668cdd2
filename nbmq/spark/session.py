"""A quiet Spark session for the pipeline: local by default, any master accepted.

What it sets, and why (each measured on a plain ``pip install pyspark``):

- ``SPARK_LOCAL_IP=127.0.0.1`` for local masters (otherwise Spark binds a non-loopback address
  and warns about it); left alone for a cluster, whose executors must reach the driver.
- ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` = ``sys.executable`` unless already set, so
  Python workers run the interpreter that has nbmq installed.
- ``spark.ui.enabled=false``, log level WARN, and a log4j2 configuration that also silences the
  JVM's start-up chatter (native-hadoop, loopback and shell-default notices).
- ``spark.sql.execution.arrow.pyspark.validateSchema.enabled=true``: ``mapInArrow`` does not cast,
  so a wrong Arrow type fails with a clear message instead of corrupt columns.
- The Python data source ``nbmq`` is registered on the session.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ARROW_UNCHECKED", "DEFAULT_MASTER", "build_session", "is_local_master"]

DEFAULT_MASTER = "local[*]"

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = warn
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.memstore.name = org.apache.spark.storage.memory.MemoryStore
logger.memstore.level = error
logger.rowbased.name = org.apache.spark.sql.catalyst.util.SparkStringUtils
logger.rowbased.level = error
logger.worker.name = org.apache.spark.deploy.worker
logger.worker.level = error
logger.master.name = org.apache.spark.deploy.master
logger.master.level = error
logger.client.name = org.apache.spark.deploy.client
logger.client.level = error
logger.standalone.name = org.apache.spark.scheduler.cluster.StandaloneSchedulerBackend
logger.standalone.level = error
"""


#: JVM option that turns off Arrow Java's per-access bounds checks (``BoundsChecking``).
ARROW_UNCHECKED = "-Darrow.enable_unsafe_memory_access=true"


def is_local_master(master: str) -> bool:
    """True for ``local``, ``local[N]``, ``local[*]``, ``local[N,F]`` and ``local-cluster[...]``."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def _log4j2_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"nbmq-log4j2-{os.getuid() if hasattr(os, 'getuid') else 0}.properties"
    try:
        if not path.exists() or path.read_text() != _LOG4J2:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(_LOG4J2)
            tmp.replace(path)
    except OSError:
        pass
    return path


def build_session(
    master: str | None = None,
    app_name: str = "nbmq",
    conf: Mapping[str, str] | None = None,
    *,
    register: bool = True,
) -> SparkSession:
    """Get or create a quiet SparkSession.

    Args:
        master: a Spark master URL (``local[*]``, ``local[2]``, ``local-cluster[2,1,1024]``,
            ``spark://host:7077``, ``yarn``, ``k8s://...``). None: leave it to ``spark-submit``
            (``--master``) or, when nothing set one, :data:`DEFAULT_MASTER`.
        app_name: the application name.
        conf: more Spark configuration, applied last (overrides the defaults here; a
            ``spark.driver/executor.extraJavaOptions`` of yours replaces ours, so add
            :data:`ARROW_UNCHECKED` to it to keep the fast Arrow reads).
        register: register the ``nbmq`` Python data source on the session.

    Returns:
        The session (``getOrCreate``: an active session is reused, and then static settings such
        as the master are the existing session's).

    Side effects:
        Sets ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` when unset and, for local masters,
        ``SPARK_LOCAL_IP`` when unset; writes a small log4j2 file to the temp directory. The
        driver and executor JVMs get :data:`ARROW_UNCHECKED` (Arrow buffer reads without
        bounds checks: 1.4-2x faster frames-table reads, measured in bench_pipeline.py).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # running under spark-submit
    effective = master or (None if submitted else DEFAULT_MASTER)
    local = effective is not None and is_local_master(effective)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    builder = SparkSession.builder.appName(app_name)
    if effective is not None:
        builder = builder.master(effective)
    log4j = f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"
    settings = {
        # Spark reads a Python data source's Arrow batches row by row; with Arrow's per-access
        # bounds and reference-count checks on, those checks were ~40% of the JVM's time on
        # the frames table (JFR profile, see benchmarks/bench_pipeline.py). The batches come
        # from our own workers through Arrow IPC, so the checks guard nothing here.
        "spark.executor.extraJavaOptions": ARROW_UNCHECKED,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.validateSchema.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.debug.maxToStringFields": "200",
        "spark.driver.extraJavaOptions": f"{log4j} {ARROW_UNCHECKED}",
    }
    if local:
        settings.update(
            {
                "spark.executor.extraJavaOptions": f"{log4j} {ARROW_UNCHECKED}",
                "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
                "spark.pyspark.driver.python": os.environ["PYSPARK_DRIVER_PYTHON"],
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.shuffle.partitions": "8",
            }
        )
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if register:
        from .registration import register as _register

        _register(spark)
    return spark
