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
  the JVM needs half the CPU to a ready session (``NBMQ_SPARK_CDS=0`` turns it off).
- Local masters: a driver heap of 384 MiB + 128 MiB per core (:func:`local_driver_memory`,
  ``640m`` on ``local[2]``) and ``-XX:MaxDirectMemorySize=1g``, so the JVM's memory stops
  following the capture's size; a ``spark.driver.memory`` of yours wins. The driver JVM
  compiles with C1 only (``-XX:TieredStopAtLevel=1``): a faster start (``_QUICK_JIT``).
- Local masters retry a failed task (``local[N]`` becomes ``local[N,4]``,
  :func:`with_task_retries`): Spark's local mode otherwise aborts the job on the first loss.
- Parquet timestamps as TIMESTAMP(MICROS) in UTC (:data:`PARQUET_TIMESTAMPS`), the type the
  pipeline's own writers use, instead of INT96.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ARROW_UNCHECKED",
    "DEFAULT_MASTER",
    "build_session",
    "class_archive_options",
    "cores_of_master",
    "is_local_master",
    "local_driver_memory",
    "session_settings",
    "with_task_retries",
    "TASK_ATTEMPTS",
    "PARQUET_TIMESTAMPS",
]

DEFAULT_MASTER = "local[*]"
#: attempts of a task on a local master (Spark's own default on clusters, ``spark.task.maxFailures``;
#: local mode takes it from the master URL only, ``local[N,F]``, and otherwise never retries)
TASK_ATTEMPTS = 4
#: Parquet timestamps as TIMESTAMP(MICROS), adjusted to UTC, in every table Spark writes (its
#: default, INT96, reads back in pyarrow as timestamp[ns] without a zone)
PARQUET_TIMESTAMPS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}

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


def with_task_retries(master: str) -> str:
    """``master`` with :data:`TASK_ATTEMPTS` attempts per task when it is ``local`` or
    ``local[N]`` / ``local[*]`` (``local[N,F]``, ``local-cluster[...]`` and clusters: unchanged).

    A Python worker killed mid-task (out of memory, a signal) then costs a retry, not the run.
    """
    m = re.fullmatch(r"local(?:\[\s*(\*|\d+)\s*\])?", master.strip())
    if m is None:
        return master
    return f"local[{m.group(1) or 1},{TASK_ATTEMPTS}]"


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
    the Python process has gone, so no run waits for it; 160-190 MB); later runs map it
    (``-XX:SharedArchiveFile``): a fresh process had its SparkSession ready in 14.5 s instead
    of 24.4 s, the JVM's CPU to get there 5.4 s instead of 10.5 (medians of 3 at load 11,
    ``benchmarks/bench_startup.py``; docs/pipeline.md "Start-up and memory bounds"). KEY hashes the
    java binary (path, size, mtime) and the Spark jars, so an upgrade starts a new archive; a
    JVM that still finds the archive unusable ignores it silently and runs as without it.

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


_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,")


def cores_of_master(master: str | None, conf: Mapping[str, str] | None = None) -> int | None:
    """The ``defaultParallelism`` a new session on ``master`` will have, known before it starts.

    Args:
        master: ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``, ``local-cluster[N,C,M]``;
            anything else (a cluster, None under spark-submit) is not known in advance.
        conf: the session's settings; ``spark.default.parallelism`` there wins.

    Returns:
        The number of cores (int >= 1), or None when only the running session can tell.
    """
    if conf and "spark.default.parallelism" in conf:
        try:
            return max(1, int(conf["spark.default.parallelism"]))
        except ValueError:
            return None
    if master is None:
        return None
    m = _LOCAL.match(master.strip())
    if m:
        if m.group(1) is None:
            return 1
        if m.group(1) == "*":  # the JVM counts the CPUs this process may run on
            return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, int(m.group(1)))
    c = _LOCAL_CLUSTER.match(master.strip())
    if c:
        return max(1, int(c.group(1)) * int(c.group(2)))
    return None


