"""The report's HTML page: one self-contained file. Its charts are data embedded in the page
(JSON) and drawn by the browser with the shipped uPlot (``static/``): zoom, values on hover, one
time axis per capture shared by its panels. Nothing is fetched: it opens offline."""

from __future__ import annotations

import html
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..findings import SEVERITIES
from . import charts, expert
from .aggregate import GAP_FACTOR, HEARTBEAT_INTERVAL_S, ReportData
from .units import count, duration, id_cell, rate, size

__all__ = ["render", "write_report", "STATIC"]

#: The browser side shipped with the package: uPlot (MIT, ``uPlot.LICENSE``) and report.js.
STATIC = Path(__file__).resolve().parent / "static"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1380px;margin:0 auto;padding:16px 10px 40px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:2px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}p.lead{color:#444;margin:0 0 10px}.note{color:#8a5300}
nav a{margin-right:14px}code,.id{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0 12px;background:#fff;max-width:100%}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#eef1f4;font-weight:600;text-align:center;white-space:normal;vertical-align:bottom}td.l{text-align:left}
tr:nth-child(even) td{background:#f6f8fa}.bad{color:#b42318;font-weight:600}.ok{color:#1a7f37}
.chart{background:#fff;border:1px solid #d0d7de;border-radius:4px;padding:4px;margin:6px 0 12px;overflow-x:auto;min-height:40px}
.chart svg{max-width:100%;height:auto;display:block}.u-title{font-size:13px!important;font-weight:600!important}
.u-legend{font-size:11.5px}.u-legend .u-marker{width:1.4em}details{margin:4px 0}summary{cursor:pointer}
.sev-error{color:#b42318;font-weight:600}.sev-warning{color:#b54708;font-weight:600}.sev-note{color:#175cd3}
tr:target td{background:#fff3bf!important}
.cards{display:flex;gap:10px;flex-wrap:wrap;margin:8px 0}.card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:6px 14px}
.card b{display:block;font-size:20px}.card span{color:#555;font-size:12px}
"""

Column = tuple[str, str, Callable[[Any], str], bool]  # header, key, formatter, left-aligned


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _num(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else count(v)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], empty: str = "none") -> str:
    if not rows:
        return f"<p class='ok'>{_e(empty)}</p>"
    head = "".join(f"<th>{_e(h)}</th>" for h, _, _, _ in columns)
    body = "".join(
        (f"<tr id='{_e(r['_id'])}'>" if r.get("_id") else "<tr>")
        + "".join(f"<td{' class=l' if left else ''}>{fmt(r.get(key))}</td>" for _, key, fmt, left in columns)
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class _Charts:
    """The page's chart specs: each :meth:`add` gives the placeholder the browser draws into."""

    def __init__(self) -> None:
        self.specs: list[charts.Chart] = []

    def add(self, spec: charts.Chart | None) -> str:
        if not spec:
            return ""
        spec = {**spec, "id": f"chart-{len(self.specs)}"}
        self.specs.append(spec)
        return f"<div class='chart' id='{spec['id']}'></div>"

    def add_all(self, specs: Sequence[charts.Chart]) -> str:
        return "".join(self.add(s) for s in specs)

    def scripts(self) -> str:
        """The embedded data, uPlot and report.js (``</`` escaped inside the JSON)."""
        payload = json.dumps({"charts": self.specs}, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
        return (
            f"<script type='application/json' id='nbmq-report-data'>{payload}</script>"
            f"<script>{(STATIC / 'uPlot.iife.min.js').read_text(encoding='utf-8')}</script>"
            f"<script>{(STATIC / 'report.js').read_text(encoding='utf-8')}</script>"
        )


def _svg(svg: str) -> str:
    return f"<div class='chart'>{svg}</div>" if svg else ""


def _pair(a: Any, b: Any, fmt: Callable[[Any], str] = _num) -> str:
    return f"{fmt(a)} / {fmt(b)}"


def _cards(items: Sequence[tuple[str, str]]) -> str:
    return (
        "<div class='cards'>"
        + "".join(f"<div class='card'><b>{_e(v)}</b><span>{_e(k)}</span></div>" for k, v in items)
        + "</div>"
    )


def _sessions_table(rows: Any) -> str:
    out = []
    for r in rows.to_dict("records"):
        dur = r.get("duration_s") or 0.0
        out.append(
            {
                "_id": expert.session_anchor(r["capture"], r["session_id"]),
                "session": id_cell(r["session_id"]),
                "client": _e(r["client"]),
                "server": _e(r["server"]),
                "duration": duration(dur),
                "frames": _pair(r["frames_c2s"], r["frames_s2c"]),
                "data": _pair(r["data_c2s"], r["data_s2c"]),
                "acks": _pair(r["acks_c2s"], r["acks_s2c"]),
                "heartbeats": _pair(r["heartbeats_c2s"], r["heartbeats_s2c"]),
                "control": f"{_num(r['connects'])} / {_num(r['connecteds'])} / {_num((r['disconnected_c2s'] or 0) + (r['disconnected_s2c'] or 0))}",
                "bytes": _pair(r["bytes_c2s"], r["bytes_s2c"], size),
                "messages": _pair(r["messages_complete_c2s"], r["messages_complete_s2c"]),
                "incomplete": _incomplete_cell(r),
                "throughput": rate(r["throughput_bytes_per_s"]) if r.get("throughput_bytes_per_s") is not None else "",
            }
        )
    ident: Callable[[Any], str] = lambda v: v  # noqa: E731 (cells above are already HTML)
    cols: list[Column] = [
        ("session", "session", ident, True),
        ("client", "client", ident, True),
        ("server", "server", ident, True),
        ("duration", "duration", ident, False),
        ("frames c2s / s2c", "frames", ident, False),
        ("data", "data", ident, False),
        ("acks", "acks", ident, False),
        ("heartbeats", "heartbeats", ident, False),
        ("connect / connected / disconn.", "control", ident, False),
        ("UDP bytes c2s / s2c", "bytes", ident, False),
        ("messages c2s / s2c", "messages", ident, False),
        ("incomplete", "incomplete", ident, False),
        ("throughput", "throughput", ident, False),
    ]
    return _table(out, cols, "no sessions")


_MAX_SESSION_ROWS = 40


def _busiest(sess: Any) -> Any:
    """At most 40 sessions, the most frames first, then in time order."""
    if len(sess) <= _MAX_SESSION_ROWS:
        return sess
    frames = sess["frames_c2s"].fillna(0) + sess["frames_s2c"].fillna(0)
    return sess.loc[frames.sort_values(ascending=False).index[:_MAX_SESSION_ROWS]].sort_values("first_ts")


def _incomplete_cell(r: dict[str, Any]) -> str:
    n = (r.get("messages_incomplete_c2s") or 0) + (r.get("messages_incomplete_s2c") or 0)
    return f"<span class=bad>{n:,}</span>" if n else "0"


def _latency_table(lat: Any) -> str:
    rows = lat.sort_values(["metric", "capture"]).to_dict("records")
    cols: list[Column] = [
        ("metric", "metric", _e, True),
        ("capture", "capture", _e, True),
        ("samples", "n", _num, False),
        ("p50", "p50", duration, False),
        ("p90", "p90", duration, False),
        ("p99", "p99", duration, False),
        ("max", "max", duration, False),
    ]
    return _table(rows, cols, "no latency samples (no handshakes, acks or complete messages)")


def _round_trip_table(trips: Any) -> str:
    rows = [
        {**r, "session": id_cell(r["session_id"])}
        for r in trips.sort_values(["capture", "session_id", "direction"], kind="stable").to_dict("records")
    ]
    cols: list[Column] = [
        ("capture", "capture", _e, True),
        ("session", "session", lambda v: v, True),
        ("data frames", "direction", _e, False),
        ("matched acks", "acks", _num, False),
        ("min", "min_s", duration, False),
        ("p50", "p50_s", duration, False),
        ("p99", "p99_s", duration, False),
    ]
    return _table(rows, cols, "no data frame matched to its Ack")


def _timing(summary: dict[str, Any], started: float | None) -> tuple[float, str]:
    """(the run's seconds, every step included, and a line naming each step's seconds)."""
    steps = {k: float(v) for k, v in (summary.get("steps") or {}).items()}
    if started is not None:
        steps["report"] = time.perf_counter() - started
    total = sum(steps.values()) if steps else float(summary.get("seconds", 0.0))
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items() if seconds >= 0.05)
    return total, parts


def render(summary: dict[str, Any], data: ReportData, findings: Any = None, started: float | None = None) -> str:
    """The report page (a complete HTML document) for a pipeline summary and its aggregates.

    Args:
        summary: the pipeline summary (``captures`` rows, ``totals``, ``steps``: step -> wall
            seconds of the steps before the report, ``master``, optional ``streams``).
        data: :func:`nbmq.spark.report.aggregate.collect`'s result.
        findings: :func:`nbmq.spark.report.expert.load`'s frame (the ``findings/`` table), or
            None when the run wrote none.
        started: ``time.perf_counter()`` when the report step began: its seconds so far join
            the run's timing, so the header counts every step.

    Returns:
        The HTML text (UTF-8 when written), one self-contained file: inline CSS, the chart
        data as JSON, uPlot and the drawing script; nothing is fetched.
    """
    import pandas as pd

    figures = _Charts()
    caps = data.captures
    nbmq_caps = caps[caps.protocol == "nbmq"].sort_values("capture")
    totals = summary.get("totals", {})
    if findings is not None:
        findings = expert.relative_times(findings, caps)
    shown: set[tuple[str, int]] = set()
    p: list[str] = []

    # Captures overview: UDP counts from the summary, stream counts from the stream tables.
    spans = {r.capture: r for r in caps.itertuples()}
    conns: dict[str, int] = {}
    records: dict[str, int] = {}
    for st in data.streams.values():
        if "connections" in st:
            for c, n in st["connections"].groupby("capture").size().items():
                conns[c] = int(n)
            for c, n in st["connections"].groupby("capture")[["c2s", "s2c"]].sum().sum(axis=1).items():
                records[c] = int(n)
    rows = []
    for r in summary.get("captures", []):
        s = spans.get(r["capture"])
        rows.append(
            {
                **r,
                "protocol": s.protocol if s is not None else "-",
                "span": duration(s.span_s) if s is not None else "",
                "connections": conns.get(r["capture"], 0),
                "records": r.get("datagrams", 0) + records.get(r["capture"], 0),
            }
        )
    bad = lambda v: f"<span class=bad>{_num(v)}</span>" if v else "0"  # noqa: E731
    p += [
        "<h2 id=captures>Captures</h2>",
        _table(
            rows,
            [
                ("capture", "capture", _e, True),
                ("protocol", "protocol", _e, True),
                ("span", "span", _e, False),
                ("UDP datagrams / TCP records", "records", _num, False),
                ("data frames", "data_frames", _num, False),
                ("control frames", "control_frames", _num, False),
                ("messages complete", "messages_complete", _num, False),
                ("incomplete", "messages_incomplete", bad, False),
                ("duplicates", "duplicates", bad, False),
                ("rejected", "rejected", bad, False),
                ("malformed", "error_rows", bad, False),
                ("unreadable records", "capture_errors", bad, False),
                ("sessions", "sessions", _num, False),
                ("TCP connections", "connections", _num, False),
            ],
        ),
    ]

    p += [
        "<h2 id=latency>Latency</h2>",
        "<p>Handshake: Connect &rarr; Connected &rarr; first Heartbeat, per session. SafeDealer ack: a data "
        "frame &rarr; the Ack carrying its FNV-1a 64 hash (first send to first Ack). Assembly: a complete "
        "message's first frame to its last.</p>",
        _latency_table(data.latency),
        figures.add_all(charts.latency(data.histograms, list(nbmq_caps["capture"]))),
    ]
    if len(data.round_trips):
        p += [
            "<h3 id=round-trips>SafeDealer round trips per peer</h3>",
            "<p>Per session and direction of the data frames: from a data frame's first copy to the first Ack "
            "carrying its hash, capture point to capture point (a capture on the sender's host gives the full "
            "round trip; one on the receiver's, its turnaround).</p>",
            _round_trip_table(data.round_trips),
        ]

    clients = (
        {(r["capture"], int(r["session_id"])): r["client"] for r in data.sessions.to_dict("records")}
        if len(data.sessions)
        else {}
    )
    for cap in nbmq_caps.itertuples():
        c = cap.capture
        m = data.messages[data.messages.capture == c]
        t = data.traffic[data.traffic.capture == c]
        control = data.control[data.control.capture == c]
        sess = data.sessions[data.sessions.capture == c] if len(data.sessions) else data.sessions
        listed = _busiest(sess)
        shown |= {(c, int(s)) for s in listed["session_id"]} if len(listed) else set()
        found = findings[findings.capture == c] if findings is not None else None
        p += [
            f"<h2 id='cap-{_e(c)}'>{_e(c)}</h2>",
            f"<p>{duration(cap.span_s)} from the first to the last frame; {len(sess)} session(s). Drag across a "
            "chart to zoom all of this capture's charts, double-click to zoom out; click a legend entry to hide "
            "its series.</p>",
            "<h3>Sessions</h3>",
            _sessions_table(listed),
            f"<p>The {_MAX_SESSION_ROWS} busiest of {len(sess):,} sessions; all are in <code>sessions/</code>.</p>"
            if len(sess) > _MAX_SESSION_ROWS
            else "",
            "<h3>Session timeline</h3>",
            "<p>A bar where a peer sent anything in a time bin; a gap in its bars is silence. Markers: "
            "<span style='color:#8c564b'>&#9660; Disconnected</span> on its sender's lane; findings on both lanes "
            "of their session, coloured by severity (<span class=sev-error>error</span>, "
            "<span class=sev-warning>warning</span>, <span class=sev-note>note</span>; listed under "
            "<a href='#expert'>Expert info</a>).</p>",
            figures.add(charts.timeline(cap, t, control, found, clients)) or "<p>no traffic</p>",
            "<h3>Traffic</h3>",
            figures.add_all(charts.traffic(cap, t, m, _busiest_ids(t))),
            "<h3>Loss and health</h3>",
            figures.add(charts.health(cap, m, data.resends[data.resends.capture == c]))
            or "<p class=ok>no duplicates, resends, rejected frames or incomplete messages</p>",
            _findings_counts(found),
            "<h3>Control-frame flow</h3>",
            "<p>Connect, Connected and Disconnected as sent, in time order (seconds since the first frame); "
            "heartbeats folded into one row per direction, plus a row for each gap over "
            f"{GAP_FACTOR:g} &times; the {HEARTBEAT_INTERVAL_S:g} s interval.</p>",
        ]
        server_eps = list(dict.fromkeys(sess["server"])) if len(sess) else []
        flow = charts.flow_rows(
            control, data.heartbeats[data.heartbeats.capture == c], data.gaps[data.gaps.capture == c], clients
        )
        p.append(_svg(charts.flow_svg(c, flow, server_eps)) or "<p>no control frames</p>")
        p += [
            "<p>Malformed datagrams by reason:</p>",
            _table(
                data.errors[data.errors.capture == c].to_dict("records"),
                [("reason", "reason", _e, True), ("rows", "rows", _num, False)],
                "no malformed datagrams",
            ),
        ]

    for proto, st in data.streams.items():
        p.append(_streams_section(proto, st, caps[caps.protocol == proto], figures))
    p.append(expert.section(findings, shown))

    seconds, steps = _timing(summary, started)
    counts = findings.groupby("severity").size() if findings is not None and len(findings) else pd.Series(dtype=int)
    head = [
        "<!doctype html><html lang=en><head><meta charset='utf-8'>",
        "<meta name=viewport content='width=device-width,initial-scale=1'><title>nbmq traffic report</title>",
        f"<style>{_CSS}{(STATIC / 'uPlot.min.css').read_text(encoding='utf-8')}</style></head><body><main>",
        "<h1>nbmq traffic report</h1>",
        f"<p class=lead>{len(summary.get('captures', []))} capture(s), pipeline run in {seconds:.1f} s "
        f"on <code>{_e(summary.get('master'))}</code>{f' ({_e(steps)})' if steps else ''}. Ids are hex u64; c2s is "
        "client to server (the side that sent Connect); rates use the capture's own time axis, shared by all its "
        "sessions.</p>",
    ]
    head += [f"<p class=note>{_e(n)}</p>" for n in data.notes]
    head.append(
        _cards(
            [
                ("UDP datagrams", count(totals.get("datagrams", 0))),
                ("complete messages", count(totals.get("messages_complete", 0))),
                ("incomplete messages", count(totals.get("messages_incomplete", 0))),
                ("sessions", count(totals.get("sessions", 0))),
                ("malformed datagrams", count(totals.get("error_rows", 0))),
                ("duplicates", count(totals.get("duplicates", 0))),
            ]
            + [  # secure mode: headers shown, content encrypted (docs/secure.md)
                (label, count(totals[key]))
                for label, key in (
                    ("secure sessions", "secure_sessions"),
                    ("sealed frames (content encrypted)", "sealed_frames"),
                )
                if totals.get(key)
            ]
            + [
                (f"{k} {'packets' if k == 'bqsp' else 'messages'}", count(v["rows"] - v["error_rows"]))
                for k, v in summary.get("streams", {}).items()
            ]
            + [(f"{s} findings", count(counts.get(s, 0))) for s in SEVERITIES if findings is not None]
        )
    )
    nav = ["<a href='#captures'>Captures</a>", "<a href='#latency'>Latency</a>", "<a href='#expert'>Expert info</a>"]
    nav += [f"<a href='#cap-{_e(c)}'>{_e(c)}</a>" for c in nbmq_caps["capture"]]
    nav += [f"<a href='#{k}'>{k}</a>" for k in data.streams]
    head.append("<nav>" + "".join(nav) + "</nav>")
    return "\n".join(head + p + ["</main>", figures.scripts(), "</body></html>"])


def _busiest_ids(t: Any) -> list[int]:
    """Session ids of a capture's traffic rows, the most frames first (session 0 left out)."""
    if not len(t):
        return []
    return [int(s) for s in t.groupby("session_id")["frames"].sum().sort_values(ascending=False).index if int(s)]


def _findings_counts(found: Any) -> str:
    """One line counting a capture's findings by kind, linked to the Expert info lists."""
    if found is None:
        return ""
    if not len(found):
        return "<p class=ok>No findings for this capture.</p>"
    parts = [f"<a href='#kind-{_e(k)}'>{_e(k)}</a> {count(n)}" for k, n in found.groupby("kind").size().items()]
    return "<p>Findings: " + ", ".join(parts) + ".</p>"


def _streams_section(proto: str, st: dict[str, Any], caps: Any, figures: _Charts) -> str:
    what = "packets" if proto == "bqsp" else "messages"
    title = "BQSP over TCP" if proto == "bqsp" else "rqueue over TCP"
    p = [f"<h2 id={proto}>{title}</h2>"]
    conn = st.get("connections")
    if conn is not None and len(conn):
        rows = conn.to_dict("records")
        for r in rows:
            r["duration"] = duration((r["last"] or 0) - (r["first"] or 0))
        p += [
            "<h3>Connections</h3>",
            _table(
                rows,
                [
                    ("capture", "capture", _e, True),
                    ("client", "client", _e, True),
                    ("server", "server", _e, True),
                    (f"{what} c2s", "c2s", _num, False),
                    (f"{what} s2c", "s2c", _num, False),
                    ("payload", "bytes", size, False),
                    ("errors", "errors", _num, False),
                    ("duration", "duration", _e, False),
                ],
            ),
        ]
    for cap in caps.sort_values("capture").itertuples():
        rates = st["rates"][st["rates"].capture == cap.capture]
        p += [f"<h3>{_e(cap.capture)}: {what} per second</h3>", figures.add_all(charts.stream_rates(cap, rates, what))]
        if proto == "bqsp" and "in_flight" in st:
            p += [
                "<h3>Requests in flight</h3>",
                figures.add(charts.in_flight(cap, st["in_flight"][st["in_flight"].capture == cap.capture])),
            ]
    sizes = st.get("sizes")
    if sizes is not None and len(sizes):
        rows = sizes.sort_values(["capture", "direction", "bucket"]).to_dict("records")
        p += [
            f"<h3>{what.capitalize()} sizes (payload, log2 buckets)</h3>",
            _table(
                rows,
                [
                    ("capture", "capture", _e, True),
                    ("direction", "direction", _e, True),
                    ("size from", "bucket", lambda b: "0 B" if b < 0 else size(2**b), False),
                    (what, "count", _num, False),
                ],
            ),
        ]
    if proto == "rqueue" and "topics" in st:
        rows = st["topics"].to_dict("records")
        for r in rows:
            r["fanout"] = f"{r['delivered'] / r['published']:.2f}" if r["published"] else ""
        p += [
            "<h3>Topics (fan-out = notifications delivered / published)</h3>",
            _table(
                rows,
                [
                    ("capture", "capture", _e, True),
                    ("topic", "topic", _e, True),
                    ("subscribers", "subscribers", _num, False),
                    ("SUBSCRIBE", "subscribes", _num, False),
                    ("REMOVE", "removes", _num, False),
                    ("published (c2s)", "published", _num, False),
                    ("delivered (s2c)", "delivered", _num, False),
                    ("fan-out", "fanout", _e, False),
                ],
            ),
            "<h3>Message types</h3>",
            _table(
                st["types"].to_dict("records"),
                [
                    ("capture", "capture", _e, True),
                    ("direction", "direction", _e, True),
                    ("type", "message_type_name", _e, True),
                    ("messages", "count", _num, False),
                ],
            ),
        ]
    if proto == "bqsp" and "queues" in st:
        rows = st["queues"].to_dict("records")
        for r in rows:
            q = r.pop("q", None)
            r["p50"], r["p90"], r["p99"] = (list(q) + [None] * 3)[:3] if q is not None else (None, None, None)
            r["open"] = (r["requests"] or 0) - (r["responses"] or 0)
        p += [
            "<h3>Queues: request &rarr; response latency</h3>",
            "<p>Request n on a queue (c2s) is matched with response n on that queue (s2c).</p>",
            _table(
                rows,
                [
                    ("capture", "capture", _e, True),
                    ("client", "client", _e, True),
                    ("queue", "queue_number", _num, False),
                    ("requests", "requests", _num, False),
                    ("responses", "responses", _num, False),
                    ("unanswered", "open", lambda v: f"<span class=bad>{v:,}</span>" if v else "0", False),
                    ("p50", "p50", duration, False),
                    ("p90", "p90", duration, False),
                    ("p99", "p99", duration, False),
                    ("max", "max", duration, False),
                ],
            ),
        ]
    errors = st.get("errors")
    p += [
        f"<h3>{proto} error rows</h3>",
        _table(
            errors.to_dict("records") if errors is not None else [],
            [("capture", "capture", _e, True), ("reason", "reason", _e, True), ("rows", "count", _num, False)],
            "no error rows",
        ),
    ]
    return "\n".join(p)


def write_report(
    path: str | Path,
    summary: dict[str, Any],
    data: ReportData,
    started: float | None = None,
    findings: str | None = None,
) -> Path:
    """Render the report and write it (UTF-8).

    Args:
        path: the HTML file to write (replaced).
        summary: the pipeline summary (see :func:`render`).
        data: :func:`nbmq.spark.report.aggregate.collect`'s result.
        started: ``time.perf_counter()`` when the report step began (see :func:`render`).
        findings: the ``findings/`` table whose rows fill the Expert info section and the
            timelines' markers (default: ``summary["tables"]["findings"]``, a finished run's).

    Returns:
        ``path`` as a Path. Raises OSError when it cannot be written.
    """
    path = Path(path)
    table = expert.load(findings if findings is not None else summary.get("tables", {}).get("findings"))
    path.write_text(render(summary, data, table, started), encoding="utf-8")
    return path
