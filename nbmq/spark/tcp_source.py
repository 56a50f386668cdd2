"""The PySpark Python data sources ``nbmq_bqsp`` and ``nbmq_rqueue``: TCP captures -> tables.

::

    import nbmq.spark
    nbmq.spark.register(spark)
    packets = spark.read.format("nbmq_bqsp").option("ports", "7701").load("captures/")
    messages = spark.read.format("nbmq_rqueue").load("captures/")           # port 6567

Options (strings, as Spark passes them):

- ``paths`` / ``path``: as for the ``nbmq`` source (files, directories read recursively, globs,
  ``.gz`` captures, ``file://`` and Hadoop URIs; comma-separated).
- ``ports``: comma-separated TCP service ports whose connections are decoded; ``any`` decodes
  every TCP connection. ``nbmq_rqueue`` defaults to 6567 (the rqueue server's default port,
  seed 004). BQSP names no port (seed 002), so ``nbmq_bqsp`` requires the option.
- ``payload`` (``true``): ``false`` leaves ``payload`` (BQSP) / ``content`` (rqueue) out.
- ``max_buffered`` (16 MiB): out-of-order bytes held per connection direction; past it the
  missing bytes are a gap (see :mod:`nbmq.capture.tcp.streams`).
- ``batch_rows`` (8192): rows per Arrow record batch.
- ``capture_names``: JSON ``{path: capture}`` overriding the ``capture`` column's value per file
  (default: ``nbmq.spark.inputs.capture_names`` of the files read; the pipeline passes the
  frames source's names, so both tables name a file alike).

One partition per file: TCP reassembly needs a whole connection, which a byte range of a file
cannot promise. Schemas: :mod:`nbmq.spark.tcp_schema`. Bad bytes never fail the job: gaps,
unparsed bytes, codec errors and capture damage are rows with ``error`` set.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .datasource import CapturePartition, _split_paths, _truthy
from .inputs import capture_names, capture_source, expand_paths
from .tcp_schema import BQSP_SCHEMA, RQUEUE_SCHEMA, RQUEUE_TYPE_NAMES, bqsp_schema, rqueue_schema

__all__ = ["BqspDataSource", "RqueueDataSource", "DEFAULT_PORTS", "parse_ports", "stream_batches"]

#: Default service ports per protocol (None: the option is required).
DEFAULT_PORTS: dict[str, list[int] | None] = {"bqsp": None, "rqueue": [6567]}
DEFAULT_BATCH_ROWS = 8192


def parse_ports(value: str | None, protocol: str) -> list[int] | None:
    """Parse the ``ports`` option: a list of ports, or None for ``any`` (every connection).

    Raises:
        ValueError: a port out of 0..65535, not a number, or no port for BQSP.
    """
    if value is None or not value.strip():
        default = DEFAULT_PORTS[protocol]
        if default is None:
            raise ValueError(
                f"nbmq_{protocol}: BQSP has no well-known port; give .option('ports', 'PORT[,PORT...]') "
                "(or 'any' for every TCP connection)"
            )
        return list(default)
    if value.strip().lower() in ("any", "*"):
        return None
    ports = [int(p) for p in value.split(",") if p.strip()]
    if any(not 0 <= p <= 0xFFFF for p in ports):
        raise ValueError(f"nbmq_{protocol}: ports must be 0..65535, got {value!r}")
    return ports


class _StreamsSource(DataSource):
    protocol = ""

    def schema(self) -> StructType:
        payload = _truthy(self.options.get("payload"), True)
        return bqsp_schema(payload) if self.protocol == "bqsp" else rqueue_schema(payload)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StreamsReader(self.protocol, dict(self.options), schema)


class BqspDataSource(_StreamsSource):
    """``nbmq_bqsp``: one row per BQSP packet (seed 002) of the captures' TCP connections."""

    protocol = "bqsp"

    @classmethod
    def name(cls) -> str:
        return "nbmq_bqsp"


class RqueueDataSource(_StreamsSource):
    """``nbmq_rqueue``: one row per rqueue message (seed 004) of the captures' TCP connections."""

    protocol = "rqueue"

    @classmethod
    def name(cls) -> str:
        return "nbmq_rqueue"


