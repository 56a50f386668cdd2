"""The pipeline's HTML report: summary tables and charts (matplotlib, inline SVG).

Charts: messages per second over time per session (one panel per capture), the message size
distribution (log2 buckets) and completion (complete / incomplete messages per capture). The
data behind them is aggregated by Spark; only small tables reach the driver.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["chart_data", "write_report"]

_MAX_SESSION_ROWS = 200
_MAX_LINES = 12  # sessions drawn per capture panel (the busiest ones)


def chart_data(messages: DataFrame) -> dict[str, Any]:
    """Aggregate what the charts need from the messages table (small results, collected)."""
    from pyspark.sql import functions as F

    spans = messages.groupBy("capture").agg(
        F.min(F.col("first_ts").cast("double")).alias("t0"), F.max(F.col("first_ts").cast("double")).alias("t1")
    )
    widths = [(r.capture, r.t0, _bin_width((r.t1 or 0.0) - (r.t0 or 0.0))) for r in spans.collect() if r.t0 is not None]
    per_second: list[Any] = []
    if widths:
        bins = messages.sparkSession.createDataFrame(widths, "capture string, t0 double, width double")
        per_second = (
            messages.join(F.broadcast(bins), "capture")
            .select(
                "capture",
                "width",
                F.col("session_id").cast("string").alias("session_id"),
                F.floor((F.col("first_ts").cast("double") - F.col("t0")) / F.col("width")).cast("long").alias("bin"),
            )
            .groupBy("capture", "width", "session_id", "bin")
            .count()
            .collect()
        )
    sizes = (
        messages.where(F.col("message_size").isNotNull())
        .select(
            "capture",
            F.when(F.col("message_size") <= 0, F.lit(-1))
            .otherwise(F.floor(F.log2(F.col("message_size"))))
            .cast("int")
            .alias("bucket"),
        )
        .groupBy("capture", "bucket")
        .count()
        .collect()
    )
    completion = (
        messages.groupBy("capture")
        .agg(
            F.sum(F.col("complete").cast("long")).alias("complete"),
            F.sum((~F.col("complete")).cast("long")).alias("incomplete"),
        )
        .collect()
    )
    return {
        "per_second": [r.asDict() for r in per_second],
        "sizes": [r.asDict() for r in sizes],
        "completion": [r.asDict() for r in completion],
    }


_NICE_WIDTHS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]


def _bin_width(span: float, bins: int = 80) -> float:
    """A round time bin (seconds) giving about ``bins`` bins over ``span`` seconds."""
    want = span / bins
    # float always: the bins frame is created with a ``width double`` schema, and Spark's
    # verifier rejects a Python int there (issue 11: every capture longer than 40 s failed).
    return float(next((w for w in _NICE_WIDTHS if w >= want), math.ceil(want / 3600) * 3600))


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.find("<svg") :]


def _charts(data: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"
    charts: list[tuple[str, str]] = []

    captures = sorted({r["capture"] for r in data["per_second"]})
    if captures:
        fig, axes = plt.subplots(len(captures), 1, figsize=(9, 2.6 * len(captures)), squeeze=False)
        for ax, capture in zip(axes[:, 0], captures):
            rows = [r for r in data["per_second"] if r["capture"] == capture]
            width = rows[0]["width"]
            totals: dict[str, int] = {}
            for r in rows:
                totals[r["session_id"]] = totals.get(r["session_id"], 0) + r["count"]
            busiest = sorted(totals, key=lambda s: -totals[s])[:_MAX_LINES]
            last = max(r["bin"] for r in rows)
            xs = [i * width for i in range(last + 1)]
            for sid in busiest:
                counts = [0.0] * (last + 1)
                for r in rows:
                    if r["session_id"] == sid:
                        counts[r["bin"]] = r["count"] / width
                ax.step(xs, counts, where="post", linewidth=1.2, label=f"{int(sid):016x}")
            ax.set_title(f"{capture}  (bins of {width:g} s)", fontsize=10)
            ax.set_ylabel("messages / s")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7, title="session", title_fontsize=7, loc="upper right")
        axes[-1, 0].set_xlabel("seconds since the capture's first message")
        fig.tight_layout()
        charts.append(("Messages per second, per session", _svg(fig)))
        plt.close(fig)

    if data["sizes"]:
        fig, ax = plt.subplots(figsize=(9, 3.2))
        buckets = sorted({r["bucket"] for r in data["sizes"]})
        caps = sorted({r["capture"] for r in data["sizes"]})
        width = 0.8 / max(1, len(caps))
        for i, capture in enumerate(caps):
            counts = {r["bucket"]: r["count"] for r in data["sizes"] if r["capture"] == capture}
            ax.bar([b + i * width for b in buckets], [counts.get(b, 0) for b in buckets], width, label=capture)
        ax.set_xticks([b + 0.4 - width / 2 for b in buckets])
        ax.set_xticklabels(["0" if b < 0 else f"{2 ** b}" for b in buckets], fontsize=8)
        ax.set_xlabel("message size, bytes (bucket lower bound, log2)")
        ax.set_ylabel("messages")
        ax.legend(fontsize=8)
        fig.tight_layout()
        charts.append(("Message size distribution", _svg(fig)))
        plt.close(fig)

    if data["completion"]:
        rows = sorted(data["completion"], key=lambda r: r["capture"])
        fig, ax = plt.subplots(figsize=(9, 0.6 + 0.5 * len(rows)))
        names = [r["capture"] for r in rows]
        done = [r["complete"] or 0 for r in rows]
        open_ = [r["incomplete"] or 0 for r in rows]
        ax.barh(names, done, color="#4c9a2a", label="complete")
        ax.barh(names, open_, left=done, color="#d9822b", label="incomplete")
        ax.set_xlabel("messages")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        charts.append(("Completion", _svg(fig)))
        plt.close(fig)
    return charts


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:,.3f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}" if abs(v) < 10**15 else str(v)
        return html.escape("" if v is None else str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(
    path: str | Path,
    summary: dict[str, Any],
    data: dict[str, Any],
    sessions: Sequence[dict[str, Any]],
) -> Path:
    """Write the HTML report.

    Args:
        path: the HTML file to write.
        summary: the pipeline summary (``captures`` rows, ``totals``, ``seconds``).
        data: :func:`chart_data`'s result.
        sessions: session rows (dicts) to list, at most the first 200 are shown.

    Returns:
        The path written.
    """
    path = Path(path)
    charts = _charts(data)
    capture_cols = list(summary["captures"][0].keys()) if summary["captures"] else ["capture"]
    session_cols = [
        "capture", "session_id", "client", "server", "duration_s", "frames_c2s", "frames_s2c",
        "messages_complete_c2s", "messages_complete_s2c", "messages_incomplete_c2s",
        "messages_incomplete_s2c", "bytes_c2s", "bytes_s2c", "throughput_bytes_per_s",
    ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>nbmq pipeline report</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
        "table{border-collapse:collapse;font-size:12px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "th{background:#f0f0f0}td:first-child{text-align:left}"
        "svg{max-width:100%;height:auto}</style></head><body>",
        "<h1>nbmq pipeline report</h1>",
        f"<p>{summary['totals'].get('datagrams', 0):,} datagrams, "
        f"{summary['totals'].get('messages_complete', 0):,} complete messages, "
        f"{summary['totals'].get('sessions', 0):,} sessions; "
        f"{summary['totals'].get('error_rows', 0):,} malformed datagrams and "
        f"{summary['totals'].get('capture_errors', 0):,} unreadable capture records; "
        f"{summary.get('seconds', 0):.1f} s on <code>{html.escape(str(summary.get('master')))}</code>.</p>",
        "<h2>Captures</h2>",
        _table(summary["captures"], capture_cols),
    ]
    for title, svg in charts:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(svg)
    shown = list(sessions)[:_MAX_SESSION_ROWS]
    parts.append(f"<h2>Sessions ({len(sessions):,})</h2>")
    parts.append(_table(shown, session_cols))
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
