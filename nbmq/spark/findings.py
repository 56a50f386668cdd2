"""The findings table: the pipeline's diagnosis, one row per thing an engineer should look at.

Every ``nbmq pipeline`` run writes ``findings/`` (Parquet, :data:`FINDINGS_COLUMNS`) beside the
frames, messages and sessions tables; ``summary.json`` counts it per severity and kind, and the
report reads it (:func:`read_findings`). The kinds and their rules are defined for users in
``docs/findings.md``; in short:

==========================  ========  =====================================================
kind                        severity  one row per
==========================  ========  =====================================================
peer_silent                 error     silence of a peer over 3 heartbeat intervals, no Disconnected
heartbeat_gap               warning   gap between a peer's signs of life over 1.5 intervals
peer_disconnected           note      Disconnected frame
message_lost_frames         error     incomplete message last seen well before the capture's end
message_in_flight_at_end    note      incomplete message last seen near the capture's end
message_suspect             error     message with a frame from a record next to capture damage
capture_damage              error     damaged span of a capture file (a framing error)
malformed_frame             error     error row of ``frames/`` (a datagram that does not decode)
resend                      note      message with repeated chunks in a session that carries acks
duplicate                   note      message with repeated chunks in a session without acks
==========================  ========  =====================================================

The rules are pure functions over numpy / pandas (:func:`liveness_gaps`, :func:`silences`,
:func:`estimate_interval`, :func:`liveness_findings`, :func:`message_findings`,
:func:`damage_spans`), so a live monitor can apply the same ones; :func:`write_findings` is
the Spark step that feeds them from ``frames/`` and ``messages/`` at any size. The messages
with something to say (incomplete or repeated) are collected first; then one pass over the
frames (``mapInArrow``, vectorised per partition, no per-row Python) yields each peer's busy
spans, its Disconnected and Ack counts, heartbeat-interval and round-trip samples, each
capture's end and the first frame number of each collected message (matched by a hash of its
key); error and Disconnected rows are filtered by Spark (Parquet statistics skip clean row
groups). Frames next to capture damage are looked up by a join only when there is damage.

Times are int64 nanoseconds since the epoch inside the rules (the frames table's ``ts_ns``)
and seconds in the details.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..options import OPTION_SPECS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "KINDS",
    "SEVERITIES",
    "FINDINGS_COLUMNS",
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "GAP_FACTOR",
    "SILENCE_FACTOR",
    "MIN_INTERVAL_S",
    "liveness_gaps",
    "silences",
    "estimate_interval",
    "in_flight_window",
    "liveness_findings",
    "message_findings",
    "damage_spans",
    "findings_frame",
    "write_findings",
    "read_findings",
]

#: Every kind and its severity.
KINDS: dict[str, str] = {
    "peer_silent": "error",
    "peer_disconnected": "note",
    "heartbeat_gap": "warning",
    "message_lost_frames": "error",
    "message_in_flight_at_end": "note",
    "message_suspect": "error",
    "capture_damage": "error",
    "malformed_frame": "error",
    "resend": "note",
    "duplicate": "note",
}
SEVERITIES = ("error", "warning", "note")

#: Columns of the table, in order: (name, Spark SQL type).
FINDINGS_COLUMNS: list[tuple[str, str]] = [
    ("capture", "string"),
    ("time", "timestamp"),  # microseconds, UTC
    ("frame", "bigint"),  # 1-based frame number in its capture, or null
    ("session_id", "decimal(20,0)"),
    ("message_id", "decimal(20,0)"),
    ("severity", "string"),
    ("kind", "string"),
    ("detail", "string"),
]

#: The reference's ``peer_heartbeat_ivl`` default, seconds: used when a capture's heartbeats
#: give no estimate.
DEFAULT_HEARTBEAT_INTERVAL_S: float = float(OPTION_SPECS["peer_heartbeat_ivl"].default)
#: A gap between signs of life longer than this many intervals is a ``heartbeat_gap`` (one
#: heartbeat missed, with room for a late tick).
GAP_FACTOR = 1.5
#: A gap longer than this many intervals is a ``peer_silent``: two heartbeats in a row missed
#: and a third late.
SILENCE_FACTOR = 3.0
#: Smallest heartbeat interval estimated, seconds; the frames pass keeps gaps over
#: ``GAP_FACTOR`` times this only, so its output stays small on busy captures.
MIN_INTERVAL_S = 0.05

_NS = 1_000_000_000
_FLOOR_NS = int(GAP_FACTOR * MIN_INTERVAL_S * _NS)
_HEARTBEAT, _DISCONNECTED, _ACK = 4, 3, 5
_SEP = "\x1f"  # between capture, session id and sender in the frames pass's peer key


# -- liveness ----------------------------------------------------------------------------------


def liveness_gaps(
    starts_ns: np.ndarray, ends_ns: np.ndarray, capture_end_ns: int, interval_s: float
) -> pd.DataFrame:
    """The gaps in one peer's signs of life longer than ``GAP_FACTOR`` heartbeat intervals.

    Args:
        starts_ns, ends_ns: int64 (n,) busy spans of the peer, nanoseconds (a single frame is a
            span of length 0; spans may come in any order and overlap).
        capture_end_ns: the capture's last timestamp, nanoseconds: silence up to it counts.
        interval_s: the heartbeat interval, seconds (> 0).

    Returns:
        One row per gap, in time order: ``start_ns`` (the last sign of life before it),
        ``end_ns`` (the next one, or ``capture_end_ns``), ``seconds`` (float), ``to_end``
        (bool: the silence runs to the capture's end), ``span`` (int: index into the inputs of
        the span the gap follows), ``kind`` (``"peer_silent"`` over ``SILENCE_FACTOR``
        intervals, else ``"heartbeat_gap"``).

    Raises:
        ValueError: ``interval_s`` is not positive, or the arrays differ in length.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be positive, got {interval_s!r}")
    starts = np.asarray(starts_ns, np.int64)
    ends = np.asarray(ends_ns, np.int64)
    if starts.shape != ends.shape:
        raise ValueError(f"starts_ns and ends_ns differ in length: {starts.shape} and {ends.shape}")
    columns = ["start_ns", "end_ns", "seconds", "to_end", "span", "kind"]
    if starts.size == 0:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(columns, ["int64", "int64", "float64", "bool", "int64", "object"])})
    order = np.lexsort((ends, starts))
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)  # the latest sign of life so far
    holder = np.maximum.accumulate(np.where(e >= reach, np.arange(e.size), 0))  # span that reached it
    nxt = np.append(s[1:], max(int(capture_end_ns), int(reach[-1])))
    at = np.flatnonzero(nxt - reach > GAP_FACTOR * interval_s * _NS)
    seconds = (nxt[at] - reach[at]) / _NS
    return pd.DataFrame({
        "start_ns": reach[at],
        "end_ns": nxt[at],
        "seconds": seconds,
        "to_end": at == e.size - 1,
        "span": order[holder[at]],
        "kind": np.where(seconds > SILENCE_FACTOR * interval_s, "peer_silent", "heartbeat_gap").astype(object),
    })


