"""The report's charts, drawn with matplotlib and embedded as inline SVG (text kept as text).

Each function takes :class:`~nbmq.spark.report.aggregate.ReportData` pieces (small pandas
frames) and returns SVG markup, or "" when there is nothing to draw.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from .units import hex_id, pick_scale

__all__ = ["traffic", "capture_traffic", "latency", "health", "flow_graph", "stream_rates", "in_flight"]

KIND_COLORS = {
    "data": "#1f77b4", "ack": "#2ca02c", "heartbeat": "#9467bd",
    "connect": "#ff7f0e", "connected": "#d62728", "disconnected": "#8c564b",
}
DIRECTION_STYLE = {"c2s": "-", "s2c": "--"}
WIDTH_IN = 13.6  # 1360 px at 100 dpi: fits a 1400 px page with margins
_MAX_SESSION_ROWS = 8
_MIN_HIST_SAMPLES = 20  # fewer samples read better in the table alone


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 10, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100})
    return plt


def svg(fig: Any) -> str:
    """The figure as an ``<svg>`` element (no XML prolog), then the figure is closed."""
    plt = _plt()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.find("<svg"):]


def _series(rows: Any, value: str, bins: int, width: float, span: float) -> tuple[np.ndarray, np.ndarray]:
    """(bin starts, rate per second) over every bin; the last bin divided by the time it covers."""
    counts = np.zeros(bins)
    if len(rows):
        np.add.at(counts, rows["bin"].to_numpy(dtype=int).clip(0, bins - 1), rows[value].to_numpy(dtype=float))
    covered = np.full(bins, width)
    covered[-1] = max(span - (bins - 1) * width, width * 0.25)
    return np.arange(bins) * width, counts / covered


def _axis(cap: Any) -> tuple[int, float, float, bool]:
    """(bins, width s, span s, last bin partial). A remainder under a quarter bin joins the
    previous bin (so no bin's rate rests on a sliver of time); the last bin covers 0.25..1.25 widths."""
    width, span = float(cap.width_s), float(cap.span_s)
    bins = max(1, math.ceil(span / width - 0.25))
    partial = abs(span - bins * width) > width * 1e-3
    return bins, width, span, partial


def _mark_partial(ax: Any, bins: int, width: float, span: float, partial: bool) -> None:
    if partial and bins > 1:
        ax.axvspan((bins - 1) * width, span, color="#bbbbbb", alpha=0.35, lw=0)
    ax.set_xlim(0, max(span, width))


def traffic(cap: Any, t: Any, m: Any, sessions: list[int]) -> str:
    """Rates over the capture's time axis: all sessions, then one row per busiest session.

    Columns: frames/s by kind, bytes/s, messages/s; c2s solid, s2c dashed. The last, partial bin
    is shaded grey and its rate uses the time it covers, so it does not read as a drop.
    """
    plt = _plt()
    bins, width, span, partial = _axis(cap)
    rows = [("all sessions", None)] + [(hex_id(s), s) for s in sessions[:_MAX_SESSION_ROWS]]
    peak = max(1.0, *( _series(t[t.direction == d], "bytes", bins, width, span)[1].max() for d in ("c2s", "s2c")))
    scale, unit = pick_scale(peak)
    fig, axes = plt.subplots(len(rows), 3, figsize=(WIDTH_IN, 1.9 * len(rows) + 0.6), sharex=True, squeeze=False)
    for i, (label, sid) in enumerate(rows):
        ts = t if sid is None else t[t.session_id == sid]
        ms = m if sid is None else m[m.session_id == sid]
        ax_f, ax_b, ax_m = axes[i]
        for kind in KIND_COLORS:
            for d, style in DIRECTION_STYLE.items():
                sel = ts[(ts.kind_name == kind) & (ts.direction == d)]
                if len(sel):
                    x, y = _series(sel, "frames", bins, width, span)
                    ax_f.step(x, y, where="post", color=KIND_COLORS[kind], ls=style, lw=1.1)
        for d, style in DIRECTION_STYLE.items():
            x, y = _series(ts[ts.direction == d], "bytes", bins, width, span)
            ax_b.step(x, y / scale, where="post", ls=style, color="#333333" if d == "c2s" else "#e377c2", lw=1.2)
            x, y = _series(ms[ms.direction == d], "messages", bins, width, span)
            ax_m.step(x, y, where="post", ls=style, color="#333333" if d == "c2s" else "#e377c2", lw=1.2)
        for ax in axes[i]:
            _mark_partial(ax, bins, width, span, partial)
            ax.set_ylim(bottom=0)
        ax_f.set_ylabel(f"{label}\nframes/s", fontsize=9)
        ax_b.set_ylabel(unit, fontsize=9)
        ax_m.set_ylabel("messages/s", fontsize=9)
    axes[0, 0].set_title("frames/s by kind", fontsize=10)
    axes[0, 1].set_title("UDP payload bytes/s", fontsize=10)
    axes[0, 2].set_title("complete messages/s (by first frame)", fontsize=10)
    from matplotlib.lines import Line2D

    kinds = sorted(set(t["kind_name"]), key=list(KIND_COLORS).index) if len(t) else []
    handles = [Line2D([], [], color=KIND_COLORS[k], lw=2, label=k) for k in kinds]
    handles += [Line2D([], [], color="#333333", ls="-", label="client -> server (c2s)"),
                Line2D([], [], color="#e377c2", ls="--", label="server -> client (s2c)")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    fig.supxlabel(f"seconds since the capture's first frame (bins of {width:g} s"
                  f"{'; grey: the last bin, partial, its rate over the time it covers' if partial else ''})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (1.9 * len(rows) + 0.6)))
    return svg(fig)


def capture_traffic(cap: Any, traffic_rows: Any, messages: Any) -> str:
    """:func:`traffic` for one capture (``cap``: a row of ``ReportData.captures``) from the report's
    whole traffic and messages tables, its busiest sessions (most frames) in rows."""
    t = traffic_rows[traffic_rows.capture == cap.capture]
    m = messages[messages.capture == cap.capture]
    busiest = list(t.groupby("session_id")["frames"].sum().sort_values(ascending=False).index) if len(t) else []
    return traffic(cap, t, m, [int(s) for s in busiest if int(s)])


def latency(hist: Any, captures: list[str]) -> str:
    """Histograms (log time axis) of each latency metric, one panel per metric, one colour per capture."""
    if not len(hist):
        return ""
    plt = _plt()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from .units import duration

    totals = hist.groupby("metric")["n"].sum()
    metrics = [m for m in dict.fromkeys(hist["metric"]) if totals[m] >= _MIN_HIST_SAMPLES]
    if not metrics:
        return ""
    cols = min(3, len(metrics))
    nrows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(WIDTH_IN, 2.6 * nrows + 0.3), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes.flat, metrics):
        sel = hist[hist.metric == metric]
        for j, cap in enumerate(captures):
            c = sel[sel.capture == cap]
            if len(c):
                edges = 10.0 ** (c["bucket"].to_numpy(dtype=float) / 5)
                ax.bar(edges, c["n"].to_numpy(dtype=float), width=edges * (10 ** 0.2 - 1), align="edge",
                       alpha=0.6, color=colors[j % len(colors)], label=cap)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: duration(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(metric, fontsize=10)
        ax.set_ylabel("count")
        ax.set_xlabel("log scale")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.tight_layout()
    return svg(fig)


def health(cap: Any, m: Any, resends: Any) -> str:
    """Duplicates, rejected frames, resends and incomplete messages per second over the capture."""
    plt = _plt()
    bins, width, span, partial = _axis(cap)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.4))
    drawn = False
    for col, color, label, table in (
        ("duplicates", "#ff7f0e", "duplicate data frames/s", m),
        ("rejected", "#d62728", "rejected data frames/s", m),
        ("incomplete", "#8c564b", "incomplete messages/s (by first frame)", m),
        ("resends", "#9467bd", "resent data frames/s (same ack hash)", resends),
    ):
        if len(table) and col in table and table[col].fillna(0).sum() > 0:
            x, y = _series(table.fillna({col: 0}), col, bins, width, span)
            ax.step(x, y, where="post", color=color, label=label)
            drawn = True
    if not drawn:
        plt.close(fig)
        return ""
    _mark_partial(ax, bins, width, span, partial)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the first frame")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return svg(fig)


_MAX_FLOW_ROWS = 60
_MAX_FLOW_ENDPOINTS = 8


def flow_rows(control: Any, heartbeats: Any, gaps: Any, clients: dict[tuple[str, int], str]) -> list[tuple[float, str, str, str, str]]:
    """(at_s, src, dst, label, kind) rows of one capture's flow graph, heartbeats folded.

    Heartbeats of one direction of a session become one row "Heartbeat xN (every ~X s)" at the
    first one, plus one row per gap longer than 1.5 intervals, so a long capture still fits.
    ``clients`` maps (capture, session_id) to the session's client endpoint.
    """
    rows: list[tuple[float, str, str, str, str]] = []
    for r in control.itertuples():
        rows.append((float(r.at_s), r.src, r.dst, str(r.kind_name).capitalize(), str(r.kind_name)))
    for r in heartbeats.itertuples():
        n = int(r.n)
        label = f"Heartbeat x{n:,}" + (f" (until {r.last_s:.3f} s)" if n > 1 else "")
        rows.append((float(r.first_s), r.src, r.dst, label, "heartbeat"))
        way = "c2s" if clients.get((r.capture, int(r.session_id))) == r.src else "s2c"
        sel = gaps[(gaps.capture == r.capture) & (gaps.session_id == int(r.session_id)) & (gaps.direction == way)]
        for g in sel.itertuples():
            rows.append((float(g.at_s), r.src, r.dst, f"Heartbeat after a {g.gap_s:.2g} s gap", "gap"))
    rows.sort(key=lambda x: x[0])
    return rows


def flow_graph(capture: str, rows: list[tuple[float, str, str, str, str]], server_eps: list[str]) -> str:
    """Wireshark-style flow graph: endpoints as columns, one arrow per control-frame row."""
    if not rows:
        return ""
    plt = _plt()
    every = list(dict.fromkeys([*server_eps] + [e for r in rows for e in (r[1], r[2])]))
    eps = every[:_MAX_FLOW_ENDPOINTS]  # the servers, then clients in order of appearance
    kept = [r for r in rows if r[1] in eps and r[2] in eps]
    shown = kept[:_MAX_FLOW_ROWS]
    x = {e: i for i, e in enumerate(eps)}
    height = 0.9 + 0.28 * len(shown)
    fig, ax = plt.subplots(figsize=(min(WIDTH_IN, 3.0 + 2.6 * len(eps)), height))
    ax.grid(False)
    for e, i in x.items():
        ax.axvline(i, color="#999999", lw=1)
        ax.text(i, -0.9, e, ha="center", va="bottom", fontsize=9, weight="bold")
    for k, (at, src, dst, label, kind) in enumerate(shown):
        color = KIND_COLORS.get(kind, "#d62728" if kind == "gap" else "#555555")
        ax.annotate("", xy=(x[dst], k), xytext=(x[src], k),
                    arrowprops={"arrowstyle": "->", "color": color, "lw": 1.3})
        ax.text((x[src] + x[dst]) / 2, k - 0.12, label, ha="center", va="bottom", fontsize=8, color=color)
        ax.text(-0.55, k, f"{at:.6f}", ha="right", va="center", fontsize=8, family="monospace")
    ax.set_ylim(len(shown) - 0.4, -1.0)
    ax.set_xlim(-1.6, len(eps) - 0.4)
    ax.axis("off")
    if len(rows) > len(shown):
        ax.set_title(f"{capture}: the first {len(shown)} of {len(rows)} rows"
                     + (f", {len(eps)} of {len(every)} endpoints" if len(every) > len(eps) else ""), fontsize=9)
    fig.tight_layout()
    return svg(fig)


def stream_rates(cap: Any, rates: Any, what: str) -> str:
    """Records/s and bytes/s per connection and direction on the capture's time axis."""
    if not len(rates):
        return ""
    plt = _plt()
    bins, width, span, partial = _axis(cap)
    fig, (ax_r, ax_b) = plt.subplots(1, 2, figsize=(WIDTH_IN, 2.8), sharex=True)
    peak = 1.0
    for (client, server, d), sel in rates.groupby(["client", "server", "direction"]):
        peak = max(peak, _series(sel, "bytes", bins, width, span)[1].max())
    scale, unit = pick_scale(peak)
    for (client, server, d), sel in rates.groupby(["client", "server", "direction"]):
        x, y = _series(sel, "records", bins, width, span)
        line = ax_r.step(x, y, where="post", ls=DIRECTION_STYLE[d], label=f"{client} {d}")[0]
        x, y = _series(sel, "bytes", bins, width, span)
        ax_b.step(x, y / scale, where="post", ls=DIRECTION_STYLE[d], color=line.get_color())
    for ax in (ax_r, ax_b):
        _mark_partial(ax, bins, width, span, partial)
        ax.set_ylim(bottom=0)
        ax.set_xlabel(f"seconds since the first record (bins of {width:g} s)")
    ax_r.set_ylabel(f"{what}/s")
    ax_b.set_ylabel(f"payload {unit}")
    ax_r.legend(fontsize=7, title="client (c2s solid, s2c dashed)", title_fontsize=7)
    fig.tight_layout()
    return svg(fig)


def in_flight(cap: Any, events: Any) -> str:
    """BQSP requests awaiting their response over time (a step per request / response)."""
    if not len(events):
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.2))
    x = events["at_s"].to_numpy(dtype=float)
    y = np.cumsum(events["d"].to_numpy(dtype=float))
    ax.step(np.r_[0.0, x], np.r_[0.0, y], where="post", color="#1f77b4")
    ax.set_ylabel("requests in flight")
    ax.set_xlabel("seconds since the first record")
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, max(float(cap.span_s), 1e-3))
    fig.tight_layout()
    return svg(fig)
