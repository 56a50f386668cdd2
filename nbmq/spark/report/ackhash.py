"""The SafeDealer ack hash of each data frame of a frames table, as a Spark pandas UDF.

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

__all__ = ["frame_hash"]

_HEADER = struct.Struct(">BBQQBBIIHI")
#: The same 34-byte header as a numpy record (nbmq.wire's layout).
_HEADER_DTYPE = np.dtype(
    [("version", "u1"), ("kind", "u1"), ("session_id", ">u8"), ("message_id", ">u8"), ("part_count", "u1"),
     ("part_index", "u1"), ("message_size", ">u4"), ("part_size", ">u4"), ("chunk_size", ">u2"),
     ("chunk_offset", ">u4")])
COLUMNS = ["version", "kind", "session_id", "message_id", "part_count", "part_index", "message_size",
           "part_size", "chunk_size", "chunk_offset", "payload"]


def _hashes(v: pd.Series, k: pd.Series, s: pd.Series, m: pd.Series, pc: pd.Series, pi: pd.Series,
            ms: pd.Series, ps: pd.Series, cs: pd.Series, co: pd.Series, chunk: pd.Series) -> pd.Series:
    # The headers are built column by column with numpy, then each frame's hash is FNV-1a over
    # its header slice, continued over its chunk: ~1.5 us a row where packing each header with
    # struct and hashing header + chunk took ~5 us (issue 14's 5M-datagram benchmark).
    from ... import codec

    header = np.zeros(len(v), _HEADER_DTYPE)
    for name, col in zip(_HEADER_DTYPE.names, (v, k, s, m, pc, pi, ms, ps, cs, co)):
        if col.dtype == object:  # DECIMAL(20,0) ids arrive as Decimal objects
            header[name] = np.array([int(x) for x in col], dtype=np.uint64)
        else:
            header[name] = col.to_numpy()
    raw = memoryview(header.tobytes())
    size, fnv, dec = _HEADER.size, codec.fnv1a64, decimal.Decimal
    out = [dec(fnv(c, fnv(raw[i : i + size]))) for i, c in zip(range(0, len(v) * size, size), chunk)]
    return pd.Series(out, dtype=object)


def frame_hash() -> Any:
    """Spark column: DECIMAL(20,0) ack hash of each (valid data frame) row; needs ``payload``."""
    from pyspark.sql import functions as F

    udf = F.pandas_udf(_hashes, "decimal(20,0)")  # type: ignore[call-overload]
    return udf(*[F.col(c) for c in COLUMNS])
