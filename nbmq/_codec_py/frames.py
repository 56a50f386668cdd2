"""Encode and parse single nbmq frames (DataFrame and ControlFrame).

Source: seed 000 (wire format) and tests/data/VECTORS.md. Where the reference is lax we are
strict (ARCHITECTURE.md, "deliberately better"): it ignores a wrong version, an unknown kind or a
short header by returning nothing, and it accepts part_index >= part_count, part_count 0 and a
chunk_size that disagrees with the bytes present, which then crash its receive queue. Here every
one of those raises :class:`~nbmq.errors.DecodeError` with the offset of the field at fault.
"""

from __future__ import annotations

import operator
import struct

from ..errors import DecodeError, FrameTooLarge
from ..wire import (
    BUNDLE_ENTRY_SIZE,
    BUNDLE_ERROR_REASONS,
    BUNDLE_HEAD_SIZE,
    CONTROL_HEADER_SIZE,
    DATA_HEADER_SIZE,
    FRAME_ERROR_REASONS,
    MAX_BUNDLE_FRAMES,
    MAX_CHUNK_SIZE,
    MAX_FRAME_SIZE,
    MAX_PARTS,
    MIN_BUNDLE_FRAMES,
    SEALED_KINDS,
    SECURE_OVERHEAD,
    SECURE_VERSION,
    VERSION,
    ControlFrame,
    DataFrame,
    FrameError,
    FrameKind,
)

Buffer = bytes | bytearray | memoryview

DATA_HEADER = struct.Struct(">BBQQBBIIHI")
CONTROL_HEADER = struct.Struct(">BBQ")
_KINDS = tuple(FrameKind)
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


def _fail(code: FrameError, offset: int) -> DecodeError:
    cls = FrameTooLarge if code == FrameError.TOO_LARGE else DecodeError
    return cls(offset, FRAME_ERROR_REASONS[code])


def check_frame(view: memoryview, sealed: bool = False) -> tuple[FrameError, int, tuple[int, ...] | None]:
    """Validate one datagram; the single source of the rules both ``parse_frame`` and
    ``parse_frames`` apply (and the dissector's ``check``, rule for rule).

    Args:
        view: the datagram, a byte memoryview.
        sealed: also take secure mode's frames (version byte
            :data:`~nbmq.wire.SECURE_VERSION`, docs/secure.md): a sealed frame is checked as
            its plain frame would be, its counter and tag (:data:`~nbmq.wire.SECURE_OVERHEAD`
            bytes) set aside; a handshake frame (Connect, Connected) carries neither.
            ``parse_frames`` takes them (headers are in clear), ``parse_frame`` does not (a
            plain peer must refuse them).

    Returns:
        ``(code, offset, fields)``: the :class:`FrameError` (OK when valid), the offset of the
        field at fault (0 when valid) and the unpacked header tuple, or None when the header
        was not complete.
    """
    n = len(view)
    if n < 2:
        return FrameError.TRUNCATED, n, None
    version = view[0]
    if version != VERSION and not (sealed and version == SECURE_VERSION):
        return FrameError.VERSION, 0, None
    kind = view[1]
    if kind > FrameKind.ACK:
        return FrameError.KIND, 1, None
    seal = SECURE_OVERHEAD if version == SECURE_VERSION and kind in SEALED_KINDS else 0
    if n > MAX_FRAME_SIZE + seal:
        return (FrameError.SEALED_TOO_LARGE if seal else FrameError.TOO_LARGE), MAX_FRAME_SIZE + seal, None
    n -= seal
    if kind == FrameKind.DATA:
        if n < DATA_HEADER_SIZE:
            return FrameError.TRUNCATED, n, None
        fields = DATA_HEADER.unpack_from(view)
        _, _, _, _, part_count, part_index, message_size, part_size, chunk_size, chunk_offset = fields
        if part_count == 0:
            return FrameError.PART_COUNT, 18, fields
        if part_index >= part_count:
            return FrameError.PART_INDEX, 19, fields
        if part_size > message_size:
            return FrameError.PART_SIZE, 24, fields
        if chunk_size != n - DATA_HEADER_SIZE:
            return FrameError.CHUNK_SIZE, 28, fields
        if chunk_offset + chunk_size > part_size:
            return FrameError.CHUNK_BOUNDS, 30, fields
        return FrameError.OK, 0, fields
    if n < CONTROL_HEADER_SIZE:
        return FrameError.TRUNCATED, n, None
    return FrameError.OK, 0, CONTROL_HEADER.unpack_from(view)


