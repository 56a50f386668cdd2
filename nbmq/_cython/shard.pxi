# Sharding a multipart message into data frames in one buffer (twin: _codec_py/shard.py).


def frame_count(part_sizes):
    """Frames needed for parts of these sizes: sum(max(1, ceil(size / 466)))."""
    return sum([max(1, -(-size // MAX_CHUNK)) for size in part_sizes])


cdef list _part_views(object parts):
    """The twin's _views: each part as bytes or a 1-D byte memoryview."""
    if isinstance(parts, (bytes, bytearray, memoryview, str)):
        raise TypeError("parts must be a sequence of buffers, not one buffer")
    cdef list views = [p if PyBytes_CheckExact(p) else nbmq_byteview(p) for p in parts]
    if not views:
        raise ValueError("a message needs at least one part (send [b''] for an empty message)")
    if len(views) > 255:
        raise ValueError(f"a message has at most 255 parts, got {len(views)}")
    return views


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _fill_frames(unsigned char* out, int64_t* offs, int32_t* lens, Hdr* h,
                       const unsigned char** ptrs, const Py_ssize_t* sizes,
                       Py_ssize_t nparts) noexcept nogil:
    """Write every frame of the parts back to back at out, with its offset and length."""
    cdef Py_ssize_t i, pos = 0, frame = 0, coff, size
    for i in range(nparts):
        h.pi = <uint8_t>i
        h.psize = <uint32_t>sizes[i]
        coff = 0
        while True:
            size = sizes[i] - coff
            if size > MAX_CHUNK:
                size = MAX_CHUNK
            h.csize = <uint16_t>size
            h.coff = <uint32_t>coff
            _put_data_header(out + pos, h)
            nbmq_copy(out + pos + DATA_HEADER, ptrs[i] + coff, size)
            offs[frame] = pos
            lens[frame] = <int32_t>(DATA_HEADER + size)
            pos += DATA_HEADER + size
            frame += 1
            coff += size
            if coff >= sizes[i]:
                break


@cython.boundscheck(False)
@cython.wraparound(False)
cdef object _shard(list views, object session_id, object message_id):
    cdef uint64_t sid = 0, mid = 0
    cdef int sid_ok = nbmq_index_u64(session_id, &sid)
    cdef int mid_ok = nbmq_index_u64(message_id, &mid)
    if not (sid_ok and mid_ok):
        raise OverflowError("session_id and message_id must be u64")
    cdef Py_ssize_t nparts = len(views), i, count = 0
    cdef const unsigned char* ptrs[255]
    cdef Py_ssize_t sizes[255]
    cdef uint64_t total = 0
    for i in range(nparts):
        v = views[i]
        if PyBytes_CheckExact(v):
            ptrs[i] = <const unsigned char*>PyBytes_AS_STRING(v)
            sizes[i] = len(<bytes>v)
        else:
            ptrs[i] = nbmq_ptr(v)
            sizes[i] = nbmq_len(v)
        total += <uint64_t>sizes[i]
        count += (sizes[i] + MAX_CHUNK - 1) // MAX_CHUNK if sizes[i] else 1
    if total > <uint64_t>U32_MAX:
        raise ValueError(f"a message is at most {MAX_MESSAGE_SIZE} bytes, got {total}")
    cdef cnp.npy_intp dims[1]
    dims[0] = count * DATA_HEADER + <cnp.npy_intp>total
    cdef cnp.ndarray buffer = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT8, 0)
    dims[0] = count
    cdef cnp.ndarray offsets = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
    cdef cnp.ndarray lengths = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT32, 0)
    cdef unsigned char* out = <unsigned char*>cnp.PyArray_DATA(buffer)
    cdef int64_t* offs = <int64_t*>cnp.PyArray_DATA(offsets)
    cdef int32_t* lens = <int32_t*>cnp.PyArray_DATA(lengths)
    cdef Hdr h
    h.sid = sid
    h.mid = mid
    h.pc = <uint8_t>nparts
    h.msize = <uint32_t>total
    if total > 65536:  # releasing the GIL costs more than a small copy
        with nogil:
            _fill_frames(out, offs, lens, &h, ptrs, sizes, nparts)
    else:
        _fill_frames(out, offs, lens, &h, ptrs, sizes, nparts)
    return nbmq_tuple3(ShardedMessage, buffer, offsets, lengths)


def shard_message(parts, session_id, message_id):
    """Cut a multipart message into data frames written into one new buffer."""
    return _shard(_part_views(parts), session_id, message_id)


def shard_message_bytes(parts, session_id, message_id):
    """shard_message, each frame as its own bytes."""
    sharded = _shard(_part_views(parts), session_id, message_id)
    cdef cnp.ndarray buffer = sharded[0]
    cdef cnp.ndarray offsets = sharded[1]
    cdef cnp.ndarray lengths = sharded[2]
    cdef const char* base = <const char*>cnp.PyArray_DATA(buffer)
    cdef const int64_t* offs = <const int64_t*>cnp.PyArray_DATA(offsets)
    cdef const int32_t* lens = <const int32_t*>cnp.PyArray_DATA(lengths)
    cdef Py_ssize_t i, n = offsets.shape[0]
    return [PyBytes_FromStringAndSize(base + offs[i], lens[i]) for i in range(n)]
