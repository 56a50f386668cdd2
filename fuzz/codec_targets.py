"""Fuzz targets for the codec: each runs one input through both twins and compares.

Sources of the rules checked: STYLE.md section 7 (both twins accept exactly the same bytes,
same errors); section 2 (stream decoders parse transactionally: any cutting of a stream into
feeds gives the same records); wire.py (one encoding per frame, so a parsed frame re-encodes
to its bytes); the docstrings of ``nbmq._codec_py`` (``parse_frames`` rows carry the error
code whose reason ``parse_frame`` raises; stream decoders stay failed after a DecodeError).
"""

from __future__ import annotations

import numpy as np

from nbmq.errors import DecodeError
from nbmq.wire import (
    FRAME_ERROR_REASONS,
    SEALED_KINDS,
    SECURE_OVERHEAD,
    SECURE_VERSION,
    VERSION,
    DataFrame,
    FrameError,
)

from .framing import split_operations, split_pieces
from .twins import Finding, check_same, load_twins, norm, outcome

__all__ = ["parse_frame", "parse_frames", "reassembler", "bqsp_decoder", "rqueue_decoder", "as_plain"]

PY, C = load_twins()
TWINS = (PY, C)


def parse_frame(data: bytes) -> None:
    """One datagram: ``parse_frame`` on bytes, bytearray and memoryview, and ``ack_hash``.

    A datagram that parses must re-encode to exactly its bytes with either twin's encoder (the
    wire format has one encoding per frame: wire.py, seed 000).
    """
    results = []
    for m in TWINS:
        results.append(
            [
                outcome(m.parse_frame, data),
                outcome(m.parse_frame, bytearray(data)),
                outcome(m.parse_frame, memoryview(data)),
                outcome(m.ack_hash, data),
            ]
        )
    check_same("parse_frame", *results)
    a, b, c, _ = results[0]
    if not a == b == c:
        raise Finding(f"parse_frame: the result depends on the buffer type: {a!r} {b!r} {c!r}")
    if a[0] == "ok":
        frame = PY.parse_frame(data)
        for m in TWINS:
            if isinstance(frame, DataFrame):
                again = m.encode_data_frame(
                    frame.session_id,
                    frame.message_id,
                    frame.part_count,
                    frame.part_index,
                    frame.message_size,
                    frame.part_size,
                    frame.chunk_offset,
                    frame.chunk,
                )
            else:
                again = m.encode_control_frame(frame.kind, frame.session_id, frame.payload)
            if bytes(again) != data:
                raise Finding(
                    f"{m.__name__}: parse_frame then encode changes the bytes: {data.hex()} -> {bytes(again).hex()}"
                )


def as_plain(datagram: bytes) -> tuple[bytes, bool]:
    """The plain datagram ``parse_frames`` checks a secure one as (docs/secure.md): version byte 1
    and, unless it is a handshake frame, the counter and tag's bytes left out (the checks read the
    header and the length only, so which 24 bytes go does not matter; the last ones do).

    Returns:
        ``(plain, sealed)``: ``sealed`` is True when 24 bytes were set aside (then ``parse_frame``'s
        TOO_LARGE is ``parse_frames``' SEALED_TOO_LARGE).
    """
    if len(datagram) < 2 or datagram[0] != SECURE_VERSION:
        return datagram, False
    sealed = datagram[1] in SEALED_KINDS
    body = datagram[: max(0, len(datagram) - SECURE_OVERHEAD)] if sealed else datagram
    return bytes((VERSION,)) + body[1:] if body else body, sealed


