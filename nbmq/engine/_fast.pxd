# What other compiled modules call in nbmq.engine._fast without a Python call: the blocking
# socket's compiled send (nbmq.transports._socket) queues a small message through queue_small.

from nbmq.engine._queue_state cimport SocketState

cdef enum:
    SMALL_OTHER = 0     # not a small message on an open engine: nothing done
    SMALL_QUEUED = 1
    SMALL_FULL = -1     # send_hwm messages held: nothing queued

cdef int queue_small(SocketState self, object part, object now) except -2