def silences(times_ns: np.ndarray, capture_end_ns: int, interval_s: float) -> pd.DataFrame:
    """:func:`liveness_gaps` of a peer given as the times of its frames (int64 ns, any order):
    the form a live monitor has. Same columns; ``span`` indexes ``times_ns``."""
    times = np.asarray(times_ns, np.int64)
    return liveness_gaps(times, times, capture_end_ns, interval_s)


def estimate_interval(after_traffic_s: Sequence[float] | np.ndarray, spacing_s: Sequence[float] | np.ndarray = ()) -> tuple[float, str]:
    """The heartbeat interval of a capture, from two kinds of heartbeat samples.

    A peer heartbeats a peer it sent nothing to for ``peer_heartbeat_ivl``, so the time from
    its last other frame to the heartbeat that follows measures the interval
    (``after_traffic_s``; the reference then heartbeats on every tick while idle, so the
    spacing of its heartbeats says little). A peer that heartbeats on a fixed clock whatever
    else it sends makes those samples small (a heartbeat soon after a data frame), and then
    the spacing of consecutive heartbeats is the interval (``spacing_s``). So the first kind's
    median is the interval, unless it is under half the spacing's.

    Args:
        after_traffic_s: seconds from a peer's last non-heartbeat frame to its next heartbeat.
        spacing_s: seconds between consecutive heartbeats of a peer.

    Returns:
        ``(interval seconds, how)``: that median (at least ``MIN_INTERVAL_S``) and
        ``"estimated from N heartbeats"``, or ``DEFAULT_HEARTBEAT_INTERVAL_S`` and
        ``"reference default"`` when there are no samples.
    """
    medians, count = [], 0
    for samples in (after_traffic_s, spacing_s):
        values = np.asarray(samples, np.float64)
        values = values[np.isfinite(values) & (values > 0)]
        medians.append(float(np.median(values)) if values.size else None)
        count += values.size
    after, spacing = medians
    if after is None and spacing is None:
        return DEFAULT_HEARTBEAT_INTERVAL_S, "reference default"
    if after is None or (spacing is not None and after < spacing / 2):
        after = spacing
    return max(float(after), MIN_INTERVAL_S), f"estimated from {count} heartbeats"  # type: ignore[arg-type]


def in_flight_window(interval_s: float, round_trip_s: float | None = None) -> float:
    """Seconds before a capture's end within which an incomplete message may still be in flight.

    Args:
        interval_s: the capture's heartbeat interval, seconds.
        round_trip_s: the capture's median round trip from data frames to their Acks, seconds,
            or None (no Acks).

    Returns:
        One heartbeat interval, or two round trips where Acks measure a longer one (a slow
        link: frames spend longer on the wire than a sender waits between heartbeats).
    """
    if round_trip_s is None or pd.isna(round_trip_s):
        return float(interval_s)
    return max(float(interval_s), 2.0 * float(round_trip_s))


