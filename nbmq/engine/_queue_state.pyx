# cython: language_level=3, embedsignature=True, boundscheck=False, wraparound=False
"""The engine's hot state as C fields: the compiled bases of ``nbmq.engine.queues.SendQueue``
and ``RecvQueue`` and of ``nbmq.engine.sockets.Socket``, and the receive queue's dedup window.

The queues (pure Python, the reference) derive from :class:`SendQueueState` and
:class:`RecvQueueState`; compiled code (``nbmq.engine._fast``) cimports them
(``_queue_state.pxd``) and reads and writes these fields without an attribute look-up, while
the Python code reaches the same fields as attributes. Their twins, ``queues.SendQueueStatePy``,
``queues.RecvQueueStatePy`` and ``sockets.SocketStatePy``, have the same names as slots
(``NBMQ_NO_EXTENSIONS=1``). The
fields' meaning is documented on the queues. :class:`DedupWindow` is the C table twin of
``queues.DedupWindowPy``; :class:`ReadyQueue` the compiled twin of the receive queue's
``collections.deque`` of completed messages; :class:`TransmissionOrder` that of a congestion
window's ``deque`` of ``(tx, flight)`` pairs; :class:`InflightTable` that of a safe send
queue's ``dict`` of frames in flight by their ack hash.
"""

cimport numpy as cnp
from collections import deque
from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from cpython.long cimport PyLong_AsUnsignedLongLong, PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from libc.math cimport isnan, NAN
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memmove, memset

cnp.import_array()

cdef extern from *:
    """
    #include <stdlib.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    /* Zeroed memory for a table of `size` bytes; from 2 MiB on, 2 MiB-aligned and backed by
       huge pages where the kernel gives them on request (a slot look-up is a random access:
       a TLB miss on top of the cache miss otherwise). Free with free(). */
    static void* nbmq_table_alloc(size_t size) {
        void* p = NULL;
        const size_t huge = (size_t)2 << 20;
        if (size >= huge) {
            if (posix_memalign(&p, huge, size) != 0) return NULL;
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
            madvise(p, size, MADV_HUGEPAGE);
    #endif
        } else {
            p = malloc(size);
        }
        if (p != NULL) memset(p, 0, size);
        return p;
    }
    #define nbmq_prefetch(p) __builtin_prefetch((p), 1)
    """
    void* nbmq_table_alloc(size_t size) nogil
    void nbmq_prefetch(const void* p) nogil


cdef class SendQueueState:
    """Fields of ``SendQueue``: counts (``held``, ``send_hwm``, ``pushed``, ``frames_out``,
    ``bytes_out`` and the round-robin index ``_rr``; ints), flags (``safe``, ``congestion``,
    ``_blocked``), ``resend_ivl`` (seconds) and the containers ``_queue`` (deque of messages),
    ``_inflight`` (hash -> flight: an :class:`InflightTable`) and ``windows`` (dict peer ->
    congestion window)."""


cdef class SocketState:
    """Fields of an engine ``Socket`` that every message's ``send`` reads or writes: ``_closed``
    (bool), ``_reference_compat`` (bool: the option of that name, as ``set_option`` last set
    it), ``_now`` (seconds, the latest call's time), ``_nonce`` (int: the next message id's
    counter), ``_sendq`` (its ``SendQueue``) and ``_opts`` (its ``SocketOptions``). A Python
    attribute each cost the compiled send a look-up in the instance's dict; the nonce is a C
    u64 (a Python int each cost a message an allocation and its arithmetic), any other value
    (2**64 once the last u64 was used) is kept as given, as the twin keeps it."""

    @property
    def _nonce(self):
        return PyLong_FromUnsignedLongLong(self.nonce) if self.nonce_other is None else self.nonce_other

    @_nonce.setter
    def _nonce(self, value):
        if type(value) is int and 0 <= value <= 0xFFFFFFFFFFFFFFFF:
            self.nonce = value
            self.nonce_other = None
        else:
            self.nonce_other = value


cdef class RecvQueueState:
    """Fields of ``RecvQueue``: counts (``recv_hwm``, ``completed``, ``dropped_hwm``; ints), the
    flag ``refuse_when_full``, ``dedup_ttl`` (seconds or None), the codec's ``reassembler``,
    ``_ready`` (the completed messages: a :class:`ReadyQueue`) and ``_dedup`` (a dedup window or
    None)."""


DEF MIN_CAPACITY = 64        # slots (a power of two) and ring records of an empty window
DEF EMPTY = 0
DEF DELETED = 1
DEF FIRST_SEQ = 2
DEF EXPIRE_AHEAD = 8         # records whose slots expire() prefetches ahead


cdef inline uint64_t _slot_hash(uint64_t session_id, uint64_t message_id) noexcept nogil:
    # message ids are FNV-1a hashes already; the mix spreads the session in (splitmix64's finish)
    cdef uint64_t h = message_id ^ (session_id * 0x9E3779B97F4A7C15ULL)
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL
    return h ^ (h >> 31)


