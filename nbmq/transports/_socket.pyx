# cython: language_level=3, embedsignature=True
"""Compiled per-message calls of the blocking socket (``nbmq.transports.socket.Socket``).

:func:`send` and :func:`recv` are the twins of ``Socket.send`` and ``Socket.recv`` for the
calls a message loop makes: a socket that is open, one small part (at most 466 bytes, one
datagram) taken by the engine at once, auto-batching; a message already received. Every
other call (a full queue and its wait, ``flush=``, a larger or multipart message, nothing
received yet) runs the Python method itself, so effects, errors and their order are those of
the Python code (tests/transports/test_socket_fast.py runs both).

The saving is the Python frame of the method (its argument parsing, locals and attribute
look-ups): about half of a 100 B Dealer sender's time per message. Into a compiled engine a
small message goes with one C call (``nbmq.engine._fast.queue_small``: no part list, no
Python call), and the fields read per message are C fields (:class:`SocketFields`).

:func:`spin_readable` is the compiled twin of ``socket.spin_readable``: the bounded spin of the
``busy_poll`` option, without the GIL.
"""

from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_GET_SIZE

import numpy

from nbmq.engine._fast cimport SMALL_FULL, SMALL_QUEUED, queue_small
from nbmq.engine._queue_state cimport SocketState

from nbmq.engine._fast import send as _compiled_engine_send
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


cdef class SocketFields:
    """The fields of the blocking socket that :func:`send` and :func:`recv` read for every
    message, as C fields (the base of ``socket.Socket``; twin ``socket.SocketFieldsPy``):
    ``closed`` (bool), ``_unflushed`` (datagrams queued by ``send`` since the last flush, an
    estimate), ``_engine_send`` (the engine's bound ``send``), ``_small_engine`` (see
    :func:`small_sender`) and ``_ready`` (the engine's ready queue). A slot of a Python class
    cost each read or write an attribute look-up."""

    cdef public bint closed
    cdef public Py_ssize_t _unflushed
    cdef public object _engine_send, _small_engine, _ready


def install(send_py, recv_py, Py_ssize_t auto_flush):
    """Set the Python methods every other call goes to (``Socket._send_py``,
    ``Socket._recv_py``) and the auto-flush size (``socket.AUTO_FLUSH``, datagrams); the
    socket module calls this once, as it cannot be imported from here without a cycle."""
    global _send_py, _recv_py, _auto_flush
    _send_py = send_py
    _recv_py = recv_py
    _auto_flush = auto_flush


def small_sender(engine):
    """``engine`` when its ``send`` is the compiled one (``nbmq.engine._fast.send``: a Dealer
    or SafeDealer built with the extensions), else None. :func:`send` queues a small message
    into such an engine with one C call (``_fast.queue_small``), without a part list."""
    if isinstance(engine, SocketState) and getattr(type(engine), "send", None) is _compiled_engine_send:
        return engine
    return None


def send(SocketFields self not None, parts, timeout=0.0, flush=None):
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
    cdef int queued = 0
    cdef object part = parts
    if self.closed:
        return _send_py(self, parts, timeout, flush)
    if type(parts) is list or type(parts) is tuple:
        if len(parts) != 1:
            return _send_py(self, parts, timeout, flush)
        part = parts[0]
    elif type(parts) is not bytes and type(parts) is not bytearray:
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
    engine = self._small_engine
    if engine is not None:  # (_now: time.monotonic's clock, without a call)
        queued = queue_small(<SocketState?>engine, part, _now())
        if queued == SMALL_FULL:  # (nothing was queued) the Python method waits, then queues it
            return _send_py(self, parts, timeout, flush)
    if engine is None or queued != SMALL_QUEUED:  # the engine's own send, for any other case
        if parts is part:
            parts = [part]
        try:
            self._engine_send(parts, _now())
        except WouldBlock:
            return _send_py(self, parts, timeout, flush)
    if flush is None:
        unflushed = self._unflushed + 1 + size // CHUNK  # (engine_binding.datagrams_of)
        if unflushed < _auto_flush:
            self._unflushed = unflushed
            return
    elif not flush:
        return
    self._flush_sent(_now())


def recv(SocketFields self not None, timeout=0.0):
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
