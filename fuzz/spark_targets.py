"""Fuzz target of the pipeline's compiled group reassembly (``nbmq/spark/_reassemble.pyx``).

``reassemble_groups`` takes frame headers decoded from captures, so every value in them is the
sender's claim: part counts, sizes and offsets out of range, chunks past their message, sizes of
gigabytes. The target builds frames from the input's bytes and checks that the compiled loop and
its Python twin (``nbmq/spark/_reassemble_py.py``, the reference) return the same arrays, or
both raise ``ValueError`` (a chunk outside its buffer, bad group bounds).

Input layout: byte 0 flags (bit 0 ``keep_parts``; bits 1-2 pick ``max_message_size`` from
:data:`LIMITS`; bits 3-4 the buffer count - 1), byte 1 the record count (1 + b % 24), byte 2
the repeat count (1 + b: the records are laid out that many times, each time with the chunk
offsets moved on by the chunk length, so one input describes up to 6144 frames: groups of more
than 256 frames), then one :data:`RECORD` per record, each followed by :data:`WIDE` when its
flags say so (one field set to any int64), then the payload, cut into the buffers.
"""

from __future__ import annotations

import struct

import numpy as np

from .twins import Finding, check_same

__all__ = ["reassemble_groups", "RECORD", "WIDE", "LIMITS", "FIELDS", "encode"]

#: per record: flags (bit 0 new group, bit 1 message_size x 65536, bit 2 chunk start unclamped,
#: bit 3 a WIDE value follows, bits 5-7 the buffer), part_count, part_index, message_size,
#: part_size, chunk_offset (u16 each), chunk_len, chunk_start
RECORD = struct.Struct(">BBBHHHBB")
#: a full-width value: which field (FIELDS[b % 8]) and its int64 value
WIDE = struct.Struct(">Bq")
FIELDS = ("part_count", "part_index", "message_size", "part_size", "chunk_offset", "chunk_len", "chunk_start", "buf_id")
LIMITS = (2**32 - 1, 64, 1000, 0)


def encode(
    frames: list[tuple[int, ...]],
    payload: bytes,
    keep_parts: bool = True,
    limit: int = 0,
    repeat: int = 1,
    buffers: int = 1,
    wide: dict[int, tuple[int, int]] | None = None,
) -> bytes:
    """An input of this target: ``frames`` as :data:`RECORD` tuples (for the seed corpus);
    ``wide`` maps a frame's index to its :data:`WIDE` tuple (set bit 3 of its flags too)."""
    head = bytes([int(keep_parts) | (limit << 1) | ((buffers - 1) << 3), (len(frames) - 1) % 24, repeat - 1])
    body = b""
    for i, f in enumerate(frames[:24]):
        body += RECORD.pack(*f)
        if f[0] & 8:
            body += WIDE.pack(*(wide or {}).get(i, (0, 0)))
    return head + body + payload


def _frames(data: bytes) -> tuple[dict[str, np.ndarray], list[bytes], bool, int] | None:
    if len(data) < 3:
        return None
    keep, limit, nbuf = bool(data[0] & 1), LIMITS[(data[0] >> 1) & 3], 1 + ((data[0] >> 3) & 3)
    n, repeat = 1 + data[1] % 24, 1 + data[2]
    records = []
    at = 3
    for _ in range(n):
        if at + RECORD.size > len(data):
            return None
        record = RECORD.unpack_from(data, at)
        at += RECORD.size
        wide = None
        if record[0] & 8:
            if at + WIDE.size > len(data):
                return None
            wide = WIDE.unpack_from(data, at)
            at += WIDE.size
        records.append((record, wide))
    payload = data[at:]
    cut = len(payload) // nbuf
    buffers = [payload[k * cut : (k + 1) * cut if k < nbuf - 1 else len(payload)] for k in range(nbuf)]
    cols: dict[str, list[int]] = {k: [] for k in ("new", *FIELDS)}
    for j in range(repeat):
        for i, ((flags, pc, pi, ms, ps, co, cl, cs), wide) in enumerate(records):
            b = (flags >> 5) % nbuf
            buf = buffers[b]
            if not flags & 4:  # inside the buffer (else as claimed: both twins must raise ValueError alike)
                cs = cs % (len(buf) + 1)
                cl = min(cl, len(buf) - cs)
            row = {
                "part_count": pc,
                "part_index": pi,
                "message_size": ms * 65536 if flags & 2 else ms,
                "part_size": ps,
                "chunk_offset": co + j * cl,
                "chunk_len": cl,
                "chunk_start": cs,
                "buf_id": b,
            }
            if wide is not None:
                row[FIELDS[wide[0] % 8]] = wide[1]
            cols["new"].append((i == 0 and j == 0) or bool(flags & 1))
            for k, v in row.items():
                cols[k].append(v)
    return {k: np.array(v, np.int64) for k, v in cols.items()}, buffers, keep, limit


def _outcome(fn, a: dict[str, np.ndarray], buffers: list[bytes], keep: bool, limit: int) -> tuple:  # type: ignore[no-untyped-def]
    n = a["part_count"].size
    bounds = np.append(np.flatnonzero(a["new"]), n).astype(np.int64)
    try:
        out = fn(
            bounds,
            a["part_count"],
            a["part_index"],
            a["message_size"],
            a["part_size"],
            a["chunk_offset"],
            buffers,
            a["buf_id"],
            a["chunk_start"],
            a["chunk_len"],
            limit,
            keep,
        )
    except ValueError as e:
        return ("raise", "ValueError", str(e))
    return ("ok", [np.asarray(x).tolist() for x in out])


def reassemble_groups(data: bytes) -> None:
    """Both twins of ``reassemble_groups`` on the frames ``data`` describes: the same outcome."""
    from nbmq.spark import _reassemble, _reassemble_py

    parsed = _frames(data)
    if parsed is None:
        return
    a, buffers, keep, limit = parsed
    want = _outcome(_reassemble_py.reassemble_groups, a, buffers, keep, limit)
    got = _outcome(_reassemble.reassemble_groups, a, buffers, keep, limit)
    check_same("reassemble_groups (compiled vs Python)", want, got)
    if want[0] == "ok":
        complete = want[1][0]
        if len(complete) != int(a["new"].sum()):
            raise Finding(f"{len(complete)} group results for {int(a['new'].sum())} groups")