class StreamsReader(DataSourceReader):
    """One partition per capture file; ``read`` reassembles and decodes it into Arrow batches."""

    def __init__(self, protocol: str, options: dict[str, str], schema: StructType) -> None:
        raw = options.get("paths") or options.get("path")
        if not raw:
            raise ValueError(f"nbmq_{protocol}: give a path: .load(PATH) or .option('paths', ...)")
        full = BQSP_SCHEMA if protocol == "bqsp" else RQUEUE_SCHEMA
        unknown = [n for n in schema.fieldNames() if n not in full.fieldNames()]
        if unknown:
            raise ValueError(f"nbmq_{protocol}: no such column(s) {unknown}; see nbmq.spark.tcp_schema")
        self.protocol, self.schema = protocol, schema
        self.paths = _split_paths(raw)
        self.ports = parse_ports(options.get("ports"), protocol)
        self.max_buffered = int(options.get("max_buffered", 16 << 20))
        self.batch_rows = max(1, int(options.get("batch_rows", DEFAULT_BATCH_ROWS)))
        # {path: capture}: the pipeline reads only the files with TCP traffic here, and passes
        # the names the frames source gave them, so both tables name a file alike
        self.names = json.loads(options.get("capture_names") or "{}")

    def partitions(self) -> list[CapturePartition]:
        paths = expand_paths(self.paths)
        names = capture_names(paths)
        names.update((p, self.names[p]) for p in paths if p in self.names)
        return [CapturePartition(path, capture=names[path]) for path in paths]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CapturePartition)
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        yield from stream_batches(
            partition.path,
            self.protocol,
            self.ports,
            arrow_schema,
            self.batch_rows,
            self.max_buffered,
            capture=partition.capture,
        )


def stream_batches(
    path: str,
    protocol: str,
    ports: Sequence[int] | None,
    arrow_schema: pa.Schema,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    max_buffered: int = 16 << 20,
    codec: Any = None,
    capture: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decode one capture's BQSP / rqueue connections into record batches of ``arrow_schema``.

    Args:
        path: the capture file (local path, ``file://`` or Hadoop URI; see ``nbmq.spark.inputs``).
        protocol: ``"bqsp"`` or ``"rqueue"``.
        ports: service ports, or None for every TCP connection.
        arrow_schema: the columns to build (any subset of the table's, in any order).
        batch_rows: rows per record batch.
        max_buffered: out-of-order bytes held per direction (bytes).
        codec: codec module for the stream decoders (default ``nbmq.codec``).
        capture: the ``capture`` column's value (default: the file's name).

    Yields:
        Record batches, columns built one at a time from the rows' fields. A file that is not
        a capture, or cannot be opened, gives one row with ``error = "capture: ..."``.
    """
    from ..capture.tcp.streams import decode_tcp_streams
    from ..errors import NbmqError

    capture = capture or os.path.basename(path)
    payload = "payload" in arrow_schema.names or "content" in arrow_schema.names
    rows: list[Any] = []
    try:
        for row in decode_tcp_streams(
            capture_source(path), protocol, ports, max_buffered=max_buffered, payload=payload, codec=codec
        ):
            rows.append(row)
            if len(rows) >= batch_rows:
                yield _batch(capture, protocol, rows, arrow_schema)
                rows = []
    except (NbmqError, OSError, ValueError, struct.error) as exc:
        from ..capture.tcp.streams import StreamRow

        rows.append(StreamRow(*([None] * 10), f"capture: {exc}"))
    if rows:
        yield _batch(capture, protocol, rows, arrow_schema)


def _batch(capture: str, protocol: str, rows: list[Any], arrow_schema: pa.Schema) -> pa.RecordBatch:
    (client, server, direction, offset, ts_ns, kind, queue, topic, data, length, error) = zip(*rows)
    n = len(rows)
    source: dict[str, Any] = {
        "client": client,
        "server": server,
        "direction": direction,
        "stream_offset": offset,
        "timestamp": [None if t is None else t // 1000 for t in ts_ns],
        "error": error,
    }
    if protocol == "bqsp":
        source.update(data_type=kind, queue_number=queue, length=length, payload=data)
    else:
        source.update(
            message_type=kind,
            message_type_name=[RQUEUE_TYPE_NAMES.get(k) for k in kind],
            topic=topic,
            content=data,
            content_length=length,
        )
    columns = []
    for field in arrow_schema:
        if field.name == "capture":
            columns.append(pa.array([capture] * n, pa.string()))
        elif field.name == "timestamp":
            columns.append(pa.array(source["timestamp"], pa.int64()).cast(field.type))
        else:
            columns.append(pa.array(source[field.name], field.type))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)