def bundle_layout(datagram: Buffer) -> tuple[list[tuple[int, int, int]], int]:
    """Where the frames of a sealed bundle lie (docs/secure.md), checked before anything is
    decrypted or allocated: the one rule the engine's opener, the batch decoder and the
    dissector apply.

    Args:
        datagram: a whole datagram whose first byte is :data:`~nbmq.wire.BUNDLE_VERSION`.

    Returns:
        ``(entries, counter_offset)``: per frame ``(header_offset, header_size,
        ciphertext_length)`` (bytes; header sizes 34 for data, 10 for control), and the offset of
        the bundle's u64 counter; the ciphertext starts 8 bytes after it, the 16-byte tag ends
        the datagram.

    Raises:
        DecodeError: one of :data:`~nbmq.wire.BUNDLE_ERROR_REASONS`, at the field at fault: a
            frame count outside 2..255 (offset 1), a truncated entry (the datagram's length), a
            header that is not a sealed one (version 0x81, a kind that is sealed), headers of
            different sessions, or lengths that do not add up to the datagram's size (offset 2).
    """
    view = memoryview(datagram).cast("B") if not isinstance(datagram, bytes) else datagram
    n = len(view)
    count = view[1] if n >= BUNDLE_HEAD_SIZE else 0
    if not MIN_BUNDLE_FRAMES <= count <= MAX_BUNDLE_FRAMES:
        raise DecodeError(1, BUNDLE_ERROR_REASONS[1])
    entries = []
    pos = BUNDLE_HEAD_SIZE
    total = 0
    session = None
    for _ in range(count):
        head = pos + BUNDLE_ENTRY_SIZE
        if head + CONTROL_HEADER_SIZE > n:
            raise DecodeError(n, BUNDLE_ERROR_REASONS[2])
        kind = view[head + 1]
        if view[head] != SECURE_VERSION or kind not in SEALED_KINDS:
            raise DecodeError(head, BUNDLE_ERROR_REASONS[3])
        size = DATA_HEADER_SIZE if kind == FrameKind.DATA else CONTROL_HEADER_SIZE
        if head + size > n:
            raise DecodeError(n, BUNDLE_ERROR_REASONS[2])
        sid = bytes(view[head + 2 : head + 10])
        if session is None:
            session = sid
        elif sid != session:
            raise DecodeError(head + 2, BUNDLE_ERROR_REASONS[4])
        length = (view[pos] << 8) | view[pos + 1]
        entries.append((head, size, length))
        total += length
        pos = head + size
    if n != pos + SECURE_OVERHEAD + total:
        raise DecodeError(BUNDLE_HEAD_SIZE, BUNDLE_ERROR_REASONS[5])
    return entries, pos


def parse_frame(datagram: Buffer) -> DataFrame | ControlFrame:
    """Parse one datagram into a frame whose chunk or payload is a view into ``datagram``.

    Args:
        datagram: one UDP payload, any C-contiguous buffer (at most 500 bytes).

    Returns:
        A :class:`~nbmq.wire.DataFrame` (kind 0) or a :class:`~nbmq.wire.ControlFrame` (kinds
        1..5). ``chunk`` / ``payload`` is a ``memoryview`` of ``datagram``: no copy, so do not
        modify ``datagram`` while the frame is in use.

    Raises:
        DecodeError: truncated header (offset = bytes present), wrong version (0), unknown kind
            (1), part_count 0 (18), part_index >= part_count (19), part larger than its message
            (24), chunk_size disagreeing with the bytes present (28), chunk past its part (30).
        FrameTooLarge: more than 500 bytes (offset 500).
    """
    view = memoryview(datagram).cast("B")
    code, offset, fields = check_frame(view)
    if code:
        raise _fail(code, offset)
    assert fields is not None
    if view[1] == FrameKind.DATA:
        _, _, sid, mid, pcount, pindex, msize, psize, _, coff = fields
        return DataFrame(sid, mid, pcount, pindex, msize, psize, coff, view[DATA_HEADER_SIZE:])
    return ControlFrame(_KINDS[view[1]], fields[2], view[CONTROL_HEADER_SIZE:])


def _check_data_args(
    session_id: int,
    message_id: int,
    part_count: int,
    part_index: int,
    message_size: int,
    part_size: int,
    chunk_offset: int,
    chunk_size: int,
) -> None:
    session_id, message_id, part_count, part_index, message_size, part_size, chunk_offset = map(
        operator.index,
        (session_id, message_id, part_count, part_index, message_size, part_size, chunk_offset),
    )
    if not (0 <= session_id <= _U64 and 0 <= message_id <= _U64):
        raise OverflowError("session_id and message_id must be u64")
    if not 1 <= part_count <= MAX_PARTS:
        raise ValueError(f"part_count must be 1..{MAX_PARTS}, got {part_count}")
    if not 0 <= part_index < part_count:
        raise ValueError(f"part_index must be 0..part_count-1, got {part_index}")
    if not (0 <= part_size <= message_size <= _U32):
        raise ValueError("need 0 <= part_size <= message_size <= 2**32-1")
    if chunk_size > MAX_CHUNK_SIZE:
        raise ValueError(f"chunk of {chunk_size} bytes is over {MAX_CHUNK_SIZE}")
    if not 0 <= chunk_offset or chunk_offset + chunk_size > part_size:
        raise ValueError("chunk past its part")


