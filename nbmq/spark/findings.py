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
the pipeline's step that feeds them from ``frames/`` and ``messages/`` at any size. The messages
with something to say (incomplete or repeated) are read first; then one pass over the frames
(:func:`_peer_pass`, vectorised per piece, no per-row Python) yields each peer's busy spans and
Ack counts, heartbeat-interval samples, the Disconnected and malformed frames, each capture's
end and the first frame number of each collected message (matched by message id, then by its
whole key). On a local output the driver runs that pass with pyarrow over the Parquet files the
run just wrote, a file per thread and a row group at a time; on a Hadoop-compatible output Spark
runs it in ``mapInArrow``. Frames next to capture damage are looked up by a second pass only
when there is damage. Round trips (the in-flight window of a slow link) come from the report's
SafeDealer ack matching (:meth:`nbmq.spark.report.passes.Passes.round_trip_medians`): one
matching for both.

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
    from pyspark.sql import SparkSession

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


def liveness_gaps(starts_ns: np.ndarray, ends_ns: np.ndarray, capture_end_ns: int, interval_s: float) -> pd.DataFrame:
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
        return pd.DataFrame(
            {c: pd.Series(dtype=t) for c, t in zip(columns, ["int64", "int64", "float64", "bool", "int64", "object"])}
        )
    order, s, reach, holder = _reaches(starts, ends)
    nxt = np.append(s[1:], max(int(capture_end_ns), int(reach[-1])))
    at = np.flatnonzero(nxt - reach > GAP_FACTOR * interval_s * _NS)
    seconds = (nxt[at] - reach[at]) / _NS
    return pd.DataFrame(
        {
            "start_ns": reach[at],
            "end_ns": nxt[at],
            "seconds": seconds,
            "to_end": at == s.size - 1,
            "span": order[holder[at]],
            "kind": np.where(seconds > SILENCE_FACTOR * interval_s, "peer_silent", "heartbeat_gap").astype(object),
        }
    )