#: Local-mode driver heap (the driver runs the tasks there): Spark's fixed 300 MiB reserve, ~84
#: MiB for the driver's own objects, and per core one Parquet row group being filled (the
#: writer buffers ``parquet.block.size`` = 128 MiB per task before it flushes).
_HEAP_BASE_MIB, _HEAP_PER_CORE_MIB = 384, 128
#: Off-heap bound of a local driver (Arrow batches from the Python workers, Netty's buffers):
#: Spark's 1 GiB default heap made it 1 GiB; measured use 155-320 MiB at 500k and 1M datagrams.
_DIRECT_CAP = "-XX:MaxDirectMemorySize=1g"
#: A local driver JVM compiles with C1 only: its start and first jobs are short bursts of
#: class loading and interpreted code, and C2's compiler threads competed with them for the
#: cores (start 5.2 -> 4.1 s, a first ``range(1000).count()`` 1.8 -> 1.3 s, medians of 3,
#: local[2], load ~2). The pipeline's heavy work runs in Python (pyarrow, the codec), not in
#: this JVM. C1 alone shrinks the code cache's default to 48 MB, which a long-lived session
#: (a test suite's) filled ("Out of space in CodeCache for adapters"): it keeps the tiered
#: default of 240 MB. Your ``spark.driver.extraJavaOptions`` replaces it.
_QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def local_driver_memory(cores: int) -> str:
    """``spark.driver.memory`` for a local master with ``cores`` task slots: ``"640m"`` on 2.

    Why a bound at all: with Spark's default 1 GiB heap, G1 grows the heap as long as
    the run allocates, so the JVM's peak followed the capture's size (heap committed 702 MiB at
    500k datagrams, 905 MiB at 1M, the full 1 GiB at 5M), while what stays live after a
    collection is 160-370 MiB at every size. With 384 MiB + 128 MiB per core the heap stops at
    its bound from about 1M datagrams on (578 MiB committed at 500k, 640 at 1M; GC pauses 6.3 ->
    7.7 s at 1M).
    Capped at a quarter of the machine's memory (the JVM's own default), never under the
    512 MiB Spark needs to start.

    Args:
        cores: task slots (``local[N]``: N).

    Returns:
        A JVM memory size string, e.g. ``"640m"``.
    """
    mib = _HEAP_BASE_MIB + _HEAP_PER_CORE_MIB * max(1, cores)
    try:
        quarter = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4 // 2**20
        mib = min(mib, quarter) if quarter > 0 else mib
    except (ValueError, OSError, AttributeError):
        pass
    return f"{max(512, mib)}m"


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


def session_settings(master: str | None, conf: Mapping[str, str] | None = None, *, archive: str = "") -> dict[str, str]:
    """The Spark settings :func:`build_session` gives a new session (no side effects but the
    log4j2 file; read ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` for local masters).

    Args:
        master: the effective master URL (None: spark-submit's, not known here).
        conf: yours, applied last (they win, ``spark.driver.memory`` included).
        archive: JVM options of :func:`class_archive_options` for the driver.

    Returns:
        key -> value, as strings.
    """
    local = master is not None and is_local_master(master)
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
        **PARQUET_TIMESTAMPS,
        "spark.driver.extraJavaOptions": f"{log4j} {ARROW_UNCHECKED} {archive}".rstrip(),
    }
    if local:
        assert master is not None
        settings.update(
            {
                "spark.executor.extraJavaOptions": f"{log4j} {ARROW_UNCHECKED}",
                "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
                "spark.pyspark.driver.python": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.shuffle.partitions": "8",
            }
        )
        if not master.startswith("local-cluster"):  # the driver runs the tasks: bound its heap
            settings["spark.driver.memory"] = local_driver_memory(cores_of_master(master) or 1)
            # the direct-memory cap follows -Xmx unless set: keep the 1 GiB it had with 1 GiB heaps
            settings["spark.driver.extraJavaOptions"] += f" {_DIRECT_CAP} {_QUICK_JIT}"
    settings.update(conf or {})
    return settings


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
    if effective is not None:
        effective = with_task_retries(effective)
    if effective is not None and is_local_master(effective):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The archive only helps a JVM this call launches: not under spark-submit, nor when
    # getOrCreate will hand back a running session.
    launching = not submitted and SparkSession.getActiveSession() is None and not _context_running()
    archive = class_archive_options(_spark_home()) if launching else ""

    builder = SparkSession.builder.appName(app_name)
    if effective is not None:
        builder = builder.master(effective)
    settings = session_settings(effective, conf, archive=archive)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if register:
        from .registration import register as _register

        _register(spark)
    return spark
