# FNV-1a 64 and the identifiers derived from it (twin: _codec_py/fnv.py).

# FNV_BASIS and _fnv (the byte loop) come from nbmq/_wire.pxd, cimported by _codec.pyx.


cdef uint64_t _fnv_obj(object data, uint64_t h) except? 0:
    """FNV-1a 64 of any buffer, continuing from h (the twin's memoryview(data).cast("B"))."""
    cdef const unsigned char* p
    cdef Py_ssize_t n
    if PyBytes_CheckExact(data):
        p = <const unsigned char*>PyBytes_AS_STRING(data)
        n = len(<bytes>data)
        view = data
    else:
        view = nbmq_byteview(data)
        p = nbmq_ptr(view)
        n = nbmq_len(view)
    if n > 4096:
        with nogil:
            h = _fnv(p, n, h)
    else:
        h = _fnv(p, n, h)
    return h


cdef inline uint64_t _fnv_u64(uint64_t v, uint64_t h) noexcept nogil:
    cdef unsigned char b[8]
    nbmq_put_be64(b, v)
    return _fnv(b, 8, h)


def fnv1a64(data, state=FNV_OFFSET_BASIS):
    """FNV-1a 64 of data, continuing from state."""
    cdef uint64_t h = 0
    if nbmq_index_u64(state, &h) != 1:
        raise OverflowError("state must be a u64")
    return PyLong_FromUnsignedLongLong(_fnv_obj(data, h))


def message_id(parts, nonce):
    """The reference's message id: FNV-1a 64 over every part, then the nonce (8 bytes BE)."""
    cdef uint64_t n = 0
    if nbmq_index_u64(nonce, &n) != 1:
        raise OverflowError("nonce must be a u64")
    cdef uint64_t h = FNV_BASIS
    for part in parts:
        h = _fnv_obj(part, h)
    return PyLong_FromUnsignedLongLong(_fnv_u64(n, h))


def session_id(sample, peer_addr):
    """The reference's session id: FNV-1a 64 of the sample (8 bytes BE), then the address."""
    cdef uint64_t s = 0
    if nbmq_index_u64(sample, &s) != 1:
        raise OverflowError("sample must be a u64")
    address = peer_addr.encode("ascii")
    return PyLong_FromUnsignedLongLong(_fnv_obj(address, _fnv_u64(s, FNV_BASIS)))


def ack_hash(frame):
    """FNV-1a 64 over a whole data frame, the hash a SafeDealer receiver acks."""
    return PyLong_FromUnsignedLongLong(_fnv_obj(frame, FNV_BASIS))
