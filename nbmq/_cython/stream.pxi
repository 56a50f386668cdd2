# The byte buffer under the stream decoders (twin: _codec_py/stream.py): fed objects kept as
# views (no copy on feed), parsed transactionally, zero-copy when a record lies in one feed.

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize


cdef class _StreamBuffer:
    """Fed bytes not yet consumed, kept as views of the fed objects."""

    cdef object _chunks               # deque of byte memoryviews; _chunks[0] is the head
    cdef object _head
    cdef const unsigned char* _hp     # the head's bytes (kept alive by _head)
    cdef Py_ssize_t _hlen
    cdef Py_ssize_t _pos              # consumed bytes of the head
    cdef uint64_t _buffered
    cdef uint64_t _consumed           # stream offset of the next unconsumed byte
    cdef object _error

    def __cinit__(self):
        self._chunks = deque()

    @property
    def buffered(self):
        """Bytes fed but not yet handed out."""
        return self._buffered

    def feed(self, data):
        """Add bytes from the stream; the decoder keeps views of data."""
        if self._error is not None:
            raise self._error
        view = nbmq_byteview(data)
        cdef Py_ssize_t n = nbmq_len(view)
        if n:
            self._chunks.append(view)
            if self._head is None:
                self._load_head(view)
            self._buffered += <uint64_t>n

    cdef inline void _load_head(self, object view):
        self._head = view
        self._hp = nbmq_ptr(view)
        self._hlen = nbmq_len(view)
        self._pos = 0

    cdef int _pop_head(self) except -1:
        self._chunks.popleft()
        if self._chunks:
            self._load_head(self._chunks[0])
        else:
            self._head = None
            self._hp = NULL
            self._hlen = 0
            self._pos = 0
        return 0

    cdef object _fail(self, object error):
        self._error = error
        return error

    cdef int _peek(self, unsigned char* out, Py_ssize_t size) except -1:
        """Copy the next size buffered bytes (at least size are buffered), consuming nothing."""
        cdef Py_ssize_t have = self._hlen - self._pos, filled, k, index = 1
        if have >= size:
            memcpy(out, self._hp + self._pos, size)
            return 0
        memcpy(out, self._hp + self._pos, have)
        filled = have
        while filled < size:
            view = self._chunks[index]
            k = min(size - filled, nbmq_len(view))
            memcpy(out + filled, nbmq_ptr(view), k)
            filled += k
            index += 1
        return 0

    cdef int _skip(self, Py_ssize_t size) except -1:
        """Consume size buffered bytes."""
        cdef Py_ssize_t have
        self._buffered -= <uint64_t>size
        self._consumed += <uint64_t>size
        while size > 0:
            have = self._hlen - self._pos
            if have > size:
                self._pos += size
                return 0
            size -= have
            self._pop_head()
        return 0

    cdef object _take(self, Py_ssize_t size):
        """Consume size (> 0) buffered bytes: a view when they lie in one feed, else a copy."""
        cdef Py_ssize_t have = self._hlen - self._pos, filled = 0, k
        cdef char* dst
        if have >= size:
            out = nbmq_subview(self._head, self._pos, size)
            self._pos += size
            if self._pos == self._hlen:
                self._pop_head()
        else:
            gathered = PyByteArray_FromStringAndSize(NULL, size)
            dst = PyByteArray_AS_STRING(gathered)
            while filled < size:
                k = min(size - filled, self._hlen - self._pos)
                memcpy(dst + filled, self._hp + self._pos, k)
                filled += k
                self._pos += k
                if self._pos == self._hlen:
                    self._pop_head()
            out = memoryview(gathered)
        self._buffered -= <uint64_t>size
        self._consumed += <uint64_t>size
        return out

    cdef object _take_in_head(self, Py_ssize_t skip, Py_ssize_t size):
        """Consume skip + size bytes that lie in the head; a view of the last size."""
        out = nbmq_subview(self._head, self._pos + skip, size)
        self._pos += skip + size
        self._buffered -= <uint64_t>(skip + size)
        self._consumed += <uint64_t>(skip + size)
        if self._pos == self._hlen:
            self._pop_head()
        return out
