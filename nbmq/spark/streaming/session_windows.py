"""Streaming sessions: per session and window of capture time, the traffic's health.

``build_stream_sessions(frames)`` turns a streaming frames table into one row per
``(capture, session_id, window)`` (:data:`SESSION_WINDOW_SCHEMA`), emitted once the watermark
passes the window's end, with ``applyInPandasWithState`` grouped by capture and endpoint pair
(the two ``addr:port`` of a session, in either direction):

- frames by kind (data, connect, connected, disconnected, heartbeat, ack) and UDP payload bytes,
  counted in the window of their capture time. A Connect carries session id 0: it is counted on
  the session it opens, the first session of its endpoint pair whose first frame is at or after
  it (the batch sessions table's rule); one no session answers within the message TTL is
  counted on session 0;
- messages complete / incomplete and the bytes of complete ones, from the same per-peer
  reassembly as :mod:`nbmq.spark.streaming.messages` (:class:`PeerMessages`, one per sender);
  a complete message counts in the window of its last frame, an incomplete one in the window
  the watermark expired it in; ``messages_in_flight``: incomplete messages still held when the
  window closed (a gauge: at a capture's end these are the batch table's incomplete messages
  not yet expired);
- ``resends``: data frames repeating a chunk already received (SafeDealer resends, frames seen
  twice), counted when their message is emitted, plus frames of already completed messages;
- liveness, the findings' rule (docs/findings.md): every frame a peer sends is a sign of life.
  ``max_silence_s`` is the longest interval, seconds, without a frame from one sender of the
  session ending in the window, a silence still running at the window's end included (the
  state keeps each sender's last frame); ``silent_peers`` counts the senders silent for more
  than 3 heartbeat intervals (:data:`SILENCE_LIMIT_S`) in the window that sent no Disconnected.

Frames arriving after their window was emitted count in the oldest window still open (the
watermark's), so no window is emitted twice. The source's idle rows (``idle_seconds``) move the
watermark past a capture that stopped growing, so its last windows close.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..findings import DEFAULT_HEARTBEAT_INTERVAL_S, SILENCE_FACTOR
from .messages import (
    PeerMessages,
    StreamMessageOptions,
    _dec,
    _decoded_or_end,
    _signed,
    _to_u64,
    _unsigned,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "build_stream_sessions",
    "SessionWindows",
    "PairSessions",
    "WINDOW_COUNTERS",
    "SESSION_WINDOW_SCHEMA",
    "SILENCE_LIMIT_S",
]

_DATA_FIELDS = ["part_count", "part_index", "message_size", "part_size", "chunk_offset"]
_KINDS = ["data", "connect", "connected", "disconnected", "heartbeat", "ack"]
_DISCONNECTED = 3

#: A sender silent for longer than this (3 heartbeat intervals of the reference's default)
#: without a Disconnected is a silent peer: the findings' ``peer_silent`` rule.
SILENCE_LIMIT_S = SILENCE_FACTOR * DEFAULT_HEARTBEAT_INTERVAL_S

#: per-window counters, in output order
WINDOW_COUNTERS = [f"frames_{k}" for k in _KINDS] + [
    "bytes",
    "messages_complete",
    "messages_incomplete",
    "message_bytes",
    "resends",
]
_GAUGES = ["messages_in_flight", "silent_peers"]

#: the sessions stream's rows (DDL; session_id is an exact unsigned DECIMAL(20,0))
SESSION_WINDOW_SCHEMA = (
    "capture string, session_id decimal(20,0), window_start timestamp, window_end timestamp, "
    + ", ".join(f"{c} long" for c in WINDOW_COUNTERS + _GAUGES)
    + ", max_silence_s double"
)
_OUT_SCHEMA = SESSION_WINDOW_SCHEMA.replace("session_id decimal(20,0)", "session_id long")


class SessionWindows:
    """One session's streaming state: open windows, per-sender reassembly, last frames.

    Args:
        window_ns: window length, ns of capture time.
    """

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self.windows: dict[int, dict[str, Any]] = {}
        self.peers: dict[str, bytes] = {}
        self.last_seen: dict[str, int] = {}
        self.disconnected: set[str] = set()

    def _window(self, ts_ns: int, floor_ns: int) -> dict[str, Any]:
        start = max(ts_ns, floor_ns) // self.window_ns * self.window_ns
        w = self.windows.get(start)
        if w is None:
            w = self.windows[start] = dict.fromkeys(WINDOW_COUNTERS, 0)
            w["silence"] = {}  # sender -> longest silence ending in the window, s
        return w

    def _silence(self, src: str, until_ns: int, floor_ns: int) -> None:
        last = self.last_seen.get(src)
        if last is None or until_ns <= last:
            return
        w = self._window(until_ns, floor_ns)
        gap = (until_ns - last) / 1e9
        w["silence"][src] = max(gap, w["silence"].get(src, 0.0))

    def advance(
        self, key: tuple[str, int], frames: pd.DataFrame | None, watermark_ns: int, options: StreamMessageOptions
    ) -> list[dict[str, Any]]:
        """Count a micro-batch's frames of this session; return the windows now closed.

        Args:
            key: ``(capture, session_id as u64)``.
            frames: the session's new frames (columns of :func:`frames_for_sessions`), or None.
            watermark_ns: the query's watermark, ns (0: none yet).
            options: the reassembly's limits.

        Returns:
            Closed windows as dicts (``window_start`` ns plus :data:`WINDOW_COUNTERS`, the
            gauges and ``max_silence_s``), oldest first.
        """
        capture, sid = key
        options = _at_completion(options)
        floor = watermark_ns  # a window ending at or before the watermark is closed
        senders: dict[str, pd.DataFrame] = {}
        now = watermark_ns
        if frames is not None and len(frames):
            frames = frames.sort_values(["ts_ns", "frame_number"], kind="stable")
            ts = frames["ts_ns"].to_numpy(np.int64)
            now = max(now, int(ts.max()))
            starts = np.maximum(ts, floor) // self.window_ns * self.window_ns
            kinds = frames["kind"].to_numpy(np.int64)
            lengths = frames["length"].to_numpy(np.int64)
            for start in np.unique(starts).tolist():
                sel = starts == start
                w = self._window(int(start), floor)
                counts = np.bincount(kinds[sel], minlength=len(_KINDS))
                for i, k in enumerate(_KINDS):
                    w[f"frames_{k}"] += int(counts[i])
                w["bytes"] += int(lengths[sel].sum())
            for src, t_ns, kind in zip(frames["src"].tolist(), ts.tolist(), kinds.tolist()):
                self._silence(src, t_ns, floor)
                self.last_seen[src] = max(t_ns, self.last_seen.get(src, t_ns))
                if kind == _DISCONNECTED:
                    self.disconnected.add(src)
            data = frames[(frames["kind"] == 0) & ~frames["secure"].astype(bool)]  # sealed chunks: ciphertext
            senders = {str(s): g for s, g in data.groupby("src", sort=False)}
        in_flight = 0
        for src in sorted(set(self.peers) | set(senders)):
            peer = PeerMessages.from_bytes(self.peers[src]) if src in self.peers else PeerMessages()
            late_before = peer.late_frames
            rows = peer.advance((capture, sid, src), senders.get(src), watermark_ns, options)
            if peer.late_frames > late_before:
                self._window(now, floor)["resends"] += peer.late_frames - late_before
            for row in rows:
                complete, last_us = row[9], row[15]
                w = self._window(last_us * 1000 if complete else max(last_us * 1000, watermark_ns), floor)
                w["messages_complete" if complete else "messages_incomplete"] += 1
                w["resends"] += int(row[12])
                if complete:
                    w["message_bytes"] += int(row[6])
            in_flight += len(set(peer.pending["message_id"].tolist()) - set(peer.held))
            if peer.empty():
                self.peers.pop(src, None)
            else:
                self.peers[src] = peer.to_bytes()
        closed = []
        if watermark_ns:
            for start in sorted(self.windows):
                end = start + self.window_ns
                if end > watermark_ns:
                    break
                for src in self.last_seen:  # a silence still running at the window's end
                    if src not in self.disconnected:
                        self._silence(src, end - 1, 0)
                w = self.windows.pop(start)
                silence = w.pop("silence")
                closed.append(
                    {
                        "window_start": start,
                        **w,
                        "messages_in_flight": in_flight,
                        "silent_peers": sum(
                            s > SILENCE_LIMIT_S for src, s in silence.items() if src not in self.disconnected
                        ),
                        "max_silence_s": max(silence.values(), default=float("nan")),
                    }
                )
        return closed

    def next_deadline_ns(self, options: StreamMessageOptions) -> int | None:
        """Capture time at which the watermark must wake this session, ns; None: never."""
        times = [s + self.window_ns for s in self.windows]
        options = _at_completion(options)
        for data in self.peers.values():
            t = PeerMessages.from_bytes(data).next_deadline_ns(options)
            if t is not None:
                times.append(t)
        return min(times) if times else None

    def empty(self) -> bool:
        """True when no window is open and no message is held (last-frame times are dropped)."""
        return not self.windows and not self.peers


class PairSessions:
    """The streaming state of one endpoint pair of a capture: its sessions' windows, and the
    Connect frames (session id 0) waiting for the session they open.

    Args:
        window_ns: window length, ns of capture time.
    """

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self.sessions: dict[int, SessionWindows] = {}
        self.connects: pd.DataFrame | None = None

    def advance(
        self, capture: str, frames: pd.DataFrame | None, watermark_ns: int, options: StreamMessageOptions
    ) -> list[tuple[int, dict[str, Any]]]:
        """Count a micro-batch's frames of this pair; return ``(session_id, window)`` of the
        windows now closed (session ids as u64; windows as :meth:`SessionWindows.advance`)."""
        by_session: dict[int, pd.DataFrame] = {}
        if frames is not None and len(frames):
            sid = frames["session_id"].to_numpy(np.int64)
            zero = sid == 0
            if zero.any():
                waiting = [f for f in (self.connects, frames[zero]) if f is not None and len(f)]
                self.connects = pd.concat(waiting, ignore_index=True)
            by_session = {int(s): g for s, g in frames[~zero].groupby("session_id", sort=False)}
        new = sorted((int(g["ts_ns"].min()), s) for s, g in by_session.items() if s not in self.sessions)
        for first_ns, s in new:
            self.sessions[s] = SessionWindows(self.window_ns)
            if self.connects is not None and len(self.connects):
                opened = self.connects["ts_ns"].to_numpy(np.int64) <= first_ns
                if opened.any():
                    by_session[s] = pd.concat([self.connects[opened], by_session[s]], ignore_index=True)
                    self.connects = self.connects[~opened]
        ttl_ns = int(options.uncompleted_message_ttl * 1e9)
        if self.connects is not None and len(self.connects) and watermark_ns:
            unanswered = self.connects["ts_ns"].to_numpy(np.int64) + ttl_ns < watermark_ns
            if unanswered.any():
                by_session[0] = (
                    pd.concat([by_session[0], self.connects[unanswered]])
                    if 0 in by_session
                    else self.connects[unanswered]
                )
                self.sessions.setdefault(0, SessionWindows(self.window_ns))
                self.connects = self.connects[~unanswered]
        closed: list[tuple[int, dict[str, Any]]] = []
        for s in list(self.sessions):
            session = self.sessions[s]
            rows = session.advance((capture, _unsigned(s)), by_session.get(s), watermark_ns, options)
            closed += [(_unsigned(s), w) for w in rows]
            if session.empty() and s not in by_session:
                del self.sessions[s]
        return closed

    def next_deadline_ns(self, options: StreamMessageOptions) -> int | None:
        """Capture time at which the watermark must wake this pair, ns; None: never."""
        times = [t for t in (s.next_deadline_ns(options) for s in self.sessions.values()) if t is not None]
        if self.connects is not None and len(self.connects):
            times.append(int(self.connects["ts_ns"].min()) + int(options.uncompleted_message_ttl * 1e9) + 1)
        return min(times) if times else None

    def empty(self) -> bool:
        """True when no session holds anything and no Connect waits."""
        return all(s.empty() for s in self.sessions.values()) and (self.connects is None or not len(self.connects))


def _at_completion(options: StreamMessageOptions) -> StreamMessageOptions:
    """A window counts a message when it completes; frames of it after that are the
    window's resends, so the sessions step does not hold completed messages."""
    return dataclasses.replace(options, completed_grace=0.0)


