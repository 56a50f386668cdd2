# The queues' and the engine socket's state that compiled code reads and writes as C fields
# (nbmq.engine.queues' SendQueue and RecvQueue and nbmq.engine.sockets' Socket derive from these
# classes; twins: queues.SendQueueStatePy, RecvQueueStatePy, DedupWindowPy,
# sockets.SocketStatePy).

from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint64_t


cdef class SendQueueState:
    cdef public Py_ssize_t held, send_hwm, pushed, frames_out, bytes_out, _rr
    cdef public bint safe, congestion, _blocked
    cdef public double resend_ivl
    cdef public object _queue, _inflight, windows


cdef class SocketState:
    cdef public bint _closed, _reference_compat
    cdef public object _now, _sendq, _opts
    cdef uint64_t nonce             # the next nonce, while nonce_other is None
    cdef object nonce_other         # the next nonce when it is no u64 (2**64 once all are spent), else None


cdef class RecvQueueState:
    cdef public Py_ssize_t recv_hwm, completed, dropped_hwm
    cdef public bint refuse_when_full
    cdef public object dedup_ttl, reassembler, _ready, _dedup


cdef struct DedupSlot:
    uint64_t session_id
    uint64_t message_id
    double until
    uint64_t seq        # its latest record in the expiry ring; 0: empty, 1: deleted


cdef struct DedupRecord:
    uint64_t session_id
    uint64_t message_id
    uint64_t seq


cdef class DedupWindow:
    cdef DedupSlot* slots
    cdef Py_ssize_t capacity, used, live    # used: live and deleted slots
    cdef DedupSlot* spare                   # the table a same-size rehash left, or NULL
    cdef Py_ssize_t spare_capacity
    cdef DedupRecord* ring
    cdef Py_ssize_t ring_capacity, head, count
    cdef uint64_t next_seq
    cdef Py_ssize_t _index(self, uint64_t session_id, uint64_t message_id) noexcept
    cdef int _rehash(self, Py_ssize_t capacity) except -1
    cdef int _resize_ring(self, Py_ssize_t capacity) except -1
    cdef int _push_record(self, uint64_t session_id, uint64_t message_id, uint64_t seq) except -1
    cdef void prefetch(self, uint64_t session_id, uint64_t message_id) noexcept
    cdef double find(self, uint64_t session_id, uint64_t message_id) noexcept
    cdef int store(self, uint64_t session_id, uint64_t message_id, double until) except -1


cdef class ReadyQueue:
    cdef object _lists                      # deque of the part lists not held in the arena
    cdef int64_t* _sizes                    # ring of entries: bytes in the arena, or -1
    cdef Py_ssize_t _head, _count, _ring_capacity
    cdef unsigned char* _data               # the arena: one-part messages' bytes, oldest first
    cdef Py_ssize_t _start, _end, _data_capacity
    cdef Py_ssize_t _peak_bytes, _peak_count   # the most held since the queue last emptied
    cdef int _entry(self, int64_t size) except -1
    cdef void _pop_entry(self) noexcept
    cdef void _emptied(self) noexcept
    cdef int push_bytes(self, const unsigned char* p, Py_ssize_t size) except -1
    cpdef object pack(self, Py_ssize_t max_messages)


cdef struct TxRecord:
    Py_ssize_t tx           # the transmission's number
    PyObject* flight        # its flight (an owned reference)


cdef class TransmissionOrder:
    cdef TxRecord* ring
    cdef Py_ssize_t head, count, capacity   # capacity: a power of two
    cdef object __weakref__
    cdef int _resize(self, Py_ssize_t capacity) except -1
    cdef int push(self, Py_ssize_t tx, object flight) except -1
    cdef int push_front(self, Py_ssize_t tx, object flight) except -1
    cdef void drop_front(self) noexcept


cdef struct FlightSlot:
    uint64_t hash           # the frame's ack hash
    PyObject* flight        # its flight (an owned reference); NULL: an empty slot
    uint64_t seq            # when it was put (the dict's insertion order)


cdef class InflightTable:
    cdef FlightSlot* slots
    cdef Py_ssize_t capacity, live          # capacity: a power of two, at least twice live
    cdef uint64_t next_seq
    cdef Py_ssize_t _index(self, uint64_t h) noexcept
    cdef int _resize(self, Py_ssize_t capacity) except -1
    cdef void _unlink(self, Py_ssize_t i) noexcept
    cdef void prefetch(self, uint64_t h) noexcept
    cdef PyObject* find(self, uint64_t h) noexcept
    cdef int store(self, uint64_t h, object flight) except -1
    cdef object take(self, uint64_t h)
