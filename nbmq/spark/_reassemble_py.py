"""Reassembly of sorted message groups, pure Python: the reference and the twin of ``_reassemble.pyx``.

A *group* is the data frames of one key (capture, session_id, src, message_id), sorted by capture
order (ts_ns, frame_number). Its rule (module docstring of :mod:`nbmq.spark.messages`):

- frames whose chunks add up to less than the first frame's ``message_size`` can never complete
  and are not reassembled (a hostile size claim allocates nothing); their duplicates are exact
  repeats of (part_index, chunk_offset, bytes);
- otherwise the frames go, in order, to one codec ``Reassembler`` (its rules: overlaps,
  conflicting headers, size caps, empty absent parts); every frame after completion
  is a duplicate, a rejection drops what was held and later frames start over;
- an incomplete group's part sizes and missing bytes come from the frame headers (``_coverage``).

Each group is reassembled on its own: the reassembler is keyed per group, so a message completed
without its empty parts in one group never makes another group's empty chunk a duplicate (the
earlier code reused one key for every group, and the result depended on which groups a worker
had seen before).
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import numpy as np

__all__ = ["check_arguments", "reassemble_group", "reassemble_groups"]


def _coverage(rows: list[tuple], chunks: list) -> tuple[dict[int, int], int]:
    """Per part index its size (first frame seen), and the distinct bytes the frames cover."""
    sizes: dict[int, int] = {}
    ranges: dict[int, list[tuple[int, int]]] = {}
    for (_, index, _, psize, offset, _), chunk in zip(rows, chunks):
        sizes.setdefault(index, psize)
        if psize != sizes[index]:
            continue
        end = min(offset + len(chunk), psize)
        if end > offset:
            ranges.setdefault(index, []).append((offset, end))
    covered = 0
    for spans in ranges.values():
        spans.sort()
        reach = 0
        for a, b in spans:
            if b > reach:
                covered += b - max(a, reach)
                reach = b
    return sizes, covered


_REASSEMBLERS: dict[int, Any] = {}
_KEYS = itertools.count(1)


def _reassembler(max_message_size: int) -> Any:
    """One Reassembler per worker and size limit, reused for every group (one key at a time)."""
    found = _REASSEMBLERS.get(max_message_size)
    if found is None:
        from .. import codec

        found = codec.Reassembler(
            max_message_size=max_message_size,
            max_incomplete_bytes=max_message_size + codec.MESSAGE_OVERHEAD,
        )
        _REASSEMBLERS[max_message_size] = found
    return found


def _reassemble(rows: list[tuple], chunks: list, max_message_size: int) -> tuple[list[Any] | None, int, int]:
    """Feed one group's frames, in capture order, to the codec's Reassembler.

    Returns:
        (parts or None, duplicates, rejected). Frames after completion count as duplicates.
    """
    from ..errors import DecodeError
    from ..wire import DataFrame

    reassembler = _reassembler(max_message_size)
    key = next(_KEYS)  # a key no earlier group had (see the module docstring)
    before = reassembler.duplicates
    done = None
    duplicates = rejected = 0
    for (pcount, pindex, msize, psize, coffset, _), chunk in zip(rows, chunks):
        if done is not None:
            duplicates += 1
            continue
        try:
            result = reassembler.add(DataFrame(0, 0, pcount, pindex, msize, psize, coffset, chunk), 0.0, key)
        except DecodeError:
            rejected += 1
            continue
        if result is not None:
            done = result
    if done is None:
        reassembler.drop(key)
    return done, duplicates + reassembler.duplicates - before, rejected


def reassemble_group(rows: list[tuple], chunks: list, max_message_size: int) -> tuple[list[Any] | None, int, int]:
    """One group's frames -> (completed parts or None, duplicates, rejected), the reference rule.

    Args:
        rows: per frame ``(part_count, part_index, message_size, part_size, chunk_offset, ts_ns)``,
            ints, in capture order.
        chunks: per frame its chunk (a bytes-like object).
        max_message_size: larger claimed messages are rejected, bytes.

    Returns:
        The parts (bytes-like, in part order, absent parts empty) when the frames complete the
        message, else None; the duplicate and rejected frame counts (module docstring).
    """
    part_count, _, message_size, _, _, _ = rows[0]
    if (
        len(rows) == 1
        and part_count == 1
        and rows[0][4] == 0
        and len(chunks[0]) == rows[0][3] == message_size <= max_message_size
    ):
        return [chunks[0]], 0, 0  # a whole message in one frame (the codec checked its header)
    if sum(len(c) for c in chunks) >= message_size:
        return _reassemble(rows, chunks, max_message_size)
    # Can never complete: duplicates are exact repeats of (part, offset, bytes).
    seen: set[tuple[int, int, bytes]] = set()
    duplicates = 0
    for (_, pindex, _, _, coffset, _), chunk in zip(rows, chunks):
        ident = (pindex, coffset, bytes(chunk))
        if ident in seen:
            duplicates += 1
        seen.add(ident)
    return None, duplicates, 0


def group_frames(
    a: int,
    b: int,
    part_count: np.ndarray,
    part_index: np.ndarray,
    message_size: np.ndarray,
    part_size: np.ndarray,
    chunk_offset: np.ndarray,
    buffers: list,
    buf_id: np.ndarray,
    chunk_start: np.ndarray,
    chunk_len: np.ndarray,
) -> tuple[list[tuple], list[memoryview]]:
    """Rows ``a:b`` of the arrays of :func:`reassemble_groups` -> ``reassemble_group``'s rows and chunks."""
    fields = [f[a:b].tolist() for f in (part_count, part_index, message_size, part_size, chunk_offset)]
    rows = [(*r, 0) for r in zip(*fields)]
    views = [memoryview(x).cast("B") for x in buffers]
    chunks = [
        views[i][s : s + k] for i, s, k in zip(buf_id[a:b].tolist(), chunk_start[a:b].tolist(), chunk_len[a:b].tolist())
    ]
    return rows, chunks


