# Batch decode: many datagrams in one buffer into FRAME_DTYPE rows (twin: _codec_py/batch.py).

from libc.string cimport memset

# FRAME_DTYPE is packed little-endian; rows are written byte by byte at these offsets.
_ROW_LAYOUT = {
    "version": 0, "kind": 1, "session_id": 2, "message_id": 10, "part_count": 18,
    "part_index": 19, "message_size": 20, "part_size": 24, "chunk_size": 28,
    "chunk_offset": 30, "payload_offset": 34, "payload_length": 42, "error": 46,
}
if FRAME_DTYPE.itemsize != 47 or {k: v[1] for k, v in FRAME_DTYPE.fields.items()} != _ROW_LAYOUT:
    raise ImportError("nbmq.wire.FRAME_DTYPE changed: update nbmq/_cython/batch.pxi")

cdef enum:
    ROW_SIZE = 47
    PREFETCH = 16

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define nbmq_prefetch(p) __builtin_prefetch((const void*)(p), 0, 0)
    #else
    #define nbmq_prefetch(p) ((void)0)
    #endif
    """
    void nbmq_prefetch(const unsigned char* p) noexcept nogil


cdef inline bint _is_row_array(object a):
    """A 1-D C-contiguous int64 or int32 ndarray: read in place."""
    return (cnp.PyArray_CheckExact(a) and cnp.PyArray_NDIM(<cnp.ndarray>a) == 1
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
            and (cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_INT64
                 or cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_INT32))


cdef inline int64_t _at(const void* p, bint narrow, Py_ssize_t i) noexcept nogil:
    return (<const int32_t*>p)[i] if narrow else (<const int64_t*>p)[i]


cdef inline bint _narrow(cnp.ndarray a) noexcept:
    return cnp.PyArray_TYPE(a) == cnp.NPY_INT32


cdef tuple _rows(object offsets, object lengths):
    """The twin's check_rows, then both as contiguous int64 or int32 ndarrays (read with _at;
    values past int64 wrap negative, which puts them outside the buffer as in the twin)."""
    if (_is_row_array(offsets) and _is_row_array(lengths)
            and cnp.PyArray_DIM(<cnp.ndarray>offsets, 0) == cnp.PyArray_DIM(<cnp.ndarray>lengths, 0)):
        return offsets, lengths
    offsets = np.asarray(offsets)
    lengths = np.asarray(lengths)
    if offsets.ndim != 1 or offsets.shape != lengths.shape:
        raise ValueError("offsets and lengths must be 1-D arrays of the same length")
    if (offsets.size and offsets.dtype.kind not in "iu") or (
        lengths.size and lengths.dtype.kind not in "iu"
    ):
        raise TypeError("offsets and lengths must be integer arrays")
    return (
        np.ascontiguousarray(offsets.astype(np.int64, copy=False)),
        np.ascontiguousarray(lengths.astype(np.int64, copy=False)),
    )


cdef inline void _put_row(unsigned char* r, const unsigned char* base, Py_ssize_t total,
                          int64_t start, int64_t length) noexcept nogil:
    cdef Hdr h
    cdef Py_ssize_t off
    cdef int code
    cdef const unsigned char* p
    cdef Py_ssize_t seal
    memset(&h, 0, sizeof(Hdr))
    memset(r, 0, ROW_SIZE)
    if start < 0 or length < 0 or <uint64_t>start + <uint64_t>length > <uint64_t>total:
        r[46] = E_OUT_OF_BUFFER
        return
    p = base + start
    code = _check(p, <Py_ssize_t>length, &h, &off, True)
    # a sealed frame's payload is the ciphertext between the counter and the tag
    seal = SECURE_OVERHEAD if length >= 2 and p[0] == SECURE_VERSION and p[1] != 1 and p[1] != 2 else 0
    if length >= 2:
        r[0] = p[0]
        r[1] = p[1]
    if code == E_OK or E_PART_COUNT <= code <= E_CHUNK_BOUNDS:
        nbmq_put_le64(r + 2, h.sid)
        if p[1] == 0:
            nbmq_put_le64(r + 10, h.mid)
            r[18] = h.pc
            r[19] = h.pi
            nbmq_put_le32(r + 20, h.msize)
            nbmq_put_le32(r + 24, h.psize)
            nbmq_put_le16(r + 28, h.csize)
            nbmq_put_le32(r + 30, h.coff)
            nbmq_put_le64(r + 34, <uint64_t>(start + DATA_HEADER + (SECURE_COUNTER if seal else 0)))
            nbmq_put_le32(r + 42, <uint32_t>(length - DATA_HEADER - seal))
        else:
            nbmq_put_le64(r + 34, <uint64_t>(start + CONTROL_HEADER + (SECURE_COUNTER if seal else 0)))
            nbmq_put_le32(r + 42, <uint32_t>(length - CONTROL_HEADER - seal))
    r[46] = <unsigned char>code


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _put_rows(unsigned char* rows, const unsigned char* base, Py_ssize_t total,
                    const void* offs, bint onarrow, const void* lens, bint lnarrow,
                    Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t ahead
    for i in range(n):
        # The headers are strided through a buffer far larger than the caches: fetch the
        # header PREFETCH rows ahead so its memory latency overlaps the work on this one.
        if i + PREFETCH < n:
            ahead = _at(offs, onarrow, i + PREFETCH)
            if 0 <= ahead < total - 64:
                nbmq_prefetch(base + ahead)
                nbmq_prefetch(base + ahead + 33)
        _put_row(rows + i * ROW_SIZE, base, total, _at(offs, onarrow, i), _at(lens, lnarrow, i))


def parse_frames(buffer, offsets, lengths):
    """Decode every datagram buffer[offsets[i]:offsets[i] + lengths[i]] into FRAME_DTYPE rows."""
    cdef cnp.ndarray offs_a, lens_a
    offs_a, lens_a = _rows(offsets, lengths)
    cdef const unsigned char* base
    cdef Py_ssize_t total
    owner = _bytes_of(buffer, &base, &total)
    cdef const void* offs = cnp.PyArray_DATA(offs_a)
    cdef const void* lens = cnp.PyArray_DATA(lens_a)
    cdef bint onarrow = _narrow(offs_a), lnarrow = _narrow(lens_a)
    cdef Py_ssize_t n = cnp.PyArray_DIM(offs_a, 0)
    cdef cnp.ndarray out = np.empty(n, dtype=FRAME_DTYPE)
    cdef unsigned char* rows = <unsigned char*>cnp.PyArray_DATA(out)
    if n > 1024:  # releasing the GIL costs more than a small batch
        with nogil:
            _put_rows(rows, base, total, offs, onarrow, lens, lnarrow, n)
    else:
        _put_rows(rows, base, total, offs, onarrow, lens, lnarrow, n)
    return out


def split_bundles(buffer, offsets, lengths):
    """Each well-formed sealed bundle replaced by its frames, laid out as if sealed alone:
    ``(buffer, offsets, lengths, source)`` (see the twin)."""
    cdef cnp.ndarray offs_a, lens_a
    offs_a, lens_a = _rows(offsets, lengths)
    cdef const unsigned char* base
    cdef Py_ssize_t total
    owner = _bytes_of(buffer, &base, &total)
    cdef Py_ssize_t n = cnp.PyArray_DIM(offs_a, 0), i, j, m = 0, k = 0, end = 0, at = 0, grown = 0
    cdef const void* offs = cnp.PyArray_DATA(offs_a)
    cdef const void* lens = cnp.PyArray_DATA(lens_a)
    cdef bint onarrow = _narrow(offs_a), lnarrow = _narrow(lens_a)
    cdef int64_t start, length
    cdef Py_ssize_t heads[MAX_BUNDLE_FRAMES]
    cdef Py_ssize_t sizes[MAX_BUNDLE_FRAMES]
    cdef Py_ssize_t blens[MAX_BUNDLE_FRAMES]
    cdef cnp.ndarray counts = np.ones(n, dtype=np.int64)
    cdef int64_t[::1] c = counts
    # first pass: which datagrams are well-formed bundles, and how many bytes their frames take
    for i in range(n):
        start = _at(offs, onarrow, i)
        length = _at(lens, lnarrow, i)
        if (start < 0 or length < 2 or <uint64_t>start + <uint64_t>length > <uint64_t>total
                or base[start] != BUNDLE_VERSION):
            continue
        if _bundle_layout(base + start, length, &k, heads, sizes, blens, &end, &at) == 0:
            c[i] = k
            grown += length - end - SECURE_OVERHEAD + k * SECURE_OVERHEAD
            for j in range(k):
                grown += sizes[j]
    if grown == 0:
        return (np.frombuffer(owner, dtype=np.uint8), offs_a.astype(np.int64), lens_a.astype(np.int64),
                np.arange(n, dtype=np.int64))
    m = int(counts.sum())
    cdef cnp.ndarray out = np.empty(total + grown, dtype=np.uint8)
    cdef unsigned char* o = <unsigned char*>cnp.PyArray_DATA(out)
    memcpy(o, base, total)
    cdef cnp.ndarray out_offsets = np.empty(m, dtype=np.int64)
    cdef cnp.ndarray out_lengths = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] oo = out_offsets, ol = out_lengths
    cdef Py_ssize_t row = 0, pos = total, cipher
    for i in range(n):
        start = _at(offs, onarrow, i)
        length = _at(lens, lnarrow, i)
        if c[i] == 1:  # not a well-formed bundle (one holds 2..255 frames): kept as it is
            oo[row] = start
            ol[row] = length
            row += 1
            continue
        _bundle_layout(base + start, length, &k, heads, sizes, blens, &end, &at)
        cipher = end + SECURE_COUNTER
        for j in range(k):
            oo[row] = pos
            ol[row] = sizes[j] + SECURE_OVERHEAD + blens[j]
            row += 1
            memcpy(o + pos, base + start + heads[j], sizes[j])
            memcpy(o + pos + sizes[j], base + start + end, SECURE_COUNTER)
            memcpy(o + pos + sizes[j] + SECURE_COUNTER, base + start + cipher, blens[j])
            memcpy(o + pos + sizes[j] + SECURE_COUNTER + blens[j], base + start + length - (SECURE_OVERHEAD - SECURE_COUNTER),
                   SECURE_OVERHEAD - SECURE_COUNTER)
            pos += sizes[j] + SECURE_OVERHEAD + blens[j]
            cipher += blens[j]
    return out, out_offsets, out_lengths, np.repeat(np.arange(n, dtype=np.int64), counts)