def parse_frames(data: bytes) -> None:
    """Datagrams laid out as ``framing.split_pieces``; one buffer, exact rows, then an odd row;
    the same split by ``split_bundles`` (and each bundle's ``bundle_layout``).

    Also checks, on the Python twin, that each row's error code names the reason ``parse_frame``
    raises for that datagram, or for a secure one's plain twin (:func:`as_plain`; the FRAME_DTYPE
    contract).
    """
    grams = split_pieces(data[1:])
    buffer = np.frombuffer(b"".join(grams), np.uint8)
    lengths = np.array([len(g) for g in grams], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if grams else np.empty(0, np.int64)
    rows = [outcome(m.parse_frames, buffer, offsets, lengths) for m in TWINS]
    check_same("parse_frames", *rows)
    # sealed bundles (version 0x82) split into their frames, then decoded: the twins agree
    split = [outcome(m.split_bundles, buffer, offsets, lengths) for m in TWINS]
    check_same("split_bundles", *split)
    if split[0][0] == "ok":
        layout = PY.split_bundles(buffer, offsets, lengths)
        check_same("parse_frames (split)", *[outcome(m.parse_frames, *layout[:3]) for m in TWINS])
        for g in grams:
            if g[:1] == b"\x82":
                check_same("bundle_layout", *[outcome(m.bundle_layout, g) for m in TWINS])
    if rows[0][0] == "ok":
        table = PY.parse_frames(buffer, offsets, lengths)
        for i, g in enumerate(grams):
            plain, sealed = as_plain(g)
            single = outcome(PY.parse_frame, plain)
            code = int(table["error"][i])
            if sealed and code == FrameError.SEALED_TOO_LARGE:
                code = FrameError.TOO_LARGE
            if (single[0] == "ok") != (code == 0) or (code and single[3] != FRAME_ERROR_REASONS[code]):
                raise Finding(f"parse_frames row {i} has error {code}, parse_frame gives {single!r}")
    if data[:1] and data[0] & 1 and len(data) >= 9:  # one more row from the last 8 bytes, anywhere
        start = int.from_bytes(data[-8:-4], "big", signed=True)
        length = int.from_bytes(data[-4:], "big", signed=True)
        odd = (np.append(offsets, start), np.append(lengths, length))
        check_same("parse_frames (odd row)", *[outcome(m.parse_frames, buffer, *odd) for m in TWINS])


_BUDGETS = (0, 3000, 20_000, 64 * 1024 * 1024)
_CAPS = (500, 100_000, 2**32 - 1)
_PEER_BUDGETS = (None, 1500, 9000)
_COUNTERS = (
    "frames",
    "duplicates",
    "rejected",
    "completed",
    "expired",
    "dropped_too_large",
    "malformed",
    "evicted",
    "incomplete_bytes",
)


def _key(mode: int, frame: DataFrame | None) -> object:
    """The key an operation uses: None (the default ``(session_id, message_id)``), a tuple whose
    owner is one of four (``session_id % 4``: owners tie often), or a bare int (its own owner)."""
    if mode == 0 or frame is None:
        return None if mode == 0 else (0, 0)
    if mode == 1:
        return (frame.session_id % 4, frame.message_id)
    return frame.message_id % 8


def _owner(mode: int, frame: DataFrame | None) -> object:
    key = _key(mode, frame)
    if key is None:
        return frame.session_id if frame is not None else 0
    return key[0] if isinstance(key, tuple) else key


def reassembler(data: bytes) -> None:
    """A Reassembler driven by ``framing.split_operations``; byte 0 picks the limits and keys.

    Byte 0: ``max_incomplete_bytes`` (``% 4``), ``max_message_size`` (``// 4 % 3``), the
    per-peer budget (``// 12 % 3``) and the keys (``// 36 % 3``: :func:`_key`). ``op & 15``:
    0-2 and 11-15 ``add_datagram``, 3-4 ``add(parse_frame(body))``, 5 ``add_datagrams`` (the
    body twice plus a row out of the buffer), 6 ``expire``, 7 ``drop`` of the body's key, 8
    ``drop_owner`` of its owner, 9 ``owner_bytes``, 10 ``oldest``; ``(op >> 4) * 0.5`` is the
    time in seconds. Outcomes, every counter and the evicted keys (``take_evicted``) after
    every operation must match: on a tie both twins evict the same peer's message.
    """
    if not data:
        return
    b0 = data[0]
    budget, cap, peer, mode = (_BUDGETS[b0 % 4], _CAPS[(b0 // 4) % 3], _PEER_BUDGETS[(b0 // 12) % 3], (b0 // 36) % 3)
    ops = split_operations(data[1:])
    logs = []
    for m in TWINS:
        r = m.Reassembler(max_message_size=cap, max_incomplete_bytes=budget, max_peer_incomplete_bytes=peer)
        log: list = []
        for op, body in ops:
            now, kind = (op >> 4) * 0.5, op & 15
            frame = _data_frame(m, body)
            key = _key(mode, frame)
            if kind <= 2 or kind >= 11:
                log.append(outcome(r.add_datagram, body, now, key))
            elif kind <= 4:
                if frame is not None:
                    log.append(outcome(r.add, frame, now, key))
            elif kind == 5:
                n = len(body)
                log.append(
                    outcome(
                        r.add_datagrams,
                        body + body,
                        np.array([0, n, 3], np.int64),
                        np.array([n, n, 2 * n], np.int64),
                        now,
                    )
                )
            elif kind == 6:
                log.append(outcome(r.expire, now))
            elif kind == 7:
                default = (frame.session_id, frame.message_id) if frame is not None else (0, 0)
                log.append(outcome(r.drop, default if key is None else key))
            elif kind == 8:
                log.append(outcome(r.drop_owner, _owner(mode, frame)))
            elif kind == 9:
                log.append(outcome(r.owner_bytes, _owner(mode, frame)))
            else:
                log.append(outcome(r.oldest))
            log.append(tuple(getattr(r, n) for n in _COUNTERS) + (len(r), r.oldest(), norm(r.take_evicted())))
        logs.append(log)
    check_same("Reassembler", *logs)


def _data_frame(module: object, body: bytes) -> DataFrame | None:
    try:
        frame = module.parse_frame(body)  # type: ignore[attr-defined]
    except DecodeError:  # the parse itself is the parse_frame target's business
        return None
    return frame if isinstance(frame, DataFrame) else None


_BQSP_LIMITS = (0, 100, 2048, 64 * 1024 * 1024)
_RQUEUE_LIMITS = (0, 300, 2048, 65535)


def _drain(decoder: object) -> tuple[list, tuple | None]:
    """Every whole record the decoder holds, then the error that stopped it (or None)."""
    got = []
    while True:
        try:
            got.append(norm(next(decoder)))  # type: ignore[call-overload]
        except StopIteration:
            return got, None
        except DecodeError as e:  # FrameTooLarge too; anything else escapes: a finding
            return got, outcome(_raise, e)


def _drive(decoder: object, pieces: list[bytes]) -> list:
    """Everything a stream decoder says, feed by feed, also after its first error."""
    events: list = []
    for piece in pieces:
        try:
            decoder.feed(piece)  # type: ignore[attr-defined]
        except DecodeError as e:
            events.append(("feed", outcome(_raise, e)))
            continue
        events.append(("records", *_drain(decoder), decoder.buffered))  # type: ignore[attr-defined]
    return events


def _raise(error: Exception) -> None:
    raise error


def _check_transactional(what: str, pieces: list[bytes], events: list, whole: list) -> None:
    """Fed in pieces or all at once, a decoder yields the same records and the same first error
    (STYLE.md section 2: a partial header consumes nothing; a record split across feeds comes
    out whole)."""
    records, error = [], None
    for event in events:
        if event[0] == "records":
            records += event[1]
            error = event[2]
        if error is not None or event[0] == "feed":
            error = error or event[1]
            break
    ((_, once, once_error, once_left),) = whole
    left = events[-1][3] if events and error is None else once_left  # bytes still buffered
    if (records, error, left) != (once, once_error, once_left):
        raise Finding(
            f"{what}: fed in {len(pieces)} pieces it says {records!r}, {error!r}, {left} "
            f"bytes left; fed at once {once!r}, {once_error!r}, {once_left}"
        )


def bqsp_decoder(data: bytes) -> None:
    """A BqspDecoder fed ``framing.split_pieces(data[1:])``; byte 0 picks max_packet_size.

    Both twins must agree feed by feed, and piecewise feeding must equal one feed of it all.
    """
    if not data:
        return
    limit, pieces = _BQSP_LIMITS[data[0] % 4], split_pieces(data[1:])
    events = [_drive(m.BqspDecoder(limit), pieces) for m in TWINS]
    check_same("BqspDecoder", *events)
    _check_transactional("BqspDecoder", pieces, events[0], _drive(PY.BqspDecoder(limit), [b"".join(pieces)]))
    head = pieces[0] if pieces else b""
    check_same("decode_bqsp_header", *[outcome(m.decode_bqsp_header, head, data[0] % 8) for m in TWINS])


def rqueue_decoder(data: bytes) -> None:
    """An RqueueDecoder fed ``framing.split_pieces(data[1:])``; byte 0 picks max_payload.

    Both twins must agree feed by feed, and piecewise feeding must equal one feed of it all.
    """
    if not data:
        return
    limit, pieces = _RQUEUE_LIMITS[data[0] % 4], split_pieces(data[1:])
    events = [_drive(m.RqueueDecoder(limit), pieces) for m in TWINS]
    check_same("RqueueDecoder", *events)
    _check_transactional("RqueueDecoder", pieces, events[0], _drive(PY.RqueueDecoder(limit), [b"".join(pieces)]))