cdef inline Py_ssize_t _table_capacity(Py_ssize_t live) noexcept:
    """Slots for ``live`` keys: a power of two, at least four times ``live + 1`` (a quarter
    full after a rehash, so the table grows and shrinks rarely)."""
    cdef Py_ssize_t capacity = MIN_CAPACITY
    while capacity < (live + 1) * 4:
        capacity *= 2
    return capacity


cdef void* _moved_ring(void* ring, Py_ssize_t head, Py_ssize_t count, Py_ssize_t capacity,
                       Py_ssize_t new_capacity, size_t item) except NULL:
    """A ring of ``new_capacity`` (>= count) records of ``item`` bytes holding the ``count``
    records of ``ring`` (``capacity`` records, the oldest at ``head``) from its start, oldest
    first; ``ring`` is freed. MemoryError (``ring`` kept) when it cannot be had."""
    cdef char* fresh = <char*>PyMem_Malloc(new_capacity * item)
    cdef Py_ssize_t first = capacity - head
    if fresh == NULL:
        raise MemoryError()
    if first >= count:
        memcpy(fresh, <const char*>ring + head * item, count * item)
    else:
        memcpy(fresh, <const char*>ring + head * item, first * item)
        memcpy(fresh + first * item, ring, (count - first) * item)
    PyMem_Free(ring)
    return fresh