def liveness_findings(
    spans: pd.DataFrame,
    disconnects: pd.DataFrame,
    capture_end_ns: dict[str, int],
    intervals: dict[str, tuple[float, str]],
) -> pd.DataFrame:
    """``peer_silent`` and ``heartbeat_gap`` rows of every peer of every session.

    A peer is a sender address in a session (Connect frames, session 0, belong to none). Its
    signs of life are all its frames (data, acks, heartbeats, control). A gap is kept when:

    - no Disconnected was sent in the session before it starts (after one, silence is the
      expected end; a Disconnected during the gap ends the watch there);
    - the session's other peers were heard from within ``SILENCE_FACTOR`` intervals before it
      starts (when they had gone silent first, this peer rightly forgot them: only the first
      silence of a dead session is a finding). A session whose other side never appears in the
      capture is judged on this peer alone;
    - no address new to the session appears after it starts (the peer moved: NAT rebinding
      keeps the session id, so its frames go on from the new address).

    Args:
        spans: columns ``capture``, ``session_id`` (int or Decimal), ``src`` ("addr:port"),
            ``start_ns``, ``start_frame``, ``end_ns``, ``end_frame``: busy spans per peer
            (a frame is a span of length 0).
        disconnects: columns ``capture``, ``session_id``, ``first_ns``: the session's first
            Disconnected frame (either direction), nanoseconds.
        capture_end_ns: capture -> last timestamp, nanoseconds.
        intervals: capture -> ``(heartbeat interval seconds, how)`` (:func:`estimate_interval`).

    Returns:
        Findings rows (:func:`findings_frame` columns, ``time_ns`` for ``time``).
    """
    rows: list[dict[str, Any]] = []
    closed = {(c, int(s)): int(t) for c, s, t in zip(disconnects["capture"], disconnects["session_id"], disconnects["first_ns"])}
    for (capture, sid), session in spans.groupby(["capture", "session_id"], sort=True):
        interval, how = intervals.get(capture, (DEFAULT_HEARTBEAT_INTERVAL_S, "reference default"))
        end = int(capture_end_ns[capture])
        d_ns = closed.get((capture, int(sid)))
        for src, peer in session.groupby("src", sort=True):
            others = session[session["src"] != src]
            first_seen = others.groupby("src")["start_ns"].min().to_numpy()
            gaps = liveness_gaps(peer["start_ns"].to_numpy(), peer["end_ns"].to_numpy(), end, interval)
            for g in gaps.itertuples(index=False):
                a, b, to_end = int(g.start_ns), int(g.end_ns), bool(g.to_end)
                if d_ns is not None:
                    if d_ns <= a:
                        continue
                    if d_ns < b:
                        b, to_end = d_ns, False
                seconds = (b - a) / _NS
                if seconds <= GAP_FACTOR * interval:
                    continue
                if len(others):
                    heard = others["end_ns"].to_numpy()[others["start_ns"].to_numpy() <= a]
                    if heard.size == 0 or a - int(heard.max()) > SILENCE_FACTOR * interval * _NS:
                        continue
                    if (first_seen > a).any():  # an address new to the session: the peer moved (NAT rebinding)
                        continue
                kind = "peer_silent" if seconds > SILENCE_FACTOR * interval else "heartbeat_gap"
                until = "the capture's end" if to_end else ("its Disconnected" if b == d_ns else "its next frame")
                rows.append({
                    "capture": capture, "time_ns": a, "frame": int(peer["end_frame"].iloc[int(g.span)]),
                    "session_id": sid, "message_id": None, "kind": kind,
                    "detail": f"{src} sent nothing for {seconds:.3f} s, until {until}"
                              f"{'' if b == d_ns else ', and no Disconnected'} "
                              f"(heartbeat interval {interval:.3g} s, {how})",
                })
    return findings_frame(rows)


# -- messages ----------------------------------------------------------------------------------


def message_findings(messages: pd.DataFrame) -> pd.DataFrame:
    """Findings rows of messages: lost frames, in flight at the end, suspect, resend, duplicate.

    Args:
        messages: one row per message, columns of the messages table (``capture``,
            ``session_id``, ``src``, ``message_id``, ``part_count``, ``message_size``,
            ``part_sizes``, ``complete``, ``missing_bytes``, ``duplicates``) plus
            ``first_ns`` / ``last_ns`` (its first and last frame, nanoseconds),
            ``capture_end_ns``, ``window_s`` (seconds: an incomplete message last seen this
            close to the capture's end is in flight), ``acked`` (bool: its session carries
            Acks), ``first_frame`` (its first frame number, or null) and ``suspect_frame`` (its
            first frame from a record next to capture damage, or null).

    Returns:
        Findings rows (:func:`findings_frame` columns, ``time_ns`` for ``time``): per message,
        ``message_suspect`` when ``suspect_frame`` is set; ``message_in_flight_at_end`` or
        ``message_lost_frames`` when incomplete; ``resend`` (acked session) or ``duplicate``
        when it has repeated chunks. Time is the message's first frame, frame its first frame
        number (the suspect frame for ``message_suspect``).
    """
    rows: list[dict[str, Any]] = []
    for m in messages.itertuples(index=False):
        base = {"capture": m.capture, "time_ns": int(m.first_ns), "frame": _int_or_none(m.first_frame),
                "session_id": m.session_id, "message_id": m.message_id}
        what = f"message from {m.src}"
        if _int_or_none(m.suspect_frame) is not None:
            rows.append({**base, "frame": int(m.suspect_frame), "kind": "message_suspect",
                         "detail": f"{what}: frame {int(m.suspect_frame)} comes from a record next to capture "
                                   f"damage; its bytes may not be what was sent"
                                   f"{' (reassembled complete)' if m.complete else ''}"})
        if not m.complete:
            before_end = (int(m.capture_end_ns) - int(m.last_ns)) / _NS
            sizes = list(m.part_sizes) if m.part_sizes is not None else []
            missing = [i for i, n in enumerate(sizes) if n is None or n != n]
            parts = f"parts {_ranges(missing)} of {m.part_count} never seen" if missing else f"all {m.part_count} parts seen"
            gist = f"{what}: {int(m.missing_bytes)} of {int(m.message_size)} bytes missing, {parts}; last frame {before_end:.3f} s before the capture's end"
            if before_end <= float(m.window_s):
                rows.append({**base, "kind": "message_in_flight_at_end",
                             "detail": f"{gist} (within {float(m.window_s):.3g} s: still in flight)"})
            else:
                rows.append({**base, "kind": "message_lost_frames",
                             "detail": f"{gist} (over {float(m.window_s):.3g} s: lost)"})
        if int(m.duplicates) > 0:
            kind = "resend" if m.acked else "duplicate"
            why = "resent (the session carries acks)" if m.acked else "repeated (the session carries no acks)"
            rows.append({**base, "kind": kind, "detail": f"{what}: {int(m.duplicates)} chunk(s) {why}"})
    return findings_frame(rows)


def _int_or_none(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _ranges(indexes: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out: list[str] = []
    for i in indexes:
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])  # type: ignore[arg-type]
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)  # type: ignore[misc]


