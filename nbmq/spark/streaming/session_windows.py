"""Streaming sessions: per session and window of capture time, the traffic's health.

``build_stream_sessions(frames)`` turns a streaming frames table into one row per
``(capture, session_id, window)`` (:data:`SESSION_WINDOW_SCHEMA`), emitted once the watermark
passes the window's end, with ``applyInPandasWithState`` grouped by ``(capture, session_id)``:

- frames by kind (data, connect, connected, disconnected, heartbeat, ack) and UDP payload bytes,
  counted in the window of their capture time;
- messages complete / incomplete and the bytes of complete ones, from the same per-peer
  reassembly as :mod:`nbmq.spark.streaming.messages` (:class:`PeerMessages`, one per sender);
  a complete message counts in the window of its last frame, an incomplete one in the window
  the watermark expired it in;
- ``resends``: data frames repeating a chunk already received (SafeDealer resends, frames seen
  twice), counted when their message is emitted, plus frames of already completed messages;
- ``max_heartbeat_gap_s``: the longest interval, seconds, between consecutive heartbeats of one
  sender of the session ending in the window (the previous heartbeat may lie in an earlier
  window: the state keeps each sender's last one); null when none ended in it.

Connect frames carry session id 0, so session 0 gathers every handshake attempt of a capture.
Frames arriving after their window was emitted count in the oldest window still open (the
watermark's), so no window is emitted twice.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

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

__all__ = ["build_stream_sessions", "SessionWindows", "WINDOW_COUNTERS", "SESSION_WINDOW_SCHEMA"]

_DATA_FIELDS = ["part_count", "part_index", "message_size", "part_size", "chunk_offset"]
_KINDS = ["data", "connect", "connected", "disconnected", "heartbeat", "ack"]

#: per-window counters, in output order
WINDOW_COUNTERS = [f"frames_{k}" for k in _KINDS] + [
    "bytes", "messages_complete", "messages_incomplete", "message_bytes", "resends",
]

#: the sessions stream's rows (DDL; session_id is an exact unsigned DECIMAL(20,0))
SESSION_WINDOW_SCHEMA = (
    "capture string, session_id decimal(20,0), window_start timestamp, window_end timestamp, "
    + ", ".join(f"{c} long" for c in WINDOW_COUNTERS)
    + ", max_heartbeat_gap_s double"
)
_OUT_SCHEMA = SESSION_WINDOW_SCHEMA.replace("session_id decimal(20,0)", "session_id long")


class SessionWindows:
    """One session's streaming state: open windows, per-sender reassembly, last heartbeats.

    Args:
        window_ns: window length, ns of capture time.
    """

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self.windows: dict[int, dict[str, float]] = {}
        self.peers: dict[str, bytes] = {}
        self.last_heartbeat: dict[str, int] = {}

    def _window(self, ts_ns: int, floor_ns: int) -> dict[str, float]:
        start = max(ts_ns, floor_ns) // self.window_ns * self.window_ns
        w = self.windows.get(start)
        if w is None:
            w = self.windows[start] = dict.fromkeys(WINDOW_COUNTERS, 0)
            w["max_heartbeat_gap_s"] = float("nan")
        return w

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
            Closed windows as dicts (``window_start`` ns plus :data:`WINDOW_COUNTERS` and
            ``max_heartbeat_gap_s``), oldest first.
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
            beats = frames[frames["kind"] == 4]
            for src, t in zip(beats["src"].tolist(), beats["ts_ns"].tolist()):
                prev = self.last_heartbeat.get(src)
                if prev is not None and t >= prev:
                    w = self._window(t, floor)
                    gap = (t - prev) / 1e9
                    old = w["max_heartbeat_gap_s"]
                    w["max_heartbeat_gap_s"] = gap if old != old or gap > old else old
                self.last_heartbeat[src] = max(t, prev or t)
            data = frames[frames["kind"] == 0]
            senders = {str(s): g for s, g in data.groupby("src", sort=False)}
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
            if peer.empty():
                self.peers.pop(src, None)
            else:
                self.peers[src] = peer.to_bytes()
        closed = []
        if watermark_ns:
            for start in sorted(self.windows):
                if start + self.window_ns <= watermark_ns:
                    closed.append({"window_start": start, **self.windows.pop(start)})
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
        """True when no window is open and no message is held (heartbeat times are dropped)."""
        return not self.windows and not self.peers


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

    return frames.where(_decoded_or_end()).select(
        "capture",
        signed("session_id"),
        "kind",
        "length",
        addr_port("src_addr", "src_port").alias("src"),
        # control frames have no data header: zeros, so pandas keeps exact int64 columns
        F.coalesce(signed("message_id"), F.lit(0)).alias("message_id"),
        addr_port("dst_addr", "dst_port").alias("dst"),
        *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in _DATA_FIELDS],
        "payload", "ts_ns", "frame_number", "timestamp",
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
    out_columns = ["capture", "session_id", "window_start", "window_end", *WINDOW_COUNTERS, "max_heartbeat_gap_s"]

    def step(key: tuple, batches: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        session = pickle.loads(state.get[0]) if state.exists else SessionWindows(window_ns)
        new = [b[b["kind"].notna()] for b in batches]  # the end row only moved the watermark
        new = [b for b in new if len(b)]
        frames_pd = pd.concat(new, ignore_index=True) if new else None
        if frames_pd is None and not state.exists:
            return
        if frames_pd is not None:
            frames_pd["kind"] = frames_pd["kind"].astype(np.int64)
        watermark_ns = max(0, int(state.getCurrentWatermarkMs())) * 1_000_000
        capture, sid = str(key[0]), int(key[1])
        closed = session.advance((capture, _unsigned(sid)), frames_pd, watermark_ns, opts)
        if session.empty():
            state.remove()
        else:
            state.update((pickle.dumps(session),))
            deadline = session.next_deadline_ns(opts)
            if deadline is not None:
                state.setTimeoutTimestamp(max(deadline // 1_000_000 + 1, int(state.getCurrentWatermarkMs()) + 1))
        if closed:
            out = pd.DataFrame(closed)
            out.insert(0, "session_id", _signed(_unsigned(sid)))
            out.insert(0, "capture", capture)
            starts = out.pop("window_start").to_numpy(np.int64)
            out.insert(2, "window_start", pd.to_datetime(starts // 1000, unit="us", utc=True))
            out.insert(3, "window_end", pd.to_datetime((starts + window_ns) // 1000, unit="us", utc=True))
            for c in WINDOW_COUNTERS:
                out[c] = out[c].astype(np.int64)
            yield out[out_columns]

    out = data.groupBy("capture", "session_id").applyInPandasWithState(
        step, _OUT_SCHEMA, "state binary", "append", GroupStateTimeout.EventTimeTimeout
    )
    return out.select("capture", _to_u64("session_id"), *[F.col(c) for c in out_columns[2:]])
