"""``nbmq monitor DIR``: live per-session health of a folder of growing captures.

Runs the streaming sessions query (:func:`nbmq.spark.streaming.session_windows.build_stream_sessions`)
over ``spark.readStream.format("nbmq").load(DIR)`` and, after each micro-batch, redraws a rich
table in the terminal: one line per session with its latest closed window and totals since the
start. A capture that stops growing for ``--idle`` seconds gets its last windows closed (the
source's idle row moves the watermark past it), so the totals reach the batch pipeline's within
``--idle`` plus two triggers of the last append, also when a peer dies. ``--out DIR`` also
appends every window row to Parquet. Stops on Ctrl-C, after ``--batches`` micro-batches or
``--timeout`` seconds.

A subcommand module of the ``nbmq`` command (contract: ``HELP``, ``add_arguments(parser)``,
``run(args) -> int``; standard-library imports only at the top level).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from typing import Any

HELP = "live per-session health of a folder of growing captures (Spark Structured Streaming)"

__all__ = ["HELP", "add_arguments", "run", "MonitorTable", "interval_seconds"]

_UNITS = {
    "ms": 1e-3,
    "millisecond": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
}


def interval_seconds(text: str) -> float:
    """A Spark interval such as ``"2 seconds"`` or ``"500 milliseconds"`` in seconds.

    Raises:
        ValueError: the text is not a number and a unit (ms, s, min, h, or their words).
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-z]+?)s?\s*", text.lower())
    if m is None or m.group(2) not in _UNITS:
        raise ValueError(f"not an interval: {text!r} (say e.g. '2 seconds')")
    return float(m.group(1)) * _UNITS[m.group(2)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``nbmq monitor``'s arguments to ``parser``."""
    parser.add_argument("dir", metavar="DIR", help="folder the capture tool writes its ring of pcap/pcapng files to")
    parser.add_argument("--window", type=float, default=1.0, help="window length, seconds of capture time (default 1)")
    parser.add_argument("--watermark", default="2 seconds", help="how late a frame may arrive (default '2 seconds')")
    parser.add_argument("--trigger", type=float, default=1.0, help="seconds between micro-batches (default 1)")
    parser.add_argument(
        "--idle",
        type=float,
        default=2.0,
        help="close a capture's open windows once it has not grown for this many seconds (default 2; 0: never)",
    )
    parser.add_argument("--out", help="also append every window row to Parquet in this folder")
    parser.add_argument("--checkpoint", help="checkpoint folder (default: a temporary one; give one to resume)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--batches", type=int, default=0, help="stop after this many micro-batches (0: never)")
    parser.add_argument("--timeout", type=float, default=0.0, help="stop after this many seconds (0: never)")
    parser.add_argument("--available-now", action="store_true", help="read what is on disk now, then stop")
    parser.add_argument(
        "--final",
        action="store_true",
        help="with --available-now: the captures are finished, close every window at the end (the source's "
        "end_row; a checkpoint given with --checkpoint then drops later frames as late)",
    )
    parser.add_argument("--no-live", action="store_true", help="print the table after each batch instead of redrawing")


class MonitorTable:
    """The monitor's view: per session, the latest window and running totals.

    ``add(rows)`` takes window rows (dicts with the sessions stream's columns); ``render()``
    returns a ``rich.table.Table``.
    """

    def __init__(self) -> None:
        self.sessions: dict[tuple[str, int], dict[str, Any]] = {}  # (capture, session id) -> view
        self.batches = 0
        self.windows = 0

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Fold a micro-batch's window rows into the view."""
        self.batches += 1
        for row in sorted(rows, key=lambda r: r["window_start"]):
            self.windows += 1
            key = (row["capture"], int(row["session_id"]))
            s = self.sessions.setdefault(key, {"totals": {}, "last": None, "max_silence": None})
            for name, value in row.items():
                if (
                    name.startswith(("frames_", "messages_"))
                    and name != "messages_in_flight"
                    or name in ("bytes", "message_bytes", "resends")
                ):
                    s["totals"][name] = s["totals"].get(name, 0) + int(value or 0)
            s["last"] = row
            silence = row.get("max_silence_s")
            if silence is not None and silence == silence and (s["max_silence"] is None or silence > s["max_silence"]):
                s["max_silence"] = silence

    def render(self) -> Any:
        """A ``rich.table.Table`` of the sessions (latest window's frames and bytes, totals)."""
        from rich.table import Table

        table = Table(
            title=f"nbmq monitor: {len(self.sessions)} sessions, {self.windows} windows, {self.batches} batches"
        )
        for col in (
            "capture",
            "session",
            "window end",
            "frames/win",
            "bytes/win",
            "frames",
            "data",
            "hb",
            "acks",
            "msgs ok",
            "msgs incompl.",
            "in flight",
            "resends",
            "max silence s",
            "peers",
        ):
            table.add_column(col, justify="left" if col in ("capture", "session", "window end", "peers") else "right")
        for (capture, sid), s in sorted(self.sessions.items()):
            last, t = s["last"], s["totals"]
            frames_win = sum(int(last[k] or 0) for k in last if k.startswith("frames_"))
            state = (
                "disconnected"
                if t.get("frames_disconnected")
                else (f"{last.get('silent_peers')} silent" if last.get("silent_peers") else "alive")
            )
            table.add_row(
                capture,
                f"{sid:016x}",
                str(last["window_end"])[:23],
                str(frames_win),
                str(last["bytes"]),
                str(sum(v for k, v in t.items() if k.startswith("frames_"))),
                str(t.get("frames_data", 0)),
                str(t.get("frames_heartbeat", 0)),
                str(t.get("frames_ack", 0)),
                str(t.get("messages_complete", 0)),
                str(t.get("messages_incomplete", 0) + int(last.get("messages_in_flight") or 0)),
                str(last.get("messages_in_flight") or 0),
                str(t.get("resends", 0)),
                "-" if s["max_silence"] is None else f"{s['max_silence']:.3f}",
                state,
            )
        return table


def run(args: argparse.Namespace) -> int:
    """Run the monitor until Ctrl-C, ``--batches`` or ``--timeout``; returns the exit code.

    Returns:
        0 after a normal stop, 2 when DIR is not a folder, 1 when the query failed.
    """
    if not os.path.isdir(args.dir):
        print(f"nbmq monitor: {args.dir!r} is not a folder", file=sys.stderr)
        return 2
    try:  # the idle row moves the watermark past the capture's last window
        advance = interval_seconds(args.watermark) + args.window
    except ValueError as exc:
        print(f"nbmq monitor: --watermark: {exc}", file=sys.stderr)
        return 2
    try:
        from rich.console import Console
        from rich.live import Live

        from ..spark.spark_session import build_session
        from ..spark.streaming import register
        from ..spark.streaming.messages import StreamMessageOptions
        from ..spark.streaming.session_windows import build_stream_sessions
    except ImportError as exc:  # pragma: no cover - depends on the install
        print(f"nbmq monitor needs the spark extra (pip install 'nbmq[spark]'): {exc}", file=sys.stderr)
        return 1

    spark = build_session(args.master, app_name="nbmq-monitor", conf={"spark.sql.shuffle.partitions": "2"})
    register(spark)
    view = MonitorTable()
    console = Console()
    if not console.is_terminal:  # a pipe or a log: no terminal width to fit, print whole cells
        console = Console(width=200)
    lock = threading.Lock()
    done = threading.Event()
    out = args.out

    def each_batch(df: Any, batch_id: int) -> None:
        if out:
            df.write.mode("append").parquet(out)
        rows = [r.asDict() for r in df.collect()]
        with lock:
            view.add(rows)
            if args.batches and view.batches >= args.batches:
                done.set()

    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="nbmq-monitor-")
    reader = spark.readStream.format("nbmq").option("end_row", str(bool(args.available_now and args.final)).lower())
    if args.idle > 0 and not args.available_now:
        reader = reader.option("idle_seconds", str(args.idle)).option("idle_advance_seconds", str(advance))
    frames = reader.load(os.path.abspath(args.dir))
    sessions = build_stream_sessions(frames, args.window, StreamMessageOptions(watermark=args.watermark))
    writer = sessions.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint)
    writer = (
        writer.trigger(availableNow=True)
        if args.available_now
        else writer.trigger(processingTime=f"{args.trigger} seconds")
    )
    query = writer.start()
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    shown = -1
    code = 0
    live = None if args.no_live else Live(view.render(), console=console, refresh_per_second=4)
    try:
        if live is not None:
            live.start()
        while query.isActive and not done.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            query.awaitTermination(0.25)
            with lock:
                if view.batches != shown:
                    shown = view.batches
                    if live is not None:
                        live.update(view.render())
                    else:
                        console.print(view.render())
    except KeyboardInterrupt:
        pass
    finally:
        with lock:
            if live is not None:
                live.update(view.render())
                live.stop()
            elif view.batches != shown:
                console.print(view.render())
        if query.exception() is not None:
            print(f"nbmq monitor: the query failed: {query.exception()}", file=sys.stderr)
            code = 1
        query.stop()
    return code