# -- capture damage ----------------------------------------------------------------------------


class _SpanLog:
    """Collects a record walk's framing errors with their owners (an ErrorLog's interface)."""

    def __init__(self) -> None:
        self.floor = 0
        self.ceiling = None
        self.entries: list[tuple[int, int, str]] = []

    def at_offset(self, offset: int, reason: str, owner: int | None = None) -> None:
        self.entries.append((offset, offset if owner is None else owner, reason))


def damage_spans(path: str) -> pd.DataFrame | None:
    """The damaged spans of a local classic pcap file, from a walk of its record chain.

    A span starts at the record whose claimed length led to a bad header (the record *before*
    the framing error: a byte deleted inside it hides the next header inside its claimed
    length, so its own bytes are the damaged ones) and ends where reading resynchronised.

    Args:
        path: a local, uncompressed pcap file.

    Returns:
        One row per span: ``offset`` (bytes, the bad header), ``frame`` (the 1-based frame
        number of the record before it, or null when that record was not read), ``time_ns``
        (that record's timestamp, or null), ``reason``; None when the file is not a classic
        pcap (pcapng, gzip, not a capture at all, unreadable): its damage is known only from
        the frames table's error rows. Never raises on a file's contents.
    """
    from ..capture.files.formats import PCAP_FILE_HEADER_LEN, detect_format, parse_pcap_header
    from ..capture.files.records import RecordScanner
    from ..capture.files.source import OpenedCapture

    from ..errors import NbmqError

    try:
        cap = OpenedCapture(path)
    except OSError:
        return None
    try:
        try:
            if cap.size < PCAP_FILE_HEADER_LEN or detect_format(cap.buf, cap.size) != "pcap":
                return None
            header = parse_pcap_header(cap.buf, cap.size)
        except (NbmqError, ValueError):  # not a capture at all: the frames table's error row says so
            return None
        scanner = RecordScanner(cap.buf, cap.size, header)
        log = _SpanLog()
        offsets = scanner.walk(PCAP_FILE_HEADER_LEN, cap.size, log)  # type: ignore[arg-type]
        rows = []
        for offset, owner, reason in log.entries:
            k = int(np.searchsorted(offsets, owner))
            read = k < offsets.size and int(offsets[k]) == owner
            time_ns = None
            if read:
                sec, frac, _incl, _orig = scanner.header_at(owner)
                time_ns = sec * _NS + frac * (_NS // header.frac_per_second)
            rows.append({"offset": offset, "frame": k + 1 if read else None, "time_ns": time_ns, "reason": reason})
        del scanner  # its views of the mapping go before the file is closed
    finally:
        cap.close()
    return pd.DataFrame(rows, columns=["offset", "frame", "time_ns", "reason"])


_FRAME_REASON = re.compile(r"^capture: frame (\d+): (.*)$")
_OFFSET_REASON = re.compile(r"^capture: offset (\d+): ")


def damage_findings(capture: str, error_texts: Sequence[str], spans: pd.DataFrame | None) -> pd.DataFrame:
    """``capture_damage`` rows of one capture.

    Args:
        capture: the ``capture`` column's value.
        error_texts: the frames table's capture-error rows' ``error`` texts (``"capture: ..."``).
        spans: :func:`damage_spans` of the file, or None (not walkable: one row per error row).

    Returns:
        Findings rows: one per damaged span (frame: the record before it), plus one per packet
        that was framed but did not decode (frame: that packet's number) and per remaining
        error row (frame null; the frames table keeps the first few reasons only).
    """
    rows: list[dict[str, Any]] = []
    texts = list(error_texts)
    if spans is not None:
        for s in spans.itertuples(index=False):
            rows.append({"capture": capture, "time_ns": _int_or_none(s.time_ns), "frame": _int_or_none(s.frame),
                         "session_id": None, "message_id": None, "kind": "capture_damage",
                         "detail": f"record chain broken at byte offset {int(s.offset)}: {s.reason}"
                                   + (f"; frame {int(s.frame)} (the record before) may hold bytes that were not sent"
                                      if _int_or_none(s.frame) is not None else "")})
        covered = len(spans) - sum(1 for t in texts if _OFFSET_REASON.match(t))
        texts = [t for t in texts if not _OFFSET_REASON.match(t)]
        if covered > 0:  # framing errors past the reasons the frames table kept
            fillers = set([i for i, t in enumerate(texts) if not _FRAME_REASON.match(t)][:covered])
            texts = [t for i, t in enumerate(texts) if i not in fillers]
    for text in texts:
        m = _FRAME_REASON.match(text)
        rows.append({"capture": capture, "time_ns": None, "frame": int(m.group(1)) if m else None,
                     "session_id": None, "message_id": None, "kind": "capture_damage",
                     "detail": f"packet did not decode: {m.group(2)}" if m else text.removeprefix("capture: ")})
    return findings_frame(rows)


# -- the table ---------------------------------------------------------------------------------


def findings_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Rows (dicts with ``capture``, ``time_ns``, ``frame``, ``session_id``, ``message_id``,
    ``kind``, ``detail``) as a DataFrame of the table's columns, ``severity`` from
    :data:`KINDS` and ``time_ns`` (int64 nanoseconds, nullable) in place of ``time``.

    Raises:
        ValueError: a row names a kind not in :data:`KINDS`.
    """
    columns = ["capture", "time_ns", "frame", "session_id", "message_id", "severity", "kind", "detail"]
    for r in rows:
        if r["kind"] not in KINDS:
            raise ValueError(f"unknown finding kind {r['kind']!r}")
    df = pd.DataFrame([{**r, "severity": KINDS[r["kind"]]} for r in rows], columns=columns)
    df["time_ns"] = df["time_ns"].astype("Int64")
    df["frame"] = df["frame"].astype("Int64")
    df["session_id"] = df["session_id"].astype(object)
    df["message_id"] = df["message_id"].astype(object)
    return df


# -- the Spark step ----------------------------------------------------------------------------

#: Schema of the frames pass's output rows: per peer (``capture``, session id and sender joined
#: by ``\x1f``) its busy spans (``span``), Disconnected and Ack counts (``disconnected``,
#: ``acks``), heartbeat samples (``heartbeat``: a = the frame before, b = the heartbeat); per
#: capture its last timestamp (``end``: b_ns; peer = the capture), its capture-error texts
#: (``damage``: peer = the capture and the text) and round-trip samples (``round_trip``: a_ns,
#: ns from a data frame to its Ack; peer = the capture); per wanted message its first frame
#: (``first``: a_ns = the key hash, a_frame).
_PASS_SCHEMA = "peer string, what string, a_ns long, a_frame long, b_ns long, b_frame long, n long"
_FINDINGS_DDL = "capture string, time_ns long, frame long, session_id decimal(20,0), message_id decimal(20,0), severity string, kind string, detail string"
_KEY = ["capture", "session_id", "src", "message_id"]


def _peer_pass(wanted: np.ndarray, batches: Iterator[Any]) -> Iterator[Any]:
    """The frames pass over one partition (``mapInArrow``): vectorised, rows of :data:`_PASS_SCHEMA`.

    ``wanted``: int64 hashes of the messages whose first frame number is needed (the
    ``message`` column's values); each found gives a ``first`` row (a_ns: the hash, a_frame:
    its first frame in this partition).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    out: dict[str, list[Any]] = {k: [] for k in ("peer", "what", "a_ns", "a_frame", "b_ns", "b_frame", "n")}

    def emit(peer: Any, what: str, a_ns: Any, a_frame: Any, b_ns: Any, b_frame: Any, n: Any) -> None:
        size = len(peer)
        for name, value in (("peer", peer), ("a_ns", a_ns), ("a_frame", a_frame), ("b_ns", b_ns), ("b_frame", b_frame), ("n", n)):
            out[name].extend(value.tolist() if isinstance(value, np.ndarray) else list(value))
        out["what"].extend([what] * size)

    damage = table.filter(pc.is_valid(table["damage"]))
    if damage.num_rows:  # the frames table's capture-error rows, text kept (peer: capture + text)
        texts = pc.binary_join_element_wise(damage["capture"], damage["damage"], _SEP).to_pylist()
        zeros = np.zeros(len(texts), np.int64)
        emit(texts, "damage", zeros, zeros, zeros, zeros, zeros)
    ends = table.filter(pc.is_valid(table["ts_ns"])).group_by("capture").aggregate([("ts_ns", "max")])
    caps = ends["capture"].to_pylist()
    zeros = np.zeros(len(caps), np.int64)
    emit(caps, "end", zeros, zeros, ends["ts_ns_max"].to_numpy(), zeros, zeros)

    if wanted.size:
        data = table.filter(pc.is_valid(table["message"]))
        keys = data["message"].to_numpy()
        hit = np.flatnonzero(np.isin(keys, wanted))
        if hit.size:
            keys, frames = keys[hit], data["frame_number"].fill_null(0).to_numpy()[hit]
            order = np.lexsort((frames, keys))
            keys, frames = keys[order], frames[order]
            head = np.r_[True, keys[1:] != keys[:-1]]
            zeros = np.zeros(int(head.sum()), np.int64)
            emit([""] * zeros.size, "first", keys[head], frames[head], zeros, zeros, zeros)

    alive = table.filter(pc.is_valid(table["peer"]))
    if alive.num_rows:
        codes = pc.dictionary_encode(alive["peer"]).combine_chunks()
        names = np.asarray(codes.dictionary.to_pylist(), dtype=object)
        idx = codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        ts = alive["ts_ns"].to_numpy().astype(np.int64)
        fr = alive["frame_number"].fill_null(0).to_numpy().astype(np.int64)
        kind = alive["kind"].fill_null(-1).to_numpy().astype(np.int64)
        order = np.lexsort((fr, ts, idx))
        idx, ts, fr, kind = idx[order], ts[order], fr[order], kind[order]
        first = np.r_[True, idx[1:] != idx[:-1]]
        dt = np.r_[0, np.diff(ts)]
        starts = np.flatnonzero(first | (dt > _FLOOR_NS))
        last = np.r_[starts[1:] - 1, idx.size - 1]
        emit(names[idx[starts]], "span", ts[starts], fr[starts], ts[last], fr[last], last - starts + 1)
        sample = _spread(np.flatnonzero(~first & (kind == _HEARTBEAT) & (np.r_[-1, kind[:-1]] != _HEARTBEAT)))
        emit(names[idx[sample]], "heartbeat", ts[sample - 1], fr[sample - 1], ts[sample], fr[sample], np.ones(sample.size, np.int64))
        beats = np.flatnonzero(kind == _HEARTBEAT)
        after = beats[1:][idx[beats[1:]] == idx[beats[:-1]]]  # a heartbeat with an earlier one of its peer
        before = beats[:-1][idx[beats[1:]] == idx[beats[:-1]]]
        keep = _spread(np.arange(after.size))
        emit(names[idx[after[keep]]], "spacing", ts[before[keep]], fr[before[keep]], ts[after[keep]], fr[after[keep]], np.ones(keep.size, np.int64))
        for what, code in (("disconnected", _DISCONNECTED), ("acks", _ACK)):
            hit = np.flatnonzero(kind == code)
            if hit.size:
                peers, at, count = np.unique(idx[hit], return_index=True, return_counts=True)
                rows = hit[at]  # each peer's first such frame (sorted by time within a peer)
                emit(names[peers], what, ts[rows], fr[rows], ts[rows], fr[rows], count)
        if (kind == _ACK).any():
            hashes = alive["ack_hash"]
            has = pc.is_valid(hashes).to_numpy(zero_copy_only=False)[order]
            caps, trips = _round_trips(names, idx[has], ts[has], kind[has], hashes.fill_null(0).to_numpy()[order][has])
            zeros = np.zeros(trips.size, np.int64)
            emit(caps, "round_trip", trips, zeros, zeros, zeros, np.ones(trips.size, np.int64))
    yield pa.RecordBatch.from_pydict(out, schema=pa.schema([
        ("peer", pa.string()), ("what", pa.string()), ("a_ns", pa.int64()), ("a_frame", pa.int64()),
        ("b_ns", pa.int64()), ("b_frame", pa.int64()), ("n", pa.int64()),
    ]))


#: Most samples of each kind (heartbeat, spacing, round trip) the frames pass keeps per
#: partition, evenly spaced: a median needs no more, and an idle reference peer heartbeats on
#: every tick.
_SAMPLES = 1000


def _spread(index: np.ndarray) -> np.ndarray:
    """At most ``_SAMPLES`` elements of ``index``, evenly spaced."""
    if index.size <= _SAMPLES:
        return index
    return index[np.linspace(0, index.size - 1, _SAMPLES).astype(np.int64)]


def _round_trips(names: np.ndarray, idx: np.ndarray, ts: np.ndarray, kind: np.ndarray, ack_hash: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Round trips, ns, of acked data frames: from a data frame's first copy to the first Ack
    carrying its hash in the same session (what a capture near the sender measures; near the
    receiver it is the receiver's turnaround, a lower bound).

    Args: the frames pass's rows that carry an ack hash, sorted by peer then time: ``names``
    (peer keys), ``idx`` (int64 index into names), ``ts`` (int64 ns), ``kind``, ``ack_hash``
    (int64). Returns (each sample's capture, int64 samples in ns).
    """
    sessions, session_of = np.unique(pd.Series(names).str.rsplit(_SEP, n=1).str[0].to_numpy(dtype=object), return_inverse=True)
    session = session_of[idx]
    acked = np.isin(session, session[kind == _ACK])  # only sessions that carry Acks
    frame = pd.DataFrame({"session": session[acked], "hash": ack_hash[acked], "ts": ts[acked], "kind": kind[acked]})
    data = frame[frame.kind == 0].drop_duplicates(["session", "hash"])  # rows are in time order per peer
    acks = frame[frame.kind == _ACK].sort_values("ts").drop_duplicates(["session", "hash"])
    pairs = data.merge(acks, on=["session", "hash"], suffixes=("", "_ack"))
    pairs = pairs[pairs.ts_ack >= pairs.ts]
    pairs = pairs.iloc[_spread(np.arange(len(pairs)))]
    captures = pd.Series(sessions[pairs.session.to_numpy()]).str.split(_SEP, n=1).str[0]
    return captures.tolist(), (pairs.ts_ack - pairs.ts).to_numpy(np.int64)


def _split_peers(rows: pd.DataFrame) -> pd.DataFrame:
    """The frames pass's ``peer`` key split into ``capture``, ``session_id`` (Decimal), ``src``."""
    if rows.empty:
        return rows.assign(capture=pd.Series(dtype=object), session_id=pd.Series(dtype=object), src=pd.Series(dtype=object))
    parts = rows["peer"].str.split(_SEP, n=2, expand=True)
    return rows.assign(capture=parts[0], session_id=parts[1].map(Decimal), src=parts[2])


def write_findings(
    spark: SparkSession, frames: DataFrame, tables: dict[str, str], files: Sequence[str]
) -> tuple[DataFrame, dict[str, Any]]:
    """Build and write ``findings/`` from ``frames/`` and ``messages/``; add ``suspect`` to ``messages/``.

    Args:
        spark: the session.
        frames: the frames table (``frames/`` as read back; any size).
        tables: the run's table paths; ``tables["messages"]`` is read, then rewritten with the
            ``suspect`` column (:data:`nbmq.spark.schema.SUSPECT_FIELD`); ``tables["findings"]``
            is set to ``findings/`` beside it.
        files: the capture files read (classic pcap files with capture damage are walked
            again here, on the driver, to find the records next to it).

    Returns:
        ``(messages, counts)``: the messages table read back (with ``suspect``), and
        ``{"rows": n, "severity": {severity: n}, "kind": {kind: n}}`` (every severity and kind,
        zeros included), for ``summary.json``.
    """
    from pyspark.sql import functions as F

    from .inputs import capture_names, local_path, splittable
    from .messages import addr_port
    from .schema import SUSPECT_FIELD

    base = tables["messages"].rsplit("/", 1)[0]
    tables["findings"] = f"{base}/findings"
    # the messages with something to report (incomplete or repeated), on the driver: the frames
    # pass looks up their first frame numbers by a hash of their key
    messages = spark.read.parquet(tables["messages"]).drop(SUSPECT_FIELD.name)
    columns = [*_KEY, "part_count", "message_size", "part_sizes", "complete", "missing_bytes", "duplicates",
               (F.unix_micros("first_ts") * 1000).alias("first_ns"), (F.unix_micros("last_ts") * 1000).alias("last_ns")]
    noted = messages.where(~F.col("complete") | (F.col("duplicates") > 0)).select(
        *columns, F.xxhash64("capture", "session_id", "src", "message_id").alias("key_hash")
    ).toPandas()

    valid = F.col("error").isNull() & F.col("session_id").isNotNull() & (F.col("session_id") != 0)
    data = F.col("error").isNull() & (F.col("kind") == 0)
    peer = F.when(valid, F.concat_ws(_SEP, "capture", F.col("session_id").cast("string"), addr_port("src_addr", "src_port")))
    message = F.when(data, F.xxhash64("capture", "session_id", addr_port("src_addr", "src_port"), "message_id"))
    passed = (
        frames.select("capture", peer.alias("peer"), "ts_ns", "frame_number", "kind", "ack_hash",
                      F.when(F.col("error").startswith("capture: "), F.col("error")).alias("damage"), message.alias("message"))
        .mapInArrow(partial(_peer_pass, noted["key_hash"].to_numpy(np.int64)), _PASS_SCHEMA)
        .toPandas()
    )
    capture_end = {r.peer: int(r.b_ns) for r in passed[passed["what"] == "end"].groupby("peer", as_index=False)["b_ns"].max().itertuples()}
    damaged = passed[passed["what"] == "damage"]["peer"].str.split(_SEP, n=1, expand=True)
    trips = passed[passed["what"] == "round_trip"].groupby("peer")["a_ns"].median() / _NS  # capture -> seconds
    firsts = passed[passed["what"] == "first"].groupby("a_ns")["a_frame"].min()  # key hash -> first frame
    noted["first_frame"] = noted.pop("key_hash").map(firsts)
    per_peer = _split_peers(passed[~passed["what"].isin(["end", "damage", "round_trip", "first"])])
    samples = per_peer[per_peer["what"].isin(["heartbeat", "spacing"])]
    samples = samples.assign(seconds=(samples["b_ns"] - samples["a_ns"]) / _NS)
    intervals = {c: estimate_interval(s.seconds[s.what == "heartbeat"].to_numpy(), s.seconds[s.what == "spacing"].to_numpy())
                 for c, s in samples.groupby("capture")}
    intervals.update({c: estimate_interval([]) for c in capture_end if c not in intervals})
    spans = per_peer[per_peer["what"] == "span"].rename(columns={"a_ns": "start_ns", "a_frame": "start_frame", "b_ns": "end_ns", "b_frame": "end_frame"})
    disc = per_peer[per_peer["what"] == "disconnected"].groupby(["capture", "session_id"], as_index=False)["a_ns"].min()
    found = [liveness_findings(spans, disc.rename(columns={"a_ns": "first_ns"}), capture_end, intervals)]
    acked = {(c, int(sid)) for c, sid in zip(*(per_peer[per_peer["what"] == "acks"][k] for k in ("capture", "session_id")))}

    # capture damage: the frames table's capture-error rows, and a walk of each such pcap file
    paths = {name: path for path, name in capture_names(list(files)).items()}
    suspect_frames: list[tuple[str, int]] = []
    for capture, texts in (damaged.groupby(0, sort=True)[1] if len(damaged) else ()):
        path = paths.get(capture)
        spans_of = damage_spans(local_path(path)) if path is not None and splittable(path) else None
        if spans_of is not None:
            suspect_frames += [(capture, int(f)) for f in spans_of["frame"].dropna()]
        found.append(damage_findings(capture, texts.tolist(), spans_of))

    # suspect messages: the frames of the records next to damage (a join only when there are some)
    suspect_keys = pd.DataFrame(columns=[*_KEY, "suspect_frame"])
    if suspect_frames:
        marks = spark.createDataFrame(suspect_frames, "capture string, frame_number long")
        suspect_keys = (
            frames.where(data).join(F.broadcast(marks), ["capture", "frame_number"])
            .select("capture", "session_id", addr_port("src_addr", "src_port").alias("src"), "message_id", "frame_number")
            .groupBy(*_KEY).agg(F.min("frame_number").alias("suspect_frame")).toPandas()
        )
        keys = spark.createDataFrame(suspect_keys[_KEY], "capture string, session_id decimal(20,0), src string, message_id decimal(20,0)")
        more = messages.join(F.broadcast(keys), _KEY, "left_semi").where(F.col("complete") & (F.col("duplicates") == 0))
        noted = pd.concat([noted, more.select(*columns).toPandas()], ignore_index=True)
    if len(noted):
        noted = noted.merge(suspect_keys, on=_KEY, how="left")
        noted["first_frame"] = noted["first_frame"].fillna(noted["suspect_frame"])
        noted["capture_end_ns"] = noted["capture"].map(capture_end)
        noted["window_s"] = [in_flight_window(intervals[c][0], trips.get(c)) for c in noted["capture"]]
        noted["acked"] = [(c, int(sid)) in acked for c, sid in zip(noted["capture"], noted["session_id"])]
        found.append(message_findings(noted))

    # malformed datagrams and Disconnected frames: Spark filters, one row each
    src, dst = addr_port("src_addr", "src_port"), addr_port("dst_addr", "dst_port")
    malformed = F.col("error").isNotNull()
    parts: list[DataFrame] = [
        frames.where((malformed & ~F.col("error").startswith("capture: ")) | ((F.col("kind") == _DISCONNECTED) & F.col("error").isNull()))
        .select(
            "capture", F.col("ts_ns").alias("time_ns"), F.col("frame_number").alias("frame"),
            F.when(~malformed, F.col("session_id")).alias("session_id"), F.lit(None).cast("decimal(20,0)").alias("message_id"),
            F.when(malformed, KINDS["malformed_frame"]).otherwise(KINDS["peer_disconnected"]).alias("severity"),
            F.when(malformed, "malformed_frame").otherwise("peer_disconnected").alias("kind"),
            F.when(malformed, F.concat(F.lit("datagram "), src, F.lit(" -> "), dst, F.lit(" ("), F.col("length"),
                                      F.lit(" bytes) does not decode: "), F.col("error")))
            .otherwise(F.concat(src, F.lit(" sent Disconnected to "), dst)).alias("detail"),
        )
    ]
    driver_rows = pd.concat([f for f in found if len(f)], ignore_index=True) if any(len(f) for f in found) else findings_frame([])
    parts.append(spark.createDataFrame(_spark_ready(driver_rows), _FINDINGS_DDL))
    table = parts[0]
    for p in parts[1:]:
        table = table.unionByName(p)
    table = table.select(
        "capture", F.timestamp_micros(F.floor(F.col("time_ns") / 1000)).alias("time"),
        *[c for c, _ in FINDINGS_COLUMNS[2:]],
    ).repartition(1).sortWithinPartitions("capture", "time", "frame", "kind")  # small: one sorted file
    saved = spark.conf.get("spark.sql.parquet.outputTimestampType", None)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        table.write.mode("overwrite").parquet(tables["findings"])
    finally:
        if saved is None:
            spark.conf.unset("spark.sql.parquet.outputTimestampType")
        else:
            spark.conf.set("spark.sql.parquet.outputTimestampType", saved)
    _add_suspect(tables["messages"], suspect_keys)

    counts = spark.read.parquet(tables["findings"]).groupBy("severity", "kind").count().collect()
    summary: dict[str, Any] = {"rows": sum(int(r["count"]) for r in counts),
                               "severity": dict.fromkeys(SEVERITIES, 0), "kind": dict.fromkeys(KINDS, 0)}
    for r in counts:
        summary["severity"][r["severity"]] += int(r["count"])
        summary["kind"][r["kind"]] += int(r["count"])
    return spark.read.parquet(tables["messages"]), summary


def _spark_ready(rows: pd.DataFrame) -> pd.DataFrame:
    """Driver-side findings rows with Python values Spark converts (Decimal ids, None for nulls)."""
    out = rows.astype(object).where(rows.notna(), None)
    for c in ("session_id", "message_id"):
        out[c] = [None if v is None else Decimal(int(v)) for v in out[c]]
    return out


def _add_suspect(path: str, suspect: pd.DataFrame) -> None:
    """Rewrite the messages table at ``path`` with the ``suspect`` column, file by file.

    pyarrow on the driver (one file in memory at a time) rather than a Spark job: a messages
    table is a fraction of the frames, and this was ~5x faster than Spark's read-and-write of
    the same table (1.0 s against 5.5 s for 308k messages). Written beside it, then swapped in.

    Args:
        path: the ``messages/`` directory (local, or a URI pyarrow.fs opens).
        suspect: :data:`_KEY` columns of the suspect messages (few: those next to damage).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.fs
    import pyarrow.parquet as pq

    from .inputs import _filesystem, is_local, local_path
    from .schema import SUSPECT_FIELD

    fs, root = (pyarrow.fs.LocalFileSystem(), local_path(path)) if is_local(path) else _filesystem(path)
    root = root.rstrip("/")
    staging = f"{root}.suspect-staging"
    if fs.get_file_info(staging).type != pyarrow.fs.FileType.NotFound:
        fs.delete_dir(staging)
    fs.create_dir(staging)
    marked = {(c, int(sid), src, int(mid)) for c, sid, src, mid in suspect[_KEY].itertuples(index=False)}
    ids = pa.array([Decimal(m) for *_, m in marked], pa.decimal128(20, 0))
    for info in fs.get_file_info(pyarrow.fs.FileSelector(root)):
        if info.type != pyarrow.fs.FileType.File or not info.base_name.endswith(".parquet"):
            continue  # _SUCCESS, checksums
        with fs.open_input_file(info.path) as f:
            table = pq.read_table(f)
        if SUSPECT_FIELD.name in table.column_names:
            table = table.drop_columns([SUSPECT_FIELD.name])
        flags = np.zeros(table.num_rows, bool)
        for i in np.flatnonzero(pc.is_in(table["message_id"], value_set=ids).to_numpy(zero_copy_only=False)) if marked else ():
            row = table.slice(int(i), 1).select(_KEY).to_pylist()[0]
            flags[i] = (row["capture"], int(row["session_id"]), row["src"], int(row["message_id"])) in marked
        table = table.append_column(pa.field(SUSPECT_FIELD.name, pa.bool_()), pa.array(flags))
        table = table.cast(pa.schema([  # Spark's INT96 timestamps (UTC instants) as TIMESTAMP(MICROS) UTC
            pa.field(f.name, pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f for f in table.schema
        ]), safe=False)  # microsecond values: nothing to lose
        with fs.open_output_stream(f"{staging}/{info.base_name}") as f:
            pq.write_table(table, f)
    fs.delete_dir(root)
    fs.move(staging, root)


def read_findings(path: str) -> pd.DataFrame:
    """Read a ``findings/`` table written by the pipeline.

    Args:
        path: the ``findings`` directory (a local path or a URI pyarrow opens).

    Returns:
        One row per finding, sorted by capture, time and frame: ``capture`` (str), ``time``
        (``datetime64[us, UTC]``), ``frame`` (``Int64``, nullable), ``session_id`` /
        ``message_id`` (Decimal or None), ``severity``, ``kind``, ``detail`` (str).

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    table = table.set_column(table.schema.get_field_index("time"), "time", table["time"].cast(pa.timestamp("us", tz="UTC")))
    df = table.to_pandas()
    df["frame"] = df["frame"].astype("Int64")
    return df.sort_values(["capture", "time", "frame", "kind"], kind="stable", na_position="first").reset_index(drop=True)
