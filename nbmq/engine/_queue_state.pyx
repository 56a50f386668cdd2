# cython: language_level=3, embedsignature=True
"""The queues' hot state as C fields: the compiled bases of ``nbmq.engine.queues.SendQueue``
and ``RecvQueue``.

The queues (pure Python, the reference) derive from :class:`SendQueueState` and
:class:`RecvQueueState`; compiled code (``nbmq.engine._fast``) cimports them
(``_queue_state.pxd``) and reads and writes these fields without an attribute look-up, while
the Python code reaches the same fields as attributes. Their twins, ``queues.SendQueueStatePy``
and ``queues.RecvQueueStatePy``, have the same names as slots (``NBMQ_NO_EXTENSIONS=1``). The
fields' meaning is documented on the queues.
"""


cdef class SendQueueState:
    """Fields of ``SendQueue``: counts (``held``, ``send_hwm``, ``pushed``, ``frames_out``,
    ``bytes_out`` and the round-robin index ``_rr``; ints), flags (``safe``, ``congestion``,
    ``_blocked``), ``resend_ivl`` (seconds) and the containers ``_queue`` (deque of messages),
    ``_inflight`` (dict hash -> flight) and ``windows`` (dict peer -> congestion window)."""


cdef class RecvQueueState:
    """Fields of ``RecvQueue``: counts (``recv_hwm``, ``completed``, ``dropped_hwm``; ints), the
    flag ``refuse_when_full``, ``dedup_ttl`` (seconds or None), the codec's ``reassembler``,
    ``_ready`` (deque of completed messages) and ``_dedup`` (dict or None)."""
