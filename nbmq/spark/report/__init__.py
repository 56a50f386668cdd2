"""The pipeline's HTML report: traffic, latency, loss and health, control-frame flow, BQSP and rqueue.

::

    from nbmq.spark.report import collect, write_report
    write_report("out/report.html", summary, collect(spark, summary["tables"]))

:mod:`.aggregate` asks Spark for small aggregates of the pipeline's tables; :mod:`.charts` turns
them into chart data that the browser draws (uPlot, shipped in ``static/``: zoom, values on hover,
one time axis per capture); :mod:`.expert` lays out the ``findings/`` table as Expert info;
:mod:`.page` writes one self-contained HTML file that fits a 1400 px window; :mod:`.units`
formats ids (hex u64) and units.
"""

from __future__ import annotations

from .aggregate import ReportData, collect
from .page import render, write_report
from .units import nice_bin_width

__all__ = ["ReportData", "collect", "render", "write_report", "nice_bin_width"]
