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
``queues.DedupWindowPy``.
"""

from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.math cimport isnan, NAN
from libc.stdint cimport uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memset

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
    ``_inflight`` (dict hash -> flight) and ``windows`` (dict peer -> congestion window)."""


cdef class SocketState:
    """Fields of an engine ``Socket`` that every message's ``send`` reads or writes: ``_closed``
    (bool), ``_now`` (seconds, the latest call's time), ``_nonce`` (int: the next message id's
    counter), ``_sendq`` (its ``SendQueue``) and ``_opts`` (its ``SocketOptions``). A Python
    attribute each cost the compiled send a look-up in the instance's dict."""


cdef class RecvQueueState:
    """Fields of ``RecvQueue``: counts (``recv_hwm``, ``completed``, ``dropped_hwm``; ints), the
    flag ``refuse_when_full``, ``dedup_ttl`` (seconds or None), the codec's ``reassembler``,
    ``_ready`` (deque of completed messages) and ``_dedup`` (a dedup window or None)."""


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
    the ttl, as the dict's did, never with what a frame claims.

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
        cdef DedupSlot* old = self.slots
        cdef Py_ssize_t old_capacity = self.capacity, k, i, mask = capacity - 1
        cdef DedupSlot* fresh = <DedupSlot*>nbmq_table_alloc(capacity * sizeof(DedupSlot))
        if fresh == NULL:
            raise MemoryError()
        for k in range(old_capacity):
            if old[k].seq >= FIRST_SEQ:
                i = <Py_ssize_t>(_slot_hash(old[k].session_id, old[k].message_id) & <uint64_t>mask)
                while fresh[i].seq != EMPTY:
                    i = (i + 1) & mask
                fresh[i] = old[k]
        self.slots = fresh
        self.capacity = capacity
        self.used = self.live
        free(old)
        return 0

    cdef int _resize_ring(self, Py_ssize_t capacity) except -1:
        """Move the records, oldest first, into a ring of ``capacity`` (>= count) records."""
        cdef DedupRecord* fresh = <DedupRecord*>PyMem_Malloc(capacity * sizeof(DedupRecord))
        cdef Py_ssize_t first = self.ring_capacity - self.head
        if fresh == NULL:
            raise MemoryError()
        if first >= self.count:
            memcpy(fresh, self.ring + self.head, self.count * sizeof(DedupRecord))
        else:
            memcpy(fresh, self.ring + self.head, first * sizeof(DedupRecord))
            memcpy(fresh + first, self.ring, (self.count - first) * sizeof(DedupRecord))
        PyMem_Free(self.ring)
        self.ring = fresh
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
