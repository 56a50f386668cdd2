"""Fuzz target of the pipeline's compiled group reassembly (``nbmq/spark/_reassemble.pyx``, issue 14).

``reassemble_groups`` takes frame headers decoded from captures, so every value in them is the
sender's claim: part counts, sizes and offsets out of range, chunks past their message, sizes of
gigabytes. The target builds frames from the input's bytes and checks that the compiled loop and
its Python twin (``nbmq/spark/_reassemble_py.py``, the reference) return the same arrays, or
both raise ``ValueError`` (a chunk outside its buffer, bad group bounds).

Input layout: byte 0 flags (bit 0 ``keep_parts``; bits 1-2 pick ``max_message_size`` from
:data:`LIMITS`), byte 1 the frame count (1 + b % 24), then one 11-byte record per frame
(:data:`RECORD`), the rest is the payload buffer the chunks point into.
"""

from __future__ import annotations

import struct

import numpy as np

from .twins import Finding, check_same

__all__ = ["reassemble_groups", "RECORD", "LIMITS", "encode"]

#: per frame: flags (bit 0 new group, bit 1 message_size x 65536, bit 2 chunk start unclamped),
#: part_count, part_index, message_size, part_size, chunk_offset (u16 each), chunk_len, chunk_start
RECORD = struct.Struct(">BBBHHHBB")
LIMITS = (2**32 - 1, 64, 1000, 0)


def encode(frames: list[tuple[int, ...]], payload: bytes, keep_parts: bool = True, limit: int = 0) -> bytes:
    """An input of this target: ``frames`` as :data:`RECORD` tuples (for the seed corpus)."""
    head = bytes([int(keep_parts) | (limit << 1), (len(frames) - 1) % 24])
    return head + b"".join(RECORD.pack(*f) for f in frames[:24]) + payload


def _frames(data: bytes) -> tuple[dict[str, np.ndarray], bytes, bool, int] | None:
    if len(data) < 2:
        return None
    keep, limit = bool(data[0] & 1), LIMITS[(data[0] >> 1) & 3]
    n = 1 + data[1] % 24
    body = data[2:]
    if len(body) < n * RECORD.size:
        return None
    buf = body[n * RECORD.size:]
    cols: dict[str, list[int]] = {k: [] for k in ("new", "part_count", "part_index", "message_size", "part_size",
                                                    "chunk_offset", "chunk_start", "chunk_len")}
    for i in range(n):
        flags, pc, pi, ms, ps, co, cl, cs = RECORD.unpack_from(body, i * RECORD.size)
        cols["new"].append(i == 0 or flags & 1)
        cols["part_count"].append(pc)
        cols["part_index"].append(pi)
        cols["message_size"].append(ms * 65536 if flags & 2 else ms)
        cols["part_size"].append(ps)
        cols["chunk_offset"].append(co)
        if not flags & 4:  # inside the buffer (else as claimed: both twins must raise ValueError alike)
            cs = cs % (len(buf) + 1)
            cl = min(cl, len(buf) - cs)
        cols["chunk_start"].append(cs)
        cols["chunk_len"].append(cl)
    return {k: np.array(v, np.int64) for k, v in cols.items()}, buf, keep, limit


def _outcome(fn, a: dict[str, np.ndarray], buf: bytes, keep: bool, limit: int) -> tuple:  # type: ignore[no-untyped-def]
    n = a["part_count"].size
    bounds = np.append(np.flatnonzero(a["new"]), n).astype(np.int64)
    try:
        out = fn(bounds, a["part_count"].astype(np.int32), a["part_index"].astype(np.int32), a["message_size"],
                 a["part_size"], a["chunk_offset"], [buf], np.zeros(n, np.int32), a["chunk_start"], a["chunk_len"],
                 limit, keep)
    except ValueError:
        return ("raise", "ValueError")
    return ("ok", [np.asarray(x).tolist() for x in out])


def reassemble_groups(data: bytes) -> None:
    """Both twins of ``reassemble_groups`` on the frames ``data`` describes: the same outcome."""
    from nbmq.spark import _reassemble, _reassemble_py

    parsed = _frames(data)
    if parsed is None:
        return
    a, buf, keep, limit = parsed
    want = _outcome(_reassemble_py.reassemble_groups, a, buf, keep, limit)
    got = _outcome(_reassemble.reassemble_groups, a, buf, keep, limit)
    check_same("reassemble_groups (compiled vs Python)", want, got)
    if want[0] == "ok":
        complete = want[1][0]
        if len(complete) != int(a["new"].sum()):
            raise Finding(f"{len(complete)} group results for {int(a['new'].sum())} groups")