def reassemble_groups(
    bounds: np.ndarray,
    part_count: np.ndarray,
    part_index: np.ndarray,
    message_size: np.ndarray,
    part_size: np.ndarray,
    chunk_offset: np.ndarray,
    buffers: list,
    buf_id: np.ndarray,
    chunk_start: np.ndarray,
    chunk_len: np.ndarray,
    max_message_size: int,
    keep_parts: bool = True,
) -> tuple[np.ndarray, ...]:
    """Reassemble every group of frames sorted by key and capture order, at once.

    Args:
        bounds: int64 (g + 1,), group ``i`` is rows ``bounds[i]:bounds[i + 1]`` (non-empty).
        part_count, part_index, message_size, part_size, chunk_offset: int64 (n,), the frame
            headers in row order (any integer dtype; ``part_count`` within 0..255).
        buffers: the payload buffers (bytes-like, uint8).
        buf_id: int32 (n,), which buffer holds each row's chunk.
        chunk_start, chunk_len: int64 (n,), where the chunk starts in its buffer and its size, bytes.
        max_message_size: larger claimed messages are rejected, bytes.
        keep_parts: return the completed parts' bytes in ``data`` (else ``data`` is empty).

    Returns:
        ``(complete, part_count, message_size, duplicates, rejected, missing, slots, slot_size,
        slot_start, digests, data)``: per group (g,) a uint8 flag, int32 part count and int64
        message size (of the completed message; else the first frame's), duplicates, rejected
        and missing bytes; ``slots`` int64 (g + 1,) where each group's parts start in
        ``slot_size``, ``slot_start`` and ``digests`` (int64 (s,), a part's size, -1 for a part
        no frame of an incomplete group named; where a completed part's bytes start in
        ``data``; uint8 (s, 32), a completed part's sha256, zeros otherwise); ``data`` uint8,
        the completed parts back to back, in group and part order.

    Raises:
        ValueError: naming the argument (:func:`check_arguments`): not 1-D integers, the arrays
            differ in length, ``bounds`` does not cut ``0..n`` into non-empty groups, a
            ``part_count`` outside the wire's 0..255 (an incomplete group holds that many output
            slots), or a chunk lies outside its buffer. Other header values never raise (the
            codec's own errors are counted as rejections).
    """
    (bounds, part_count, part_index, message_size, part_size, chunk_offset, buf_id, chunk_start, chunk_len) = (
        check_arguments(
            bounds,
            [part_count, part_index, message_size, part_size, chunk_offset, buf_id, chunk_start, chunk_len],
            buffers,
            max_message_size,
        )
    )
    g = len(bounds) - 1
    complete = np.zeros(g, np.uint8)
    out_count = np.zeros(g, np.int32)
    out_size = np.zeros(g, np.int64)
    duplicates = np.zeros(g, np.int64)
    rejected = np.zeros(g, np.int64)
    missing = np.zeros(g, np.int64)
    slots = np.zeros(g + 1, np.int64)
    sizes: list[int] = []
    starts: list[int] = []
    digests: list[bytes] = []
    data: list[bytes] = []
    at = 0
    for i in range(g):
        a, b = int(bounds[i]), int(bounds[i + 1])
        rows, chunks = group_frames(
            a, b, part_count, part_index, message_size, part_size, chunk_offset, buffers, buf_id, chunk_start, chunk_len
        )
        done, duplicates[i], rejected[i] = reassemble_group(rows, chunks, max_message_size)
        if done is not None:
            complete[i] = 1
            out_count[i] = len(done)
            for p in done:
                blob = bytes(p)
                sizes.append(len(blob))
                starts.append(at if keep_parts else 0)
                digests.append(hashlib.sha256(blob).digest())
                if keep_parts:
                    data.append(blob)
                    at += len(blob)
            out_size[i] = sum(len(p) for p in done)
        else:
            found, covered = _coverage(rows, chunks)
            pc0, ms0 = rows[0][0], rows[0][2]
            out_count[i] = pc0
            out_size[i] = ms0
            missing[i] = max(0, ms0 - covered)
            sizes.extend(found.get(j, -1) for j in range(pc0))
            starts.extend([0] * max(pc0, 0))
            digests.extend([bytes(32)] * max(pc0, 0))
        slots[i + 1] = len(sizes)
    return (
        complete,
        out_count,
        out_size,
        duplicates,
        rejected,
        missing,
        slots,
        np.array(sizes, np.int64),
        np.array(starts, np.int64),
        np.frombuffer(b"".join(digests), np.uint8).reshape(-1, 32).copy(),
        np.frombuffer(b"".join(data), np.uint8).copy(),
    )


