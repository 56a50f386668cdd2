"""The pipeline driver's own work, done in a thread while the Spark JVM starts.

``nbmq pipeline`` waits 5-10 s for its SparkSession (the JVM's launch and the SparkContext),
during which the driver's Python process is idle. :class:`Prestart` fills that time with the
work the driver would otherwise do serially later: importing the modules the steps and the
report use (pandas, pyarrow.compute: about a second), planning the byte ranges of the large
captures (``datasource._plan``'s record walk, kept in its per-process memo for the driver-side
planners) and deciding which captures hold BQSP / rqueue TCP traffic
(:func:`nbmq.capture.tcp.segments.has_tcp_traffic`, a record walk: 0.4 s per 1M datagrams).

One daemon-free worker thread does it all, in that order (the imports are needed first, the
TCP answer only at the streams step). Errors are not lost: :meth:`Prestart.with_traffic`
raises what ``has_tcp_traffic`` raised (``DpktMissing``), at the step that needs it, as a
serial run would; a failed import or plan is simply redone, and reported, by the step itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["Prestart", "PREFETCH_MODULES", "REPORT_MODULES"]

#: Modules every pipeline run imports after the session is up (the steps' and the sources').
PREFETCH_MODULES = (
    "pyspark.sql.functions",
    "nbmq.spark.datasource",
    "nbmq.spark.messages",
    "nbmq.spark.messages_local",
    "nbmq.spark.sessions_table",
    "nbmq.spark.streaming.source",
    "nbmq.spark.tcp_source",
    "nbmq.capture.tcp.segments",
)
#: ... and with a report.
REPORT_MODULES = ("nbmq.spark.report",)


def _import_all(names: Sequence[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- the step importing it for real reports it
            pass


def _plan_all(files: Sequence[str], split: Callable[[], int | None]) -> None:
    from .datasource import _plan
    from .inputs import file_size, splittable

    split_bytes = split()
    if not split_bytes:
        return
    for path in files:
        try:
            if splittable(path) and file_size(path) > split_bytes:
                _plan(path, split_bytes)  # fills datasource._PLANNED
        except Exception:  # noqa: BLE001 -- the frames step plans again and reports it
            pass


def _with_traffic(files: Sequence[str], ports: Sequence[int]) -> list[str]:
    from ..capture.tcp.segments import has_tcp_traffic
    from .inputs import capture_source

    return [f for f in files if has_tcp_traffic(capture_source(f), ports)]


class Prestart:
    """Driver work started before the SparkSession, collected when a step needs it.

    Args:
        files: the expanded capture paths (``datasource.expand_paths``).
        split: gives the byte-range split size the frames step will use (called in the
            thread); None, or a None result: no planning here.
        tcp_ports: protocol (``"bqsp"``, ``"rqueue"``) -> TCP ports; a protocol with no ports
            is not looked for.
        report: also import the report's modules.

    The thread starts at once. Use as a context manager (or call :meth:`close`): leaving it
    drops the work not yet started and never waits for a running task.
    """

    def __init__(
        self,
        files: Sequence[str],
        *,
        split: Callable[[], int | None] | None,
        tcp_ports: Mapping[str, Sequence[int] | None],
        report: bool,
    ) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbmq-prestart")
        self._pool.submit(_import_all, PREFETCH_MODULES + (REPORT_MODULES if report else ()))
        if split is not None:
            self._pool.submit(_plan_all, list(files), split)
        self._traffic: dict[str, Future[list[str]]] = {
            protocol: self._pool.submit(_with_traffic, list(files), list(ports))
            for protocol, ports in tcp_ports.items()
            if ports
        }

    def with_traffic(self, protocol: str) -> list[str]:
        """The files holding TCP traffic on ``protocol``'s ports (waits for the walk).

        Raises:
            KeyError: ``protocol`` had no ports.
            DpktMissing: a candidate packet needs dpkt and it is not installed.
        """
        return self._traffic[protocol].result()

    def close(self) -> None:
        """Cancel what has not started; a running task finishes in the background."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Prestart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
