"""Schemas of the BQSP packets table and the rqueue messages table (``nbmq_bqsp``, ``nbmq_rqueue``).

One row per decoded packet / message, plus error rows (``error`` set, the decoded columns null)
for decode failures and capture-level problems of a connection (gaps, unparsed or truncated
bytes, overlapping retransmissions with different bytes) and for damage in the capture file
(then only ``capture`` and ``error`` are set). The ``error`` prefixes are those of
:class:`nbmq.capture.tcp.streams.StreamRow`. No unsigned 64-bit identifiers appear here, so
:data:`nbmq.spark.schema.U64` is not needed.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["BQSP_SCHEMA", "RQUEUE_SCHEMA", "bqsp_schema", "rqueue_schema", "RQUEUE_TYPE_NAMES"]

#: rqueue message type -> the seed's name (seed 004).
RQUEUE_TYPE_NAMES = {1: "SUBSCRIBE", 2: "REMOVE", 5: "DEREGISTER", 7: "NOTIFICATION"}

_CONNECTION_FIELDS: list[tuple[str, DataType]] = [
    ("capture", StringType()),  # file name of the capture
    ("client", StringType()),  # "addr:port" ("[v6]:port"): the SYN sender, else the non-service side
    ("server", StringType()),
    ("direction", StringType()),  # "c2s" or "s2c"
    ("stream_offset", LongType()),  # byte offset of the record (or problem) in that direction's stream
    ("timestamp", TimestampType()),  # UTC, microseconds: the segment that completed the record
]

_BQSP_FIELDS = _CONNECTION_FIELDS + [
    ("data_type", IntegerType()),  # header Data Type, u16 (seed 002)
    ("queue_number", IntegerType()),  # header Queue, u8
    ("length", LongType()),  # Data Size: payload bytes
    ("payload", BinaryType()),  # only with payload=true (the default)
    ("error", StringType()),
]

_RQUEUE_FIELDS = _CONNECTION_FIELDS + [
    ("message_type", IntegerType()),  # 1, 2, 5, 7 (seed 004)
    ("message_type_name", StringType()),  # SUBSCRIBE, REMOVE, DEREGISTER, NOTIFICATION
    ("topic", BinaryType()),  # exact bytes; CAST(topic AS STRING) for UTF-8 text; empty for DEREGISTER
    ("content", BinaryType()),  # NOTIFICATION content; only with payload=true
    ("content_length", LongType()),  # 0 for the types without content
    ("error", StringType()),
]


def _fields(spec: list[tuple[str, DataType]]) -> StructType:
    return StructType([StructField(name, dtype, True) for name, dtype in spec])


BQSP_SCHEMA = _fields(_BQSP_FIELDS)
RQUEUE_SCHEMA = _fields(_RQUEUE_FIELDS)


def bqsp_schema(payload: bool = True) -> StructType:
    """The BQSP packets table's schema, with or without the ``payload`` column."""
    return _fields([f for f in _BQSP_FIELDS if payload or f[0] != "payload"])


def rqueue_schema(payload: bool = True) -> StructType:
    """The rqueue messages table's schema, with or without the ``content`` column."""
    return _fields([f for f in _RQUEUE_FIELDS if payload or f[0] != "content"])
