# Single nbmq frames: parse, and encode DataFrame / ControlFrame (twin: _codec_py/frames.py).

cdef struct Hdr:
    uint64_t sid
    uint64_t mid
    uint32_t msize
    uint32_t psize
    uint32_t coff
    uint16_t csize
    uint8_t pc
    uint8_t pi

# FrameError codes (nbmq.wire.FrameError).
cdef enum:
    E_OK = 0
    E_TRUNCATED = 1
    E_VERSION = 2
    E_KIND = 3
    E_TOO_LARGE = 4
    E_PART_COUNT = 5
    E_PART_INDEX = 6
    E_PART_SIZE = 7
    E_CHUNK_SIZE = 8
    E_CHUNK_BOUNDS = 9
    E_OUT_OF_BUFFER = 10
    E_SEALED_TOO_LARGE = 11

# DATA_HEADER, CONTROL_HEADER, MAX_FRAME, MAX_CHUNK and secure mode's sizes: nbmq/_wire.pxd.

cdef list _REASONS = [FRAME_ERROR_REASONS[code] for code in FrameError]
cdef tuple _KINDS = tuple(FrameKind)


cdef inline int _check(const unsigned char* p, Py_ssize_t n, Hdr* h, Py_ssize_t* off,
                       bint sealed=False) noexcept nogil:
    """The twin's check_frame: a FrameError code, the offset at fault, and the header in h.

    The header fields in h are valid when the code is OK or PART_COUNT..CHUNK_BOUNDS (data) or
    OK (control: only sid). ``sealed``: take secure mode's frames too (checked as their plain
    frame, the counter and tag set aside).
    """
    cdef uint8_t kind
    cdef Py_ssize_t seal = 0
    if n < 2:
        off[0] = n
        return E_TRUNCATED
    if p[0] != VERSION and not (sealed and p[0] == SECURE_VERSION):
        off[0] = 0
        return E_VERSION
    kind = p[1]
    if kind > 5:
        off[0] = 1
        return E_KIND
    if p[0] == SECURE_VERSION and kind != 1 and kind != 2:
        seal = SECURE_OVERHEAD
    if n > MAX_FRAME + seal:
        off[0] = MAX_FRAME + seal
        return E_SEALED_TOO_LARGE if seal else E_TOO_LARGE
    n -= seal
    if kind == 0:
        if n < DATA_HEADER:
            off[0] = n
            return E_TRUNCATED
        h.sid = nbmq_be64(p + 2)
        h.mid = nbmq_be64(p + 10)
        h.pc = p[18]
        h.pi = p[19]
        h.msize = nbmq_be32(p + 20)
        h.psize = nbmq_be32(p + 24)
        h.csize = nbmq_be16(p + 28)
        h.coff = nbmq_be32(p + 30)
        if h.pc == 0:
            off[0] = 18
            return E_PART_COUNT
        if h.pi >= h.pc:
            off[0] = 19
            return E_PART_INDEX
        if h.psize > h.msize:
            off[0] = 24
            return E_PART_SIZE
        if <Py_ssize_t>h.csize != n - DATA_HEADER:
            off[0] = 28
            return E_CHUNK_SIZE
        if <uint64_t>h.coff + h.csize > h.psize:
            off[0] = 30
            return E_CHUNK_BOUNDS
        off[0] = 0
        return E_OK
    if n < CONTROL_HEADER:
        off[0] = n
        return E_TRUNCATED
    h.sid = nbmq_be64(p + 2)
    off[0] = 0
    return E_OK


cdef object _frame_error(int code, Py_ssize_t offset):
    cls = FrameTooLarge if code == E_TOO_LARGE else DecodeError
    return cls(offset, _REASONS[code])


def bundle_layout(datagram):
    """Where the frames of a sealed bundle lie: ``(entries, counter_offset)`` (see the twin)."""
    cdef object mv = nbmq_byteview(datagram)
    cdef const unsigned char* p = nbmq_ptr(mv)
    cdef Py_ssize_t heads[MAX_BUNDLE_FRAMES]
    cdef Py_ssize_t sizes[MAX_BUNDLE_FRAMES]
    cdef Py_ssize_t lens[MAX_BUNDLE_FRAMES]
    cdef Py_ssize_t k = 0, end = 0, at = 0, i
    cdef int why = _bundle_layout(p, len(mv), &k, heads, sizes, lens, &end, &at)
    if why:
        raise DecodeError(at, BUNDLE_ERROR_REASONS[why])
    return [(heads[i], sizes[i], lens[i]) for i in range(k)], end


def parse_frame(datagram):
    """Parse one datagram into a DataFrame or ControlFrame that views the datagram."""
    cdef object mv = nbmq_byteview(datagram)
    cdef const unsigned char* p = nbmq_ptr(mv)
    cdef Py_ssize_t n = nbmq_len(mv)
    cdef Py_ssize_t off
    cdef Hdr h
    cdef int code = _check(p, n, &h, &off)
    if code:
        raise _frame_error(code, off)
    if p[1] == 0:
        nbmq_narrow(mv, DATA_HEADER, n - DATA_HEADER)
        return nbmq_data_frame(DataFrame, h.sid, h.mid, h.pc, h.pi, h.msize, h.psize, h.coff, mv)
    nbmq_narrow(mv, CONTROL_HEADER, n - CONTROL_HEADER)
    return nbmq_tuple3(ControlFrame, _KINDS[p[1]], PyLong_FromUnsignedLongLong(h.sid), mv)


