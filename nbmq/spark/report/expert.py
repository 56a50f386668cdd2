"""The report's Expert Info: the pipeline's ``findings/`` table grouped by severity and kind, as
Wireshark's Expert Info groups a capture's notes, each row with its frame number and ids.

The findings table (written by every ``nbmq pipeline`` run, see docs/findings.md) has the columns
``capture, time, frame, session_id, message_id, severity, kind, detail``; this module only reads
and lays it out, the rules that make it live with the pipeline.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from ..findings import SEVERITIES
from .units import count, hex_id, id_cell

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["load", "relative_times", "section", "session_anchor"]

#: Rows listed per (severity, kind); the rest are counted and stay in findings/.
MAX_ROWS_PER_KIND = 50


def load(path: str | None) -> pd.DataFrame | None:
    """The findings table at ``path`` (:func:`nbmq.spark.findings.read_findings`), with ``time``
    as float epoch seconds and ids as Python ints.

    Args:
        path: where the pipeline wrote ``findings/``; None when it wrote none.

    Returns:
        The frame, or None when ``path`` is None or holds no findings table (an output written
        before there was one).
    """
    if path is None:
        return None
    import pandas as pd

    from ..findings import read_findings

    try:
        frame = read_findings(path)
    except FileNotFoundError:
        return None
    frame["time"] = (pd.to_datetime(frame["time"], utc=True) - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    for column in ("session_id", "message_id", "frame"):  # object: a NaN would stand for a missing id
        frame[column] = pd.Series(
            [None if v is None or v is pd.NA or v != v else int(v) for v in frame[column]],
            index=frame.index,
            dtype=object,
        )
    return frame


def relative_times(findings: pd.DataFrame, captures: pd.DataFrame) -> pd.DataFrame:
    """``findings`` with ``at_s``: seconds since its capture's first frame (``captures.t0``)."""
    t0 = dict(zip(captures["capture"], captures["t0"].astype(float)))
    out = findings.copy()
    out["at_s"] = [t - t0.get(c, t) if t == t else float("nan") for c, t in zip(out["capture"], out["time"])]
    return out


def session_anchor(capture: str, session_id: Any) -> str:
    """The id of a session's row in the report (``#`` links point there)."""
    return "sess-" + "".join(ch if ch.isalnum() else "-" for ch in str(capture)) + "-" + hex_id(session_id)


def _session_cell(capture: str, session_id: Any, shown: set[tuple[str, int]]) -> str:
    if session_id is None:
        return ""
    label = id_cell(session_id)
    if (capture, int(session_id)) in shown:
        return f"<a href='#{session_anchor(capture, session_id)}'>{label}</a>"
    return label


def section(findings: pd.DataFrame | None, shown_sessions: set[tuple[str, int]]) -> str:
    """The Expert Info section's HTML.

    Args:
        findings: :func:`relative_times`' frame, or None when the run wrote no findings table.
        shown_sessions: (capture, session_id) of the sessions whose rows the page shows; their
            ids link there.

    Returns:
        A summary table (severity, kind, findings, captures) and, per severity and kind, a
        folded list of its first 50 findings: capture, time, frame, session, message, detail.
    """
    e = html.escape
    out = ["<h2 id=expert>Expert info</h2>"]
    if findings is None:
        return out[0] + "<p class=note>No findings table in this output (findings/ is missing).</p>"
    if not len(findings):
        return (
            out[0]
            + "<p class=ok>No findings: every peer stayed alive, every message is complete and every frame decoded.</p>"
        )
    order = {s: i for i, s in enumerate(SEVERITIES)}
    groups = sorted(findings.groupby(["severity", "kind"], sort=False), key=lambda g: (order.get(g[0][0], 9), g[0][1]))
    out.append(
        "<p>The pipeline's <code>findings/</code> table, grouped as Wireshark's Expert Info: "
        "each kind is defined in docs/findings.md. Times are seconds since the capture's first frame; "
        "frame numbers count from 1 as Wireshark does.</p>"
    )
    rows = []
    for (severity, kind), sel in groups:
        rows.append(
            f"<tr><td class='l sev-{e(severity)}'>{e(severity)}</td><td class=l><a href='#kind-{e(kind)}'>{e(kind)}</a></td>"
            f"<td>{count(len(sel))}</td><td class=l>{e(', '.join(sorted(set(sel['capture']))))}</td></tr>"
        )
    out.append(
        "<table><thead><tr><th>severity</th><th>kind</th><th>findings</th><th>captures</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    for (severity, kind), sel in groups:
        sel = sel.sort_values(["capture", "time"], na_position="first")
        body = []
        for r in sel.head(MAX_ROWS_PER_KIND).itertuples():
            at = "" if r.at_s != r.at_s else f"{r.at_s:.6f}"
            body.append(
                f"<tr><td class=l>{e(r.capture)}</td><td>{at}</td><td>{'' if r.frame is None else count(r.frame)}</td>"
                f"<td class=l>{_session_cell(r.capture, r.session_id, shown_sessions)}</td>"
                f"<td class=l>{id_cell(r.message_id)}</td><td class=l>{e(r.detail)}</td></tr>"
            )
        more = f" (the first {MAX_ROWS_PER_KIND}; all are in findings/)" if len(sel) > MAX_ROWS_PER_KIND else ""
        out.append(
            f"<details id='kind-{e(kind)}'{' open' if severity == 'error' else ''}><summary><span class='sev-{e(severity)}'>"
            f"{e(severity)}</span> {e(kind)}: {count(len(sel))}{more}</summary>"
            "<table><thead><tr><th>capture</th><th>at (s)</th><th>frame</th><th>session</th><th>message</th><th>detail</th></tr>"
            f"</thead><tbody>{''.join(body)}</tbody></table></details>"
        )
    return "\n".join(out)
