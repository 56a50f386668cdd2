# The send queue's state that compiled code reads and writes as C fields (nbmq.engine.queues
# SendQueue derives from this class; its pure-Python twin is queues.SendQueueStatePy).

cdef class SendQueueState:
    cdef public Py_ssize_t held, send_hwm, pushed, frames_out, bytes_out, _rr
    cdef public bint safe, congestion, _blocked
    cdef public double resend_ivl
    cdef public object _queue, _inflight, windows
