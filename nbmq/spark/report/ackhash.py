"""The SafeDealer ack hash of each data frame of a frames table, as a Spark pandas UDF.

Only for frames tables written before their ``ack_hash`` column: the decoder computes
that column now (``nbmq.capture.datagrams.ack_hashes``) and the report reads it instead.

A receiver acks FNV-1a 64 over the data frame's exact bytes (``codec.ack_hash``, seed 000); the
frames table keeps every header field and the chunk, so the 34-byte header is rebuilt
(big-endian, the layout in :mod:`nbmq.wire`) and hashed. No ``from __future__ import
annotations`` here: Spark reads the pandas type hints at definition time.
"""

import decimal
import struct
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["frame_hash", "ack_value", "signed_u64"]

_HEADER = struct.Struct(">BBQQBBIIHI")
#: The same 34-byte header as a numpy record (nbmq.wire's layout).
_HEADER_DTYPE = np.dtype(
    [
        ("version", "u1"),
        ("kind", "u1"),
        ("session_id", ">u8"),
        ("message_id", ">u8"),
        ("part_count", "u1"),
        ("part_index", "u1"),
        ("message_size", ">u4"),
        ("part_size", ">u4"),
        ("chunk_size", ">u2"),
        ("chunk_offset", ">u4"),
    ]
)
COLUMNS = [
    "version",
    "kind",
    "session_id",
    "message_id",
    "part_count",
    "part_index",
    "message_size",
    "part_size",
    "chunk_size",
    "chunk_offset",
    "payload",
]


def _hashes(
    v: pd.Series,
    k: pd.Series,
    s: pd.Series,
    m: pd.Series,
    pc: pd.Series,
    pi: pd.Series,
    ms: pd.Series,
    ps: pd.Series,
    cs: pd.Series,
    co: pd.Series,
    chunk: pd.Series,
) -> pd.Series:
    """int64 Series: each row's FNV-1a 64 ack hash, its u64 bits read as signed (Spark has no
    u64; the report only compares hashes). ``s``/``m`` may be u64, int64 (same bits) or Decimal."""
    # The headers are built column by column with numpy, then each frame's hash is FNV-1a over
    # its header slice, continued over its chunk. Ids come in as int64 bits and the hash goes
    # out as int64: Decimal objects both ways were most of the UDF's time.
    from ... import codec

    header = np.zeros(len(v), _HEADER_DTYPE)
    for name, col in zip(_HEADER_DTYPE.names, (v, k, s, m, pc, pi, ms, ps, cs, co)):
        if col.dtype == object:  # Decimal objects (DECIMAL(20,0) passed as is)
            header[name] = np.array([int(x) for x in col], dtype=np.uint64)
        else:
            header[name] = col.to_numpy().astype(_HEADER_DTYPE[name].newbyteorder("="), copy=False)
    raw = memoryview(header.tobytes())
    size, fnv = _HEADER.size, codec.fnv1a64
    out = np.fromiter(
        (fnv(c, fnv(raw[i : i + size])) for i, c in zip(range(0, len(v) * size, size), chunk)),
        dtype=np.uint64,
        count=len(v),
    )
    return pd.Series(out.view(np.int64))


def signed_u64(name: str) -> Any:
    """Spark column: a DECIMAL(20,0) u64 column as BIGINT with the same 64 bits (null -> 0)."""
    from pyspark.sql import functions as F

    x = F.coalesce(F.col(name), F.lit(decimal.Decimal(0)))
    top = F.lit(decimal.Decimal(2**63))
    return F.when(x >= top, x - top - top).otherwise(x).cast("bigint")


def frame_hash() -> Any:
    """Spark column: BIGINT ack hash of each (valid data frame) row (the u64's bits, signed);
    needs ``payload``. Null fields (rows that are not data frames) hash as zeros."""
    from pyspark.sql import functions as F

    udf = F.pandas_udf(_hashes, "bigint")  # type: ignore[call-overload]
    cols = [
        signed_u64(c)
        if c in ("session_id", "message_id")
        else F.coalesce(F.col(c), F.unhex(F.lit("")))
        if c == "payload"
        else F.coalesce(F.col(c), F.lit(0))
        for c in COLUMNS
    ]
    return udf(*cols)


def ack_value() -> Any:
    """Spark column: an Ack's 8-byte payload (the acked frame's hash) as BIGINT, same bits as
    :func:`frame_hash`."""
    from pyspark.sql import functions as F

    return F.conv(F.hex("payload"), 16, -10).cast("bigint")
