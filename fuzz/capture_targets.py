"""Fuzz targets for the capture readers: one input is a whole capture file (pcap or pcapng).

``capture_twins`` reads it with the compiled helpers (``nbmq.capture.files._records`` record walker
and gather, ``nbmq.capture.datagrams._decode`` packet decoder and address table) and again with their
Python / numpy paths, and compares every column, counter and error reason; the dpkt engine
(the packet-at-a-time reference, ``read_datagrams(engine="dpkt")``) must agree as well. ``capture_split``
checks the ``plan_splits`` contract (nbmq/capture/files/splits.py): reading each byte range gives,
together, exactly the whole-file read, errors included. ``ack_hashes`` checks the frames table's
``ack_hash`` column (nbmq/capture/datagrams/ack_hashes.py): compiled loop against numpy,
and each value against ``codec.ack_hash`` of the datagram or the Ack's payload.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator

import numpy as np

from nbmq import _codec_py
from nbmq.capture import DatagramBatch, first_frames, plan_splits, read_datagrams
from nbmq.capture.datagrams import ack_hashes as hashes
from nbmq.capture.datagrams import assemble, batch, decode_fast
from nbmq.capture.files import records
from nbmq.capture.files.errorlog import MAX_ERROR_REASONS
from nbmq.errors import CaptureError
from nbmq.wire import SECURE_VERSION

from .framing import split_pieces
from .twins import Finding, check_same

__all__ = ["capture_twins", "capture_split", "ack_hashes", "python_paths", "picture"]

# (module, attribute) of every compiled helper the readers pick at import time
_COMPILED = (
    (records, "_walk_chain"),
    (records, "_walk_fields"),
    (batch, "_gather"),
    (decode_fast, "_decode"),
    (assemble, "_factorize"),
    (hashes, "_native_fnv"),
)


def _require_compiled() -> None:
    missing = [f"{m.__name__}.{a}" for m, a in _COMPILED if getattr(m, a) is None]
    if missing:
        raise ImportError(
            f"compiled capture helpers not loaded ({', '.join(missing)}): build the "
            "extensions and unset NBMQ_NO_EXTENSIONS"
        )


_require_compiled()


@contextlib.contextmanager
def python_paths() -> Iterator[None]:
    """Within the block the readers use their Python / numpy paths instead of compiled code."""
    saved = [getattr(m, a) for m, a in _COMPILED]
    for m, a in _COMPILED:
        setattr(m, a, None)
    try:
        yield
    finally:
        for (m, a), value in zip(_COMPILED, saved):
            setattr(m, a, value)


def picture(b: DatagramBatch, *, counters: bool = True) -> tuple:
    """Everything a batch says, in comparable form (payloads datagram by datagram)."""
    c = b.compact()
    rows = (
        c.timestamp_ns.tolist(),
        c.timestamp.tolist(),
        list(c.src_addr),
        list(c.dst_addr),
        c.src_port.tolist(),
        c.dst_port.tolist(),
        c.lengths.tolist(),
        c.frame_number.tolist(),
        c.truncated.tolist(),
        c.payload.tobytes(),
    )
    if not counters:
        return rows
    return rows + (b.packets, b.skipped, b.errors, list(b.error_reasons), b.fallback_rows)


def _read(data: bytes, **kw: object) -> tuple:
    try:
        return ("ok", picture(read_datagrams(data, **kw)))  # type: ignore[arg-type]
    except CaptureError as e:
        return ("raise", "CaptureError", str(e))


def capture_twins(data: bytes) -> None:
    """Whole-file and second-half reads: the compiled helpers against the Python paths, and the
    fast engine against the dpkt reference engine (all but ``fallback_rows``, which only the
    fast engine counts)."""
    half = len(data) // 2
    compiled = [_read(data), _read(data, start=half)]
    with python_paths():
        python = [_read(data), _read(data, start=half)]
    check_same("read_datagrams (compiled vs Python paths)", python, compiled)
    reference = [_read(data, engine="dpkt"), _read(data, start=half, engine="dpkt")]
    if [_no_fallback(r) for r in compiled] != [_no_fallback(r) for r in reference]:
        raise Finding(f"read_datagrams: fast and dpkt engines disagree\n  fast: {compiled}\n  dpkt: {reference}")


def _no_fallback(result: tuple) -> tuple:
    return result if result[0] != "ok" else ("ok", result[1][:-1])


def _targets(data: bytes) -> list[int]:
    """Range sizes for one input: a pseudo-random one from 64 bytes up, and a third of it."""
    return [64 + zlib.crc32(data) % max(len(data) // 2, 1), max(len(data) // 3, 1)]


def capture_split(data: bytes) -> None:
    """The union of the ``plan_splits`` ranges' reads is the whole-file read (pcapng: halves)."""
    try:
        whole = read_datagrams(data)
    except CaptureError:
        return
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        plans = [[(0, len(data) // 2), (len(data) // 2, len(data))]]
    else:
        plans = [plan_splits(data, t) for t in _targets(data)]
    # The reasons are a sample (the first MAX_ERROR_REASONS by position) in each range, and a
    # range counts the errors of the records it owns, so only their set is compared, and only
    # while the whole read kept every reason.
    sample = whole.errors <= MAX_ERROR_REASONS
    want = (
        picture(whole, counters=False),
        whole.packets,
        whole.skipped,
        whole.errors,
        sorted(whole.error_reasons) if sample else None,
    )
    for splits in plans:
        for bases in ([None] * len(splits), first_frames(data, splits)):
            parts = [read_datagrams(data, start=s, end=e, first_frame=f) for (s, e), f in zip(splits, bases)]
            union = DatagramBatch.concat(parts)
            got = (
                picture(union, counters=False),
                union.packets,
                union.skipped,
                union.errors,
                sorted(union.error_reasons) if sample else None,
            )
            if got != want:
                raise Finding(
                    f"split read {splits} (first_frame {bases}) != whole read:\n"
                    f"  whole: {_summary(whole)}\n  split: {_summary(union)}"
                )


def _summary(b: DatagramBatch) -> str:
    frames = b.frame_number.tolist()
    return (
        f"{len(b)} rows, packets={b.packets} skipped={b.skipped} errors={b.errors} "
        f"reasons={b.error_reasons} frames={frames if len(frames) < 40 else frames[:40]}"
    )


def ack_hashes(data: bytes) -> None:
    """Datagrams laid out as for ``parse_frames`` (``framing.split_pieces``), ``gap`` junk bytes
    (byte 0 mod 8) between them: the ``ack_hash`` column by the compiled loop and by numpy, and
    every value by its rule (a valid data frame: ``ack_hash`` of its datagram; a valid Ack with
    8 payload bytes: those bytes, big-endian; anything else, secure mode's sealed frames
    included: null)."""
    grams = split_pieces(data[1:])
    gap = data[0] % 8 if data else 0
    buf, offsets = bytearray(), []
    for g in grams:
        buf += b"\xee" * gap
        offsets.append(len(buf))
        buf += g
    buffer = np.frombuffer(bytes(buf), np.uint8)
    lengths = np.array([len(g) for g in grams], np.int64)
    rows = _codec_py.parse_frames(buffer, np.array(offsets, np.int64), lengths)
    compiled = [a.tolist() for a in hashes.ack_hashes(buffer, rows, compiled=True)]
    numpy_ = [a.tolist() for a in hashes.ack_hashes(buffer, rows, compiled=False)]
    check_same("ack_hashes (compiled vs numpy)", numpy_, compiled)
    for i, g in enumerate(grams):
        ok = rows["error"][i] == 0 and g[0] != SECURE_VERSION
        if ok and g[1] == 0:
            want = _codec_py.ack_hash(g)
        elif ok and g[1] == 5 and len(g) == 18:
            want = int.from_bytes(g[10:], "big")
        else:
            want = None
        got = compiled[0][i] % 2**64 if compiled[1][i] else None
        if got != want:
            raise Finding(f"ack_hashes row {i} ({g.hex()}): {got} != {want}")