#: The row arguments of ``reassemble_groups``, in call order (their names in ValueError messages).
ROW_ARGUMENTS = (
    "part_count",
    "part_index",
    "message_size",
    "part_size",
    "chunk_offset",
    "buf_id",
    "chunk_start",
    "chunk_len",
)
#: The wire's part_count is a u8: an incomplete group holds this many output slots at most.
MAX_PART_COUNT = 255
#: The chunks of one call add up to at most this many bytes (int64 sums cannot wrap below it).
MAX_TOTAL_BYTES = 2**62


def _integers(name: str, values: Any) -> np.ndarray:
    """``values`` as a 1-D int64 array; ValueError naming ``name`` when it is not 1-D integers."""
    a = np.asarray(values)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a 1-D integer array, got {a.dtype} of shape {a.shape}")
    if a.dtype.kind == "u" and a.size and int(a.max()) > 2**63 - 1:
        raise ValueError(f"{name} holds values above 2**63 - 1")
    return a.astype(np.int64, copy=False)


def check_arguments(bounds: Any, rows: list[Any], buffers: Any, max_message_size: Any) -> tuple[np.ndarray, ...]:
    """The argument checks both twins make before touching a byte (ValueError, as ``reassemble_groups`` says).

    Every comparison is written so that int64 arithmetic cannot wrap (``start > size - length``,
    not ``start + length > size``).

    Args:
        bounds: ``reassemble_groups``' bounds.
        rows: its eight row arguments, in :data:`ROW_ARGUMENTS` order.
        buffers: its payload buffers.
        max_message_size: its size limit.

    Returns:
        ``(bounds, *rows)`` as 1-D int64 arrays.

    Raises:
        ValueError: naming the argument: not a 1-D integer array, row arrays of different lengths,
            bounds that do not cut ``0..n`` into non-empty groups, a part_count outside
            ``0..MAX_PART_COUNT``, a chunk outside its buffer, chunks adding up to more than
            :data:`MAX_TOTAL_BYTES`, a negative or non-integer ``max_message_size``, or buffers
            that are not a list of bytes-like objects.
    """
    if not isinstance(max_message_size, (int, np.integer)) or not 0 <= max_message_size <= 2**63 - 1:
        raise ValueError(f"max_message_size must be an integer in 0..2**63-1, got {max_message_size!r}")
    if not isinstance(buffers, list):
        raise ValueError(f"buffers must be a list of bytes-like objects, got {type(buffers).__name__}")
    try:
        views = [memoryview(x) for x in buffers]
    except TypeError as e:
        raise ValueError(f"buffers must be a list of bytes-like objects: {e}") from None
    if not all(v.c_contiguous for v in views):
        raise ValueError("buffers must be contiguous")
    sizes = np.array([v.nbytes for v in views] + [0], np.int64)
    b = _integers("bounds", bounds)
    cols = [_integers(name, r) for name, r in zip(ROW_ARGUMENTS, rows)]
    n = len(cols[0])
    for name, c in zip(ROW_ARGUMENTS, cols):
        if len(c) != n:
            raise ValueError(f"the row arrays differ in length: {name} has {len(c)}, part_count {n}")
    if b.size == 0 or (b.size > 1 and (b[0] != 0 or np.any(b[1:] <= b[:-1]) or b[-1] > n)):
        raise ValueError("bounds must increase from 0 to at most the row count")
    if n:
        pc, ids, start, length = cols[0], cols[5], cols[6], cols[7]
        if np.any((pc < 0) | (pc > MAX_PART_COUNT)):
            raise ValueError(f"part_count must be within 0..{MAX_PART_COUNT} (the wire's u8)")
        bad = (ids < 0) | (ids >= len(buffers)) | (start < 0) | (length < 0)
        room = sizes[np.where(bad, len(buffers), ids)] - np.where(bad, 0, length)  # cannot wrap: both >= 0
        if bad.any() or np.any(start > room):
            raise ValueError("a chunk lies outside its payload buffer (buf_id, chunk_start, chunk_len)")
        if int(length.max()) > MAX_TOTAL_BYTES // n:
            if sum(length.tolist()) > MAX_TOTAL_BYTES:
                raise ValueError(f"chunk_len: the chunks add up to more than {MAX_TOTAL_BYTES} bytes")
    return (b, *cols)