cdef class DedupWindow:
    """The messages a receive queue delivered lately: ``(session_id, message_id)`` (u64 each)
    -> until when a repeat is a duplicate (seconds), forgotten oldest-put first by
    :meth:`expire`. The compiled twin of ``queues.DedupWindowPy`` (same methods and results;
    ``tests/engine/test_engine_dedup_window.py``): an open-addressing table of 32-byte slots
    (at most half full, deleted slots included; from 2 MiB on, in huge pages where the kernel
    gives them) and a ring of 24-byte records in put order, so
    a delivered message costs no Python object (the dict of tuples it replaces was a fifth of
    a SafeDealer receiver's time at 100 B). A key put again gets a new record; the old one is
    skipped when :meth:`expire` reaches it. Memory grows with the messages delivered within
    the ttl, as the dict's did, never with what a frame claims; once expiry keeps pace, a
    second table of the same size is kept for the rehashes that clear deleted slots.

    Raises:
        MemoryError: the table or ring cannot grow.
        OverflowError: a key outside u64 (Python methods only)."""

    def __cinit__(self):
        self.slots = <DedupSlot*>nbmq_table_alloc(MIN_CAPACITY * sizeof(DedupSlot))
        self.ring = <DedupRecord*>PyMem_Malloc(MIN_CAPACITY * sizeof(DedupRecord))
        if self.slots == NULL or self.ring == NULL:
            raise MemoryError()
        self.capacity = MIN_CAPACITY
        self.ring_capacity = MIN_CAPACITY
        self.used = self.live = self.head = self.count = 0
        self.next_seq = FIRST_SEQ

    def __dealloc__(self):
        free(self.slots)
        free(self.spare)
        PyMem_Free(self.ring)

    cdef Py_ssize_t _index(self, uint64_t session_id, uint64_t message_id) noexcept:
        """The slot holding the key, or -1."""
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_slot_hash(session_id, message_id) & <uint64_t>mask)
        cdef DedupSlot* s
        while True:
            s = &self.slots[i]
            if s.seq == EMPTY:
                return -1
            if s.seq != DELETED and s.message_id == message_id and s.session_id == session_id:
                return i
            i = (i + 1) & mask

    cdef void prefetch(self, uint64_t session_id, uint64_t message_id) noexcept:
        """Start loading the key's first slot into the cache (a batch's receive loop calls
        this for every frame before it looks any up, so the misses overlap)."""
        nbmq_prefetch(&self.slots[_slot_hash(session_id, message_id) & <uint64_t>(self.capacity - 1)])

    cdef double find(self, uint64_t session_id, uint64_t message_id) noexcept:
        """The key's until (seconds), or NaN when it is not remembered."""
        cdef Py_ssize_t i = self._index(session_id, message_id)
        return NAN if i < 0 else self.slots[i].until

    cdef int _rehash(self, Py_ssize_t capacity) except -1:
        """Move the live keys into a table of ``capacity`` slots. A rehash that keeps the size
        (it clears the deleted slots: the steady state, where expiry deletes as fast as
        messages come) reuses the table the last one left, cleared here: fresh memory would
        cost a kernel page fault and zeroing per page, each time (a fifth of a SafeDealer
        receiver's time at 100 B)."""
        cdef DedupSlot* old = self.slots
        cdef Py_ssize_t old_capacity = self.capacity, k, i, mask = capacity - 1
        cdef DedupSlot* fresh
        if self.spare != NULL and self.spare_capacity == capacity:
            fresh = self.spare
            memset(fresh, 0, capacity * sizeof(DedupSlot))
        else:
            fresh = <DedupSlot*>nbmq_table_alloc(capacity * sizeof(DedupSlot))
            if fresh == NULL:
                raise MemoryError()
            free(self.spare)  # (one of another size: of no more use)
        self.spare = NULL
        for k in range(old_capacity):
            if old[k].seq >= FIRST_SEQ:
                i = <Py_ssize_t>(_slot_hash(old[k].session_id, old[k].message_id) & <uint64_t>mask)
                while fresh[i].seq != EMPTY:
                    i = (i + 1) & mask
                fresh[i] = old[k]
        self.slots = fresh
        self.capacity = capacity
        self.used = self.live
        if old_capacity == capacity:  # kept for the next rehash of this size
            self.spare, self.spare_capacity = old, old_capacity
        else:
            free(old)
        return 0

    cdef int _resize_ring(self, Py_ssize_t capacity) except -1:
        """Move the records, oldest first, into a ring of ``capacity`` (>= count) records."""
        self.ring = <DedupRecord*>_moved_ring(self.ring, self.head, self.count, self.ring_capacity,
                                              capacity, sizeof(DedupRecord))
        self.ring_capacity = capacity
        self.head = 0
        return 0

    cdef int _push_record(self, uint64_t session_id, uint64_t message_id, uint64_t seq) except -1:
        cdef DedupRecord* r
        if self.count == self.ring_capacity:
            self._resize_ring(self.ring_capacity * 2)
        r = &self.ring[(self.head + self.count) % self.ring_capacity]
        r.session_id = session_id
        r.message_id = message_id
        r.seq = seq
        self.count += 1
        return 0

    cdef int store(self, uint64_t session_id, uint64_t message_id, double until) except -1:
        """Remember the key until ``until`` (seconds), as the newest entry."""
        cdef Py_ssize_t i = self._index(session_id, message_id), mask
        cdef uint64_t seq = self.next_seq
        cdef DedupSlot* s
        if i < 0:
            if (self.used + 1) * 2 > self.capacity:  # at most half full: short probes for absent keys
                self._rehash(_table_capacity(self.live))
            mask = self.capacity - 1
            i = <Py_ssize_t>(_slot_hash(session_id, message_id) & <uint64_t>mask)
            while self.slots[i].seq >= FIRST_SEQ:
                i = (i + 1) & mask
            if self.slots[i].seq == EMPTY:
                self.used += 1
            self.live += 1
        self._push_record(session_id, message_id, seq)  # (before the slot: MemoryError leaves it as it was)
        self.next_seq = seq + 1
        s = &self.slots[i]
        s.session_id = session_id
        s.message_id = message_id
        s.until = until
        s.seq = seq
        return 0

    def get(self, session_id, message_id):
        """``until`` (float seconds) of the key, or None when it is not remembered."""
        cdef double until = self.find(PyLong_AsUnsignedLongLong(session_id),
                                      PyLong_AsUnsignedLongLong(message_id))
        return None if isnan(until) else until

    def put(self, session_id, message_id, double until):
        """Remember the key until ``until`` (seconds) as the newest entry (a key put again
        moves to the end of the expiry order)."""
        self.store(PyLong_AsUnsignedLongLong(session_id), PyLong_AsUnsignedLongLong(message_id), until)

    def expire(self, double now):
        """Forget entries oldest-put first while their until is <= ``now`` (seconds), up to
        the first that is not; returns how many were forgotten."""
        cdef Py_ssize_t forgotten = 0, i
        cdef DedupRecord* r
        while self.count:
            if self.count > EXPIRE_AHEAD:  # (the slots of later records load meanwhile)
                r = &self.ring[(self.head + EXPIRE_AHEAD) % self.ring_capacity]
                self.prefetch(r.session_id, r.message_id)
            r = &self.ring[self.head]
            i = self._index(r.session_id, r.message_id)
            if i >= 0 and self.slots[i].seq == r.seq:  # (else put again later: skipped)
                if self.slots[i].until > now:
                    break
                self.slots[i].seq = DELETED
                self.live -= 1
                forgotten += 1
            self.head = (self.head + 1) % self.ring_capacity
            self.count -= 1
        if self.count == 0:
            self.head = 0
        if self.live * 16 < self.capacity and self.capacity > MIN_CAPACITY:  # shrink after a burst
            self._rehash(_table_capacity(self.live))
        if self.count * 8 < self.ring_capacity and self.ring_capacity > MIN_CAPACITY:
            self._resize_ring(self.ring_capacity // 2)
        return forgotten

    def __len__(self):
        return self.live

    def __repr__(self):
        return f"DedupWindow({self.live} remembered)"


DEF MIN_ENTRIES = 64         # ring entries (a power of two) of an empty ready queue
DEF MIN_ARENA = 16384        # arena bytes of an empty ready queue
DEF SHRINK_ABOVE = 1 << 20   # bytes of arena or ring from which an emptied queue gives memory back


cdef inline cnp.ndarray _uint8s(Py_ssize_t size):
    cdef cnp.npy_intp dims[1]
    dims[0] = <cnp.npy_intp>size
    return cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT8, 0)


cdef inline cnp.ndarray _int64s(Py_ssize_t n):
    cdef cnp.npy_intp dims[1]
    dims[0] = <cnp.npy_intp>n
    return cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)


