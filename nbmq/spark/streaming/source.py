"""``spark.readStream.format("nbmq").load(DIR)``: the frames table of a folder of growing captures.

The folder is what ``dumpcap -b filesize:.. -b files:..`` or ``tcpdump -C .. -W ..`` write: a
ring of pcap / pcapng files, the newest growing, the oldest deleted. Each micro-batch reads the
records added since the last one, as rows of :data:`nbmq.spark.schema.FRAMES_SCHEMA` (the batch
source's rows, frame numbers included).

Offsets (JSON, in the query's checkpoint): ``{"files": {name: [end, records, ...]}}`` per
capture file of the folder (:class:`~nbmq.spark.streaming.ringfiles.FileOffset`), ``end`` the
byte offset just past the last *whole* record
(:func:`~nbmq.spark.streaming.boundaries.whole_records`) and ``records`` the records before it.
A record still being written is therefore read by the next batch, whole; a restarted query
resumes at its checkpoint's offsets, so no frame is read twice or lost.

Rotation: a file that disappears after it was read is dropped from the offsets. A file that
disappears between planning and reading (the ring turned faster than the query) cannot be
read: its partition yields one row whose ``error`` says ``capture: rotated away ...`` with the
bytes lost, so the loss is visible. A file truncated or rewritten under the same name
(``tcpdump -W``; shorter than its offset, or other first bytes) is a new file read from byte 0,
and the old file's bytes seen but not read are one error row ``capture: replaced under the
same name (N bytes of the old file lost)`` (:mod:`~nbmq.spark.streaming.ringfiles`).

Damage: the offsets resynchronise past a damaged record or block as the batch readers do, so
a stream over a damaged file gives the batch read's frames and one error row per damage. A
decision that more bytes could still change waits at the damage until they come, or until
the file is final: an ``availableNow`` run, or a file older (mtime) than the folder's newest.
A pcapng reader maps the size the planner walked, so it words damage from the same bytes. A
pcapng block whose both lengths are wrong and whose leading one runs past the bytes on disk is
skipped once four whole blocks follow a settled resynchronisation (the frames behind it are not
held back); its error row comes in the batch where the file reaches the claimed end (``block
lengths differ``) or turns final (``truncated block``), the batch read's wording.

End of data: with ``end_row`` (``"true"``) an ``availableNow`` run adds, after the data, one
row whose ``error`` is :data:`END_OF_DATA` and whose ``timestamp`` is :data:`END_TIMESTAMP`
(2200-01-01): it moves the watermark of the streaming messages and sessions past everything,
so they emit what they hold (completed messages waiting for late frames, incomplete ones,
open windows). Use it over finished captures only: the watermark stays there, so the same
checkpoint drops any later frame as late.

Idle captures: with ``idle_seconds`` (default 0: off) a capture file that has not grown for that
many seconds of processing time, all of it read, gets one row whose ``error`` starts with
:data:`IDLE_PREFIX` and whose ``timestamp`` is its last frame's plus ``idle_advance_seconds``
(give the watermark delay plus the window: the watermark then passes that file's last window,
so the streaming sessions close it although no later frame will come; ``nbmq monitor --idle``).
The row comes once per pause: the file must grow before it gets another. Frames that come after
it count in the oldest window still open, so no frame is lost.

Options: ``path`` (the folder; a file or glob also works), ``payload``, ``udp_ports``,
``batch_rows`` as for the batch source; ``split_bytes`` (default 16 MiB: a larger new range of
one pcap file is cut at record boundaries into several partitions); ``max_bytes_per_trigger``
(default unlimited: a batch takes whole files' new ranges, in name order, until it has this many
bytes, at least one range); ``end_row`` (default false, see above); ``idle_seconds`` and
``idle_advance_seconds`` (see above).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..datasource import DEFAULT_BATCH_ROWS, NbmqDataSource, expand_paths, frames_request
from .ringfiles import FileOffset, fingerprint, replaced

__all__ = ["NbmqStreamingDataSource", "NbmqStreamReader", "StreamRange", "read_stream_range", "IDLE_PREFIX"]

DEFAULT_STREAM_SPLIT_BYTES = 16 * 1024 * 1024
#: ``error`` of the ``end_row`` option's row
END_OF_DATA = "end of data"
#: ``timestamp`` of the ``end_row`` option's row, seconds since the epoch (2200-01-01 UTC)
END_TIMESTAMP = 7_258_118_400
#: ``error`` of an idle capture's row (``idle_seconds``), followed by the seconds it waited
IDLE_PREFIX = "idle: no growth for"


@dataclass(frozen=True)
class StreamRange(InputPartition):
    """One partition of a micro-batch: the whole records of ``path`` in ``[start, end)``.

    Attributes:
        path: absolute path of the capture.
        start: first byte (0: from the file header), a record boundary.
        end: byte offset just past the last whole record to read.
        first_frame: frame number of the first record at or after ``start``.
        fp_len, fp_crc: the file's fingerprint when planned
            (:func:`~nbmq.spark.streaming.ringfiles.fingerprint`; 0: not checked).
        error: when set, the partition is this one error row (a loss found while planning).
        size: pcapng: the file's size the planner walked, bytes; the reader maps that much
            and reads the blocks starting in ``[start, end)``, so it decides damage on the
            planner's bytes (0: map ``end`` bytes).
        defer_at: a damage in the range whose error row waits for its text (not emitted
            here: a later batch's error partition says it; 0: none).
    """

    path: str
    start: int
    end: int
    first_frame: int
    fp_len: int = 0
    fp_crc: int = 0
    error: str = ""
    size: int = 0
    defer_at: int = 0
    idle_advance_ns: int = 0


class NbmqStreamingDataSource(NbmqDataSource):
    """The ``nbmq`` data source with a stream reader: batch reads are the parent's, unchanged."""

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        return NbmqStreamReader(dict(self.options), schema)


def _files(paths: list[str]) -> list[str]:
    """The local, uncompressed captures named by ``paths`` (a growing file is read by byte
    offset, which a compressed or remote file does not allow)."""
    try:
        found = expand_paths(paths)
    except FileNotFoundError:  # a glob before the first file of the ring exists
        return []
    return [p for p in found if os.path.isabs(p) and not p.lower().endswith(".gz")]


class NbmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets over a folder of growing captures (see the module docstring).

    Args:
        options: the source's options (``path`` required).
        schema: the requested frames columns (any subset of ``FRAMES_SCHEMA``).

    Raises:
        ValueError: no path, or an unknown column.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.paths = frames_request(options, schema, "nbmq stream source", "a folder: .load(DIR)")
        self.schema = schema
        self.batch_rows = max(1, int(options.get("batch_rows", DEFAULT_BATCH_ROWS)))
        self.split_bytes = int(options.get("split_bytes", DEFAULT_STREAM_SPLIT_BYTES))
        self.max_bytes = int(options.get("max_bytes_per_trigger", 0))
        self.end_row = str(options.get("end_row", "false")).lower() == "true"
        self.idle_seconds = float(options.get("idle_seconds", 0))
        self.idle_advance_ns = int(float(options.get("idle_advance_seconds", 0)) * 1e9)
        # name -> (size, monotonic time it was last seen to change), for idle_seconds
        self._grown: dict[str, tuple[int, float]] = {}
        ports = options.get("udp_ports", "")
        self.udp_ports = [int(p) for p in ports.split(",") if p.strip()] or None
        self._target: dict[str, list[int]] | None = None
        self._final = False
        # name -> (start, Boundary) of the last walk, for partitions() of the same range
        self._walked: dict[str, tuple[int, Any]] = {}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """``availableNow``: read up to the whole records on disk now, and no further."""
        self._target = None
        self._final = True
        try:
            self._target = self.latestOffset({"files": {}}, None)["files"]
        finally:
            self._final = False

    def initialOffset(self) -> dict:  # noqa: N802
        return {"files": {}}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: N802
        """Walk each file from its known boundary to its last whole record.

        Files gone from the folder leave the offsets; with ``max_bytes_per_trigger`` the later
        files keep their old boundary until a later batch.
        """
        from ...errors import CaptureError
        from .boundaries import Deferred, whole_records

        known: dict[str, list[int]] = dict((start or {}).get("files", {}))
        budget = _byte_budget(limit)
        out: dict[str, list[int]] = {}
        folder = self._folder()
        files = _files(self.paths)
        mtimes = {p: _mtime(p) for p in files}
        newest = max(mtimes.values(), default=0)
        for path in files:
            name = os.path.relpath(path, folder)
            off = FileOffset.parse(known.get(name))
            if budget is not None and budget <= 0:
                out[name] = off.to_json()
                continue
            # a file older than the newest one will not grow (the ring moved on): its end decides
            final = self._final or self._target is not None or mtimes[path] < newest
            generation, lost, end, records = off.generation, 0, off.end, off.records
            pending = Deferred(off.defer_at, off.defer_to, off.defer_trailing) if off.defer_at else None
            try:
                size = os.path.getsize(path)
                if name in known and replaced(path, size, off):  # truncated or rewritten in place
                    generation, lost, end, records = generation + 1, max(0, off.seen - off.end), 0, 0
                    pending = None  # the old file's damage: its bytes are counted lost
                b = whole_records(path, end, records, final=final, pending=pending)
                self._walked[name] = (end, b)
                fp_len, fp_crc = fingerprint(path, b.end)
            except (OSError, CaptureError):  # rotated away, or not (yet) a capture
                if name in known:
                    out[name] = off.to_json()
                continue
            if self._target is not None:
                cap = self._target.get(name, [0, 0])
                b = b if b.end <= cap[0] else type(b)(cap[0], cap[1])
                if b.end < end:
                    b = type(b)(end, records)
            d = b.deferred
            out[name] = FileOffset(
                b.end,
                b.records,
                generation,
                fp_len,
                fp_crc,
                max(size, b.size),
                lost,
                *((d.at, d.to, d.trailing) if d else ()),
            ).to_json()
            if budget is not None:
                budget -= b.end - end
        result: dict[str, Any] = {"files": out}
        idle = self._idle(out, dict((start or {}).get("idle", {})))
        if idle:
            result["idle"] = idle
        if (
            self.end_row
            and self._target is not None
            and all(out.get(n, [0])[0] >= t[0] for n, t in self._target.items())
        ):
            result["end"] = 1  # everything read: the end row comes with this batch
        return result

    def _idle(self, files: dict[str, list[int]], before: dict[str, int]) -> dict[str, int]:
        """Name -> read end of the files idle for ``idle_seconds`` with every byte read (kept
        while they stay so, so each pause gives one row)."""
        if self.idle_seconds <= 0 or self._target is not None:
            return {}
        import time

        now = time.monotonic()
        folder = self._folder()
        idle: dict[str, int] = {}
        for name, value in files.items():
            off = FileOffset.parse(value)
            try:
                size = os.path.getsize(os.path.join(folder, name))
            except OSError:
                continue
            seen = self._grown.get(name)
            if seen is None or seen[0] != size:
                self._grown[name] = (size, now)
                seen = self._grown[name]
            if before.get(name) == off.end or (size == off.end and off.end > 0 and now - seen[1] >= self.idle_seconds):
                idle[name] = off.end
        return idle

    def partitions(self, start: dict, end: dict) -> list[StreamRange]:
        from .boundaries import Deferred, record_starts

        before = start.get("files", {})
        folder = self._folder()
        parts: list[StreamRange] = []
        if end.get("end") and not start.get("end"):
            parts.append(StreamRange("", 0, 0, 0, error=END_OF_DATA))
        for name, at in sorted(end.get("idle", {}).items()):
            if start.get("idle", {}).get(name) != at:
                parts.append(
                    StreamRange(
                        os.path.join(folder, name),
                        0,
                        at,
                        0,
                        error=f"{IDLE_PREFIX} {self.idle_seconds:g} s",
                        idle_advance_ns=self.idle_advance_ns,
                    )
                )
        for name, value in sorted(end.get("files", {}).items()):
            to, since = FileOffset.parse(value), FileOffset.parse(before.get(name))
            path = os.path.join(folder, name)
            if to.generation != since.generation:  # replaced under its name: a new file from 0
                if to.lost:
                    parts.append(
                        StreamRange(
                            path,
                            0,
                            0,
                            0,
                            error=(f"capture: replaced under the same name ({to.lost} bytes of the old file lost)"),
                        )
                    )
                since = FileOffset(0, 0)
            if since.defer_at and to.defer_at != since.defer_at and to.generation == since.generation:
                told = Deferred(since.defer_at, since.defer_to, since.defer_trailing).text(to.seen)
                parts.append(StreamRange(path, 0, 0, 0, error=f"capture: {told}"))  # decided now
            if to.end <= since.end:
                continue
            defer = to.defer_at if to.defer_at != since.defer_at and since.end <= to.defer_at < to.end else 0
            walked = self._walked.get(name)
            starts = walked[1].starts if walked and walked[0] == since.end and walked[1].end >= to.end else None
            try:
                pieces = (
                    record_starts(path, since.end, to.end, self.split_bytes, starts)
                    if self.split_bytes > 0
                    else [(since.end, 0)]
                )
            except OSError:
                pieces = [(since.end, 0)]
            bounds = [p for p, _ in pieces[1:]] + [to.end]
            for (lo, skip), hi in zip(pieces, bounds):
                parts.append(
                    StreamRange(
                        path, lo, hi, since.records + skip + 1, to.fp_len, to.fp_crc, size=to.seen, defer_at=defer
                    )
                )
        return parts

    def _folder(self) -> str:
        path = self.paths[0]
        if path.startswith("file://"):
            path = path[len("file://") :]
        path = os.path.abspath(path)
        return path if os.path.isdir(path) else os.path.dirname(path)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamRange)
        yield from read_stream_range(partition, self.schema, self.batch_rows, self.udp_ports)

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

        return ReadMaxBytes(self.max_bytes) if self.max_bytes > 0 else ReadAllAvailable()

    def commit(self, end: dict) -> None:
        """Nothing to release: the files belong to the capture tool."""


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _end_row(arrow_schema: pa.Schema) -> pa.RecordBatch:
    values = {
        "capture": "",
        "error": END_OF_DATA,
        "timestamp": END_TIMESTAMP * 1_000_000,
        "ts_ns": END_TIMESTAMP * 1_000_000_000,
    }
    columns = [pa.array([values.get(f.name)], f.type) for f in arrow_schema]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def _idle_row(
    part: StreamRange, capture: str, arrow_schema: pa.Schema, udp_ports: list[int] | None
) -> pa.RecordBatch | None:
    """The idle row of ``part.path``: its last frame's time plus ``part.idle_advance_ns``; None
    when the file holds no frame (or is gone: nothing waits for it then)."""
    from ...capture import read_datagrams
    from ...errors import CaptureError

    try:
        with open(part.path, "rb") as f:
            data = f.read(part.end)
        batch = read_datagrams(data, udp_ports=udp_ports)
    except (OSError, CaptureError):
        return None
    if not len(batch):
        return None
    ts_ns = int(batch.timestamp_ns.max()) + part.idle_advance_ns
    values = {"capture": capture, "error": part.error, "timestamp": ts_ns // 1000, "ts_ns": ts_ns}
    columns = [pa.array([values.get(f.name)], f.type) for f in arrow_schema]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def _byte_budget(limit: Any) -> int | None:
    from pyspark.sql.streaming.datasource import ReadMaxBytes

    return int(limit.max_bytes) if isinstance(limit, ReadMaxBytes) else None


def read_stream_range(
    part: StreamRange,
    schema: StructType,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    udp_ports: list[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Read the whole records of one :class:`StreamRange` into frames-table record batches.

    The file is memory-mapped and cut at ``part.end``, so bytes appended meanwhile (the next
    record, maybe half written) are not seen. Runs on the executors.

    Yields:
        Arrow record batches of ``schema``; one error row if the file has rotated away or is not
        a capture (reason starting with ``"capture: "``).
    """
    import mmap

    from pyspark.sql.pandas.types import to_arrow_schema

    from ...capture import read_datagrams
    from ...capture.files.formats import detect_format
    from ...errors import CaptureError
    from ..datasource import _capture_error_batch, read_frames_batches

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    capture = os.path.basename(part.path)
    if part.error == END_OF_DATA:
        yield _end_row(arrow_schema)
        return
    if part.error.startswith(IDLE_PREFIX):
        row = _idle_row(part, capture, arrow_schema, udp_ports)
        if row is not None:
            yield row
        return
    if part.error:
        yield _capture_error_batch(capture, [part.error], 1, arrow_schema)
        return
    try:
        fd = os.open(part.path, os.O_RDONLY)
    except FileNotFoundError:
        lost = part.end - part.start
        yield _capture_error_batch(
            capture, [f"capture: rotated away before it was read ({lost} bytes lost)"], 1, arrow_schema
        )
        return
    pcap, mapped = True, part.end
    try:
        try:
            pcap = detect_format(os.pread(fd, 4, 0), 4) == "pcap"
        except CaptureError:  # not a capture: the read below words the error row
            pass
        # pcapng: the planner's bytes, so damage is decided (and its text worded) as planned
        mapped = part.end if pcap or part.size < part.end else part.size
        mm = mmap.mmap(fd, mapped, prot=mmap.PROT_READ)
    except (OSError, ValueError) as exc:  # shorter than planned: truncated or replaced
        os.close(fd)
        yield _capture_error_batch(capture, [f"capture: cannot map {mapped} bytes: {exc}"], 1, arrow_schema)
        return
    os.close(fd)
    view = memoryview(mm)  # mm closes when the last view of it goes (batches copy what they keep)
    if part.fp_len and fingerprint(part.path, part.fp_len) != (part.fp_len, part.fp_crc):
        lost = part.end - part.start
        yield _capture_error_batch(
            capture, [f"capture: replaced before it was read ({lost} bytes lost)"], 1, arrow_schema
        )
        return

    def read() -> Any:
        # part.start is a record of the whole-file walk: walking from it is exact
        batch = read_datagrams(
            view,
            start=part.start,
            end=None if pcap else part.end,
            udp_ports=udp_ports,
            first_frame=part.first_frame if pcap else None,
            walk_from=max(part.start, 24) if pcap else None,
        )
        if part.defer_at:  # its row comes once its text is decided (a later batch)
            kept = [r for r in batch.error_reasons if not r.startswith(f"offset {part.defer_at}: ")]
            batch.errors -= len(batch.error_reasons) - len(kept)
            batch.error_reasons = kept
        return batch

    yield from read_frames_batches(capture, read, arrow_schema, batch_rows)
