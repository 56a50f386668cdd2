# The queues' state that compiled code reads and writes as C fields (nbmq.engine.queues'
# SendQueue and RecvQueue derive from these classes; twins: queues.SendQueueStatePy, RecvQueueStatePy).

cdef class SendQueueState:
    cdef public Py_ssize_t held, send_hwm, pushed, frames_out, bytes_out, _rr
    cdef public bint safe, congestion, _blocked
    cdef public double resend_ivl
    cdef public object _queue, _inflight, windows


cdef class RecvQueueState:
    cdef public Py_ssize_t recv_hwm, completed, dropped_hwm
    cdef public bint refuse_when_full
    cdef public object dedup_ttl, reassembler, _ready, _dedup
