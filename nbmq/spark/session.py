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
- ``SPARK_HOME`` = pyspark's own directory when unset (pip installs), so ``spark-submit`` does
  not start one more Python process just to find it.
- A class-data-sharing archive for the driver JVM (:func:`class_archive_options`): Spark loads
  ~15,000 classes from 280 jars at start-up; mapped from an archive written by an earlier run
  they load 3-5 s faster on 2 busy cores (issue 14; ``NBMQ_SPARK_CDS=0`` turns it off).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ARROW_UNCHECKED", "DEFAULT_MASTER", "build_session", "class_archive_options", "is_local_master"]

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


#: First bytes of a finished dynamic CDS archive (HotSpot's ``CDS_DYNAMIC_ARCHIVE_MAGIC``,
#: little-endian). The JVM writes the header last, so a file still being dumped does not have it.
_CDS_MAGIC = (0xF00BABA8).to_bytes(4, "little")
#: Seconds after which an unfinished archive (its JVM killed mid-dump) is removed and redone.
_CDS_STALE_S = 600.0
#: The archive's JVM flags: a missing, stale or foreign archive is ignored without a word.
_CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nbmq"


def _java_binary() -> str | None:
    import shutil

    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def class_archive_options(spark_home: str | None = None, cache_dir: Path | None = None) -> str:
    """JVM options giving the driver a dynamic class-data-sharing (CDS) archive; ``""`` when off.

    Spark's driver JVM spends most of its start-up loading and verifying classes (about 15,000
    from 280 jars). The first run dumps the classes it loaded into
    ``~/.cache/nbmq/spark-cds-KEY.jsa`` when its JVM exits (``-XX:ArchiveClassesAtExit``, after
    the Python process has gone, so no run waits for it; ~160 MB); later runs map it
    (``-XX:SharedArchiveFile``): SparkSession ready in 6.0 s instead of 8.0 s and the first job
    1-2 s faster (medians, load ~6, see README "Start-up"). KEY hashes the java binary (path,
    size, mtime) and the Spark jars, so an upgrade starts a new archive; a JVM that still
    finds the archive unusable ignores it silently and runs as without it.

    Each dump goes to its own ``.PID.part`` file and is renamed into place by the next run once
    its header (written last) is there, so concurrent runs never read a half-written archive.

    Args:
        spark_home: the Spark installation (its ``jars/`` enter the key); None: ``SPARK_HOME``.
        cache_dir: where archives live; None: ``$XDG_CACHE_HOME/nbmq`` or ``~/.cache/nbmq``.

    Returns:
        The options for ``spark.driver.extraJavaOptions`` (use or dump the archive), or ``""``
        when ``NBMQ_SPARK_CDS=0``, no ``java`` is found, or the cache directory is not
        writable. Never raises.
    """
    if os.environ.get("NBMQ_SPARK_CDS", "1").strip().lower() in ("0", "false", "no", "off"):
        return ""
    try:
        java = _java_binary()
        home = spark_home or os.environ.get("SPARK_HOME")
        if java is None or not home:
            return ""
        directory = cache_dir or _cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        jars = sorted(os.listdir(os.path.join(home, "jars"))) if os.path.isdir(os.path.join(home, "jars")) else []
        st = os.stat(java)
        key = hashlib.sha256(repr((java, st.st_size, st.st_mtime_ns, os.path.realpath(home), jars)).encode())
        stem = f"spark-cds-{key.hexdigest()[:16]}"
        final = directory / f"{stem}.jsa"
        dumping = False
        for part in directory.glob(f"{stem}.*.part"):  # earlier runs' dumps
            with open(part, "rb") as f:
                finished = f.read(4) == _CDS_MAGIC
            if finished and not final.is_file():
                os.replace(part, final)
            elif finished or time.time() - part.stat().st_mtime > _CDS_STALE_S:
                part.unlink()  # a second copy, or a dump whose JVM died
            else:
                dumping = True  # being written right now: do not start a second dump
        if final.is_file():
            return f"-XX:SharedArchiveFile={final} {_CDS_QUIET}"
        if dumping or not os.access(directory, os.W_OK):
            return ""
        return f"-XX:ArchiveClassesAtExit={directory / f'{stem}.{os.getpid()}.part'} {_CDS_QUIET}"
    except OSError:
        return ""


def _context_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def _spark_home() -> str | None:
    """SPARK_HOME, set to pyspark's directory when unset (what spark-submit's script would find)."""
    if not os.environ.get("SPARK_HOME"):
        try:
            from pyspark.find_spark_home import _find_spark_home

            os.environ["SPARK_HOME"] = _find_spark_home()
        except (Exception, SystemExit):  # noqa: BLE001 -- it exits when none is found: spark-submit reports it
            return None
    return os.environ["SPARK_HOME"]


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
        ``SPARK_LOCAL_IP`` when unset; sets ``SPARK_HOME`` to pyspark's directory when unset
        and a JVM is to be launched; writes a small log4j2 file to the temp directory. The
        driver and executor JVMs get :data:`ARROW_UNCHECKED` (Arrow buffer reads without
        bounds checks: 1.4-2x faster frames-table reads, measured in bench_pipeline.py). A
        driver JVM launched here uses or writes a class-data-sharing archive in
        ``~/.cache/nbmq`` (:func:`class_archive_options`; ``NBMQ_SPARK_CDS=0``: off).

    Raises:
        pyspark.errors.PySparkRuntimeError: the JVM could not be started (``JAVA_GATEWAY_EXITED``:
            no java, a bad ``JAVA_HOME``, ...; Spark's own error, with its message).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # running under spark-submit
    effective = master or (None if submitted else DEFAULT_MASTER)
    local = effective is not None and is_local_master(effective)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The archive only helps a JVM this call launches: not under spark-submit, nor when
    # getOrCreate will hand back a running session.
    launching = not submitted and SparkSession.getActiveSession() is None and not _context_running()
    archive = class_archive_options(_spark_home()) if launching else ""

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
        "spark.driver.extraJavaOptions": f"{log4j} {ARROW_UNCHECKED} {archive}".rstrip(),
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