def frames_for_sessions(frames: DataFrame) -> DataFrame:
    """The decoded frames of a (streaming) frames table, in the sessions step's columns."""
    from pyspark.sql import functions as F

    from ..messages import addr_port

    def signed(name: str) -> Any:
        c = F.col(name)
        return F.when(c >= _dec(1 << 63), c - _dec(1 << 64)).otherwise(c).cast("long").alias(name)

    src = addr_port("src_addr", "src_port")
    dst = addr_port("dst_addr", "dst_port")
    return frames.where(_decoded_or_end()).select(
        "capture",
        F.concat_ws(" ", F.least(src, dst), F.greatest(src, dst)).alias("pair"),
        signed("session_id"),
        "kind",
        "length",
        addr_port("src_addr", "src_port").alias("src"),
        # control frames have no data header: zeros, so pandas keeps exact int64 columns
        F.coalesce(signed("message_id"), F.lit(0)).alias("message_id"),
        addr_port("dst_addr", "dst_port").alias("dst"),
        *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in _DATA_FIELDS],
        "payload",
        "ts_ns",
        "frame_number",
        "timestamp",
        F.coalesce(F.col("secure"), F.lit(False)).alias("secure"),
    )


def build_stream_sessions(
    frames: DataFrame, window: float = 1.0, options: StreamMessageOptions | None = None
) -> DataFrame:
    """The streaming per-session, per-window health table of a streaming frames table.

    Args:
        frames: ``spark.readStream.format("nbmq").load(DIR)`` with ``payload``.
        window: window length, seconds of capture time (default 1).
        options: reassembly limits and the watermark delay (:class:`StreamMessageOptions`).

    Returns:
        A streaming DataFrame of :data:`SESSION_WINDOW_SCHEMA`; write it in ``append`` mode.

    Raises:
        ValueError: ``window`` is not positive.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    if not window > 0:
        raise ValueError(f"window must be > 0 s, not {window!r}")
    opts = options or StreamMessageOptions()
    window_ns = int(round(window * 1e9))
    data = frames_for_sessions(frames).withWatermark("timestamp", opts.watermark)
    out_columns = ["capture", "session_id", "window_start", "window_end", *WINDOW_COUNTERS, *_GAUGES, "max_silence_s"]

    def step(key: tuple, batches: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        pair = pickle.loads(state.get[0]) if state.exists else PairSessions(window_ns)
        new = [b[b["kind"].notna()] for b in batches]  # the end and idle rows only moved the watermark
        new = [b for b in new if len(b)]
        frames_pd = pd.concat(new, ignore_index=True) if new else None
        if frames_pd is None and not state.exists:
            return
        if frames_pd is not None:
            frames_pd["kind"] = frames_pd["kind"].astype(np.int64)
        watermark_ns = max(0, int(state.getCurrentWatermarkMs())) * 1_000_000
        closed = pair.advance(str(key[0]), frames_pd, watermark_ns, opts)
        if pair.empty():
            state.remove()
        else:
            state.update((pickle.dumps(pair),))
            deadline = pair.next_deadline_ns(opts)
            if deadline is not None:
                state.setTimeoutTimestamp(max(deadline // 1_000_000 + 1, int(state.getCurrentWatermarkMs()) + 1))
        if closed:
            out = pd.DataFrame([w for _, w in closed])
            out.insert(0, "session_id", [_signed(s) for s, _ in closed])
            out.insert(0, "capture", str(key[0]))
            starts = out.pop("window_start").to_numpy(np.int64)
            out.insert(2, "window_start", pd.to_datetime(starts // 1000, unit="us", utc=True))
            out.insert(3, "window_end", pd.to_datetime((starts + window_ns) // 1000, unit="us", utc=True))
            for c in WINDOW_COUNTERS + _GAUGES:
                out[c] = out[c].astype(np.int64)
            yield out[out_columns]

    out = data.groupBy("capture", "pair").applyInPandasWithState(
        step, _OUT_SCHEMA, "state binary", "append", GroupStateTimeout.EventTimeTimeout
    )
    return out.select("capture", _to_u64("session_id"), *[F.col(c) for c in out_columns[2:]])
