"""The report's charts as data: the browser draws them (uPlot, shipped in ``static/``).

Each function takes :class:`~nbmq.spark.report.aggregate.ReportData` pieces (small pandas
frames) and returns chart specifications: plain dicts of lists, embedded in the page as JSON and
drawn by ``static/report.js``. A spec is::

    {"title": str, "group": str | None,        # charts of one group share their x range (zoom)
     "kind": "step" | "bars" | "lanes",
     "x": {"label": str, "values": [float, ...], "log": bool},
     "y": {"label": str, "lanes": [str, ...] (lanes only)},
     "series": [{"label": str, "values": [float | None, ...], "color": "#rrggbb",
                 "dash": [px, ...], "width": px}],
     "shade": [x0, x1] | None,                  # the last, partial time bin, drawn grey
     "markers": [{"x": s, "lane": int, "color": "#rrggbb", "label": str}]   # lanes only
     "height": px}

Times are seconds since the capture's first frame. Rates are per second over a bin's width,
the last bin divided by the time it covers so it does not read as a drop. The control-frame
flow graph is the one static drawing: :func:`flow_svg` writes it as inline SVG.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np

from .units import hex_id, pick_scale

__all__ = [
    "Chart",
    "traffic",
    "capture_traffic",
    "latency",
    "health",
    "timeline",
    "flow_rows",
    "flow_svg",
    "stream_rates",
    "in_flight",
    "axis",
]

Chart = dict[str, Any]

KIND_COLORS = {
    "data": "#1f77b4",
    "ack": "#2ca02c",
    "heartbeat": "#9467bd",
    "connect": "#ff7f0e",
    "connected": "#d62728",
    "disconnected": "#8c564b",
}
DIRECTION_COLORS = {"c2s": "#333333", "s2c": "#e377c2"}
#: c2s solid, s2c dashed (pixels on, off).
DIRECTION_DASH: dict[str, list[int]] = {"c2s": [], "s2c": [6, 4]}
SEVERITY_COLORS = {"error": "#b42318", "warning": "#b54708", "note": "#175cd3"}
_PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]
_MAX_SESSION_SERIES = 8
_MAX_LANES = 16
_MIN_HIST_SAMPLES = 20  # fewer samples read better in the table alone


def _values(array: Any) -> list[float | None]:
    """Floats with 6 significant digits (the page stays small), None for NaN / infinities."""
    out: list[float | None] = []
    for v in np.asarray(array, dtype=float).tolist():
        out.append(float(f"{v:.6g}") if math.isfinite(v) else None)
    return out


def _widths(n: int) -> list[float]:
    """Line widths falling with drawing order: a series drawn later over an equal one stays
    thinner, so the earlier one shows around it (data under acks of the same count)."""
    return [round(max(1.2, 3.2 - 0.35 * i), 2) for i in range(n)]


def _series(rows: Any, value: str, bins: int, width: float, span: float) -> tuple[np.ndarray, np.ndarray]:
    """(bin starts, rate per second) over every bin; the last bin divided by the time it covers."""
    counts = np.zeros(bins)
    if len(rows):
        np.add.at(counts, rows["bin"].to_numpy(dtype=int).clip(0, bins - 1), rows[value].to_numpy(dtype=float))
    covered = np.full(bins, width)
    covered[-1] = max(span - (bins - 1) * width, width * 0.25)
    return np.arange(bins) * width, counts / covered


def axis(cap: Any) -> tuple[int, float, float, bool]:
    """(bins, width s, span s, last bin partial) of a capture's time axis. A remainder under a
    quarter bin joins the previous bin (no bin's rate rests on a sliver of time); the last bin
    covers 0.25..1.25 widths."""
    width, span = float(cap.width_s), float(cap.span_s)
    bins = max(1, math.ceil(span / width - 0.25))
    partial = abs(span - bins * width) > width * 1e-3
    return bins, width, span, partial


def _time_axis(cap: Any, what: str = "frame") -> tuple[dict[str, Any], list[float] | None, int, float, float]:
    """(x spec with bin edges, shade, bins, width, span): the step charts' shared x axis."""
    bins, width, span, partial = axis(cap)
    edges = np.r_[np.arange(bins) * width, max(span, width)]
    x = {
        "label": f"seconds since the capture's first {what} (bins of {width:g} s)",
        "values": _values(edges),
        "log": False,
    }
    shade = [float(f"{(bins - 1) * width:.6g}"), float(f"{span:.6g}")] if partial and bins > 1 else None
    return x, shade, bins, width, span


def _step(values: np.ndarray) -> list[float | None]:
    """A step series over bin edges: the last bin's value repeated at the closing edge."""
    return _values(np.r_[values, values[-1:]])


def _chart(
    title: str,
    group: str | None,
    x: dict[str, Any],
    ylabel: str,
    series: list[dict[str, Any]],
    shade: list[float] | None = None,
    kind: str = "step",
    height: int = 220,
) -> Chart:
    for s, w in zip(series, _widths(len(series))):
        s.setdefault("width", w)
        s.setdefault("dash", [])
    return {
        "title": title,
        "group": group,
        "kind": kind,
        "x": x,
        "y": {"label": ylabel},
        "series": series,
        "shade": shade,
        "markers": [],
        "height": height,
    }


def traffic(cap: Any, t: Any, m: Any, sessions: list[int]) -> list[Chart]:
    """Rates over the capture's time axis: frames/s by kind and direction, UDP payload bytes/s,
    complete messages/s (by first frame), and frames/s of the busiest sessions.

    Args:
        cap: a row of ``ReportData.captures`` (capture, span_s, width_s).
        t: the capture's ``ReportData.traffic`` rows; m: its ``messages`` rows.
        sessions: session ids, busiest first (at most 8 get a series of their own).

    Returns:
        Four charts (three when there is at most one session), group ``cap.capture``.
    """
    x, shade, bins, width, span = _time_axis(cap)
    group = str(cap.capture)
    kinds = [k for k in KIND_COLORS if len(t) and (t.kind_name == k).any()]
    frames = []
    for kind in kinds:
        for d in ("c2s", "s2c"):
            sel = t[(t.kind_name == kind) & (t.direction == d)]
            if len(sel):
                frames.append(
                    {
                        "label": f"{kind} {d}",
                        "values": _step(_series(sel, "frames", bins, width, span)[1]),
                        "color": KIND_COLORS[kind],
                        "dash": DIRECTION_DASH[d],
                    }
                )
    peak = max(
        [1.0] + [float(_series(t[t.direction == d], "bytes", bins, width, span)[1].max()) for d in ("c2s", "s2c")]
    )
    scale, unit = pick_scale(peak)
    rates, msgs = [], []
    for d in ("c2s", "s2c"):
        rates.append(
            {
                "label": d,
                "values": _step(_series(t[t.direction == d], "bytes", bins, width, span)[1] / scale),
                "color": DIRECTION_COLORS[d],
                "dash": DIRECTION_DASH[d],
            }
        )
        msgs.append(
            {
                "label": d,
                "values": _step(_series(m[m.direction == d], "messages", bins, width, span)[1]),
                "color": DIRECTION_COLORS[d],
                "dash": DIRECTION_DASH[d],
            }
        )
    charts = [
        _chart("frames/s by kind (c2s solid, s2c dashed)", group, x, "frames/s", frames, shade),
        _chart("UDP payload bytes/s", group, x, unit, rates, shade, height=180),
        _chart("complete messages/s (by first frame)", group, x, "messages/s", msgs, shade, height=180),
    ]
    if len(sessions) > 1:
        per = []
        for i, sid in enumerate(sessions[:_MAX_SESSION_SERIES]):
            per.append(
                {
                    "label": hex_id(sid),
                    "values": _step(_series(t[t.session_id == sid], "frames", bins, width, span)[1]),
                    "color": _PALETTE[i % len(_PALETTE)],
                }
            )
        title = f"frames/s of the {len(per)} busiest sessions" if len(sessions) > len(per) else "frames/s by session"
        charts.append(_chart(title, group, x, "frames/s", per, shade, height=180))
    return charts


def capture_traffic(cap: Any, traffic_rows: Any, messages: Any) -> list[Chart]:
    """:func:`traffic` for one capture from the report's whole traffic and messages tables, its
    busiest sessions (most frames) first."""
    t = traffic_rows[traffic_rows.capture == cap.capture]
    m = messages[messages.capture == cap.capture]
    busiest = list(t.groupby("session_id")["frames"].sum().sort_values(ascending=False).index) if len(t) else []
    return traffic(cap, t, m, [int(s) for s in busiest if int(s)])


def latency(hist: Any, captures: list[str]) -> list[Chart]:
    """Histograms of each latency metric on a log time axis, one chart per metric with at
    least 20 samples, one series per capture (bars; x in seconds)."""
    if not len(hist):
        return []
    totals = hist.groupby("metric")["n"].sum()
    out = []
    for metric in dict.fromkeys(hist["metric"]):
        if totals[metric] < _MIN_HIST_SAMPLES:
            continue
        sel = hist[hist.metric == metric]
        buckets = sorted(set(int(b) for b in sel["bucket"]))
        edges = 10.0 ** (np.asarray(buckets, dtype=float) / 5)
        series = []
        for j, cap in enumerate(captures):
            c = sel[sel.capture == cap].set_index("bucket")["n"]
            if len(c):
                series.append(
                    {
                        "label": cap,
                        "values": _values([c.get(b, np.nan) for b in buckets]),
                        "color": _PALETTE[j % len(_PALETTE)],
                    }
                )
        x = {"label": f"{metric} (seconds, log scale)", "values": _values(edges), "log": True}
        out.append(_chart(metric, None, x, "count", series, kind="bars", height=200))
    return out


def health(cap: Any, m: Any, resends: Any) -> Chart | None:
    """Duplicates, rejected frames, resends and incomplete messages per second over the capture;
    None when all are zero."""
    x, shade, bins, width, span = _time_axis(cap)
    series = []
    for col, color, label, table in (
        ("resends", "#9467bd", "resent data frames/s (same ack hash)", resends),
        ("duplicates", "#ff7f0e", "duplicate data frames/s", m),
        ("rejected", "#d62728", "rejected data frames/s", m),
        ("incomplete", "#8c564b", "incomplete messages/s (by first frame)", m),
    ):
        if len(table) and col in table and table[col].fillna(0).sum() > 0:
            series.append(
                {
                    "label": label,
                    "values": _step(_series(table.fillna({col: 0}), col, bins, width, span)[1]),
                    "color": color,
                }
            )
    return _chart("loss and health", str(cap.capture), x, "per second", series, shade, height=180) if series else None


def timeline(cap: Any, t: Any, control: Any, findings: Any, clients: dict[tuple[str, int], str]) -> Chart | None:
    """Per-session timeline: one lane per session and direction, a bar where the peer sent
    anything in a time bin (data, acks, heartbeats, control), and markers: Disconnected frames
    (on the sender's lane) and findings about the session (on both its lanes).

    Args:
        cap: a row of ``ReportData.captures`` (capture, t0 in epoch seconds, span_s, width_s).
        t: the capture's ``ReportData.traffic`` rows (session_id, direction, bin, frames).
        control: the capture's ``ReportData.control`` rows (session_id, at_s, src, kind_name).
        findings: the capture's findings rows (session_id, at_s, severity, kind), or None.
        clients: (capture, session_id) -> the session's client endpoint.

    Returns:
        A ``lanes`` chart (at most 16 lanes: the busiest sessions), or None without traffic.
    """
    if not len(t):
        return None
    x, shade, bins, width, span = _time_axis(cap)
    active = t[t.frames > 0]
    busiest = list(active.groupby("session_id")["frames"].sum().sort_values(ascending=False).index)
    sessions = [int(s) for s in busiest if int(s)][: _MAX_LANES // 2]
    lanes: list[str] = []
    series = []
    where: dict[tuple[int, str], int] = {}
    for sid in sorted(sessions, key=lambda s: float(active[active.session_id == s]["bin"].min())):
        for d in ("c2s", "s2c"):
            sel = active[(active.session_id == sid) & (active.direction == d)]
            values = np.full(bins + 1, np.nan)
            values[sel["bin"].to_numpy(dtype=int).clip(0, bins - 1)] = len(lanes)
            where[(sid, d)] = len(lanes)
            lanes.append(f"{hex_id(sid)[-6:]} {d}")
            series.append(
                {"label": f"{hex_id(sid)} {d}", "values": _values(values), "color": DIRECTION_COLORS[d], "width": 1}
            )
    markers = []
    cap_name = str(cap.capture)
    for r in control.itertuples() if len(control) else ():
        if r.kind_name != "disconnected" or not r.session_id:
            continue
        d = "c2s" if clients.get((cap_name, int(r.session_id))) == r.src else "s2c"
        if (int(r.session_id), d) in where:
            markers.append(
                {
                    "x": float(f"{r.at_s:.6g}"),
                    "lane": where[(int(r.session_id), d)],
                    "color": KIND_COLORS["disconnected"],
                    "label": "Disconnected",
                }
            )
    if findings is not None and len(findings):
        for r in findings.itertuples():
            if r.session_id is None or (isinstance(r.session_id, float) and math.isnan(r.session_id)):
                continue
            for d in ("c2s", "s2c"):
                lane = where.get((int(r.session_id), d))
                if lane is not None:
                    markers.append(
                        {
                            "x": float(f"{r.at_s:.6g}"),
                            "lane": lane,
                            "color": SEVERITY_COLORS.get(r.severity, "#555555"),
                            "label": str(r.kind),
                        }
                    )
    chart = _chart(
        "session timeline: when each peer sent anything (bars) and what happened (markers)",
        cap_name,
        x,
        "session, direction",
        series,
        shade,
        kind="lanes",
        height=130 + 28 * len(lanes),
    )
    chart["y"]["lanes"] = lanes
    chart["markers"] = markers
    return chart


_MAX_FLOW_ROWS = 60
_MAX_FLOW_ENDPOINTS = 8


def flow_rows(
    control: Any, heartbeats: Any, gaps: Any, clients: dict[tuple[str, int], str]
) -> list[tuple[float, str, str, str, str]]:
    """(at_s, src, dst, label, kind) rows of one capture's flow graph, heartbeats folded.

    Heartbeats of one direction of a session become one row "Heartbeat xN (until X s)" at the
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


def flow_svg(capture: str, rows: list[tuple[float, str, str, str, str]], server_eps: list[str]) -> str:
    """Wireshark-style flow graph as inline SVG: endpoints as columns (servers first, at most
    8), one arrow per row (at most 60), times on the left; "" without rows."""
    if not rows:
        return ""
    every = list(dict.fromkeys([*server_eps] + [e for r in rows for e in (r[1], r[2])]))
    eps = every[:_MAX_FLOW_ENDPOINTS]
    kept = [r for r in rows if r[1] in eps and r[2] in eps]
    shown = kept[:_MAX_FLOW_ROWS]
    col, left, top, row_h = 190, 110, 40, 24
    width = left + col * len(eps)
    height = top + row_h * len(shown) + 10
    x = {e: left + col * i + col // 2 for i, e in enumerate(eps)}
    e = html.escape
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        "font-family='system-ui,sans-serif' font-size='11'>",
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='7' markerHeight='7' "
        "orient='auto-start-reverse'><path d='M0,0L10,5L0,10z' fill='context-stroke'/></marker></defs>",
    ]
    for ep, cx in x.items():
        out.append(f"<line x1='{cx}' y1='{top - 10}' x2='{cx}' y2='{height}' stroke='#999'/>")
        out.append(f"<text x='{cx}' y='{top - 16}' text-anchor='middle' font-weight='bold'>{e(ep)}</text>")
    for k, (at, src, dst, label, kind) in enumerate(shown):
        y = top + row_h * k + 14
        color = KIND_COLORS.get(kind, "#d62728" if kind == "gap" else "#555555")
        x1, x2 = x[src], x[dst]
        out.append(f"<text x='{left - 8}' y='{y + 4}' text-anchor='end' font-family='monospace'>{at:.6f}</text>")
        out.append(
            f"<line x1='{x1}' y1='{y}' x2='{x2 - 4 if x2 > x1 else x2 + 4}' y2='{y}' stroke='{color}' "
            "stroke-width='1.4' marker-end='url(#arrow)'/>"
        )
        out.append(f"<text x='{(x1 + x2) / 2}' y='{y - 4}' text-anchor='middle' fill='{color}'>{e(label)}</text>")
    if len(rows) > len(shown) or len(every) > len(eps):
        note = f"{capture}: the first {len(shown)} of {len(rows)} rows"
        note += f", {len(eps)} of {len(every)} endpoints" if len(every) > len(eps) else ""
        out.append(f"<text x='4' y='12' fill='#555'>{e(note)}</text>")
    out.append("</svg>")
    return "".join(out)


def stream_rates(cap: Any, rates: Any, what: str) -> list[Chart]:
    """Records/s and payload bytes/s per connection and direction on the capture's time axis
    (two charts, group ``cap.capture``); [] without rows."""
    if not len(rates):
        return []
    x, shade, bins, width, span = _time_axis(cap, "record")
    peak = 1.0
    groups = list(rates.groupby(["client", "server", "direction"]))
    for _, sel in groups:
        peak = max(peak, float(_series(sel, "bytes", bins, width, span)[1].max()))
    scale, unit = pick_scale(peak)
    recs, byts = [], []
    for i, ((client, _server, d), sel) in enumerate(groups):
        color = _PALETTE[(i // 2) % len(_PALETTE)]
        recs.append(
            {
                "label": f"{client} {d}",
                "values": _step(_series(sel, "records", bins, width, span)[1]),
                "color": color,
                "dash": DIRECTION_DASH[d],
            }
        )
        byts.append(
            {
                "label": f"{client} {d}",
                "values": _step(_series(sel, "bytes", bins, width, span)[1] / scale),
                "color": color,
                "dash": DIRECTION_DASH[d],
            }
        )
    group = str(cap.capture)
    return [
        _chart(f"{what}/s per connection (c2s solid, s2c dashed)", group, x, f"{what}/s", recs, shade),
        _chart("payload bytes/s per connection", group, x, f"payload {unit}", byts, shade, height=180),
    ]


def in_flight(cap: Any, events: Any) -> Chart | None:
    """BQSP requests awaiting their response over time (a step per request / response)."""
    if not len(events):
        return None
    at = events["at_s"].to_numpy(dtype=float)
    level = np.cumsum(events["d"].to_numpy(dtype=float))
    span = max(float(cap.span_s), 1e-3)
    x = {"label": "seconds since the first record", "values": _values(np.r_[0.0, at, span]), "log": False}
    series = [{"label": "requests in flight", "values": _values(np.r_[0.0, level, level[-1:]]), "color": "#1f77b4"}]
    return _chart("requests in flight", str(cap.capture), x, "requests", series, height=180)
