# cython: language_level=3, embedsignature=True
"""The send queue's hot state as C fields: the compiled base of ``nbmq.engine.queues.SendQueue``.

``SendQueue`` (pure Python, the reference) derives from :class:`SendQueueState`; compiled code
(``nbmq.engine._fast``) cimports it (``_queue_state.pxd``) and reads and writes these fields
without an attribute look-up, while the Python code reaches the same fields as attributes.
Its twin, ``queues.SendQueueStatePy``, has the same names as slots (``NBMQ_NO_EXTENSIONS=1``).
The fields' meaning is documented on ``SendQueue``.
"""


cdef class SendQueueState:
    """Fields of ``SendQueue``: counts (``held``, ``send_hwm``, ``pushed``, ``frames_out``,
    ``bytes_out`` and the round-robin index ``_rr``; ints), flags (``safe``, ``congestion``,
    ``_blocked``), ``resend_ivl`` (seconds) and the containers ``_queue`` (deque of messages),
    ``_inflight`` (dict hash -> flight) and ``windows`` (dict peer -> congestion window)."""
