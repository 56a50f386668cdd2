"""The SafeDealer ack hash of each data frame of a frames table, as a Spark pandas UDF.

A receiver acks FNV-1a 64 over the data frame's exact bytes (``codec.ack_hash``, seed 000); the
frames table keeps every header field and the chunk, so the 34-byte header is rebuilt
(big-endian, the layout in :mod:`nbmq.wire`) and hashed. No ``from __future__ import
annotations`` here: Spark reads the pandas type hints at definition time.
"""

import decimal
import struct
from typing import Any

import pandas as pd

__all__ = ["frame_hash"]

_HEADER = struct.Struct(">BBQQBBIIHI")
COLUMNS = ["version", "kind", "session_id", "message_id", "part_count", "part_index", "message_size",
           "part_size", "chunk_size", "chunk_offset", "payload"]


def _hashes(v: pd.Series, k: pd.Series, s: pd.Series, m: pd.Series, pc: pd.Series, pi: pd.Series,
            ms: pd.Series, ps: pd.Series, cs: pd.Series, co: pd.Series, chunk: pd.Series) -> pd.Series:
    from ... import codec

    pack, h = _HEADER.pack, codec.ack_hash
    out = [
        decimal.Decimal(h(pack(*map(int, row[:10])) + bytes(row[10])))
        for row in zip(v, k, s, m, pc, pi, ms, ps, cs, co, chunk)
    ]
    return pd.Series(out, dtype=object)


def frame_hash() -> Any:
    """Spark column: DECIMAL(20,0) ack hash of each (valid data frame) row; needs ``payload``."""
    from pyspark.sql import functions as F

    udf = F.pandas_udf(_hashes, "decimal(20,0)")  # type: ignore[call-overload]
    return udf(*[F.col(c) for c in COLUMNS])