def encode_data_frame_into(
    buffer: bytearray | memoryview,
    offset: int,
    session_id: int,
    message_id: int,
    part_count: int,
    part_index: int,
    message_size: int,
    part_size: int,
    chunk_offset: int,
    chunk: Buffer,
) -> int:
    """Write one data frame into ``buffer`` at ``offset``.

    Args:
        buffer: a writable C-contiguous buffer (bytearray, memoryview, numpy uint8 array).
        offset: where the frame starts in ``buffer``, bytes.
        session_id, message_id: u64.
        part_count: 1..255. part_index: 0..part_count-1.
        message_size: u32 sum of part sizes, bytes. part_size: bytes, at most message_size.
        chunk_offset: offset of ``chunk`` within its part, bytes.
        chunk: the chunk bytes (at most 466; may be empty).

    Returns:
        Bytes written: 34 + len(chunk).

    Raises:
        ValueError: a field out of range, a chunk over 466 bytes or past its part, or no room
            in ``buffer``.
        OverflowError: an id is not a u64.
        TypeError: a field is not an int, ``chunk`` is not a C-contiguous buffer, or
            ``buffer`` is not writable.
    """
    chunk_view = memoryview(chunk).cast("B")
    size = len(chunk_view)
    _check_data_args(session_id, message_id, part_count, part_index, message_size, part_size, chunk_offset, size)
    out = memoryview(buffer).cast("B")
    offset = operator.index(offset)
    end = offset + DATA_HEADER_SIZE + size
    if offset < 0 or end > len(out):
        raise ValueError("no room for the frame in the buffer")
    DATA_HEADER.pack_into(
        out,
        offset,
        VERSION,
        FrameKind.DATA,
        session_id,
        message_id,
        part_count,
        part_index,
        message_size,
        part_size,
        size,
        chunk_offset,
    )
    out[offset + DATA_HEADER_SIZE : end] = chunk_view
    return DATA_HEADER_SIZE + size


def encode_data_frame(
    session_id: int,
    message_id: int,
    part_count: int,
    part_index: int,
    message_size: int,
    part_size: int,
    chunk_offset: int,
    chunk: Buffer,
) -> bytes:
    """Encode one data frame; the arguments and errors are those of :func:`encode_data_frame_into`.

    Returns:
        The frame, ``34 + len(chunk)`` bytes.
    """
    out = bytearray(DATA_HEADER_SIZE + len(memoryview(chunk).cast("B")))
    encode_data_frame_into(
        out,
        0,
        session_id,
        message_id,
        part_count,
        part_index,
        message_size,
        part_size,
        chunk_offset,
        chunk,
    )
    return bytes(out)


def encode_control_frame_into(
    buffer: bytearray | memoryview, offset: int, kind: int, session_id: int, payload: Buffer = b""
) -> int:
    """Write one control frame into ``buffer`` at ``offset``.

    Args:
        buffer: a writable C-contiguous buffer.
        offset: where the frame starts, bytes.
        kind: a control :class:`~nbmq.wire.FrameKind` (1..5).
        session_id: u64 (the reference sends 0 in Connect).
        payload: bytes after the header (an Ack's 8-byte hash), at most 490 bytes.

    Returns:
        Bytes written: 10 + len(payload).

    Raises:
        ValueError: ``kind`` is not 1..5, the payload is over 490 bytes, or no room in ``buffer``.
        OverflowError: ``session_id`` is not a u64.
        TypeError: ``kind``, ``session_id`` or ``offset`` is not an int, or ``buffer`` is not
            writable.
    """
    if not FrameKind.CONNECT <= operator.index(kind) <= FrameKind.ACK:
        raise ValueError(f"control frame kind must be 1..5, got {kind}")
    if not 0 <= operator.index(session_id) <= _U64:
        raise OverflowError("session_id must be a u64")
    body = memoryview(payload).cast("B")
    size = CONTROL_HEADER_SIZE + len(body)
    if size > MAX_FRAME_SIZE:
        raise ValueError(f"control payload over {MAX_FRAME_SIZE - CONTROL_HEADER_SIZE} bytes")
    out = memoryview(buffer).cast("B")
    offset = operator.index(offset)
    if offset < 0 or offset + size > len(out):
        raise ValueError("no room for the frame in the buffer")
    CONTROL_HEADER.pack_into(out, offset, VERSION, kind, session_id)
    out[offset + CONTROL_HEADER_SIZE : offset + size] = body
    return size


def encode_control_frame(kind: int, session_id: int, payload: Buffer = b"") -> bytes:
    """Encode one control frame; arguments and errors as :func:`encode_control_frame_into`.

    Returns:
        The frame, ``10 + len(payload)`` bytes.
    """
    out = bytearray(CONTROL_HEADER_SIZE + len(memoryview(payload).cast("B")))
    encode_control_frame_into(out, 0, kind, session_id, payload)
    return bytes(out)
