"""The PySpark Python data source ``nbmq``: captures -> the frames table, one row per datagram.

::

    import nbmq.spark
    nbmq.spark.register(spark)
    frames = spark.read.format("nbmq").load("captures/")          # a file, a directory,
    frames = spark.read.format("nbmq").load("a.pcap,b.pcapng")    # a comma-separated list,
    frames = spark.read.format("nbmq").load(["a.pcap", "b.pcap"]) # a list,
    frames = spark.read.format("nbmq").option("paths", "a.pcap,b.pcap").load()

Options (all strings, as Spark passes them):

- ``paths`` / ``path``: files, directories (their ``*.pcap``, ``*.pcapng``, ``*.cap`` files and
  the same gzip-compressed, ``*.pcap.gz`` ..., recursively, sorted) or glob patterns,
  comma-separated; local paths, ``file://`` URIs or Hadoop file system URIs (``hdfs://``,
  ``s3a://``, ...; opened through ``pyarrow.fs``, see :mod:`nbmq.spark.inputs`). Files must be
  readable at the same path by the driver (which plans the splits) and by every executor.
- ``payload`` (``true``): ``false`` leaves the ``payload`` column out.
- ``split_bytes`` (64 MiB): a classic pcap file larger than this is read as byte ranges of about
  this size (``nbmq.capture.plan_splits``), one Spark partition each, so one big file spreads
  over the cores; every other file (pcapng, ``.gz``, non-local URIs) is one partition. ``0``
  never splits.
- ``udp_ports``: comma-separated UDP ports; only datagrams from or to one of them are read.
- ``batch_rows`` (65536): rows per Arrow record batch handed to Spark.
- ``window_bytes`` (32 MiB): a local classic pcap range is decoded this many bytes at a time
  (same rows, same order; memory about one window per task). ``0`` decodes each
  range whole.

A ``.schema(...)`` naming a subset of the frames columns (same types) builds only those columns:
Python data sources get no column pruning from Spark, so this is how to make a narrow read cheap.

Schema: :data:`nbmq.spark.schema.FRAMES_SCHEMA`. Rows whose datagram does not decode keep their
capture columns (addresses, ports, length, raw ``version`` and ``kind`` bytes, the whole datagram
in ``payload``) and carry the reason in ``error`` (``nbmq.wire.FRAME_ERROR_REASONS``); their
header columns are null. The ``capture`` column is the file's name, or as many trailing path
components as tell it apart from the other files read with it (``run1/x.pcap``,
``run2/x.pcap``: ``nbmq.spark.inputs.capture_names``), since the messages and sessions tables
key on it. Records of the capture file itself that cannot be read (a truncated file, a damaged
record header) become rows with only ``capture`` and ``error`` set, the error
starting with ``"capture: "``. Reading never fails on bad bytes.

``read()`` runs on the executors: it reads a byte range with ``nbmq.capture.read_datagrams``,
decodes every datagram at once with the codec's ``parse_frames`` and builds Arrow columns with
numpy (no per-row Python code).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .inputs import CAPTURE_SUFFIXES, capture_names, capture_source, expand_paths, file_size, splittable
from .schema import FRAMES_SCHEMA, frames_schema

__all__ = ["NbmqDataSource", "CapturePartition", "CAPTURE_SUFFIXES", "expand_paths", "frames_batches"]

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
DEFAULT_BATCH_ROWS = 65536
#: Bytes of a classic pcap range decoded at a time (``window_bytes`` option).
DEFAULT_WINDOW_BYTES = 32 * 1024 * 1024

_KIND_NAMES = ["data", "connect", "connected", "disconnected", "heartbeat", "ack"]


def _truthy(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() not in ("false", "0", "no", "off", "")


def _split_paths(value: str) -> list[str]:
    value = value.strip()
    if value.startswith("["):  # Spark passes load([...]) as a JSON array
        return [str(p) for p in json.loads(value)]
    return [p.strip() for p in value.split(",") if p.strip()]


@dataclass(frozen=True)
class CapturePartition(InputPartition):
    """One Spark partition: a whole capture file, or one byte range of a classic pcap file.

    Attributes:
        path: absolute path of the capture.
        start: first byte of the range (0: the whole file from its header).
        end: end of the range, exclusive (None: to the end of the file).
        first_frame: frame number of the range's first record (None: whole file, or let the
            reader count the records before ``start``).
        walk_from: byte offset of a record at or before the range's first one, where its
            read starts walking (``nbmq.capture.range_starts``; None: the reader
            resynchronises).
        capture: the ``capture`` column's value (``inputs.capture_names``: distinct among the
            files read together; None: the file's name).
    """

    path: str
    start: int = 0
    end: int | None = None
    first_frame: int | None = None
    walk_from: int | None = None
    capture: str | None = None


class NbmqDataSource(DataSource):
    """The ``nbmq`` data source (see the module docstring for the options)."""

    @classmethod
    def name(cls) -> str:
        return "nbmq"

    def schema(self) -> StructType:
        return frames_schema(payload=_truthy(self.options.get("payload"), True))

    def reader(self, schema: StructType) -> DataSourceReader:
        return NbmqReader(dict(self.options), schema)


def frames_request(options: dict[str, str], schema: StructType, source: str, wanted: str) -> list[str]:
    """The paths of a frames source's options, after checking the requested columns.

    Args:
        options: the source's options (``paths`` or ``path``: comma-separated).
        schema: the requested columns, any subset of ``FRAMES_SCHEMA``.
        source: the source's name for messages; wanted: what to give when no path is set.

    Returns:
        The paths, as given (expanded later).

    Raises:
        ValueError: no path, or a column the frames table does not have.
    """
    raw = options.get("paths") or options.get("path")
    if not raw:
        raise ValueError(f"{source}: give {wanted}")
    unknown = [name for name in schema.fieldNames() if name not in FRAMES_SCHEMA.fieldNames()]
    if unknown:
        raise ValueError(f"{source}: no such frames column(s) {unknown}; see nbmq.spark.schema")
    return _split_paths(raw)


class NbmqReader(DataSourceReader):
    """Plans one partition per file (or per byte range) and reads it into Arrow batches."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.paths = frames_request(options, schema, "nbmq data source", "a path: .load(PATH) or .option('paths', ...)")
        self.schema = schema
        self.split_bytes = int(options.get("split_bytes", DEFAULT_SPLIT_BYTES))
        self.batch_rows = max(1, int(options.get("batch_rows", DEFAULT_BATCH_ROWS)))
        self.window_bytes = int(options.get("window_bytes", DEFAULT_WINDOW_BYTES))
        ports = options.get("udp_ports", "")
        self.udp_ports = [int(p) for p in ports.split(",") if p.strip()] or None

    def partitions(self) -> list[CapturePartition]:
        parts: list[CapturePartition] = []
        paths = expand_paths(self.paths)
        names = capture_names(paths)
        for path in paths:
            if self.split_bytes > 0 and splittable(path) and file_size(path) > self.split_bytes:
                planned = _plan(path, self.split_bytes)
            else:
                planned = [CapturePartition(path)]
            parts.extend(dataclasses.replace(p, capture=names[path]) for p in planned)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CapturePartition)
        yield from read_partition(partition, self.schema, self.batch_rows, self.udp_ports, self.window_bytes)