def _reaches(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Spans in time order with the latest sign of life so far: ``(order, sorted starts, reach,
    holder)``; ``reach[i]`` is the max end of the first i+1 sorted spans, ``holder[i]`` the
    sorted index of the (latest) span that reached it."""
    order = np.lexsort((ends, starts))
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    holder = np.maximum.accumulate(np.where(e >= reach, np.arange(e.size), 0))
    return order, s, reach, holder


def _merged_spans(rows: pd.DataFrame, intervals: dict[str, tuple[float, str]]) -> pd.DataFrame:
    """The frames pass's ``span`` rows (``peer``, a/b ns and frames) with each peer's spans
    joined where no gap of over ``GAP_FACTOR`` intervals (its capture's) separates them.

    The pass can only join frames closer than ``GAP_FACTOR * MIN_INTERVAL_S`` (the interval is
    known after it), so a peer sending every 0.1 s left a span per frame: ~a million rows at 1M
    datagrams. Joined spans give :func:`liveness_findings` the same gaps (the same starts,
    reaches and end frames), other peers' last signs of life before a gap and first starts.
    """
    columns = ["peer", "start_ns", "start_frame", "end_ns", "end_frame"]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "peer" else "int64") for c in columns})
    code, peers = pd.factorize(rows["peer"])
    s, e = rows["a_ns"].to_numpy(np.int64), rows["b_ns"].to_numpy(np.int64)
    sf, ef = rows["a_frame"].to_numpy(np.int64), rows["b_frame"].to_numpy(np.int64)
    by_peer = np.argsort(code, kind="stable")
    bounds = np.flatnonzero(np.diff(code[by_peer])) + 1
    out = []
    for peer, idx in zip(np.unique(code), np.split(by_peer, bounds)):
        name = peers[peer]
        interval = intervals.get(name.split(_SEP, 1)[0], (DEFAULT_HEARTBEAT_INTERVAL_S, ""))[0]
        order, start, reach, holder = _reaches(s[idx], e[idx])
        first = np.flatnonzero(np.r_[True, start[1:] - reach[:-1] > GAP_FACTOR * interval * _NS])
        last = np.r_[first[1:] - 1, start.size - 1]
        out.append(
            pd.DataFrame(
                {
                    "peer": name,
                    "start_ns": start[first],
                    "start_frame": sf[idx][order][first],
                    "end_ns": reach[last],
                    "end_frame": ef[idx][order][holder[last]],
                }
            )
        )
    return pd.concat(out, ignore_index=True)


def silences(times_ns: np.ndarray, capture_end_ns: int, interval_s: float) -> pd.DataFrame:
    """:func:`liveness_gaps` of a peer given as the times of its frames (int64 ns, any order):
    the form a live monitor has. Same columns; ``span`` indexes ``times_ns``."""
    times = np.asarray(times_ns, np.int64)
    return liveness_gaps(times, times, capture_end_ns, interval_s)


def estimate_interval(
    after_traffic_s: Sequence[float] | np.ndarray, spacing_s: Sequence[float] | np.ndarray = ()
) -> tuple[float, str]:
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
    closed = {
        (c, int(s)): int(t)
        for c, s, t in zip(disconnects["capture"], disconnects["session_id"], disconnects["first_ns"])
    }
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
                rows.append(
                    {
                        "capture": capture,
                        "time_ns": a,
                        "frame": int(peer["end_frame"].iloc[int(g.span)]),
                        "session_id": sid,
                        "message_id": None,
                        "kind": kind,
                        "detail": f"{src} sent nothing for {seconds:.3f} s, until {until}"
                        f"{'' if b == d_ns else ', and no Disconnected'} "
                        f"(heartbeat interval {interval:.3g} s, {how})",
                    }
                )
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
        base = {
            "capture": m.capture,
            "time_ns": int(m.first_ns),
            "frame": _int_or_none(m.first_frame),
            "session_id": m.session_id,
            "message_id": m.message_id,
        }
        what = f"message from {m.src}"
        if _int_or_none(m.suspect_frame) is not None:
            rows.append(
                {
                    **base,
                    "frame": int(m.suspect_frame),
                    "kind": "message_suspect",
                    "detail": f"{what}: frame {int(m.suspect_frame)} comes from a record next to capture "
                    f"damage; its bytes may not be what was sent"
                    f"{' (reassembled complete)' if m.complete else ''}",
                }
            )
        if not m.complete:
            before_end = (int(m.capture_end_ns) - int(m.last_ns)) / _NS
            sizes = list(m.part_sizes) if m.part_sizes is not None else []
            missing = [i for i, n in enumerate(sizes) if n is None or n != n]
            parts = (
                f"parts {_ranges(missing)} of {m.part_count} never seen"
                if missing
                else f"all {m.part_count} parts seen"
            )
            gist = f"{what}: {int(m.missing_bytes)} of {int(m.message_size)} bytes missing, {parts}; last frame {before_end:.3f} s before the capture's end"
            if before_end <= float(m.window_s):
                rows.append(
                    {
                        **base,
                        "kind": "message_in_flight_at_end",
                        "detail": f"{gist} (within {float(m.window_s):.3g} s: still in flight)",
                    }
                )
            else:
                rows.append(
                    {**base, "kind": "message_lost_frames", "detail": f"{gist} (over {float(m.window_s):.3g} s: lost)"}
                )
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
    """The damaged spans of a local pcap or pcapng file, from a walk of its record chain.

    In a classic pcap a span starts at the record whose claimed length led to a bad header (the
    record *before* the framing error: a byte deleted inside it hides the next header inside its
    claimed length, so its own bytes are the damaged ones) and ends where reading
    resynchronised. A pcapng block carries its length twice, so the damaged block is the one
    whose two lengths disagree (or that cannot be framed) itself.

    Args:
        path: a local pcap or pcapng file, gzip-compressed or not.

    Returns:
        One row per span: ``offset`` (bytes, the bad header or block), ``frame`` (the 1-based
        frame number of the damaged record, or null when it is not known to be a packet),
        ``time_ns`` (that record's timestamp, or null when it was not read), ``reason``; None when the file is not
        a capture at all or cannot be read: its damage is known only from the frames table's
        error rows. Never raises on a file's contents.
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
            if cap.size < PCAP_FILE_HEADER_LEN:
                return None
            if detect_format(cap.buf, cap.size) == "pcapng":
                return _pcapng_damage(cap)
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


def _pcapng_damage(cap: Any) -> pd.DataFrame:
    """:func:`damage_spans` of an opened pcapng capture: each framing error's own block, with its
    frame number (and time, when the walk kept it as a packet: its bytes may not be the ones sent;
    a packet block that could not be framed has its number and no time)."""
    from ..capture.files.pcapng import walk_pcapng

    log = _SpanLog()
    packets = walk_pcapng(cap, 0, cap.size, log)  # type: ignore[arg-type]
    read = {off: (frame, ts) for off, frame, ts in zip(packets.offsets, packets.frames, packets.ts_ns)}
    read.update((off, (frame, None)) for off, frame in packets.skipped)
    rows = []
    for offset, owner, reason in log.entries:
        frame, time_ns = read.get(owner, (None, None))
        rows.append({"offset": offset, "frame": frame, "time_ns": time_ns, "reason": reason})
    return pd.DataFrame(rows, columns=["offset", "frame", "time_ns", "reason"])


def _damaged_record(frame: int | None, time_ns: int | None) -> str:
    if frame is None:
        return ""
    if time_ns is None:  # a pcapng packet block that could not be framed
        return f"; frame {frame}, the damaged record, was not read"
    return f"; frame {frame}, the damaged record, may hold bytes that were not sent"


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
            rows.append(
                {
                    "capture": capture,
                    "time_ns": _int_or_none(s.time_ns),
                    "frame": _int_or_none(s.frame),
                    "session_id": None,
                    "message_id": None,
                    "kind": "capture_damage",
                    "detail": f"record chain broken at byte offset {int(s.offset)}: {s.reason}"
                    + _damaged_record(_int_or_none(s.frame), _int_or_none(s.time_ns)),
                }
            )
        covered = len(spans) - sum(1 for t in texts if _OFFSET_REASON.match(t))
        texts = [t for t in texts if not _OFFSET_REASON.match(t)]
        if covered > 0:  # framing errors past the reasons the frames table kept
            fillers = set([i for i, t in enumerate(texts) if not _FRAME_REASON.match(t)][:covered])
            texts = [t for i, t in enumerate(texts) if i not in fillers]
    for text in texts:
        m = _FRAME_REASON.match(text)
        rows.append(
            {
                "capture": capture,
                "time_ns": None,
                "frame": int(m.group(1)) if m else None,
                "session_id": None,
                "message_id": None,
                "kind": "capture_damage",
                "detail": f"packet did not decode: {m.group(2)}" if m else text.removeprefix("capture: "),
            }
        )
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


# -- the step ----------------------------------------------------------------------------------

#: Columns of ``frames/`` the frames pass reads.
_PASS_COLUMNS = [
    "capture",
    "session_id",
    "src_addr",
    "src_port",
    "dst_addr",
    "dst_port",
    "ts_ns",
    "frame_number",
    "kind",
    "error",
    "length",
    "message_id",
]
#: Schema of the frames pass's output rows: per peer (``capture``, session id and sender joined
#: by ``\x1f``) its busy spans (``span``), Ack counts (``acks``), heartbeat samples
#: (``heartbeat``: a = the frame before, b = the heartbeat; ``spacing``: a = the heartbeat
#: before); per Disconnected frame its time and number (``disconnected``, text: the detail);
#: per malformed datagram the same (``malformed``: peer = the capture); per capture its last
#: timestamp (``end``: b_ns; peer = the capture), its capture-error texts (``damage``: peer = the
#: capture and the text); per wanted message its first frame (``first``: a_ns = the message
#: id's bits as int64, a_frame).
_PASS_SCHEMA = "peer string, what string, a_ns long, a_frame long, b_ns long, b_frame long, n long, text string"
_KEY = ["capture", "session_id", "src", "message_id"]
#: Columns of ``messages/`` the message rules read (``first_ns`` / ``last_ns`` from the
#: timestamps).
_MESSAGE_COLUMNS = [*_KEY, "part_count", "message_size", "part_sizes", "complete", "missing_bytes", "duplicates"]


def _pass_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("peer", pa.dictionary(pa.int32(), pa.string())),  # a peer's text once per piece
            ("what", pa.string()),
            ("a_ns", pa.int64()),
            ("a_frame", pa.int64()),
            ("b_ns", pa.int64()),
            ("b_frame", pa.int64()),
            ("n", pa.int64()),
            ("text", pa.string()),
        ]
    )


def _u64_bits(ids: Any) -> np.ndarray:
    """A DECIMAL(20,0) id column as int64 (the u64's bits; null as 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(ids, pa.uint64()).fill_null(0).to_numpy(zero_copy_only=False).view(np.int64)


def _emit(
    out: list[Any],
    peer: Any,
    what: str,
    a_ns: Any,
    a_frame: Any,
    b_ns: Any = None,
    b_frame: Any = None,
    n: Any = None,
    text: Any = None,
) -> None:
    """Append to ``out`` a pyarrow Table of :func:`_pass_schema` rows ``what`` (a row per element
    of ``peer``); an int column not given is zeros (no nulls: a float64 column in pandas would
    round ns), ``text`` not given is null."""
    import pyarrow as pa

    schema = _pass_schema()
    size = len(peer)
    columns = {"peer": peer, "what": pa.array([what]).take(np.zeros(size, np.int64))}
    for name, value in (("a_ns", a_ns), ("a_frame", a_frame), ("b_ns", b_ns), ("b_frame", b_frame), ("n", n)):
        columns[name] = pa.array(np.zeros(size, np.int64)) if value is None else value
    columns["text"] = pa.nulls(size, pa.string()) if text is None else text
    out.append(pa.Table.from_arrays([_arrow(columns[f.name], f.type) for f in schema], schema=schema))


class _PeerGroup:
    """:func:`_peer_group`'s result for one row group: ``rows``, its :func:`_pass_schema` tables of
    single frames (damage, end, malformed, disconnected, first); ``names``, the peer keys of its
    decoded frames, in order of first appearance; and per frame of a session (not 0) in row
    order ``idx`` (index into ``names``), ``ts`` (ns), ``frame`` and ``kind`` (int64 arrays)."""

    __slots__ = ("rows", "names", "idx", "ts", "frame", "kind")

    def __init__(self, rows: list[Any], names: np.ndarray, *arrays: np.ndarray) -> None:
        self.rows, self.names = rows, names
        empty = np.zeros(0, np.int64)
        self.idx, self.ts, self.frame, self.kind = arrays or (empty,) * 4


def _peer_pass(wanted: np.ndarray, table: Any) -> Any:
    """The frames pass over one piece of ``frames/`` (a Parquet file on the driver, a partition in
    ``mapInArrow``): vectorised, no per-row Python. :func:`_peer_group` then :func:`_peer_file`
    (which the driver runs over a file's row groups: the same rows, a row group in memory).

    Args:
        wanted: int64 (the u64's bits) message ids whose first frame number is needed (each
            found gives a ``first`` row per key).
        table: a pyarrow Table with the :data:`_PASS_COLUMNS` of ``frames/``.

    Returns:
        A pyarrow Table of :data:`_PASS_SCHEMA` rows (few: spans, samples, special frames).
    """
    return _peer_file([_peer_group(wanted, table)])


def _peer_group(wanted: np.ndarray, table: Any) -> _PeerGroup:
    """The frames pass's rows of single frames of ``table`` (a row group or a whole piece, with
    the :data:`_PASS_COLUMNS`) and its peers' frames for :func:`_peer_file`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .messages_local import endpoint_text

    out: list[pa.Table] = []
    if table.num_rows == 0:
        return _PeerGroup(out, np.zeros(0, object))
    error = table["error"]
    damaged = pc.fill_null(pc.starts_with(error, "capture: "), False)
    if pc.any(damaged).as_py():  # the frames table's capture-error rows, text kept (peer: capture + text)
        damage = table.filter(damaged)
        _emit(
            out,
            pc.binary_join_element_wise(damage["capture"], damage["error"], _SEP),
            "damage",
            np.zeros(damage.num_rows, np.int64),
            None,
        )
    ends = table.filter(pc.is_valid(table["ts_ns"])).group_by("capture").aggregate([("ts_ns", "max")])
    _emit(out, ends["capture"], "end", None, None, ends["ts_ns_max"])

    decoded = pc.is_null(error)
    malformed = pc.and_(pc.is_valid(error), pc.invert(damaged))
    if pc.any(malformed).as_py():
        bad = table.filter(malformed)
        text = pc.binary_join_element_wise(
            "datagram ",
            endpoint_text(bad["src_addr"], bad["src_port"]),
            " -> ",
            endpoint_text(bad["dst_addr"], bad["dst_port"]),
            " (",
            pc.cast(bad["length"], "string"),
            " bytes) does not decode: ",
            bad["error"],
            "",
        )
        _emit(out, bad["capture"], "malformed", *_with_nulls(bad["ts_ns"], bad["frame_number"]), text=text)

    # peers: a code per decoded row, its key text built once per peer
    sid = _u64_bits(table["session_id"])
    dec = np.flatnonzero(
        pc.fill_null(pc.and_(decoded, pc.is_valid(table["session_id"])), False).to_numpy(zero_copy_only=False)
    )
    if dec.size == 0:
        return _PeerGroup(out, np.zeros(0, object))
    captures = pc.dictionary_encode(table["capture"]).combine_chunks()
    addrs = pc.dictionary_encode(table["src_addr"]).combine_chunks()
    where = (
        captures.indices.to_numpy(zero_copy_only=False).astype(np.int64) * max(1, len(addrs.dictionary))
        + addrs.indices.fill_null(0).to_numpy(zero_copy_only=False)
    ) * 65536 + table["src_port"].fill_null(0).to_numpy()
    codes = (
        pd.DataFrame({"where": where[dec], "sid": sid[dec]})
        .groupby(["where", "sid"], sort=False)
        .ngroup()
        .to_numpy(np.int64)
    )
    _, heads = np.unique(codes, return_index=True)
    one = table.take(pa.array(dec[heads])).select(["capture", "session_id", "src_addr", "src_port"])
    names = np.asarray(
        pc.binary_join_element_wise(
            one["capture"],
            pc.cast(pc.cast(one["session_id"], pa.uint64()), "string"),
            endpoint_text(one["src_addr"], one["src_port"]),
            _SEP,
        ).to_pylist(),
        dtype=object,
    )
    code = np.full(table.num_rows, -1, np.int64)
    code[dec] = codes
    kind_all = table["kind"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    bye = np.flatnonzero((code >= 0) & (kind_all == _DISCONNECTED))
    if bye.size:
        gone = table.take(pa.array(bye))
        text = pc.binary_join_element_wise(
            endpoint_text(gone["src_addr"], gone["src_port"]),
            " sent Disconnected to ",
            endpoint_text(gone["dst_addr"], gone["dst_port"]),
            "",
        )
        _emit(out, names[code[bye]], "disconnected", *_with_nulls(gone["ts_ns"], gone["frame_number"]), text=text)

    if wanted.size:
        ids = _u64_bits(table["message_id"])
        hit = np.flatnonzero(np.isin(ids, wanted) & (code >= 0) & (kind_all == 0))
        if hit.size:
            found = pd.DataFrame(
                {
                    "peer": code[hit],
                    "id": ids[hit],
                    "frame": table["frame_number"].take(pa.array(hit)).fill_null(0).to_numpy(),
                }
            )
            first = found.groupby(["peer", "id"], as_index=False, sort=False)["frame"].min()
            _emit(out, names[first["peer"].to_numpy()], "first", first["id"].to_numpy(), first["frame"].to_numpy())

    alive = np.flatnonzero((code >= 0) & (sid != 0))  # session 0: Connect frames belong to no peer
    return _PeerGroup(
        out,
        names,
        code[alive],
        table["ts_ns"].fill_null(0).to_numpy().astype(np.int64)[alive],
        table["frame_number"].fill_null(0).to_numpy().astype(np.int64)[alive],
        kind_all[alive],
    )


def _peer_file(groups: Sequence[_PeerGroup]) -> Any:
    """The frames pass's rows of one piece from its row groups' :func:`_peer_group` (in order):
    their single frames' rows, then per peer, over the whole piece in time order, its busy spans
    (frames closer than ``GAP_FACTOR * MIN_INTERVAL_S`` joined), heartbeat samples (the frame
    before a heartbeat that follows other traffic; consecutive heartbeats), at most
    ``_SAMPLES`` of each kind evenly spread, and its Ack count with its first Ack."""
    import pyarrow as pa

    out = [t for g in groups for t in g.rows]
    known: dict[str, int] = {}  # a peer's index in the piece, by first appearance
    parts = []
    for g in groups:
        remap = np.array([known.setdefault(name, len(known)) for name in g.names], np.int64)
        parts.append((remap[g.idx], g.ts, g.frame, g.kind))
    if known:
        names = np.asarray(list(known), dtype=object)
        idx, ts, fr, kind = (np.concatenate(column) for column in zip(*parts))
    if known and idx.size:
        order = np.lexsort((fr, ts, idx))
        idx, ts, fr, kind = idx[order], ts[order], fr[order], kind[order]
        first = np.r_[True, idx[1:] != idx[:-1]]
        dt = np.r_[0, np.diff(ts)]
        starts = np.flatnonzero(first | (dt > _FLOOR_NS))
        last = np.r_[starts[1:] - 1, idx.size - 1]
        peers = pa.DictionaryArray.from_arrays(pa.array(idx[starts].astype(np.int32)), pa.array(names, pa.string()))
        _emit(out, peers, "span", ts[starts], fr[starts], ts[last], fr[last], last - starts + 1)
        sample = _spread(np.flatnonzero(~first & (kind == _HEARTBEAT) & (np.r_[-1, kind[:-1]] != _HEARTBEAT)))
        _emit(
            out,
            names[idx[sample]],
            "heartbeat",
            ts[sample - 1],
            fr[sample - 1],
            ts[sample],
            fr[sample],
            np.ones(sample.size, np.int64),
        )
        beats = np.flatnonzero(kind == _HEARTBEAT)
        after = beats[1:][idx[beats[1:]] == idx[beats[:-1]]]  # a heartbeat with an earlier one of its peer
        before = beats[:-1][idx[beats[1:]] == idx[beats[:-1]]]
        keep = _spread(np.arange(after.size))
        _emit(
            out,
            names[idx[after[keep]]],
            "spacing",
            ts[before[keep]],
            fr[before[keep]],
            ts[after[keep]],
            fr[after[keep]],
            np.ones(keep.size, np.int64),
        )
        hit = np.flatnonzero(kind == _ACK)
        if hit.size:
            peers, at, count = np.unique(idx[hit], return_index=True, return_counts=True)
            rows = hit[at]  # each peer's first Ack (sorted by time within a peer)
            _emit(out, names[peers], "acks", ts[rows], fr[rows], ts[rows], fr[rows], count)
    return pa.concat_tables(out) if out else _pass_schema().empty_table()


def _arrow(values: Any, kind: Any) -> Any:
    """``values`` (numpy, list or pyarrow) as a pyarrow Array of type ``kind``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(kind):
        if isinstance(values, pa.DictionaryArray):
            return values
        return pc.dictionary_encode(values if isinstance(values, pa.Array) else pa.array(values, kind.value_type))
    return values.cast(kind) if isinstance(values, pa.Array) else pa.array(values, type=kind)


def _with_nulls(ts_ns: Any, frame: Any) -> tuple[Any, Any, None, None, Any]:
    """``(a_ns, a_frame, b_ns, b_frame, n)`` of a frame's row: time and number with nulls as 0,
    ``n`` a bit mask of which were set (1: time, 2: number)."""
    import pyarrow.compute as pc

    n = pc.add(pc.cast(pc.is_valid(ts_ns), "int64"), pc.multiply(pc.cast(pc.is_valid(frame), "int64"), 2))
    return ts_ns.fill_null(0), frame.fill_null(0), None, None, n


def _row_time_frame(rows: pd.DataFrame) -> tuple[list[int | None], list[int | None]]:
    """The ``time_ns`` and ``frame`` of :func:`_with_nulls` rows, nulls restored."""
    n = rows["n"].to_numpy(np.int64)
    return (
        [int(t) if m & 1 else None for t, m in zip(rows["a_ns"].to_numpy(np.int64), n)],
        [int(f) if m & 2 else None for f, m in zip(rows["a_frame"].to_numpy(np.int64), n)],
    )


def _spark_pass(wanted: np.ndarray, batches: Iterator[Any]) -> Iterator[Any]:
    """:func:`_peer_pass` over one Spark partition (``mapInArrow``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    batches = list(batches)
    if batches:
        out = _peer_pass(wanted, pa.Table.from_batches(batches))
        yield from out.set_column(0, "peer", pc.cast(out["peer"], pa.string())).to_batches()  # Spark: plain text


def _marked_frames(marks: pd.DataFrame, table: Any) -> pd.DataFrame:
    """The data frames of ``table`` (:data:`_PASS_COLUMNS` of ``frames/``) whose ``(capture,
    frame_number)`` is in ``marks``: :data:`_KEY` columns (ids as Decimal) and
    ``suspect_frame``."""
    import pyarrow.compute as pc

    from .messages_local import endpoint_text

    data = pc.fill_null(pc.and_(pc.is_null(table["error"]), pc.equal(table["kind"], 0)), False)
    rows = table.filter(data).select(["capture", "session_id", "src_addr", "src_port", "message_id", "frame_number"])
    rows = rows.append_column("src", endpoint_text(rows["src_addr"], rows["src_port"])).to_pandas()
    rows = rows.merge(marks, on=["capture", "frame_number"])
    return rows.rename(columns={"frame_number": "suspect_frame"})[[*_KEY, "suspect_frame"]]


_MARKED_SCHEMA = "capture string, session_id decimal(20,0), src string, message_id decimal(20,0), suspect_frame long"


def _spark_marked(marks: pd.DataFrame, batches: Iterator[Any]) -> Iterator[Any]:
    """:func:`_marked_frames` over one Spark partition (``mapInArrow``)."""
    import pyarrow as pa

    batches = list(batches)
    if batches:
        rows = _marked_frames(marks, pa.Table.from_batches(batches))
        yield pa.RecordBatch.from_pandas(
            rows,
            schema=pa.schema(
                [
                    ("capture", pa.string()),
                    ("session_id", pa.decimal128(20, 0)),
                    ("src", pa.string()),
                    ("message_id", pa.decimal128(20, 0)),
                    ("suspect_frame", pa.int64()),
                ]
            ),
            preserve_index=False,
        )


def _messages_arrow(path: str, where: Any) -> pd.DataFrame:
    """The local ``messages/`` rows matching the pyarrow expression ``where``:
    :data:`_MESSAGE_COLUMNS` plus ``first_ns`` / ``last_ns`` (int64 ns, microsecond precision)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from .inputs import local_path
    from .scan import release_freed

    table = ds.dataset(local_path(path), format="parquet").to_table(
        columns=[*_MESSAGE_COLUMNS, "first_ts", "last_ts"], filter=where
    )
    for name in ("first", "last"):
        ts = table[f"{name}_ts"]
        micros = pc.cast(pc.cast(ts, pa.timestamp("us", tz=ts.type.tz), safe=False), pa.int64())
        table = table.drop_columns([f"{name}_ts"]).append_column(f"{name}_ns", pc.multiply(micros, 1000))
    out = table.to_pandas()
    del table
    release_freed()  # the filter read whole row groups: give them back before the next pass
    return out


def _messages_spark(spark: SparkSession, path: str, where: Any) -> pd.DataFrame:
    """:func:`_messages_arrow` read by Spark (any file system); ``where`` a Spark column."""
    from pyspark.sql import functions as F

    return (
        spark.read.parquet(path)
        .where(where)
        .select(
            *_MESSAGE_COLUMNS,
            (F.unix_micros("first_ts") * 1000).alias("first_ns"),
            (F.unix_micros("last_ts") * 1000).alias("last_ns"),
        )
        .toPandas()
    )


def write_findings(
    spark: SparkSession,
    tables: dict[str, str],
    files: Sequence[str],
    *,
    passes: Any,
    on_driver: bool | None = None,
) -> dict[str, Any]:
    """Build and write ``findings/`` from ``frames/`` and ``messages/``; add ``suspect`` to ``messages/``.

    On a local output the driver reads the Parquet files the run just wrote with pyarrow (a file
    per thread, a row group at a time, only the columns the rules need); on a Hadoop-compatible one (``hdfs://``,
    ``s3a://``, ...) Spark runs the same frames pass (:func:`_peer_pass`) in ``mapInArrow``.
    Either way the rules then run on the driver over the pass's few rows, and ``findings/`` is
    written by pyarrow as one sorted file.

    Args:
        spark: the session (reads the tables when they are not read on the driver).
        tables: the run's table paths (``frames`` and ``messages``, any size);
            ``tables["messages"]`` is read, then rewritten with the
            ``suspect`` column (:data:`nbmq.spark.schema.SUSPECT_FIELD`); ``tables["findings"]``
            is set to ``findings/`` beside it.
        files: the capture files read (classic pcap files with capture damage are walked
            again here, on the driver, to find the records next to it).
        on_driver: read the tables with pyarrow on the driver (True) or with Spark (False);
            None (the default) chooses the driver when both tables are local.
        passes: the run's :class:`nbmq.spark.report.passes.Passes` over the same tables: its
            SafeDealer ack matching (:meth:`~nbmq.spark.report.passes.Passes.round_trip_medians`)
            gives each capture's round trip for the in-flight window, the one the report shows
            (the caller builds it: the report's passes read this module, not the other way).

    Returns:
        ``{"rows": n, "severity": {severity: n}, "kind": {kind: n}}`` (every severity and kind,
        zeros included), for ``summary.json``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from .inputs import capture_names, is_local, local_path
    from .scan import scan_file_groups, scan_files

    base = tables["messages"].rsplit("/", 1)[0]
    tables["findings"] = f"{base}/findings"
    if on_driver is None:
        on_driver = is_local(tables["frames"]) and is_local(tables["messages"])
    # the messages with something to report (incomplete or repeated): the frames pass looks up
    # their first frame numbers by message id, then by the whole key
    if on_driver:
        noted = _messages_arrow(tables["messages"], ~pc.field("complete") | (pc.field("duplicates") > 0))
    else:
        from pyspark.sql import functions as F

        noted = _messages_spark(spark, tables["messages"], ~F.col("complete") | (F.col("duplicates") > 0))
    wanted = np.unique(np.array([int(m) for m in noted["message_id"]], np.uint64).view(np.int64))
    if on_driver:
        pieces = scan_file_groups(tables["frames"], partial(_peer_group, wanted), _peer_file, _PASS_COLUMNS)
        table = pa.concat_tables(pieces) if pieces else _pass_schema().empty_table()
        # spans can be a row per frame (until joined): kept apart, their peers as codes
        span = pc.equal(table["what"], "span")
        span_rows = table.filter(span).to_pandas()
        passed = table.filter(pc.invert(span)).to_pandas()
        passed["peer"] = passed["peer"].astype(object)
    else:
        frames = spark.read.parquet(tables["frames"])
        passed = frames.select(*_PASS_COLUMNS).mapInArrow(partial(_spark_pass, wanted), _PASS_SCHEMA).toPandas()
        span_rows = passed[passed["what"] == "span"]
        passed = passed[passed["what"] != "span"]

    capture_end = {
        r.peer: int(r.b_ns)
        for r in passed[passed["what"] == "end"].groupby("peer", as_index=False)["b_ns"].max().itertuples()
    }
    damaged = passed[passed["what"] == "damage"]["peer"].str.split(_SEP, n=1, expand=True)
    per_peer = _split_peers(passed[~passed["what"].isin(["end", "damage", "malformed"])])
    firsts = per_peer[per_peer["what"] == "first"]
    firsts = firsts.assign(message_id=[Decimal(int(b)) for b in firsts["a_ns"].to_numpy(np.int64).view(np.uint64)])
    firsts = firsts.groupby(_KEY, as_index=False)["a_frame"].min().rename(columns={"a_frame": "first_frame"})
    noted = (
        noted.merge(firsts, on=_KEY, how="left") if len(noted) else noted.assign(first_frame=pd.Series(dtype="float64"))
    )
    samples = per_peer[per_peer["what"].isin(["heartbeat", "spacing"])]
    samples = samples.assign(seconds=(samples["b_ns"] - samples["a_ns"]) / _NS)
    intervals = {
        c: estimate_interval(s.seconds[s.what == "heartbeat"].to_numpy(), s.seconds[s.what == "spacing"].to_numpy())
        for c, s in samples.groupby("capture")
    }
    intervals.update({c: estimate_interval([]) for c in capture_end if c not in intervals})
    spans = _split_peers(_merged_spans(span_rows, intervals))
    byes = per_peer[per_peer["what"] == "disconnected"]
    disc = byes[byes["n"].to_numpy(np.int64) & 1 == 1].groupby(["capture", "session_id"], as_index=False)["a_ns"].min()
    found = [liveness_findings(spans, disc.rename(columns={"a_ns": "first_ns"}), capture_end, intervals)]
    acked = {
        (c, int(sid)) for c, sid in zip(*(per_peer[per_peer["what"] == "acks"][k] for k in ("capture", "session_id")))
    }
    malformed = passed[passed["what"] == "malformed"]
    found.append(
        findings_frame(
            [
                {
                    "capture": c,
                    "time_ns": t,
                    "frame": f,
                    "session_id": None,
                    "message_id": None,
                    "kind": "malformed_frame",
                    "detail": d,
                }
                for c, t, f, d in zip(malformed["peer"], *_row_time_frame(malformed), malformed["text"])
            ]
            + [
                {
                    "capture": c,
                    "time_ns": t,
                    "frame": f,
                    "session_id": s,
                    "message_id": None,
                    "kind": "peer_disconnected",
                    "detail": d,
                }
                for c, s, t, f, d in zip(byes["capture"], byes["session_id"], *_row_time_frame(byes), byes["text"])
            ]
        )
    )

    # capture damage: the frames table's capture-error rows, and a walk of each such pcap file
    paths = {name: path for path, name in capture_names(list(files)).items()}
    suspect_frames: list[tuple[str, int]] = []
    for capture, texts in damaged.groupby(0, sort=True)[1] if len(damaged) else ():
        path = paths.get(capture)
        spans_of = damage_spans(local_path(path)) if path is not None and is_local(path) else None
        if spans_of is not None:
            suspect_frames += [(capture, int(f)) for f in spans_of["frame"].dropna()]
        found.append(damage_findings(capture, texts.tolist(), spans_of))

    # suspect messages: the data frames of the records next to damage (a second pass only when
    # there are some)
    suspect_keys = pd.DataFrame(columns=[*_KEY, "suspect_frame"])
    if suspect_frames:
        marks = pd.DataFrame(suspect_frames, columns=["capture", "frame_number"])
        if on_driver:
            where = pc.field("frame_number").isin(marks["frame_number"].unique().tolist())
            pieces = scan_files(tables["frames"], partial(_marked_frames, marks), _PASS_COLUMNS, where)
            suspect_keys = pd.concat([suspect_keys, *pieces], ignore_index=True)
        else:
            marked = frames.select(*_PASS_COLUMNS).mapInArrow(partial(_spark_marked, marks), _MARKED_SCHEMA).toPandas()
            suspect_keys = pd.concat([suspect_keys, marked], ignore_index=True)
        suspect_keys = suspect_keys.groupby(_KEY, as_index=False)["suspect_frame"].min()
        ids = sorted({int(m) for m in suspect_keys["message_id"]})
        if on_driver:
            more = _messages_arrow(
                tables["messages"],
                pc.field("message_id").isin(pa.array([Decimal(m) for m in ids], pa.decimal128(20, 0))),
            )
        else:
            from pyspark.sql import functions as F

            more = _messages_spark(spark, tables["messages"], F.col("message_id").isin([Decimal(m) for m in ids]))
        more = more[more["complete"] & (more["duplicates"] == 0)].merge(suspect_keys[_KEY], on=_KEY)
        noted = pd.concat([noted, more], ignore_index=True)
    if len(noted):
        noted = noted.merge(suspect_keys, on=_KEY, how="left")
        noted["first_frame"] = noted["first_frame"].astype("Int64").fillna(noted["suspect_frame"].astype("Int64"))
        noted["capture_end_ns"] = noted["capture"].map(capture_end)
        trips = passes.round_trip_medians()  # capture -> seconds
        noted["window_s"] = [in_flight_window(intervals[c][0], trips.get(c)) for c in noted["capture"]]
        noted["acked"] = [(c, int(sid)) in acked for c, sid in zip(noted["capture"], noted["session_id"])]
        found.append(message_findings(noted))

    table = (
        pd.concat([f for f in found if len(f)], ignore_index=True) if any(len(f) for f in found) else findings_frame([])
    )
    table = table.sort_values(["capture", "time_ns", "frame", "kind"], kind="stable", na_position="first")
    _write_table(tables["findings"], _findings_arrow(table))
    _add_suspect(tables["messages"], suspect_keys)

    summary: dict[str, Any] = {
        "rows": len(table),
        "severity": dict.fromkeys(SEVERITIES, 0),
        "kind": dict.fromkeys(KINDS, 0),
    }
    for column in ("severity", "kind"):
        for value, n in table[column].value_counts().items():
            summary[column][value] += int(n)
    return summary


def _findings_arrow(rows: pd.DataFrame) -> Any:
    """:func:`findings_frame` rows as a pyarrow Table of :data:`FINDINGS_COLUMNS` (time
    ``TIMESTAMP(MICROS)`` UTC, floored from ``time_ns``; ids DECIMAL(20,0))."""
    import pyarrow as pa

    def ids(values: pd.Series) -> Any:
        return pa.array([None if v is None or v != v else Decimal(int(v)) for v in values], pa.decimal128(20, 0))

    time_ns = rows["time_ns"]
    micros = pa.array((time_ns // 1000).to_numpy("int64", na_value=0), pa.int64(), mask=time_ns.isna().to_numpy())
    return pa.table(
        {
            "capture": pa.array(rows["capture"].tolist(), pa.string()),
            "time": micros.cast(pa.timestamp("us", tz="UTC")),
            "frame": pa.array(
                rows["frame"].to_numpy("int64", na_value=0), pa.int64(), mask=rows["frame"].isna().to_numpy()
            ),
            "session_id": ids(rows["session_id"]),
            "message_id": ids(rows["message_id"]),
            **{c: pa.array(rows[c].tolist(), pa.string()) for c in ("severity", "kind", "detail")},
        }
    )


def _write_table(path: str, table: Any) -> None:
    """Write ``table`` as the one Parquet file of the directory ``path`` (local or a URI
    pyarrow.fs opens), replacing what was there."""
    import pyarrow.fs
    import pyarrow.parquet as pq

    from .inputs import _filesystem, is_local, local_path

    fs, root = (pyarrow.fs.LocalFileSystem(), local_path(path)) if is_local(path) else _filesystem(path)
    root = root.rstrip("/")
    if fs.get_file_info(root).type != pyarrow.fs.FileType.NotFound:
        fs.delete_dir(root)
    fs.create_dir(root)
    with fs.open_output_stream(f"{root}/part-00000.parquet") as f:
        pq.write_table(table, f)


#: Most samples of each kind (heartbeat, spacing) the frames pass keeps per
#: piece, evenly spaced: a median needs no more, and an idle reference peer heartbeats on
#: every tick.
_SAMPLES = 1000


def _spread(index: np.ndarray) -> np.ndarray:
    """At most ``_SAMPLES`` elements of ``index``, evenly spaced."""
    if index.size <= _SAMPLES:
        return index
    return index[np.linspace(0, index.size - 1, _SAMPLES).astype(np.int64)]


def _split_peers(rows: pd.DataFrame) -> pd.DataFrame:
    """The frames pass's ``peer`` key split into ``capture``, ``session_id`` (Decimal), ``src``."""
    if rows.empty:
        return rows.assign(
            capture=pd.Series(dtype=object), session_id=pd.Series(dtype=object), src=pd.Series(dtype=object)
        )
    parts = rows["peer"].str.split(_SEP, n=2, expand=True)
    return rows.assign(capture=parts[0], session_id=parts[1].map(Decimal), src=parts[2])


#: Rows of ``messages/`` :func:`_add_suspect` reads, flags and writes at a time.
_SUSPECT_BATCH_ROWS = 65_536


def _with_suspect(table: Any, marked: set[tuple[str, int, str, int]], ids: Any) -> Any:
    """``table`` (rows of ``messages/``) with the ``suspect`` column: True for the rows whose
    (capture, session_id, src, message_id) is in ``marked`` (``ids``: their message ids as a
    DECIMAL(20,0) array, to find candidates without per-row Python)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .schema import SUSPECT_FIELD

    flags = np.zeros(table.num_rows, bool)
    for i in (
        np.flatnonzero(pc.is_in(table["message_id"], value_set=ids).to_numpy(zero_copy_only=False)) if marked else ()
    ):
        row = table.slice(int(i), 1).select(_KEY).to_pylist()[0]
        flags[i] = (row["capture"], int(row["session_id"]), row["src"], int(row["message_id"])) in marked
    return table.append_column(pa.field(SUSPECT_FIELD.name, pa.bool_()), pa.array(flags))


def _add_suspect(path: str, suspect: pd.DataFrame) -> None:
    """Rewrite the messages table at ``path`` with the ``suspect`` column, file by file.

    pyarrow on the driver (:data:`_SUSPECT_BATCH_ROWS` rows in memory at a time, each written
    as a row group) rather than a Spark job: a messages
    table is a fraction of the frames, and this was ~5x faster than Spark's read-and-write of
    the same table (1.0 s against 5.5 s for 308k messages). Written beside it, then swapped in.

    Args:
        path: the ``messages/`` directory (local, or a URI pyarrow.fs opens).
        suspect: :data:`_KEY` columns of the suspect messages (few: those next to damage).
    """
    import pyarrow as pa
    import pyarrow.fs
    import pyarrow.parquet as pq

    from .inputs import _filesystem, is_local, local_path
    from .scan import release_freed
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
        with fs.open_input_file(info.path) as f, fs.open_output_stream(f"{staging}/{info.base_name}") as out:
            source = pq.ParquetFile(f)
            fields = [field for field in source.schema_arrow if field.name != SUSPECT_FIELD.name]
            schema = pa.schema(
                [  # Spark's INT96 timestamps (UTC instants) as TIMESTAMP(MICROS) UTC
                    pa.field(field.name, pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(field.type) else field
                    for field in fields
                ]
                + [pa.field(SUSPECT_FIELD.name, pa.bool_())]
            )
            with pq.ParquetWriter(out, schema) as writer:
                for batch in source.iter_batches(
                    batch_size=_SUSPECT_BATCH_ROWS, columns=[field.name for field in fields]
                ):
                    writer.write_table(
                        _with_suspect(pa.Table.from_batches([batch]), marked, ids).cast(schema, safe=False)
                    )
        release_freed()
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
    table = table.set_column(
        table.schema.get_field_index("time"), "time", table["time"].cast(pa.timestamp("us", tz="UTC"))
    )
    df = table.to_pandas()
    df["frame"] = df["frame"].astype("Int64")
    return df.sort_values(["capture", "time", "frame", "kind"], kind="stable", na_position="first").reset_index(
        drop=True
    )
