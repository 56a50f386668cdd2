"""The three tables' schemas: frames, messages, sessions.

Unsigned 64-bit identifiers (``session_id``, ``message_id``) are ``DECIMAL(20,0)`` everywhere:
the exact unsigned value (the manifest's and tshark's numbers), and the type Spark itself gives a
Parquet ``UINT_64`` column. A signed reinterpretation in ``LONG`` would make half of all ids
negative and differ from every other tool.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = [
    "U64",
    "FRAMES_SCHEMA",
    "MESSAGES_SCHEMA",
    "SESSIONS_SCHEMA",
    "frames_schema",
    "messages_schema",
    "SUSPECT_FIELD",
    "messages_table_schema",
]

#: Spark type of an unsigned 64-bit identifier.
U64: DataType = DecimalType(20, 0)


def _fields(spec: list[tuple[str, DataType]]) -> StructType:
    return StructType([StructField(name, dtype, True) for name, dtype in spec])


_FRAME_FIELDS: list[tuple[str, DataType]] = [
    ("capture", StringType()),  # file name of the capture
    ("frame_number", LongType()),  # 1-based packet number in the file, as tshark counts
    ("timestamp", TimestampType()),  # capture time, microseconds, UTC
    ("ts_ns", LongType()),  # capture time, nanoseconds since the epoch, exact
    ("src_addr", StringType()),
    ("src_port", IntegerType()),
    ("dst_addr", StringType()),
    ("dst_port", IntegerType()),
    ("length", IntegerType()),  # UDP payload bytes captured (the whole datagram)
    ("truncated", BooleanType()),  # fewer bytes captured than the UDP header announced
    ("kind", IntegerType()),  # byte 1 of the datagram (0 data, 1..5 control); null if < 2 bytes
    ("kind_name", StringType()),  # data, connect, connected, disconnected, heartbeat, ack
    ("version", IntegerType()),  # byte 0 of the datagram
    ("session_id", U64),  # null when the datagram did not decode
    ("message_id", U64),  # data frames only
    ("part_count", IntegerType()),
    ("part_index", IntegerType()),
    ("message_size", LongType()),
    ("part_size", LongType()),
    ("chunk_size", IntegerType()),
    ("chunk_offset", LongType()),
    ("payload", BinaryType()),  # chunk (data) / payload (control); whole datagram on error rows
    ("error", StringType()),  # null, or why the datagram did not decode
    # Last, so the columns before it keep their positions. The SafeDealer ack hash the
    # row names: a data frame's FNV-1a 64 over its whole datagram (what an Ack for it carries), an
    # Ack's 8-byte payload; the u64's bits as signed; null on other rows (nbmq.capture.datagrams.ack_hashes).
    ("ack_hash", LongType()),
    # Secure mode (docs/secure.md): the version byte is 0x81. The header is in clear; a sealed
    # frame's payload is ciphertext (its data frames are not reassembled, its Acks match nothing).
    ("secure", BooleanType()),
]

FRAMES_SCHEMA = _fields(_FRAME_FIELDS)


def frames_schema(payload: bool = True) -> StructType:
    """The frames table's schema, with or without the ``payload`` column."""
    return _fields([f for f in _FRAME_FIELDS if payload or f[0] != "payload"])


_MESSAGE_FIELDS: list[tuple[str, DataType]] = [
    ("capture", StringType()),
    ("session_id", U64),
    ("src", StringType()),  # sender "addr:port"
    ("dst", StringType()),  # receiver "addr:port" (of the first frame)
    ("message_id", U64),
    ("part_count", IntegerType()),
    ("message_size", LongType()),  # bytes, as the frames claim
    ("part_sizes", ArrayType(LongType(), True)),  # null element: no frame of that part seen
    ("part_sha256", ArrayType(StringType(), True)),  # hex per part; null unless complete
    ("complete", BooleanType()),
    ("missing_bytes", LongType()),  # message_size minus distinct bytes received
    ("frames", LongType()),  # valid data frames seen with this key (duplicates included)
    ("duplicates", LongType()),  # repeats of a chunk already held, or after completion
    ("rejected", LongType()),  # frames the reassembler refused (conflicts, hostile sizes)
    ("first_ts", TimestampType()),
    ("last_ts", TimestampType()),
    ("parts", ArrayType(BinaryType(), True)),  # only with the ``parts`` option; else null
]

MESSAGES_SCHEMA = _fields(_MESSAGE_FIELDS)


def messages_schema(parts: bool = False) -> StructType:
    """The messages table's schema, with or without the ``parts`` column."""
    return _fields([f for f in _MESSAGE_FIELDS if parts or f[0] != "parts"])


#: The written ``messages/`` table's last column: true when a frame of the message comes from a
#: record next to capture damage (its bytes may not be what was sent, complete or not). The
#: reassembly builds :func:`messages_schema`; the findings step
#: (:func:`nbmq.spark.findings.write_findings`) adds this column from the frames table.
SUSPECT_FIELD = StructField("suspect", BooleanType(), True)


def messages_table_schema(parts: bool = False) -> StructType:
    """The schema of ``messages/`` as the pipeline writes it: :func:`messages_schema` plus
    :data:`SUSPECT_FIELD`."""
    return StructType([*messages_schema(parts).fields, SUSPECT_FIELD])


_SESSION_FIELDS: list[tuple[str, DataType]] = [
    ("capture", StringType()),
    ("session_id", U64),  # 0: Connect frames that no session answered, per address pair
    ("client", StringType()),  # "addr:port" that sent Connect (else the non-server side)
    ("server", StringType()),  # "addr:port" of the bound side (sent Connected)
    ("connect_ts", TimestampType()),
    ("connected_ts", TimestampType()),
    ("first_heartbeat_ts", TimestampType()),
    ("first_ts", TimestampType()),
    ("last_ts", TimestampType()),
    ("duration_s", DoubleType()),
    ("connects", LongType()),  # Connect frames attributed to this session (client -> server)
    ("connecteds", LongType()),  # Connected frames (server -> client)
    ("disconnected_c2s", LongType()),
    ("disconnected_s2c", LongType()),
    ("heartbeats_c2s", LongType()),
    ("heartbeats_s2c", LongType()),
    ("data_c2s", LongType()),
    ("data_s2c", LongType()),
    ("acks_c2s", LongType()),
    ("acks_s2c", LongType()),
    ("frames_c2s", LongType()),
    ("frames_s2c", LongType()),
    ("bytes_c2s", LongType()),  # UDP payload bytes
    ("bytes_s2c", LongType()),
    ("messages_complete_c2s", LongType()),
    ("messages_complete_s2c", LongType()),
    ("messages_incomplete_c2s", LongType()),
    ("messages_incomplete_s2c", LongType()),
    ("message_bytes_c2s", LongType()),  # bytes of complete messages
    ("message_bytes_s2c", LongType()),
    ("throughput_bytes_per_s", DoubleType()),  # (bytes_c2s + bytes_s2c) / duration_s; null if 0 s
    ("secure", BooleanType()),  # its frames are secure mode's (version 0x81)
    ("sealed_frames", LongType()),  # frames whose content is encrypted (all but the handshake)
]

SESSIONS_SCHEMA = _fields(_SESSION_FIELDS)