#: ``_plan`` results of this process, by (path, split size, file size, mtime): the pipeline plans
#: on the driver while the JVM starts (``nbmq.spark.prestart``), and the driver-side planners
#: (the one-pass job) then find the walk done. A changed file has another key.
_PLANNED: dict[tuple[str, int, int, int], list[CapturePartition]] = {}
_PLANNING = threading.Lock()  # a second caller waits for the walk in progress instead of repeating it


def _plan(path: str, split_bytes: int) -> list[CapturePartition]:
    try:
        st = os.stat(path)
    except OSError:
        return _plan_now(path, split_bytes)
    key = (path, split_bytes, st.st_size, st.st_mtime_ns)
    with _PLANNING:
        if key not in _PLANNED:
            if len(_PLANNED) >= 64:
                _PLANNED.clear()
            _PLANNED[key] = _plan_now(path, split_bytes)
        return list(_PLANNED[key])


def _plan_now(path: str, split_bytes: int) -> list[CapturePartition]:
    from ..capture import plan_splits, range_starts

    try:
        ranges = plan_splits(path, split_bytes)
        if len(ranges) <= 1:
            return [CapturePartition(path)]
        firsts = range_starts(path, ranges)  # the whole-file walk: exact ranges, damage included
    except Exception:  # not a capture, or damaged: one partition, whose read reports why
        return [CapturePartition(path)]
    return [
        CapturePartition(path, int(start), int(end), int(frame), int(record))
        for (start, end), (record, frame) in zip(ranges, firsts)  # record: where to walk from
    ]


