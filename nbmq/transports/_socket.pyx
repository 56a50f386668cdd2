# cython: language_level=3, embedsignature=True
"""Compiled per-message calls of the blocking socket (``nbmq.transports.socket.Socket``).

:func:`send` and :func:`recv` are the twins of ``Socket.send`` and ``Socket.recv`` for the
calls a message loop makes: a socket that is open, one small part (at most 466 bytes, one
datagram) taken by the engine at once, auto-batching; a message already received. Every
other call (a full queue and its wait, ``flush=``, a larger or multipart message, nothing
received yet) runs the Python method itself, so effects, errors and their order are those of
the Python code (tests/transports/test_socket_fast.py runs both).

The saving is the Python frame of the method (its argument parsing, locals and attribute
look-ups): about half of a 100 B Dealer sender's time per message.

:func:`spin_readable` is the compiled twin of ``socket.spin_readable``: the bounded spin of the
``busy_poll`` option, without the GIL.
"""

from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_GET_SIZE

import numpy

from nbmq.errors import WouldBlock

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    short POLLIN

cdef extern from "<time.h>" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clock_id, timespec *ts)
    int CLOCK_MONOTONIC

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef object _ndarray = numpy.ndarray
cdef object _send_py = None
cdef object _recv_py = None
cdef Py_ssize_t _auto_flush = 64

cdef enum:
    CHUNK = 466     # payload bytes of one datagram (wire.MAX_CHUNK)


cdef inline double _now() noexcept nogil:
    """``time.monotonic()`` (the same clock, rounded as CPython rounds it), without a call."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>(<long long>ts.tv_sec * 1000000000 + ts.tv_nsec) / 1e9


def install(send_py, recv_py, Py_ssize_t auto_flush):
    """Set the Python methods every other call goes to (``Socket._send_py``,
    ``Socket._recv_py``) and the auto-flush size (``socket.AUTO_FLUSH``, datagrams); the
    socket module calls this once, as it cannot be imported from here without a cycle."""
    global _send_py, _recv_py, _auto_flush
    _send_py = send_py
    _recv_py = recv_py
    _auto_flush = auto_flush


def send(self, parts, timeout=0.0, flush=None):
    """``Socket.send(parts, timeout=0.0, flush=None)``, compiled (same arguments, effects,
    errors). A one-part message of at most 466 bytes (a bare ``bytes`` or ``bytearray``, or a
    list / tuple of one such part or of one 1-D numpy array, as ``recv`` returns) that the
    engine takes at once, on an open socket, is queued here, and flushed as ``flush`` says (None: when about 64 datagrams wait; true: at
    once; false: never here). Anything else is ``Socket.send`` itself.

    Raises:
        As ``Socket.send``: WouldBlock (NoPeer) at ``send_hwm`` after ``timeout`` seconds,
        SocketClosed, NotSupported, TypeError / ValueError.
    """
    cdef Py_ssize_t size, unflushed
    cdef object part = parts
    if self.closed:
        return _send_py(self, parts, timeout, flush)
    if type(parts) is list or type(parts) is tuple:
        if len(parts) != 1:
            return _send_py(self, parts, timeout, flush)
        part = parts[0]
    elif type(parts) is bytes or type(parts) is bytearray:
        parts = [parts]
    else:
        return _send_py(self, parts, timeout, flush)
    if type(part) is bytes:
        size = PyBytes_GET_SIZE(part)
    elif type(part) is bytearray:
        size = PyByteArray_GET_SIZE(part)
    elif type(part) is _ndarray and part.ndim == 1:  # (a received part, sent back: an echo)
        size = len(part)
    else:
        return _send_py(self, parts, timeout, flush)
    if size > CHUNK:
        return _send_py(self, parts, timeout, flush)
    try:
        self._engine_send(parts, _now())  # (_now: time.monotonic's clock, without a call)
    except WouldBlock:  # (nothing was queued) the Python method waits, then queues it
        return _send_py(self, parts, timeout, flush)
    if flush is None:
        unflushed = self._unflushed + 1 + size // CHUNK  # (engine_binding.datagrams_of)
        if unflushed < _auto_flush:
            self._unflushed = unflushed
            return
    elif not flush:
        return
    self._flush_sent(_now())


def recv(self, timeout=0.0):
    """``Socket.recv(timeout=0.0)``, compiled (same arguments, return, errors): the oldest
    ready message when nothing waits for a flush; anything else is ``Socket.recv`` itself.

    Returns:
        The message's parts, a list of uint8 numpy arrays owning their bytes.
    """
    ready = self._ready
    if ready and not self._unflushed:
        return ready.popleft()
    return _recv_py(self, timeout)


def spin_readable(int fd, double seconds):
    """``socket.spin_readable(fd, seconds)``, compiled: polls ``fd`` without waiting
    (``poll(fd, POLLIN, 0)``, then ``sched_yield()``) in a loop that does not hold the GIL,
    for up to ``seconds``.
    Returns True as soon as ``fd`` is readable (or in error), False when the time ran out."""
    cdef pollfd entry
    cdef double end
    cdef int ready = 0
    entry.fd = fd
    entry.events = POLLIN
    with nogil:
        end = _now() + seconds
        while True:
            entry.revents = 0
            ready = poll(&entry, 1, 0)
            if ready != 0 or _now() >= end:
                break
            sched_yield()  # a peer process that shares this core runs now, not after our slice
    return ready != 0