cdef inline list _one_part(const unsigned char* p, Py_ssize_t size):
    """A one-part message: a list of one new uint8 array holding ``size`` bytes from ``p``."""
    cdef cnp.ndarray part = _uint8s(size)
    memcpy(cnp.PyArray_DATA(part), p, size)
    return [part]


cdef class ReadyQueue:
    """The receive queue's completed messages, oldest first: the compiled twin of the
    ``collections.deque`` of part lists the Python code keeps (``append``, ``popleft``,
    ``clear``, ``len``, truth, indexing and iteration as a deque's), plus :meth:`pack`, the
    batch form of ``popleft`` (``Socket.recv_packed``).

    The compiled receive loops (``nbmq.engine._fast``) put a whole one-frame message here as
    its bytes alone (``push_bytes``): copied once into an arena of such messages back to back,
    no Python object per message. ``popleft`` then builds its part (one uint8 array, a copy:
    the same as the deque held), and :meth:`pack` copies a run of them into one buffer. Other
    messages keep their part lists, in order among the others. Indexing and iteration build
    a fresh list for an arena message (changing it changes nothing queued).

    Memory: the bytes of the messages queued (at most ``recv_hwm`` of them, each at most a
    frame's chunk in the arena), the arena twice that at most; once the queue empties, an
    arena (or ring) over 1 MiB that the messages since it last emptied used less than an
    eighth of shrinks to twice their use (a burst's memory goes back).

    Raises:
        IndexError: ``popleft`` or an index on an empty queue / out of range.
        MemoryError: the arena or ring cannot grow."""

    def __cinit__(self):
        self._lists = deque()
        self._sizes = <int64_t*>PyMem_Malloc(MIN_ENTRIES * sizeof(int64_t))
        self._data = <unsigned char*>PyMem_Malloc(MIN_ARENA)
        if self._sizes == NULL or self._data == NULL:
            raise MemoryError()
        self._ring_capacity = MIN_ENTRIES
        self._data_capacity = MIN_ARENA
        self._head = self._count = self._start = self._end = 0
        self._peak_bytes = self._peak_count = 0

    def __dealloc__(self):
        PyMem_Free(self._sizes)
        PyMem_Free(self._data)

    cdef int _entry(self, int64_t size) except -1:
        """Add an entry at the tail: ``size`` bytes in the arena, or -1 for the next list."""
        cdef Py_ssize_t capacity = self._ring_capacity, first, k
        cdef int64_t* fresh
        if self._count == capacity:
            fresh = <int64_t*>PyMem_Malloc(2 * capacity * sizeof(int64_t))
            if fresh == NULL:
                raise MemoryError()
            first = capacity - self._head  # the entries up to the ring's end, then the rest
            memcpy(fresh, self._sizes + self._head, first * sizeof(int64_t))
            memcpy(fresh + first, self._sizes, self._head * sizeof(int64_t))
            PyMem_Free(self._sizes)
            self._sizes = fresh
            self._head = 0
            self._ring_capacity = capacity = 2 * capacity
        self._sizes[(self._head + self._count) & (capacity - 1)] = size
        self._count += 1
        if self._count > self._peak_count:
            self._peak_count = self._count
        return 0

    cdef void _emptied(self) noexcept:
        """The queue just emptied: start again at the front, and give back an arena or ring
        that the messages held since the last time it emptied used less than an eighth of
        (what a burst grew it to), keeping twice that use."""
        cdef unsigned char* data
        cdef int64_t* sizes
        cdef Py_ssize_t keep
        self._head = self._start = self._end = 0
        if self._data_capacity > SHRINK_ABOVE and self._peak_bytes * 8 < self._data_capacity:
            keep = max(<Py_ssize_t>MIN_ARENA, 2 * self._peak_bytes)
            data = <unsigned char*>PyMem_Malloc(keep)
            if data != NULL:  # (else keep the larger one)
                PyMem_Free(self._data)
                self._data = data
                self._data_capacity = keep
        if self._ring_capacity * sizeof(int64_t) > SHRINK_ABOVE and self._peak_count * 8 < self._ring_capacity:
            keep = MIN_ENTRIES
            while keep < 2 * self._peak_count:
                keep *= 2
            sizes = <int64_t*>PyMem_Malloc(keep * sizeof(int64_t))
            if sizes != NULL:
                PyMem_Free(self._sizes)
                self._sizes = sizes
                self._ring_capacity = keep
        self._peak_bytes = self._peak_count = 0

    cdef int push_bytes(self, const unsigned char* p, Py_ssize_t size) except -1:
        """Queue a one-part message of ``size`` bytes (>= 0) read from ``p`` (copied)."""
        cdef Py_ssize_t used = self._end - self._start, capacity
        cdef unsigned char* fresh
        if self._end + size > self._data_capacity:
            if used + size <= self._data_capacity // 2:  # slide the live bytes to the front
                memmove(self._data, self._data + self._start, used)
            else:
                capacity = max(2 * self._data_capacity, 2 * (used + size))
                fresh = <unsigned char*>PyMem_Malloc(capacity)
                if fresh == NULL:
                    raise MemoryError()
                memcpy(fresh, self._data + self._start, used)
                PyMem_Free(self._data)
                self._data = fresh
                self._data_capacity = capacity
            self._start = 0
            self._end = used
        self._entry(size)
        memcpy(self._data + self._end, p, size)
        self._end += size
        if self._end - self._start > self._peak_bytes:
            self._peak_bytes = self._end - self._start
        return 0

    def push(self, data):
        """Queue a one-part message holding a copy of ``data``'s bytes (any contiguous buffer),
        as the compiled receive loops queue a whole one-frame message."""
        cdef Py_buffer view
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self.push_bytes(<const unsigned char*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    def append(self, parts):
        """Queue a message (its list of parts) at the tail."""
        self._lists.append(parts)
        try:
            self._entry(-1)
        except MemoryError:
            self._lists.pop()
            raise

    cdef void _pop_entry(self) noexcept:
        self._head = (self._head + 1) & (self._ring_capacity - 1)
        self._count -= 1
        if not self._count:
            self._emptied()

    def popleft(self):
        """The oldest message (its list of parts), removed. IndexError when empty."""
        cdef int64_t size
        cdef object message  # (a deque takes any object: so does append)
        if not self._count:
            raise IndexError("pop from an empty ReadyQueue")
        size = self._sizes[self._head]
        if size < 0:
            message = self._lists.popleft()
        else:
            message = _one_part(self._data + self._start, size)
            self._start += size
        self._pop_entry()
        return message

    def __getitem__(self, Py_ssize_t index):
        """Message ``index`` (negative counts from the newest) without removing it."""
        cdef Py_ssize_t i, offset = self._start, lists = 0
        cdef int64_t size
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("ReadyQueue index out of range")
        for i in range(index):
            size = self._sizes[(self._head + i) & (self._ring_capacity - 1)]
            if size < 0:
                lists += 1
            else:
                offset += size
        size = self._sizes[(self._head + index) & (self._ring_capacity - 1)]
        if size < 0:
            return self._lists[lists]
        return _one_part(self._data + offset, size)

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(self._count):
            yield self[i]

    def __len__(self):
        return self._count

    def __bool__(self):
        return self._count > 0

    def clear(self):
        """Remove every message."""
        self._lists.clear()
        self._count = 0
        self._emptied()

    cpdef object pack(self, Py_ssize_t max_messages):
        """Pop up to ``max_messages`` one-part messages off the head and return them packed
        back to back: ``(data, offsets, lengths)`` (uint8, int64, int64 arrays; message ``i`` is
        ``data[offsets[i] : offsets[i] + lengths[i]]``), stopping before a multipart message;
        None when the oldest is multipart or nothing is queued (nothing popped). The twin of
        ``sockets._pack_ready`` over a deque."""
        cdef Py_ssize_t n = 0, lists = 0, total = 0, mask = self._ring_capacity - 1, i, k
        cdef Py_ssize_t run_start, run_bytes
        cdef int64_t size
        cdef Py_buffer view
        cdef cnp.ndarray data, offsets, lengths
        cdef int64_t* offs
        cdef int64_t* lens
        cdef unsigned char* out
        cdef object message  # (a deque takes any object: so does append)
        while n < max_messages and n < self._count:  # how many, and their bytes
            size = self._sizes[(self._head + n) & mask]
            if size < 0:
                message = self._lists[lists]
                if len(message) != 1:
                    break
                PyObject_GetBuffer(message[0], &view, PyBUF_SIMPLE)
                size = view.len
                PyBuffer_Release(&view)
                lists += 1
            total += size
            n += 1
        if not n:
            return None
        data = _uint8s(total)
        offsets = _int64s(n)
        lengths = _int64s(n)
        out = <unsigned char*>cnp.PyArray_DATA(data)
        offs = <int64_t*>cnp.PyArray_DATA(offsets)
        lens = <int64_t*>cnp.PyArray_DATA(lengths)
        total = 0
        run_start = self._start  # arena messages in a row: one copy
        run_bytes = 0
        i = 0
        while i < n:
            size = self._sizes[(self._head + i) & mask]
            if size >= 0:
                offs[i] = total + run_bytes
                lens[i] = size
                run_bytes += size
                i += 1
                continue
            if run_bytes:
                memcpy(out + total, self._data + run_start, run_bytes)
                total += run_bytes
                run_start += run_bytes
                run_bytes = 0
            PyObject_GetBuffer(self._lists[0][0], &view, PyBUF_SIMPLE)
            try:
                memcpy(out + total, view.buf, view.len)
                offs[i] = total
                lens[i] = view.len
                total += view.len
            finally:
                PyBuffer_Release(&view)
            self._lists.popleft()
            i += 1
        if run_bytes:
            memcpy(out + total, self._data + run_start, run_bytes)
            run_start += run_bytes
        self._start = run_start
        self._head = (self._head + n) & mask
        self._count -= n
        if not self._count:
            self._emptied()
        return data, offsets, lengths

    def __sizeof__(self):
        """Bytes held: the object, its arena and its ring (the part lists are not counted)."""
        return sizeof(ReadyQueue) + self._data_capacity + self._ring_capacity * sizeof(int64_t)

    def __repr__(self):
        return f"ReadyQueue({self._count} messages, {self._end - self._start} bytes in the arena)"


DEF MIN_RECORDS = 64         # records (a power of two) of an empty transmission order


cdef class TransmissionOrder:
    """A congestion window's transmissions, oldest first: ``(tx, flight)`` records (the
    transmission's number, an int, and the frame's flight), the compiled twin of the
    ``collections.deque`` of pairs the Python code keeps (``append``, ``appendleft``,
    ``popleft``, ``clear``, ``len``, truth, indexing and iteration as a deque's, each taking or
    giving a pair). Stale records (the flight acked or sent again since) stay until they reach
    the front, as in the deque.

    The compiled send and ack loops (``nbmq.engine._fast``) push and read C records of 16
    bytes, ``{tx, flight}``, in one ring: no pair tuple and no int per transmission (the ack
    loop's walk of the deque loaded three cold objects per record, the pair, its int and the
    flight; now the flight alone). The ring owns a reference to each flight; the cycle window
    -> order -> flight -> window is not seen by the cycle collector (neither the flights nor
    this ring are tracked, as the deque's flights were not), and is broken by emptying the
    order (``SendQueue.clear``, ``SendQueue.__del__``).

    Memory: 16 bytes per record, in a ring that doubles when full and halves when less than
    an eighth full (never below 64 records).

    Raises:
        IndexError: ``popleft`` or an index on an empty order / out of range.
        TypeError / ValueError: a pair that is not two items, or its tx not an int.
        MemoryError: the ring cannot grow."""

    def __cinit__(self):
        self.ring = <TxRecord*>PyMem_Malloc(MIN_RECORDS * sizeof(TxRecord))
        if self.ring == NULL:
            raise MemoryError()
        self.capacity = MIN_RECORDS
        self.head = self.count = 0

    def __dealloc__(self):
        cdef TxRecord* ring = self.ring
        cdef Py_ssize_t i, head = self.head, count = self.count, mask = self.capacity - 1
        self.ring = NULL
        self.count = 0
        if ring != NULL:
            for i in range(count):
                Py_XDECREF(ring[(head + i) & mask].flight)
            PyMem_Free(ring)

    cdef int _resize(self, Py_ssize_t capacity) except -1:
        """Move the records, oldest first, into a ring of ``capacity`` (a power of two, >= count)."""
        self.ring = <TxRecord*>_moved_ring(self.ring, self.head, self.count, self.capacity,
                                           capacity, sizeof(TxRecord))
        self.capacity = capacity
        self.head = 0
        return 0

    cdef int push(self, Py_ssize_t tx, object flight) except -1:
        """Add ``(tx, flight)`` as the newest record."""
        cdef TxRecord* r
        if self.count == self.capacity:
            self._resize(2 * self.capacity)
        r = &self.ring[(self.head + self.count) & (self.capacity - 1)]
        Py_INCREF(flight)
        r.tx = tx
        r.flight = <PyObject*>flight
        self.count += 1
        return 0

    cdef int push_front(self, Py_ssize_t tx, object flight) except -1:
        """Add ``(tx, flight)`` as the oldest record."""
        if self.count == self.capacity:
            self._resize(2 * self.capacity)
        self.head = (self.head - 1) & (self.capacity - 1)
        Py_INCREF(flight)
        self.ring[self.head].tx = tx
        self.ring[self.head].flight = <PyObject*>flight
        self.count += 1
        return 0

    cdef void drop_front(self) noexcept:
        """Remove the oldest record (there is one) and release its flight. The ring is left
        consistent before the release, which may free the flight (the caller holds the
        order)."""
        cdef PyObject* flight = self.ring[self.head].flight
        self.head = (self.head + 1) & (self.capacity - 1)
        self.count -= 1
        if self.count * 8 < self.capacity and self.capacity > MIN_RECORDS:
            try:
                self._resize(self.capacity // 2)
            except MemoryError:  # (keep the larger ring)
                pass
        Py_XDECREF(flight)

    def append(self, pair):
        """Add the pair ``(tx, flight)`` as the newest transmission."""
        tx, flight = pair
        self.push(tx, flight)

    def appendleft(self, pair):
        """Add the pair ``(tx, flight)`` as the oldest transmission."""
        tx, flight = pair
        self.push_front(tx, flight)

    def popleft(self):
        """The oldest ``(tx, flight)``, removed. IndexError when empty."""
        if not self.count:
            raise IndexError("pop from an empty TransmissionOrder")
        cdef TxRecord* r = &self.ring[self.head]
        pair = (r.tx, <object>r.flight)
        self.drop_front()
        return pair

    def __getitem__(self, Py_ssize_t index):
        """The pair ``(tx, flight)`` at ``index`` (negative counts from the newest)."""
        cdef TxRecord* r
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError("TransmissionOrder index out of range")
        r = &self.ring[(self.head + index) & (self.capacity - 1)]
        return (r.tx, <object>r.flight)

    def __iter__(self):
        """The pairs, oldest first (a snapshot: changing the order meanwhile changes nothing
        iterated)."""
        return iter([self[i] for i in range(self.count)])

    def __len__(self):
        return self.count

    def __bool__(self):
        return self.count > 0

    def clear(self):
        """Remove every record (releasing its flight)."""
        cdef TxRecord* ring = self.ring
        cdef Py_ssize_t i, head = self.head, count = self.count, mask = self.capacity - 1
        cdef TxRecord* fresh = <TxRecord*>PyMem_Malloc(MIN_RECORDS * sizeof(TxRecord))
        if fresh == NULL:
            raise MemoryError()
        self.ring = fresh  # (emptied before any flight is released: releasing may run code)
        self.capacity = MIN_RECORDS
        self.head = self.count = 0
        for i in range(count):
            Py_XDECREF(ring[(head + i) & mask].flight)
        PyMem_Free(ring)

    def __sizeof__(self):
        """Bytes held: the object and its ring (the flights are not counted)."""
        return sizeof(TransmissionOrder) + self.capacity * sizeof(TxRecord)

    def __repr__(self):
        return f"TransmissionOrder({self.count} transmissions)"


DEF MIN_SLOTS = MIN_CAPACITY  # slots (a power of two) of an empty in-flight table
# Slots (96 KiB) an in-flight table keeps however empty it gets: a sender whose acks come back
# faster than it sends drains its table to a few frames every flush; shrinking it each time
# (to four times what is left) made every flush regrow it, one doubling per 64 frames or so.
DEF KEEP_SLOTS = 4096


cdef inline bint _u64(object key) noexcept:
    return type(key) is int and 0 <= key <= 0xFFFFFFFFFFFFFFFF


cdef class InflightTable:
    """A safe send queue's frames awaiting their ack: the frame's ack hash (u64, FNV-1a 64 of
    the frame) -> its flight. The compiled twin of the ``dict`` the Python code keeps (``[h]``,
    ``get``, ``pop``, ``del``, ``in``, ``len``, truth, ``clear``, and ``keys`` / ``values`` /
    ``items`` / iteration in the order the hashes were put, as a dict's), and what the
    compiled send and ack loops (``nbmq.engine._fast``) put flights in and take them from by
    a C u64: no Python int per frame, on either side.

    An open-addressing table of 24-byte slots ``{hash, flight, seq}`` (linear probing, at
    most half full; a removal shifts the slots after it back, so no deleted slots pile up).
    The table owns a reference to each flight. Memory: the table grows with the frames in
    flight (the peers' congestion windows), never with what a frame claims, from 2 MiB on in
    huge pages where the kernel gives them; it doubles at half full and shrinks when less
    than an eighth full, never below 4096 slots (96 KiB) once it grew past them.

    Raises:
        KeyError: ``[h]`` or ``del`` of a hash not held.
        OverflowError / TypeError: putting a hash that is not a u64 int (looking one up
        finds nothing, as in the dict).
        MemoryError: the table cannot grow."""

    def __cinit__(self):
        self.slots = <FlightSlot*>nbmq_table_alloc(MIN_SLOTS * sizeof(FlightSlot))
        if self.slots == NULL:
            raise MemoryError()
        self.capacity = MIN_SLOTS
        self.live = 0
        self.next_seq = 0

    def __dealloc__(self):
        cdef FlightSlot* slots = self.slots
        cdef Py_ssize_t i, capacity = self.capacity
        self.slots = NULL
        self.live = 0
        if slots != NULL:
            for i in range(capacity):
                Py_XDECREF(slots[i].flight)
            free(slots)

    cdef Py_ssize_t _index(self, uint64_t h) noexcept:
        """The slot holding ``h``, or -1."""
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_slot_hash(0, h) & <uint64_t>mask)
        while self.slots[i].flight != NULL:
            if self.slots[i].hash == h:
                return i
            i = (i + 1) & mask
        return -1

    cdef void prefetch(self, uint64_t h) noexcept:
        """Start loading ``h``'s first slot into the cache (a batch of acks looks up many)."""
        nbmq_prefetch(&self.slots[_slot_hash(0, h) & <uint64_t>(self.capacity - 1)])

    cdef int _resize(self, Py_ssize_t capacity) except -1:
        """Move the flights into a table of ``capacity`` slots (a power of two > 2 * live)."""
        cdef FlightSlot* fresh = <FlightSlot*>nbmq_table_alloc(capacity * sizeof(FlightSlot))
        cdef FlightSlot* old = self.slots
        cdef Py_ssize_t k, i, mask = capacity - 1
        if fresh == NULL:
            raise MemoryError()
        for k in range(self.capacity):
            if old[k].flight != NULL:
                i = <Py_ssize_t>(_slot_hash(0, old[k].hash) & <uint64_t>mask)
                while fresh[i].flight != NULL:
                    i = (i + 1) & mask
                fresh[i] = old[k]
        self.slots = fresh
        self.capacity = capacity
        free(old)
        return 0

    cdef PyObject* find(self, uint64_t h) noexcept:
        """``h``'s flight (a borrowed reference), or NULL."""
        cdef Py_ssize_t i = self._index(h)
        return NULL if i < 0 else self.slots[i].flight

    cdef int store(self, uint64_t h, object flight) except -1:
        """Put ``flight`` under ``h`` (replacing the one held: it keeps its place in the order)."""
        cdef Py_ssize_t i = self._index(h), mask
        cdef PyObject* old
        if i >= 0:
            old = self.slots[i].flight
            Py_INCREF(flight)
            self.slots[i].flight = <PyObject*>flight
            Py_XDECREF(old)
            return 0
        if (self.live + 1) * 2 > self.capacity:
            self._resize(2 * self.capacity)
        mask = self.capacity - 1
        i = <Py_ssize_t>(_slot_hash(0, h) & <uint64_t>mask)
        while self.slots[i].flight != NULL:
            i = (i + 1) & mask
        Py_INCREF(flight)
        self.slots[i].hash = h
        self.slots[i].flight = <PyObject*>flight
        self.slots[i].seq = self.next_seq
        self.next_seq += 1
        self.live += 1
        return 0

    cdef void _unlink(self, Py_ssize_t i) noexcept:
        """Empty slot ``i`` (its reference passes to the caller), shifting back the slots of
        its probe run that may take its place, so every held hash stays reachable."""
        cdef Py_ssize_t mask = self.capacity - 1, j = i, k
        while True:
            j = (j + 1) & mask
            if self.slots[j].flight == NULL:
                break
            k = <Py_ssize_t>(_slot_hash(0, self.slots[j].hash) & <uint64_t>mask)
            # slot j may move to i unless its home k lies cyclically in (i, j]
            if (i <= j and (k <= i or k > j)) or (i > j and k <= i and k > j):
                self.slots[i] = self.slots[j]
                i = j
        self.slots[i].flight = NULL
        self.live -= 1

    cdef object take(self, uint64_t h):
        """``h``'s flight, removed (the caller's reference now), or None."""
        cdef Py_ssize_t i = self._index(h)
        cdef PyObject* flight
        if i < 0:
            return None
        flight = self.slots[i].flight
        self._unlink(i)
        if self.live * 8 < self.capacity and self.capacity > KEEP_SLOTS:
            try:
                self._resize(max(KEEP_SLOTS, _table_capacity(self.live)))
            except MemoryError:  # (keep the larger table)
                pass
        result = <object>flight  # (a new reference: the table's is released below)
        Py_XDECREF(flight)
        return result

    def __getitem__(self, h):
        cdef PyObject* flight = self.find(h) if _u64(h) else NULL
        if flight == NULL:
            raise KeyError(h)
        return <object>flight

    def get(self, h, default=None):
        """``h``'s flight, or ``default``."""
        cdef PyObject* flight = self.find(h) if _u64(h) else NULL
        return default if flight == NULL else <object>flight

    def __setitem__(self, h, flight):
        self.store(PyLong_AsUnsignedLongLong(h), flight)

    def __delitem__(self, h):
        if not _u64(h) or self.take(h) is None:
            raise KeyError(h)

    def pop(self, h, *default):
        """``h``'s flight, removed; ``default`` (or KeyError without one) when not held."""
        flight = self.take(h) if _u64(h) else None
        if flight is None:
            if default:
                return default[0]
            raise KeyError(h)
        return flight

    def __contains__(self, h):
        return _u64(h) and self.find(h) != NULL

    def __len__(self):
        return self.live

    def __bool__(self):
        return self.live > 0

    def items(self):
        """``(hash, flight)`` pairs in the order the hashes were put (a list)."""
        cdef Py_ssize_t i
        held = [(self.slots[i].seq, self.slots[i].hash, <object>self.slots[i].flight)
                for i in range(self.capacity) if self.slots[i].flight != NULL]
        held.sort(key=_first)
        return [(h, flight) for _, h, flight in held]

    def keys(self):
        """The hashes held, in the order they were put (a list)."""
        return [h for h, _ in self.items()]

    def values(self):
        """The flights held, in the order their hashes were put (a list)."""
        return [flight for _, flight in self.items()]

    def __iter__(self):
        return iter(self.keys())

    def clear(self):
        """Remove every flight (releasing it)."""
        cdef FlightSlot* fresh = <FlightSlot*>nbmq_table_alloc(MIN_SLOTS * sizeof(FlightSlot))
        cdef FlightSlot* old = self.slots
        cdef Py_ssize_t i, capacity = self.capacity
        if fresh == NULL:
            raise MemoryError()
        self.slots = fresh  # (emptied before any flight is released: releasing may run code)
        self.capacity = MIN_SLOTS
        self.live = 0
        for i in range(capacity):
            Py_XDECREF(old[i].flight)
        free(old)

    def __sizeof__(self):
        """Bytes held: the object and its table (the flights are not counted)."""
        return sizeof(InflightTable) + self.capacity * sizeof(FlightSlot)

    def __repr__(self):
        return f"InflightTable({self.live} frames in flight)"


cdef object _first(object t):
    return t[0]