def read_partition(
    partition: CapturePartition,
    schema: StructType,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    udp_ports: Sequence[int] | None = None,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Read one partition and yield Arrow record batches of ``schema`` (runs on executors).

    A local classic pcap range is read ``window_bytes`` at a time (``_windows``): the same rows
    in the same order, the capture-error rows still last, but memory stays about one window
    whatever the range's size, and Spark gets the first rows after one window's decoding
    instead of the whole range's (a 1 GB range held ~1.2 GB per worker).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from ..capture import read_datagrams

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    capture = partition.capture or os.path.basename(partition.path)
    windows = _windows(partition, window_bytes)
    if windows is None:
        yield from read_frames_batches(
            capture,
            lambda: read_datagrams(
                capture_source(partition.path),
                start=partition.start,
                end=partition.end,
                udp_ports=udp_ports,
                first_frame=partition.first_frame,
                walk_from=partition.walk_from,
            ),
            arrow_schema,
            batch_rows,
        )
        return
    damage = _Damage()
    for lo, hi, frame, walk_from in windows:
        yield from read_frames_batches(
            capture,
            lambda lo=lo, hi=hi, frame=frame, walk_from=walk_from: read_datagrams(
                partition.path, start=lo, end=hi, udp_ports=udp_ports, first_frame=frame, walk_from=walk_from
            ),
            arrow_schema,
            batch_rows,
            damage,
        )
    if damage.count:  # one error batch at the end, as a read of the whole range gives it
        yield _capture_error_batch(capture, damage.reasons, damage.count, arrow_schema)


def _windows(partition: CapturePartition, window_bytes: int) -> Iterator[tuple[int, int, int, int]] | None:
    """``(start, end, first_frame, walk_from)`` of the windows of a local classic pcap range
    (``nbmq.capture.files.splits.walk_windows``: together exactly the range's records and
    framing errors); None when the range is read whole (pcapng, gzip, a remote file, a range
    within one window, no frame number known, or a file that does not open as a pcap)."""
    from ..capture.files.errorlog import ErrorLog
    from ..capture.files.formats import PCAP_FILE_HEADER_LEN, detect_format, parse_pcap_header
    from ..capture.files.records import RecordScanner
    from ..capture.files.source import GZIP_MAGIC, OpenedCapture
    from ..capture.files.splits import walk_windows

    path, start = partition.path, partition.start
    first_frame = partition.first_frame
    if first_frame is None and start <= PCAP_FILE_HEADER_LEN:
        first_frame = 1  # the whole file, or a range from its first record
    if window_bytes <= 0 or first_frame is None or "://" in path or not splittable(path):
        return None
    try:
        size = os.path.getsize(path)
        end = size if partition.end is None else min(partition.end, size)
        if end - start <= window_bytes:
            return None
        with open(path, "rb") as f:
            head = f.read(4)
        if head[:2] == GZIP_MAGIC:
            return None
        cap = OpenedCapture(path)
        try:
            if detect_format(cap.buf, cap.size) != "pcap":
                raise ValueError("not a classic pcap")
            scanner = RecordScanner(cap.buf, cap.size, parse_pcap_header(cap.buf, cap.size))
        except Exception:
            cap.close()
            raise
    except Exception:  # noqa: BLE001 -- the whole-range read reports why, as an error row
        return None
    begin = partition.walk_from if partition.walk_from is not None else PCAP_FILE_HEADER_LEN

    def steps() -> Iterator[tuple[int, int, int, int]]:
        nonlocal scanner
        try:
            for lo, hi, _offs, frame, walk_from in walk_windows(
                cap, scanner, ErrorLog(), start, end, begin=begin, first_frame=first_frame, window=window_bytes
            ):
                yield lo, hi, frame, walk_from
        finally:
            del scanner  # its views of the mapping go before the file is closed
            cap.close()

    return steps()


class _Damage:
    """Capture damage summed over a range's windows: the exact count and the first reasons."""

    def __init__(self) -> None:
        self.count = 0
        self.reasons: list[str] = []

    def add(self, count: int, reasons: Sequence[str]) -> None:
        from ..capture.files.errorlog import MAX_ERROR_REASONS

        self.count += count
        self.reasons = (self.reasons + [f"capture: {r}" for r in reasons])[:MAX_ERROR_REASONS]


def read_frames_batches(
    capture: str, read: Callable[[], Any], arrow_schema: pa.Schema, batch_rows: int, damage: _Damage | None = None
) -> Iterator[pa.RecordBatch]:
    """Run ``read`` (returns a ``DatagramBatch``) and yield its frames rows, then one row for
    the capture damage it counted; an unreadable capture is one error row, never a failed task.

    Args:
        capture: the ``capture`` column's value; arrow_schema: the rows' schema;
        batch_rows: most rows per Arrow batch; damage: if given, the damage is added to it
            instead of yielded (a windowed read yields it once, at the end).
    """
    from ..errors import NbmqError

    try:
        batch = read()
    except (NbmqError, OSError, ValueError, struct.error) as exc:
        if damage is not None:
            damage.add(1, [str(exc)])
            return
        yield _capture_error_batch(capture, [f"capture: {exc}"], 1, arrow_schema)
        return
    yield from frames_batches(capture, batch, arrow_schema, batch_rows)
    if batch.errors and damage is not None:
        damage.add(batch.errors, batch.error_reasons)
    elif batch.errors:
        yield _capture_error_batch(capture, [f"capture: {r}" for r in batch.error_reasons], batch.errors, arrow_schema)


def _capture_error_batch(capture: str, reasons: list[str], count: int, arrow_schema: pa.Schema) -> pa.RecordBatch:
    texts = (reasons + ["capture: unreadable record"] * count)[:count]
    columns = []
    for field in arrow_schema:
        if field.name == "capture":
            columns.append(pa.array([capture] * count, pa.string()))
        elif field.name == "error":
            columns.append(pa.array(texts, pa.string()))
        else:
            columns.append(pa.nulls(count, field.type))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _u64_decimal(values: np.ndarray, valid: np.ndarray | None, dtype: pa.DataType) -> pa.Array:
    """uint64 -> decimal128(20, 0) by writing the 16-byte little-endian integers directly
    (``valid`` None: every value is valid)."""
    wide = np.zeros((len(values), 2), dtype="<u8")
    wide[:, 0] = values
    bitmap = _bitmap(valid) if valid is not None else None
    return pa.Array.from_buffers(dtype, len(values), [bitmap, pa.py_buffer(wide)])


def _masked(values: np.ndarray, valid: np.ndarray, dtype: pa.DataType) -> pa.Array:
    values = np.ascontiguousarray(values, dtype=dtype.to_pandas_dtype())
    return pa.Array.from_buffers(dtype, len(values), [_bitmap(valid), pa.py_buffer(values)])


def _dictionary(codes: np.ndarray, valid: np.ndarray, names: pa.Array) -> pa.Array:
    indices = _masked(codes, valid, pa.int32())
    return pa.DictionaryArray.from_arrays(indices, names).cast(pa.string())


def _strings(values: np.ndarray, codes: np.ndarray | None = None, texts: np.ndarray | None = None) -> pa.Array:
    """An object array of ``str`` (few distinct values) -> an Arrow string array.

    With ``codes`` and ``texts`` (``values == texts[codes]``, as capture readers provide them)
    the strings are not hashed again.
    """
    if codes is None or texts is None:
        import pandas as pd

        codes, texts = pd.factorize(values, use_na_sentinel=False)
    return pa.DictionaryArray.from_arrays(
        pa.array(np.asarray(codes, np.int32)), pa.array(np.asarray(texts, dtype=object), pa.string())
    ).cast(pa.string())


def _constant_string(value: str, n: int) -> pa.Array:
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def _gather(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of ``buffer[starts[i] : starts[i] + lengths[i]]`` in one vectorised step.

    The bytes are copied with ``nbmq.capture.datagrams.batch.gather_ranges`` (one memcpy per row when
    the capture extension is built, one numpy mask gather otherwise); the offsets are a cumsum.
    No per-row Python code.
    """
    from ..capture.datagrams.batch import gather_ranges

    n = len(starts)
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = gather_ranges(buffer, starts, lengths)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(data))]
    )


def frames_batches(
    capture: str, batch: Any, arrow_schema: pa.Schema, batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Decode a :class:`~nbmq.capture.DatagramBatch` and yield frames-table record batches.

    Args:
        capture: the ``capture`` column's value (the file name).
        batch: the datagrams, as ``nbmq.capture.read_datagrams`` returns them.
        arrow_schema: the Arrow schema to produce (any subset of the frames columns, in any
            order, as Spark's ``to_arrow_schema`` derives it from the requested schema).
        batch_rows: rows per record batch.
    """
    from .. import codec
    from ..wire import FRAME_ERROR_REASONS, SECURE_VERSION, FrameError, FrameKind

    if len(batch) == 0:
        return
    # one row per frame: a sealed bundle's frames each get a row, with the bundle's time,
    # addresses and record (docs/secure.md)
    buffer, offsets, all_lengths, source = codec.split_bundles(
        np.asarray(batch.payload, dtype=np.uint8), batch.offsets, batch.lengths
    )
    n = len(source)
    bundled = n != len(batch)

    def per_row(column: Any) -> Any:
        return column[source] if bundled and column is not None else column

    rows = codec.parse_frames(buffer, offsets, all_lengths)
    names = set(arrow_schema.names)
    error_names = pa.array([FRAME_ERROR_REASONS[int(c)] for c in FrameError], pa.string())
    kind_names = pa.array(_KIND_NAMES, pa.string())
    texts = getattr(batch, "addresses", None)
    src_code, dst_code = per_row(getattr(batch, "src_code", None)), per_row(getattr(batch, "dst_code", None))
    src = _strings(per_row(batch.src_addr), src_code, texts) if "src_addr" in names else None
    dst = _strings(per_row(batch.dst_addr), dst_code, texts) if "dst_addr" in names else None
    frame_number, timestamp_ns = per_row(batch.frame_number), per_row(batch.timestamp_ns)
    src_port, dst_port, truncated = per_row(batch.src_port), per_row(batch.dst_port), per_row(batch.truncated)
    for lo in range(0, n, batch_rows):
        hi = min(n, lo + batch_rows)
        m = hi - lo
        r = rows[lo:hi]
        error = r["error"]
        ok = error == FrameError.OK
        kind = r["kind"]
        data = ok & (kind == FrameKind.DATA)
        secure = r["version"] == SECURE_VERSION
        lengths = np.asarray(all_lengths[lo:hi])
        has_kind = lengths >= 2
        cols: dict[str, Any] = {}

        def want(name: str) -> bool:
            return name in names

        if want("capture"):
            cols["capture"] = _constant_string(capture, m)
        if want("frame_number"):
            cols["frame_number"] = pa.array(np.asarray(frame_number[lo:hi], dtype=np.int64))
        ts_ns = np.asarray(timestamp_ns[lo:hi], dtype=np.int64)
        if want("timestamp"):
            cols["timestamp"] = pa.array(ts_ns // 1000).view(pa.timestamp("us", tz="UTC"))
        if want("ts_ns"):
            cols["ts_ns"] = pa.array(ts_ns)
        if src is not None:
            cols["src_addr"] = src.slice(lo, m)
        if dst is not None:
            cols["dst_addr"] = dst.slice(lo, m)
        if want("src_port"):
            cols["src_port"] = pa.array(np.asarray(src_port[lo:hi]).astype(np.int32))
        if want("dst_port"):
            cols["dst_port"] = pa.array(np.asarray(dst_port[lo:hi]).astype(np.int32))
        if want("length"):
            cols["length"] = pa.array(lengths.astype(np.int32))
        if want("truncated"):
            cols["truncated"] = pa.array(np.asarray(truncated[lo:hi], dtype=np.bool_))
        if want("kind"):
            cols["kind"] = _masked(kind, has_kind, pa.int32())
        if want("kind_name"):
            cols["kind_name"] = _dictionary(kind, ok, kind_names)
        if want("version"):
            cols["version"] = _masked(r["version"], has_kind, pa.int32())
        if want("session_id"):
            cols["session_id"] = _u64_decimal(r["session_id"], ok, arrow_schema.field("session_id").type)
        if want("message_id"):
            cols["message_id"] = _u64_decimal(r["message_id"], data, arrow_schema.field("message_id").type)
        for name, dtype in (
            ("part_count", pa.int32()),
            ("part_index", pa.int32()),
            ("message_size", pa.int64()),
            ("part_size", pa.int64()),
            ("chunk_size", pa.int32()),
            ("chunk_offset", pa.int64()),
        ):
            if want(name):
                cols[name] = _masked(r[name], data, dtype)
        if want("payload"):
            starts = np.where(ok, r["payload_offset"], np.asarray(offsets[lo:hi]))
            plen = np.where(ok, r["payload_length"], lengths)
            cols["payload"] = _gather(buffer, starts, plen)
        if want("error"):
            cols["error"] = _dictionary(error, ~ok, error_names)
        if want("ack_hash"):  # from the bytes here, so readers of the table need no payload
            from ..capture.datagrams.ack_hashes import ack_hashes

            cols["ack_hash"] = _masked(*ack_hashes(buffer, r), pa.int64())
        if want("secure"):
            cols["secure"] = pa.array(secure)
        yield pa.RecordBatch.from_arrays([cols[f.name] for f in arrow_schema], schema=arrow_schema)
