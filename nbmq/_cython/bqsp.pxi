# BQSP (seed 002): 7-byte little-endian header (data_size u32, data_type u16, queue u8), then
# the data (twin: _codec_py/bqsp.py).

cdef enum:
    BQSP_HEADER = 7


cdef bytes _bqsp_packet(object data_size, object data_type, object queue,
                        const unsigned char* data, Py_ssize_t n):
    cdef int64_t size = _i64(data_size), kind = _i64(data_type), q = _i64(queue)
    if not (0 <= size <= U32_MAX and 0 <= kind <= 0xFFFF and 0 <= q <= 0xFF):
        raise ValueError("need data_size u32, data_type u16, queue u8")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, BQSP_HEADER + n)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    nbmq_put_le32(o, <uint32_t>size)
    nbmq_put_le16(o + 4, <uint16_t>kind)
    o[6] = <unsigned char>q
    if n:
        memcpy(o + BQSP_HEADER, data, n)
    return out


def encode_bqsp_header(data_size, data_type, queue):
    """The 7-byte little-endian header."""
    return _bqsp_packet(data_size, data_type, queue, NULL, 0)


def decode_bqsp_header(data, offset=0):
    """Read a header at offset: (data_size, data_type, queue)."""
    view = nbmq_byteview(data)
    cdef Py_ssize_t n = nbmq_len(view)
    cdef int64_t off = _i64(offset)
    if off < 0 or n - off < BQSP_HEADER:
        raise DecodeError(max(0, n - operator.index(offset)), "truncated header")
    cdef const unsigned char* p = nbmq_ptr(view) + off
    return (nbmq_le32(p), p[4] | (p[5] << 8), p[6])


def encode_bqsp_packet(data, data_type, queue):
    """Header plus data, one packet."""
    view = nbmq_byteview(data)
    return _bqsp_packet(nbmq_len(view), data_type, queue, nbmq_ptr(view), nbmq_len(view))


cdef class BqspDecoder(_StreamBuffer):
    """Incremental BQSP stream decoder: feed bytes, iterate packets."""

    cdef object _max_packet_size
    cdef int64_t _max

    def __init__(self, max_packet_size=BQSP_DEFAULT_MAX_PACKET):
        """Set the largest data_size accepted, bytes."""
        if not 0 <= operator.index(max_packet_size) <= 0xFFFFFFFF:
            raise ValueError("max_packet_size must be 0..2**32-1")
        self.max_packet_size = max_packet_size

    @property
    def max_packet_size(self):
        """Largest data_size accepted, bytes."""
        return self._max_packet_size

    @max_packet_size.setter
    def max_packet_size(self, value):
        self._max = _i64(value)
        self._max_packet_size = value

    cdef object _next(self):
        cdef unsigned char tmp[BQSP_HEADER]
        cdef const unsigned char* hp
        cdef Py_ssize_t have
        cdef uint32_t size
        if self._error is not None:
            raise self._error
        if self._buffered < BQSP_HEADER:
            return None
        have = self._hlen - self._pos
        if have >= BQSP_HEADER:
            hp = self._hp + self._pos
        else:
            self._peek(tmp, BQSP_HEADER)
            hp = tmp
        size = nbmq_le32(hp)
        if <int64_t>size > self._max:
            raise self._fail(FrameTooLarge(self._consumed, "packet over max_packet_size"))
        if self._buffered < BQSP_HEADER + <uint64_t>size:
            return None
        kind = hp[4] | (hp[5] << 8)
        queue = hp[6]
        if size == 0:
            self._skip(BQSP_HEADER)
            data = _empty_view()
        elif have >= BQSP_HEADER + <Py_ssize_t>size:
            data = self._take_in_head(BQSP_HEADER, size)
        else:
            self._skip(BQSP_HEADER)
            data = self._take(size)
        return nbmq_tuple3(BqspPacket, kind, queue, data)

    def next_packet(self):
        """The next whole packet, or None until more bytes are fed."""
        return self._next()

    def __iter__(self):
        return self

    def __next__(self):
        packet = self._next()
        if packet is None:
            raise StopIteration
        return packet