cdef inline void _put_data_header(unsigned char* o, const Hdr* h) noexcept nogil:
    o[0] = 1
    o[1] = 0
    nbmq_put_be64(o + 2, h.sid)
    nbmq_put_be64(o + 10, h.mid)
    o[18] = h.pc
    o[19] = h.pi
    nbmq_put_be32(o + 20, h.msize)
    nbmq_put_be32(o + 24, h.psize)
    nbmq_put_be16(o + 28, h.csize)
    nbmq_put_be32(o + 30, h.coff)


cdef int _check_data_args(object session_id, object message_id, object part_count,
                          object part_index, object message_size, object part_size,
                          object chunk_offset, Py_ssize_t chunk_size, Hdr* h) except -1:
    """The twin's _check_data_args; fills h."""
    cdef int sid_ok = nbmq_index_u64(session_id, &h.sid)
    cdef int mid_ok = nbmq_index_u64(message_id, &h.mid)
    cdef int64_t pc = _i64(part_count)
    cdef int64_t pi = _i64(part_index)
    cdef int64_t ms = _i64(message_size)
    cdef int64_t ps = _i64(part_size)
    cdef int64_t co = _i64(chunk_offset)
    if not (sid_ok and mid_ok):
        raise OverflowError("session_id and message_id must be u64")
    if not 1 <= pc <= 255:
        raise ValueError(f"part_count must be 1..255, got {part_count}")
    if not 0 <= pi < pc:
        raise ValueError(f"part_index must be 0..part_count-1, got {part_index}")
    if not (0 <= ps <= ms <= U32_MAX):
        raise ValueError("need 0 <= part_size <= message_size <= 2**32-1")
    if chunk_size > MAX_CHUNK:
        raise ValueError(f"chunk of {chunk_size} bytes is over {MAX_CHUNK}")
    if co < 0 or co > ps - chunk_size:
        raise ValueError("chunk past its part")
    h.pc = <uint8_t>pc
    h.pi = <uint8_t>pi
    h.msize = <uint32_t>ms
    h.psize = <uint32_t>ps
    h.coff = <uint32_t>co
    h.csize = <uint16_t>chunk_size
    return 0


cdef Py_ssize_t _room(object out, object offset, Py_ssize_t size) except -1:
    """The writable position for size bytes at offset in the byte view out."""
    cdef int64_t off = _i64(offset)
    if off < 0 or off > nbmq_len(out) - size:
        raise ValueError("no room for the frame in the buffer")
    if nbmq_readonly(out):
        raise TypeError("argument must be read-write bytes-like object, not memoryview")
    return <Py_ssize_t>off


def encode_data_frame_into(buffer, offset, session_id, message_id, part_count, part_index,
                           message_size, part_size, chunk_offset, chunk):
    """Write one data frame into buffer at offset; returns the bytes written."""
    cdef const unsigned char* data
    cdef Py_ssize_t size
    owner = _bytes_of(chunk, &data, &size)
    cdef Hdr h
    _check_data_args(session_id, message_id, part_count, part_index, message_size, part_size,
                     chunk_offset, size, &h)
    cdef object out = nbmq_byteview(buffer)
    cdef Py_ssize_t off = _room(out, offset, DATA_HEADER + size)
    cdef unsigned char* o = nbmq_wptr(out) + off
    _put_data_header(o, &h)
    memmove(o + DATA_HEADER, data, size)
    return DATA_HEADER + size


def encode_data_frame(session_id, message_id, part_count, part_index, message_size, part_size,
                      chunk_offset, chunk):
    """Encode one data frame as bytes."""
    cdef const unsigned char* data
    cdef Py_ssize_t size
    owner = _bytes_of(chunk, &data, &size)
    cdef Hdr h
    _check_data_args(session_id, message_id, part_count, part_index, message_size, part_size,
                     chunk_offset, size, &h)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, DATA_HEADER + size)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    _put_data_header(o, &h)
    memcpy(o + DATA_HEADER, data, size)
    return out


cdef object _check_control_args(object kind, object session_id, object payload, uint64_t* sid):
    """The twin's control-frame checks; returns the payload's byte view."""
    cdef int64_t k = _i64(kind)
    if not 1 <= k <= 5:
        raise ValueError(f"control frame kind must be 1..5, got {kind}")
    if nbmq_index_u64(session_id, sid) != 1:
        raise OverflowError("session_id must be a u64")
    body = nbmq_byteview(payload)
    if CONTROL_HEADER + nbmq_len(body) > MAX_FRAME:
        raise ValueError(f"control payload over {MAX_FRAME - CONTROL_HEADER} bytes")
    return body


def encode_control_frame_into(buffer, offset, kind, session_id, payload=b""):
    """Write one control frame into buffer at offset; returns the bytes written."""
    cdef uint64_t sid = 0
    body = _check_control_args(kind, session_id, payload, &sid)
    cdef Py_ssize_t size = CONTROL_HEADER + nbmq_len(body)
    out = nbmq_byteview(buffer)
    cdef Py_ssize_t off = _room(out, offset, size)
    cdef unsigned char* o = nbmq_wptr(out) + off
    o[0] = 1
    o[1] = <uint8_t>_i64(kind)
    nbmq_put_be64(o + 2, sid)
    memmove(o + CONTROL_HEADER, nbmq_ptr(body), size - CONTROL_HEADER)
    return size


def encode_control_frame(kind, session_id, payload=b""):
    """Encode one control frame as bytes."""
    nbmq_byteview(payload)  # the twin sizes its output from the payload first
    cdef uint64_t sid = 0
    body = _check_control_args(kind, session_id, payload, &sid)
    cdef Py_ssize_t size = CONTROL_HEADER + nbmq_len(body)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    o[0] = 1
    o[1] = <uint8_t>_i64(kind)
    nbmq_put_be64(o + 2, sid)
    memcpy(o + CONTROL_HEADER, nbmq_ptr(body), size - CONTROL_HEADER)
    return out
