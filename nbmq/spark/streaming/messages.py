"""Streaming messages: reassembly with state kept across micro-batches.

``build_stream_messages(frames)`` turns a streaming frames table into the messages table
(:func:`nbmq.spark.schema.messages_schema`), one row per message, with
``applyInPandasWithState`` grouped by peer ``(capture, session_id, src)``.

Why that operator and key: ``applyInPandasWithState`` runs on the default state store (no
RocksDB provider needed, unlike ``transformWithStateInPandas`` in PySpark 4.3) and hands each
group's new frames over as one pandas frame, so the per-call overhead is paid per peer and
batch, not per message. A peer is also what the socket budgets: its incomplete messages share
``max_incomplete_bytes``, as on a live socket (ARCHITECTURE: budgets are per peer).

Each message's row is computed by the batch pipeline's own reassembly
(:func:`nbmq.spark.messages.message_row`, the group loop of :func:`~nbmq.spark.messages.group_rows`),
over every frame of the message seen so far in capture order, so a streamed row equals the
batch row of the same frames. Rules, per peer:

- A completed message is held (its frames) until the watermark passes its completion (the
  capture time of the frame that completed it) plus ``completed_grace`` (default: the
  ``uncompleted_message_ttl``, the horizon within which the socket still sees a resend), and
  frames of it arriving meanwhile (duplicates, resends) are added, so its row equals the
  batch table's row of the same frames. The cost is latency: a message's row comes about
  ``watermark + completed_grace`` of capture time after it completed (20 s with the
  defaults); ``completed_grace=0`` emits it the micro-batch it completes, as before.
  After emission its id is remembered (a tombstone) for ``uncompleted_message_ttl``; frames
  of it arriving later are counted in :class:`PeerMessages` ``late_frames``, not emitted
  again (the batch table would count them in the row's ``frames`` / ``duplicates``).
- An incomplete message is kept in the state (its frames, payloads included) until the
  watermark passes its first frame's capture time plus ``uncompleted_message_ttl`` (seconds,
  default 10, the socket's), then emitted with ``complete = false``.
- Budget: pending messages are charged ``message_size + MESSAGE_OVERHEAD`` (the codec
  Reassembler's charge) in order of first capture time; one that does not fit in
  ``max_incomplete_bytes`` (default 64 MiB, the socket's) is dropped at once and emitted
  incomplete with all its frames counted as ``rejected``, as the socket refuses it.

Watermark: on the frames' ``timestamp`` (capture time), ``watermark`` delay (default 10 s).
The watermark only moves with newer frames, so the last messages of a finished capture stay
held; the source's ``end_row`` option (an ``availableNow`` run over finished captures) adds one
row after the data that moves the watermark past everything and flushes them.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ...options import DEFAULTS
from ..messages import FRAME_COLUMNS, MESSAGE_ROW_FIELDS  # frames kept with ids as signed int64

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "StreamMessageOptions",
    "PeerMessages",
    "build_stream_messages",
    "frames_for_messages",
    "MESSAGE_ROW_FIELDS",
]

_TWO64 = 1 << 64
_DATA_FIELDS = ["part_count", "part_index", "message_size", "part_size", "chunk_offset"]
_MAX_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class StreamMessageOptions:
    """Limits of the stateful reassembly (defaults: the socket's, ``nbmq.options``).

    Attributes:
        uncompleted_message_ttl: seconds of capture time an incomplete message is kept after
            its first frame.
        max_incomplete_bytes: budget of one peer's incomplete messages, bytes.
        max_message_size: larger claims are rejected, bytes (the batch table's default).
        watermark: how late a frame may arrive (Spark interval text), e.g. ``"10 seconds"``.
        completed_grace: seconds of capture time a completed message is held for late frames
            before its row is emitted (None: ``uncompleted_message_ttl``; 0: emit at once).
    """

    uncompleted_message_ttl: float = DEFAULTS["uncompleted_message_ttl"]
    max_incomplete_bytes: int = int(DEFAULTS["max_incomplete_bytes"])
    max_message_size: int = _MAX_U32
    watermark: str = "10 seconds"
    completed_grace: float | None = None

    def grace_ns(self) -> int:
        """``completed_grace`` in ns of capture time."""
        grace = self.uncompleted_message_ttl if self.completed_grace is None else self.completed_grace
        return int(grace * 1e9)


def _signed(u: int) -> int:
    return u - _TWO64 if u >= 1 << 63 else u


def _unsigned(s: int) -> int:
    return s + _TWO64 if s < 0 else s


@dataclass
class PeerMessages:
    """One peer's reassembly state between micro-batches (plain data; see :meth:`to_bytes`).

    Attributes:
        pending: frames of held messages, incomplete or completed (pandas, :data:`FRAME_COLUMNS`).
        held: completed, not yet emitted message id (signed int64) -> capture time of
            completion, ns.
        done: emitted completed message id (signed int64) -> capture time of completion, ns.
        late_frames: frames of already completed messages seen since (counted, dropped).
        dropped_budget: messages dropped because the peer's budget was full.
    """

    pending: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FRAME_COLUMNS))
    done: dict[int, int] = field(default_factory=dict)
    late_frames: int = 0
    dropped_budget: int = 0
    held: dict[int, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The state as Arrow IPC bytes (pending frames; ``done`` and counters as metadata)."""
        table = pa.Table.from_pandas(self.pending[FRAME_COLUMNS], schema=_FRAME_SCHEMA, preserve_index=False)
        meta = {
            b"done_ids": np.array(list(self.done), np.int64).tobytes().hex().encode(),
            b"done_ts": np.array(list(self.done.values()), np.int64).tobytes().hex().encode(),
            b"late": str(self.late_frames).encode(),
            b"dropped": str(self.dropped_budget).encode(),
            b"held_ids": np.array(list(self.held), np.int64).tobytes().hex().encode(),
            b"held_ts": np.array(list(self.held.values()), np.int64).tobytes().hex().encode(),
        }
        table = table.replace_schema_metadata(meta)
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> PeerMessages:
        """Inverse of :meth:`to_bytes`."""
        table = pa.ipc.open_stream(data).read_all()
        meta = table.schema.metadata or {}
        ids = np.frombuffer(bytes.fromhex(meta.get(b"done_ids", b"").decode()), np.int64)
        ts = np.frombuffer(bytes.fromhex(meta.get(b"done_ts", b"").decode()), np.int64)
        held_ids = np.frombuffer(bytes.fromhex(meta.get(b"held_ids", b"").decode()), np.int64)
        held_ts = np.frombuffer(bytes.fromhex(meta.get(b"held_ts", b"").decode()), np.int64)
        return cls(
            table.to_pandas(),
            dict(zip(ids.tolist(), ts.tolist())),
            int(meta.get(b"late", b"0")),
            int(meta.get(b"dropped", b"0")),
            dict(zip(held_ids.tolist(), held_ts.tolist())),
        )

    def advance(
        self,
        key: tuple[str, int, str],
        frames: pd.DataFrame | None,
        watermark_ns: int,
        options: StreamMessageOptions,
    ) -> list[tuple]:
        """Add a micro-batch's frames of this peer; return the message rows now final.

        Args:
            key: ``(capture, session_id as u64, src)``.
            frames: new data frames of the peer (:data:`FRAME_COLUMNS`; may be None or empty).
            watermark_ns: the query's watermark, ns of capture time (0: none yet).
            options: TTL, budget, size limit and the grace of completed messages.

        Returns:
            Rows in :data:`MESSAGE_ROW_FIELDS` order (ids as u64 ints, times in µs).
        """
        from ..messages import _Group, message_row

        capture, sid, src = key
        ttl_ns = int(options.uncompleted_message_ttl * 1e9)
        grace_ns = options.grace_ns()
        parts = [self.pending]
        fresh: set[int] = set()
        if frames is not None and len(frames):
            new = frames[FRAME_COLUMNS]
            late = new["message_id"].isin(list(self.done)) if self.done else None
            if late is not None and late.any():
                self.late_frames += int(late.sum())
                new = new[~late]
            parts.append(new)
            fresh = set(new["message_id"].tolist())
        every = (
            pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else self.pending
        )
        rows: list[tuple] = []
        keep: list[pd.DataFrame] = []
        if len(every):
            every = every.sort_values(["ts_ns", "frame_number"], kind="stable")
            groups = sorted(every.groupby("message_id", sort=False), key=lambda g: int(g[1]["ts_ns"].iloc[0]))
            budget = options.max_incomplete_bytes
            from ... import codec

            for mid, g in groups:
                held_ns = self.held.get(int(mid))
                if (
                    held_ns is not None
                    and int(mid) not in fresh
                    and not (watermark_ns and held_ns + grace_ns < watermark_ns)
                ):
                    keep.append(g)  # held, nothing new, not due: its row is not needed yet
                    continue
                group = _Group((capture, sid, src, _unsigned(int(mid))), str(g["dst"].iloc[0]))
                group.rows = list(
                    zip(
                        *(
                            g[c].tolist()
                            for c in ("part_count", "part_index", "message_size", "part_size", "chunk_offset", "ts_ns")
                        )
                    )
                )
                group.chunks = [memoryview(p) for p in g["payload"].tolist()]
                row = message_row(group, False, options.max_message_size)
                first_ns = int(g["ts_ns"].iloc[0])
                if row[9]:  # complete: held for late frames until the grace has passed
                    done_ns = self.held.pop(int(mid), int(g["ts_ns"].max()))
                    if grace_ns and not (watermark_ns and done_ns + grace_ns < watermark_ns):
                        self.held[int(mid)] = done_ns
                        keep.append(g)
                    else:
                        rows.append(row)
                        self.done[int(mid)] = done_ns
                    continue
                self.held.pop(int(mid), None)  # a late frame the reassembly rejects: incomplete again
                charge = int(g["message_size"].iloc[0]) + codec.MESSAGE_OVERHEAD
                if charge > budget:
                    self.dropped_budget += 1
                    rows.append(row[:13] + (len(g),) + row[14:])
                elif watermark_ns and first_ns + ttl_ns < watermark_ns:
                    rows.append(row)
                else:
                    budget -= charge
                    keep.append(g)
        self.pending = pd.concat(keep, ignore_index=True) if keep else pd.DataFrame(columns=FRAME_COLUMNS)
        if watermark_ns:
            self.done = {m: t for m, t in self.done.items() if t + grace_ns + ttl_ns >= watermark_ns}
        return rows

    def next_deadline_ns(self, options: StreamMessageOptions) -> int | None:
        """Capture time at which the watermark must wake this peer (expiry), ns; None: never."""
        ttl_ns = int(options.uncompleted_message_ttl * 1e9)
        grace_ns = options.grace_ns()
        times = [t + grace_ns + ttl_ns for t in self.done.values()]
        times += [t + grace_ns for t in self.held.values()]
        if len(self.pending):
            times.append(int(self.pending.groupby("message_id")["ts_ns"].min().min()) + ttl_ns)
        return min(times) + 1 if times else None

    def empty(self) -> bool:
        """True when nothing is held (the state can be removed)."""
        return not len(self.pending) and not self.done


_FRAME_SCHEMA = pa.schema(
    [
        ("message_id", pa.int64()),
        ("dst", pa.string()),
        ("part_count", pa.int32()),
        ("part_index", pa.int32()),
        ("message_size", pa.int64()),
        ("part_size", pa.int64()),
        ("chunk_offset", pa.int64()),
        ("payload", pa.binary()),
        ("ts_ns", pa.int64()),
        ("frame_number", pa.int64()),
    ]
)

#: messages rows as the stateful step emits them: u64 ids as signed longs (converted after)
_OUT_SCHEMA = (
    "capture string, session_id long, src string, dst string, message_id long, part_count int, "
    "message_size long, part_sizes array<long>, part_sha256 array<string>, complete boolean, "
    "missing_bytes long, frames long, duplicates long, rejected long, first_ts timestamp, "
    "last_ts timestamp"
)
_STATE_SCHEMA = "state binary"


def rows_frame(rows: Iterable[tuple]) -> pd.DataFrame:
    """Message row tuples -> a pandas frame of the step's output schema (ids signed)."""
    cols = list(zip(*rows)) if rows else [[] for _ in MESSAGE_ROW_FIELDS]
    data = dict(zip(MESSAGE_ROW_FIELDS, cols))
    data.pop("parts")
    out = pd.DataFrame(data)
    if len(out):
        out["session_id"] = [_signed(int(v)) for v in out["session_id"]]
        out["message_id"] = [_signed(int(v)) for v in out["message_id"]]
        for c in ("first_ts", "last_ts"):
            out[c] = pd.to_datetime(np.asarray(out[c], np.int64), unit="us", utc=True)
    return out


def frames_for_messages(frames: DataFrame) -> DataFrame:
    """The decoded frames of a (streaming) frames table, in the stateful step's columns."""
    from pyspark.sql import functions as F

    from ..messages import addr_port

    def signed(name: str) -> Any:
        c = F.col(name)
        return F.when(c >= _dec(1 << 63), c - _dec(_TWO64)).otherwise(c).cast("long").alias(name)

    # Control frames come too (zeros in the data columns, dropped by the step): they move the
    # watermark, so a peer's incomplete messages expire while only heartbeats flow. Secure
    # mode's data frames do not: their chunks are ciphertext (reassembled_frames' rule).
    sealed_data = F.coalesce((F.col("kind") == 0) & F.col("secure"), F.lit(False))
    return frames.where(_decoded_or_end() & ~sealed_data).select(
        "capture",
        signed("session_id"),
        addr_port("src_addr", "src_port").alias("src"),
        "kind",
        F.coalesce(signed("message_id"), F.lit(0)).alias("message_id"),
        addr_port("dst_addr", "dst_port").alias("dst"),
        *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in _DATA_FIELDS],
        "payload",
        "ts_ns",
        "frame_number",
        "timestamp",
    )


def _decoded_or_end() -> Any:
    """Decoded frames, and the source's end and idle rows (they move the watermark; the steps
    drop them)."""
    from pyspark.sql import functions as F

    from .source import END_OF_DATA, IDLE_PREFIX

    return F.col("error").isNull() | (F.col("error") == F.lit(END_OF_DATA)) | F.col("error").startswith(IDLE_PREFIX)


def _dec(value: int) -> Any:
    """A decimal(21,0) literal (py4j cannot pass ints past a Java long)."""
    from pyspark.sql import functions as F

    return F.lit(str(value)).cast("decimal(21,0)")


def _to_u64(name: str) -> Any:
    from pyspark.sql import functions as F

    c = F.col(name).cast("decimal(20,0)")
    return F.when(c < 0, c + _dec(_TWO64)).otherwise(c).cast("decimal(20,0)").alias(name)


def build_stream_messages(frames: DataFrame, options: StreamMessageOptions | None = None) -> DataFrame:
    """The streaming messages table of a streaming frames table (needs ``payload``).

    Args:
        frames: ``spark.readStream.format("nbmq").load(DIR)`` (or any frames stream).
        options: limits and watermark; default :class:`StreamMessageOptions`.

    Returns:
        A streaming DataFrame of :func:`nbmq.spark.schema.messages_schema` (without
        ``parts``); write it in ``append`` mode.
    """
    from pyspark.sql.streaming.state import GroupStateTimeout

    opts = options or StreamMessageOptions()
    data = frames_for_messages(frames).withWatermark("timestamp", opts.watermark)

    def step(key: tuple, batches: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        peer = PeerMessages.from_bytes(state.get[0]) if state.exists else PeerMessages()
        new = [b[b["kind"] == 0] for b in batches]
        new = [b for b in new if len(b)]
        frames_pd = pd.concat(new, ignore_index=True) if new else None
        watermark_ns = max(0, int(state.getCurrentWatermarkMs())) * 1_000_000
        capture, sid, src = key
        if frames_pd is None and not state.exists:
            return
        rows = peer.advance((str(capture), _unsigned(int(sid)), str(src)), frames_pd, watermark_ns, opts)
        if peer.empty():
            state.remove()
        else:
            state.update((peer.to_bytes(),))
            deadline = peer.next_deadline_ns(opts)
            if deadline is not None:
                state.setTimeoutTimestamp(max(deadline // 1_000_000 + 1, int(state.getCurrentWatermarkMs()) + 1))
        if rows:
            yield rows_frame(rows)

    out = data.groupBy("capture", "session_id", "src").applyInPandasWithState(
        step, _OUT_SCHEMA, _STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
    )
    from pyspark.sql import functions as F

    from ..schema import messages_schema

    names = messages_schema().fieldNames()
    converted = {"session_id": _to_u64("session_id"), "message_id": _to_u64("message_id")}
    return out.select(*[converted.get(n, F.col(n)) for n in names])
