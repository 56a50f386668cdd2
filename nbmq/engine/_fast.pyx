# cython: language_level=3, embedsignature=True, boundscheck=False, wraparound=False
"""Compiled per-message hot path of Dealer (and Dish).

Three functions, each the exact twin of pure-Python engine code it replaces when built
(``nbmq.engine.sockets`` picks them; ``NBMQ_NO_EXTENSIONS=1`` keeps the Python code):

- :func:`send`: ``Socket.send`` for a one-part ``bytes`` message of at most 466 bytes
  (message id, ``send_hwm`` check, ``SendQueue.push_small``) in one call; every other message
  goes to ``Socket.send`` itself.
- :func:`take`: the leading run of such small messages of a fire-and-forget queue
  (``SendQueue.take``'s common case: next peer in turn, encode the one frame, hand it out);
  from the first other message on, ``SendQueue.take`` itself.
- :func:`receive_batch`: ``Socket._receive_batch_unacked`` for a datagram that is a whole
  one-frame message from a connected peer on its known path (parsed, checked and its chunk
  copied into the receive queue's arena, ``_queue_state.ReadyQueue.push_bytes``, without a
  Python object); every other datagram goes to ``receive_datagram`` itself.

SafeDealer: :func:`send` too; :func:`receive_batch_safe` (twin of
``SafeDealer._receive_datagrams_py``: dedup, queue and Ack of one-frame messages, Acks parsed),
:func:`ack` (``SendQueue.ack``'s common case; in a batch, the acks of one window keep its
state in C; a sharded message's frames too) and :func:`take_safe`
(``SendQueue._take_safe`` under congestion control for small and sharded messages, reached
through :func:`take`), whose frames awaiting acks are :class:`Flight` records (the twin of
``queues._Flight``); a small message is its own flight (:class:`SmallMessage` derives from
:class:`Flight`: one object per message in flight, not two). Neither is tracked by the cycle
collector (its collections were a quarter of the 100 B sender's time).

The queues' hot fields are C fields of their shared compiled bases
(``nbmq.engine._queue_state``, declared in its ``.pxd``): the queues' own Python code and this
module read and write the same fields.

Counters, events, output and the order of everything are those of the Python code
(tests/engine/test_engine_send_fast.py, tests/engine/test_engine_receive_fast.py,
tests/engine/test_engine_safe_receive_fast.py).
"""

cimport cython
cimport numpy as cnp
import numpy as np
from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsUnsignedLongLong, PyLong_AsUnsignedLongLongMask, PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.memoryview cimport PyMemoryView_GET_BUFFER
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, UINT64_MAX
from libc.string cimport memcpy

from nbmq._wire cimport (DATA_HEADER, FNV_BASIS, MAX_CHUNK, MAX_FRAME, fnv1a64 as _fnv,
                        fnv1a64x4 as _fnv4)
from cpython.ref cimport PyObject
from nbmq.engine._queue_state cimport (DedupWindow, InflightTable, ReadyQueue, RecvQueueState, SendQueueState,
                                      SocketState, TransmissionOrder, TxRecord)

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)
    const Py_ssize_t PY_SSIZE_T_MAX
    const Py_ssize_t PY_SSIZE_T_MIN

from collections import deque

from nbmq.engine.connection import Connection
from nbmq.engine.peers import PeerState
from nbmq.engine.queues import OutMessage, SendQueue, _frames_of
from nbmq.errors import WouldBlock

cnp.import_array()

cdef object _CONNECTED = PeerState.CONNECTED
cdef object _deque_append = deque.append  # (called unbound: no method look-up per message)
cdef object _U64_MAX = 0xFFFFFFFFFFFFFFFF
cdef object _take_py = SendQueue.take
cdef object _receive_py = Connection.receive_datagrams

cdef enum:
    OVERHEAD = 256      # the reassembler's claim per message besides its bytes (MESSAGE_OVERHEAD)


cdef inline uint64_t _be(const unsigned char* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return v


cdef inline void _put_be(unsigned char* p, uint64_t v, int n) noexcept nogil:
    cdef int i
    for i in range(n - 1, -1, -1):
        p[i] = <unsigned char>(v & 0xFF)
        v >>= 8


cdef inline tuple _pair(object first, object second):
    """``(first, second)``, not tracked by the cycle collector: a datagram and its address,
    which never lead back to the pair. Tens of thousands of them live while acks wait;
    tracked, each young collection walked them and promoted them into the old generation's
    full collections."""
    cdef tuple pair = (first, second)
    PyObject_GC_UnTrack(<void*>pair)
    return pair


cdef inline uint64_t _message_id(uint64_t nonce):
    """codec.message_id((), nonce), a message's id outside ``reference_compat`` (Socket.send):
    FNV-1a 64 over the nonce (8 bytes BE) alone."""
    cdef unsigned char b[8]
    _put_be(b, nonce, 8)
    return _fnv(b, 8, FNV_BASIS)


cdef inline bytes _small_frame(uint64_t sid, uint64_t mid, bytes small):
    """codec.encode_data_frame(sid, mid, 1, 0, size, size, 0, small): a whole one-frame message."""
    cdef Py_ssize_t size = PyBytes_GET_SIZE(small)
    cdef bytes frame = PyBytes_FromStringAndSize(NULL, DATA_HEADER + size)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(frame)
    o[0] = 1
    o[1] = 0
    _put_be(o + 2, sid, 8)
    _put_be(o + 10, mid, 8)
    o[18] = 1
    o[19] = 0
    _put_be(o + 20, <uint64_t>size, 4)
    _put_be(o + 24, <uint64_t>size, 4)
    _put_be(o + 28, <uint64_t>size, 2)
    _put_be(o + 30, 0, 4)
    memcpy(o + DATA_HEADER, PyBytes_AS_STRING(small), size)
    return frame


@cython.no_gc
cdef class Flight:
    """One SafeDealer frame awaiting its ack: the compiled twin of
    ``nbmq.engine.queues._Flight`` (same attributes, constructor and ``forget``), made by
    :func:`take_safe` for a frame of a sharded message, without a Python ``__init__``, and
    read by :func:`ack` as C fields. A small message is its own flight
    (:class:`SmallMessage` derives from this class): one record per message, not two.

    Not tracked by the cycle collector (one per message in flight: the 100 B sender's
    collections walked them all). Its one cycle, window -> ``order`` -> flight ->
    ``win``, is broken by ``SendQueue.clear`` and ``SendQueue.__del__``; an ack or
    ``forget`` breaks it for each flight."""

    cdef public object view, win
    cdef object message          # the message; None for a SmallMessage, which is its own
    cdef uint64_t h              # the frame's ack hash (``hash`` makes the int)
    cdef public double due, sent_at, last_sent
    cdef public Py_ssize_t resends, tx, fast

    def __init__(self, h, view, msg, double due, double sent_at=0.0, win=None):
        self.h = PyLong_AsUnsignedLongLong(h)
        self.view = view
        self.message = msg
        self.due = due
        self.resends = 0
        self.sent_at = sent_at
        self.win = win
        self.tx = -1
        self.last_sent = sent_at
        self.fast = 0

    @property
    def hash(self):
        """The frame's ack hash (``codec.ack_hash``; u64 int)."""
        return PyLong_FromUnsignedLongLong(self.h)

    @property
    def msg(self):
        """The message this frame belongs to (an ``OutMessage``, or the flight itself)."""
        return self if self.message is None else self.message

    def forget(self):
        if self.win is not None:
            self.win.forget(len(self.view))
            self.win = None


cdef inline Flight _flight(Flight f, uint64_t h, object view, object msg, double due, double now,
                           object win, Py_ssize_t tx):
    """``f`` made ``_Flight(h, view, msg, due, now, win)`` with ``tx`` set, without ``__init__``
    (``f``: a new Flight, or a SmallMessage sent, with ``msg`` None: its own flight)."""
    f.h = h
    f.view = view
    f.message = msg
    f.due = due
    f.sent_at = now
    f.last_sent = now
    f.win = win
    f.tx = tx
    return f


@cython.final
@cython.no_gc  # it holds no object that could lead back to it but its window (see Flight)
cdef class SmallMessage(Flight):
    """A one-part message of at most 466 bytes queued by :func:`send`: the twin of
    ``OutMessage(None, message_id, None, None, small)`` (``SendQueue.push_small``) with the
    same attributes (see ``nbmq.engine.queues.OutMessage``), built without a Python
    ``__init__`` (the cost of one per message). On a SafeDealer it is also the flight of its
    one frame once :func:`take_safe` sent it (``view``: the frame, ``msg``: itself), so a
    message in flight is one object; its id is a C u64 (``message_id`` makes the int)."""

    cdef public object small, peer
    cdef object _frames       # frames the Python take made (a list of one), else None
    cdef uint64_t mid
    cdef public Py_ssize_t sent, unacked
    cdef public bint dropped

    @property
    def message_id(self):
        return PyLong_FromUnsignedLongLong(self.mid)

    @property
    def sharded(self):
        return None

    @property
    def group(self):
        return None

    @property
    def frames(self):
        """The one frame as a sequence once made (by the Python take, or sent here), else None."""
        if self._frames is not None:
            return self._frames
        return None if self.view is None else (self.view,)

    @frames.setter
    def frames(self, value):
        self._frames = value


cdef inline SmallMessage _small_message(bytes part, uint64_t message_id):
    cdef SmallMessage msg = SmallMessage.__new__(SmallMessage)
    msg.small = part
    msg.mid = message_id
    msg.tx = -1
    return msg


cdef object _send_py = None


cdef object _packed_ranges_py = None


def install(socket_send, receive_unacked, packed_ranges):
    """Set the functions :func:`send` and :func:`receive_one` hand every other case to
    (``Socket.send``, ``Socket._receive_unacked``) and the check :func:`send_packed` runs
    (``sockets.packed_ranges``); the engine module calls this once, as it cannot be imported
    from here without a cycle."""
    global _send_py, _receive_one_py, _packed_ranges_py
    _send_py = socket_send
    _receive_one_py = receive_unacked
    _packed_ranges_py = packed_ranges


cdef inline bint _small_u8(cnp.ndarray part) noexcept:
    """``part`` is a 1-D C-contiguous uint8 array of at most one chunk (466 bytes)."""
    return (cnp.PyArray_NDIM(part) == 1 and cnp.PyArray_TYPE(part) == cnp.NPY_UINT8
            and cnp.PyArray_IS_C_CONTIGUOUS(part) and cnp.PyArray_NBYTES(part) <= MAX_CHUNK)


def send(SocketState self not None, parts, now):
    """Queue one multipart message: ``Socket.send(parts, now)`` of a Dealer or SafeDealer,
    compiled.

    A one-part ``bytes``, ``bytearray`` or 1-D contiguous ``uint8`` numpy array (what ``recv``
    returns: an echo's reply) message of at most 466 bytes (one frame) is queued here as a
    :class:`SmallMessage` (:func:`queue_small`); any other message, a closed engine and
    ``reference_compat`` go to ``Socket.send`` itself.

    Args:
        parts: 1..255 bytes-like parts (see ``Socket.send``). now: seconds (monotonic).

    Raises:
        WouldBlock: ``send_hwm`` messages are held; nothing was queued. The rest as
        ``Socket.send`` (InteropError, NbmqError when closed, TypeError / ValueError).

    Queues output: flush with :meth:`datagrams_to_send`. Mutates state.
    """
    cdef int queued
    if (type(parts) is not list and type(parts) is not tuple) or len(parts) != 1:
        return _send_py(self, parts, now)
    queued = queue_small(self, parts[0], now)
    if queued == SMALL_FULL:
        raise WouldBlock(f"send_hwm ({(<SendQueueState>self._sendq).send_hwm}) messages held")
    if queued == SMALL_OTHER:
        return _send_py(self, parts, now)


cdef int queue_small(SocketState self, object part, object now) except -2:
    """Queue ``part``, the one part of a message, as :func:`send` does when it is small: a
    ``bytes``, ``bytearray`` or 1-D contiguous ``uint8`` array of at most 466 bytes (the
    last two copied once into ``bytes``) on an open engine outside ``reference_compat``. A
    C call for the blocking socket's compiled ``send`` (``nbmq.transports._socket``): no part
    list and no Python call per message.

    Returns:
        SMALL_QUEUED (1); SMALL_FULL (-1): ``send_hwm`` messages are held, nothing queued
        (``send`` raises WouldBlock); SMALL_OTHER (0): anything else, nothing done (the caller
        hands the message to ``Socket.send``). ``now`` (seconds) is recorded unless OTHER.
    """
    cdef uint64_t nonce
    cdef SendQueueState sendq
    if type(part) is bytearray and PyByteArray_GET_SIZE(part) <= MAX_CHUNK:
        part = PyBytes_FromStringAndSize(PyByteArray_AS_STRING(part), PyByteArray_GET_SIZE(part))  # the one copy
    elif type(part) is cnp.ndarray and _small_u8(<cnp.ndarray>part):
        part = PyBytes_FromStringAndSize(<char*>cnp.PyArray_DATA(<cnp.ndarray>part),
                                         cnp.PyArray_NBYTES(<cnp.ndarray>part))  # the one copy
    if (type(part) is not bytes or PyBytes_GET_SIZE(part) > MAX_CHUNK or self._closed
            or self._reference_compat):
        return SMALL_OTHER
    self._now = now
    sendq = <SendQueueState?>self._sendq
    if sendq.held >= sendq.send_hwm:
        return SMALL_FULL
    if self.nonce_other is not None:  # past 2**64 - 1: codec.message_id refuses it, Socket.send raises
        return SMALL_OTHER
    nonce = self.nonce
    # SendQueue.push_small, inlined (its send_hwm check was just made)
    _deque_append(sendq._queue, _small_message(part, _message_id(nonce)))  # (a deque: SendQueue's)
    sendq.held += 1
    sendq.pushed += 1
    if nonce == UINT64_MAX:
        self.nonce_other = _U64_MAX + 1  # (the twin's int: the next send raises)
    else:
        self.nonce = nonce + 1
    return SMALL_QUEUED


def send_packed(SocketState self not None, data, offsets, lengths, now):
    """Queue one-part messages packed in ``data`` (message ``i`` is
    ``data[offsets[i] : offsets[i] + lengths[i]]``) while under ``send_hwm``:
    ``Socket.send_packed`` of a Dealer or SafeDealer, compiled (same arguments, return, errors).
    Messages of at most 466 bytes are queued here as :func:`send` queues them; any other, a
    closed engine and ``reference_compat`` go through ``Socket.send`` one by one.

    Queues output: flush with :meth:`datagrams_to_send`. Mutates state.
    """
    cdef Py_buffer view
    cdef const unsigned char* base
    cdef Py_ssize_t i, n, off, size, taken = 0, queued = 0, held, hwm
    cdef uint64_t nonce = 0
    cdef bytes part
    cdef int64_t[::1] offs
    cdef int64_t[::1] lens
    cdef bint fast
    cdef SendQueueState sendq
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char*>view.buf
        offs, lens = _packed_ranges_py(offsets, lengths, view.len)  # checked before any is queued
        n = offs.shape[0]
        sendq = <SendQueueState?>self._sendq
        slow = self._closed or self._reference_compat
        # the queue's count and the nonce live in C for the run of small messages, written
        # back before any other message goes through Socket.send and at the end
        append = sendq._queue.append
        hwm = sendq.send_hwm
        held = sendq.held
        fast = False
        for i in range(n):
            if held >= hwm:
                break
            off = offs[i]
            size = lens[i]
            part = PyBytes_FromStringAndSize(<const char*>(base + off), size)
            if not fast:
                # (no nonce of the run wraps)
                fast = not slow and self.nonce_other is None and self.nonce <= UINT64_MAX - <uint64_t>n
                if fast:
                    nonce = self.nonce
            if not fast or size > MAX_CHUNK:
                if fast:
                    _write_back(self, sendq, held, queued, nonce)
                    fast = False
                    queued = 0
                _send_py(self, [part], now)
                held = sendq.held
                taken += 1
                continue
            append(_small_message(part, _message_id(nonce)))
            nonce += 1
            held += 1
            queued += 1
            taken += 1
        if fast:
            _write_back(self, sendq, held, queued, nonce)
            self._now = now
    finally:
        PyBuffer_Release(&view)
    return taken


cdef inline void _write_back(SocketState self, SendQueueState sendq, Py_ssize_t held, Py_ssize_t queued,
                             uint64_t nonce) except *:
    """End a run of :func:`send_packed`: ``queued`` small messages were appended (the queue
    now holds ``held``) and the next nonce is ``nonce``."""
    if queued:
        sendq.held = held
        sendq.pushed += queued
        self.nonce = nonce


def take(SendQueueState sendq not None, double now, Py_ssize_t limit, list out, list ring):
    """``SendQueue.take(now, limit, out, ring)`` (same arguments, return and effects).

    Runs the leading small messages (``push_small``, no fixed peer, not dropped) of a queue
    that is not safe, with a peer connected: each goes to the next peer of ``ring`` in turn as
    one ``bytes`` frame. From the first other message on, ``SendQueue.take`` does the rest."""
    cdef Py_ssize_t n = 0, nbytes = 0, size, nring = len(ring), rr
    cdef uint64_t sid = 0, mid_c = 0
    cdef bytes frame
    cdef object small, msg, peer = None, addr = None, last = None, mid
    cdef SmallMessage sm
    if sendq.safe:  # SafeDealer: its own compiled case
        return take_safe(sendq, now, limit, out, ring)
    if not nring:
        return _take_py(sendq, now, limit, out, ring)
    queue = sendq._queue
    rr = sendq._rr
    popleft = queue.popleft
    while queue and n < limit:
        msg = queue[0]
        if type(msg) is SmallMessage:
            sm = <SmallMessage>msg
            if sm.peer is not None or sm._frames is not None or sm.dropped:
                break
            small = sm.small
            mid_c = sm.mid
        elif type(msg) is OutMessage:
            small = msg.small
            if small is None or msg.peer is not None or msg.frames is not None or msg.dropped:
                break
            mid = msg.message_id
            mid_c = PyLong_AsUnsignedLongLongMask(mid)
        else:
            break
        if type(small) is not bytes:
            break
        if rr >= nring:
            rr = 0
        peer = ring[rr]
        if peer is not last:
            if peer._state is not _CONNECTED:  # (the ring holds connected peers only)
                break
            if last is not None:
                last.sent(now)
            last = peer
            sid = PyLong_AsUnsignedLongLongMask(peer._sid)
            addr = peer._addr
        rr += 1
        size = PyBytes_GET_SIZE(small)
        frame = _small_frame(sid, mid_c, <bytes>small)
        if type(msg) is SmallMessage:
            (<SmallMessage>msg).peer = peer
        else:
            msg.peer = peer
        out.append(_pair(frame, addr))
        nbytes += DATA_HEADER + size
        n += 1
        popleft()
    if last is not None:
        last.sent(now)
    sendq.took(rr, n, nbytes, n)
    if n < limit and queue:
        n += _take_py(sendq, now, limit - n, out, ring)
    return n


cdef inline bint _flat_bytes(object obj):
    """bytes, bytearray, or a 1-D contiguous memoryview of single bytes: a buffer whose
    Python slices are the byte ranges read here (anything else takes the Python code)."""
    cdef Py_buffer* b
    if type(obj) is bytes or type(obj) is bytearray:
        return True
    if type(obj) is not memoryview:
        return False
    b = PyMemoryView_GET_BUFFER(obj)
    return b.itemsize == 1 and b.ndim == 1 and (b.strides == NULL or b.strides[0] == 1)


cdef inline bint _peer_ok(object peer, object addr):
    return (peer is not None and peer._addr == addr and not peer._paths
            and peer._state is _CONNECTED)


@cython.final
cdef class _PeerCache:
    """The peer of the last datagram a batch loop took (most datagrams of a batch come from
    one peer): its session id and address, or ``peer`` None when nothing is cached."""
    cdef object peer
    cdef object addr
    cdef uint64_t sid

    cdef inline object get(self, dict peers, uint64_t sid, object addr, object now):
        """The connected peer of session ``sid`` on its known path ``addr`` (a fresh lookup
        records it heard at ``now`` and caches it), or None."""
        if self.peer is not None and sid == self.sid and addr is self.addr:
            return self.peer
        peer = peers.get(PyLong_FromUnsignedLongLong(sid))
        if not _peer_ok(peer, addr):
            return None
        peer.heard(now)
        self.peer, self.sid, self.addr = peer, sid, addr
        return peer


cdef object _datagram(object buffer, object offsets, object lengths, Py_ssize_t i, Py_ssize_t off,
                      Py_ssize_t length):
    """Datagram ``i`` of a batch, ``buffer[offsets[i] : offsets[i] + lengths[i]]``, sliced as the
    Python twin slices it: with C sums when ``off + length`` cannot wrap, else with the caller's
    own values (Python ints never wrap; numpy's do, in both twins)."""
    if (length > 0 and off > PY_SSIZE_T_MAX - length) or (length < 0 and off < PY_SSIZE_T_MIN - length):
        return buffer[off : offsets[i] + lengths[i]]
    return buffer[off : off + length]


cdef int _receive_rest(object slow, object buffer, object offsets, object lengths, object addrs,
                       Py_ssize_t i, Py_ssize_t total, object now) except -1:
    """Datagrams ``i`` to ``total`` of a batch, one by one through ``slow``
    (``receive_datagram``): once a slow datagram closed the engine or replaced its queue."""
    cdef Py_ssize_t off
    while i < total:
        off = offsets[i]
        slow(buffer[off : off + lengths[i]], addrs[i], now)
        i += 1
    return 0


cdef int64_t _room(object reassembler) except? -2:
    """The largest whole one-frame message the reassembler would complete at once (its
    ``max_message_size`` and incomplete-bytes budgets, less a message's overhead), or -1
    while it holds an incomplete message (a frame might belong to it)."""
    cdef int64_t room
    if len(reassembler):
        return -1
    room = reassembler.max_incomplete_bytes
    cap = reassembler.max_peer_incomplete_bytes
    if cap is not None and <int64_t>cap < room:
        room = cap
    room -= <int64_t>reassembler.incomplete_bytes + OVERHEAD
    return min(room, <int64_t>reassembler.max_message_size)


cdef inline bint _whole_frame(const unsigned char* p, Py_ssize_t length, int64_t room) noexcept:
    """A valid data frame (codec's checks) that is a whole non-empty message of at most
    ``room`` bytes: one part, one chunk."""
    cdef uint32_t size
    if length <= DATA_HEADER or length > MAX_FRAME:
        return False
    size = <uint32_t>(length - DATA_HEADER)
    return (p[0] == 1 and p[1] == 0 and p[18] == 1 and p[19] == 0
            and _be(p + 20, 4) == size and _be(p + 24, 4) == size and _be(p + 28, 2) == size
            and _be(p + 30, 4) == 0 and <int64_t>size <= room)


cdef object _receive_one_py = None


def receive_one(self, data, addr, now):
    """Feed one datagram (Dealer's and Dish's ``receive_datagram``, compiled twin of
    ``Socket._receive_unacked``; same arguments). A whole one-frame message from a connected
    peer on its known path (as in :func:`receive_batch`) is completed here; any other
    datagram goes to ``Socket._receive_unacked``. Never raises for bad input; may queue
    output: flush with :meth:`datagrams_to_send` after calling this, and drain
    :meth:`next_event`."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef int64_t room
    cdef RecvQueueState recvq = <RecvQueueState?>self._recvq
    cdef ReadyQueue ready
    if (self._closed or recvq._dedup is not None or recvq.refuse_when_full
            or type(recvq._ready) is not ReadyQueue or not _flat_bytes(data)):
        return _receive_one_py(self, data, addr, now)
    reassembler = recvq.reassembler
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        room = _room(reassembler)
        if room < 0 or not _whole_frame(p, view.len, room):
            return _receive_one_py(self, data, addr, now)
        peer_sid = PyLong_FromUnsignedLongLong(_be(p + 2, 8))
        peer = self._peers.get(peer_sid)
        if not _peer_ok(peer, addr):
            return _receive_one_py(self, data, addr, now)
        self._now = now
        counters = self._counters
        counters.datagrams_in += 1
        counters.bytes_in += view.len
        peer.heard(now)
        reassembler.note_owner(peer_sid)  # the owner entry add() would make
        reassembler.frames += 1
        reassembler.completed += 1
        ready = <ReadyQueue>recvq._ready
        if ready._count < recvq.recv_hwm:
            ready.push_bytes(p + DATA_HEADER, view.len - DATA_HEADER)
            recvq.completed += 1
        else:
            recvq.dropped_hwm += 1
            self._data_result(_DROPPED, _parse_frame(data))
    finally:
        PyBuffer_Release(&view)


def receive_batch(self, buffer, offsets, lengths, addrs, now):
    """Feed a ``recvmmsg`` batch (Dealer's and Dish's ``receive_datagrams``, compiled twin of
    ``Socket._receive_batch_unacked``): the same as ``receive_datagram`` for each datagram in
    turn (datagram ``i`` is ``buffer[offsets[i] : offsets[i] + lengths[i]]`` from
    ``addrs[i]``; ``now`` in seconds). Never raises for bad input; may queue output: flush
    with :meth:`datagrams_to_send` after calling this, and drain :meth:`next_event`.

    A datagram that is a valid data frame carrying a whole message (one part, one chunk, not
    empty, within ``max_message_size`` and the incomplete-bytes budgets, while the reassembler
    holds no incomplete message) from a connected peer on its known path is completed here,
    as the compiled Reassembler's one-frame case does; any other goes to
    ``receive_datagram``, after the counters summed so far are brought up to date."""
    cdef Py_buffer view
    cdef const unsigned char* base
    cdef const unsigned char* p
    cdef Py_ssize_t i, total, off, length, count = 0, nbytes = 0, whole = 0, completed = 0
    cdef int64_t room = 0, hwm
    cdef uint64_t sid
    cdef bint whole_ok = False, stale = True, noted = False
    cdef uint64_t noted_sid = 0
    cdef object addr, peer, reassembler
    cdef ReadyQueue ready
    cdef _PeerCache cache = _PeerCache.__new__(_PeerCache)
    cdef RecvQueueState recvq = <RecvQueueState?>self._recvq
    if (self._closed or recvq._dedup is not None or recvq.refuse_when_full
            or type(recvq._ready) is not ReadyQueue or not _flat_bytes(buffer)):
        return _receive_py(self, buffer, offsets, lengths, addrs, now)
    total = min(len(offsets), len(lengths), len(addrs))
    self._now = now
    counters = self._counters
    peers = self._peers
    ready = <ReadyQueue>recvq._ready
    hwm = recvq.recv_hwm
    reassembler = recvq.reassembler
    slow = self.receive_datagram
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char*>view.buf
        i = 0
        while i < total:
            if stale:  # (re)read what the reassembler or a slow datagram may have changed
                stale = False
                noted = False
                room = _room(reassembler)
                whole_ok = room >= 0
            off = offsets[i]
            length = lengths[i]
            addr = addrs[i]
            i += 1
            if whole_ok and DATA_HEADER < length <= MAX_FRAME and 0 <= off <= view.len - length:
                p = base + off
                if _whole_frame(p, length, room):
                    # a whole one-frame message: the compiled Reassembler's first case, here
                    sid = _be(p + 2, 8)
                    peer = cache.get(peers, sid, addr, now)
                    if peer is not None:
                        if not noted or sid != noted_sid:  # the owner entry add() would make
                            noted = reassembler.note_owner(PyLong_FromUnsignedLongLong(sid))
                            noted_sid = sid
                        count += 1
                        nbytes += length
                        whole += 1
                        if ready._count < hwm:
                            ready.push_bytes(p + DATA_HEADER, length - DATA_HEADER)
                            completed += 1
                        else:  # recv_hwm: the generic drop, with the frame for its event
                            recvq.dropped_hwm += 1
                            self._data_result(_DROPPED, _parse_frame(_datagram(buffer, offsets, lengths, i - 1, off, length)))
                        continue
            # Socket._receive_batch_unacked's loop body, for any other data frame of a
            # connected peer on its known path (a chunk of a larger message)
            data = _datagram(buffer, offsets, lengths, i - 1, off, length)
            try:
                frame = _parse_frame(data)
            except DecodeError:
                frame = None
            if type(frame) is DataFrame:
                peer = peers.get((<tuple>frame)[0])
                if _peer_ok(peer, addr):
                    peer.heard(now)
                    count += 1
                    nbytes += length
                    stale = True  # the reassembler may hold an incomplete message now
                    evicted = reassembler.evicted
                    try:
                        parts = reassembler.add(frame, now)
                    except DecodeError as exc:  # FrameTooLarge too
                        self._data_result(recvq.push_failed(exc, evicted), frame)
                        continue
                    if reassembler.evicted != evicted:
                        recvq.report_evicted()
                    if parts is None:
                        continue
                    if ready._count < hwm:
                        ready.append(parts)
                        completed += 1
                    else:
                        recvq.dropped_hwm += 1
                        self._data_result(_DROPPED, frame)
                    continue
            _flush(counters, recvq, reassembler, count, nbytes, whole, completed)
            count = nbytes = whole = completed = 0
            cache.peer = None
            stale = True
            slow(data, addr, now)
            if self._closed or recvq.reassembler is not reassembler:
                _receive_rest(slow, buffer, offsets, lengths, addrs, i, total, now)
                return
            hwm = recvq.recv_hwm
        _flush(counters, recvq, reassembler, count, nbytes, whole, completed)
    finally:
        PyBuffer_Release(&view)


cdef inline void _flush(object counters, RecvQueueState recvq, object reassembler, Py_ssize_t count,
                        Py_ssize_t nbytes, Py_ssize_t whole, Py_ssize_t completed) except *:
    """Bring the counters up to date with what the loop summed: ``count`` datagrams of
    ``nbytes`` bytes taken, ``whole`` one-frame messages completed here (the reassembler's
    counters) and ``completed`` messages queued."""
    if count:
        counters.datagrams_in += count
        counters.bytes_in += nbytes
    if whole:
        reassembler.frames += whole
        reassembler.completed += whole
    if completed:
        recvq.completed += completed


from nbmq.codec import parse_frame as _parse_frame
from nbmq.engine.queues import PushResult
from nbmq.codec import ack_hash as _ack_hash
from nbmq.errors import DecodeError
from nbmq.wire import DataFrame

cdef object _DROPPED = PushResult.DROPPED


# SafeDealer: the batch receive with dedup and acks, compiled

cdef object _receive_safe_py = None

cdef enum:
    ACK_FRAME = 18      # an Ack: version, kind, session id, the frame's 8-byte hash
    ACK_KIND = 5        # FrameKind.ACK
    MAX_CTRL = 65536    # connection.MAX_CONTROL_QUEUE


def install_safe(receive_safe_py):
    """Set the function :func:`receive_batch_safe` hands the cases it does not take to
    (``SafeDealer._receive_datagrams_py``, the pure-Python twin; called once by the engine
    module)."""
    global _receive_safe_py
    _receive_safe_py = receive_safe_py


cdef inline bytes _ack_frame(uint64_t sid, uint64_t h):
    """The 18-byte Ack control frame for a data frame of hash ``h`` (as ``_ACK_FRAME.pack``)."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, ACK_FRAME)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    o[0] = 1
    o[1] = ACK_KIND
    _put_be(o + 2, sid, 8)
    _put_be(o + 10, h, 8)
    return out


cdef class _AckRun  # (below, with the ack)


def receive_batch_safe(self, buffer, offsets, lengths, addrs, now):
    """Feed a ``recvmmsg`` batch to a SafeDealer (compiled twin of
    ``SafeDealer._receive_datagrams_py``; same arguments and effects: datagram ``i`` is
    ``buffer[offsets[i] : offsets[i] + lengths[i]]`` from ``addrs[i]``, ``now`` in seconds).
    Never raises for bad input; queues acks and fast resends: flush with
    :meth:`datagrams_to_send`, and drain :meth:`next_event`.

    Taken here without a frame object: a valid data frame that is a whole one-frame message
    (as :func:`receive_batch`) from a connected peer on its known path, of a message not
    delivered within the dedup window, while ``recv_hwm`` is not reached (dedup entry, the
    message queued, the Ack built in C: FNV-1a 64 of the frame); and an 18-byte Ack from such
    a peer (``SendQueue.ack``). Other data frames of such a peer are reassembled as the
    Python twin does; every other datagram goes to ``receive_datagram`` after the counters
    summed so far are brought up to date (tests/engine/test_engine_safe_receive_fast.py)."""
    cdef Py_buffer view
    cdef const unsigned char* base
    cdef const unsigned char* p
    cdef Py_ssize_t i, total, off, length
    cdef Py_ssize_t count = 0, nbytes = 0, whole = 0, completed = 0, acks_out = 0, queued = 0
    cdef Py_ssize_t acks_in = 0
    cdef int64_t room = 0, hwm
    cdef uint64_t sid
    cdef bint whole_ok = False, stale = True, noted = False
    cdef uint64_t noted_sid = 0, mid
    cdef double until_c, now_c, ttl_c
    cdef object addr, peer, key, sent_to = None
    cdef _PeerCache cache = _PeerCache.__new__(_PeerCache)
    cdef _AckRun run = _AckRun.__new__(_AckRun)
    cdef RecvQueueState recvq = <RecvQueueState?>self._recvq
    cdef DedupWindow dedup
    cdef ReadyQueue ready
    cdef uint64_t* hashes = NULL
    if (self._closed or type(recvq._dedup) is not DedupWindow or type(recvq._ready) is not ReadyQueue
            or type((<SendQueueState?>self._sendq)._inflight) is not InflightTable or not _flat_bytes(buffer)):
        return _receive_safe_py(self, buffer, offsets, lengths, addrs, now)
    dedup = <DedupWindow>recvq._dedup
    total = min(len(offsets), len(lengths), len(addrs))
    self._now = now
    now_c = now
    counters = self._counters
    peers = self._peers
    ready = <ReadyQueue>recvq._ready
    ttl_c = recvq.dedup_ttl
    hwm = recvq.recv_hwm
    reassembler = recvq.reassembler
    sendq = self._sendq
    ctrl = self._ctrl
    slow = self.receive_datagram
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char*>view.buf
        hashes = <uint64_t*>PyMem_Malloc(max(total, 1) * sizeof(uint64_t))
        if hashes == NULL:
            raise MemoryError()
        _prepare_batch(dedup, <InflightTable>(<SendQueueState>sendq)._inflight, base, view.len, offsets,
                       lengths, total, hashes)
        i = 0
        while i < total:
            if stale:  # (re)read what the reassembler or a slow datagram may have changed
                stale = False
                noted = False
                room = _room(reassembler)
                whole_ok = room >= 0
            off = offsets[i]
            length = lengths[i]
            addr = addrs[i]
            i += 1
            if (length == ACK_FRAME or DATA_HEADER < length) and 0 <= off <= view.len - length:  # length > 0 first: no wrap
                p = base + off
                if length == ACK_FRAME and p[0] == 1 and p[1] == ACK_KIND:
                    sid = _be(p + 2, 8)
                    peer = cache.get(peers, sid, addr, now)  # (records it heard)
                    if peer is not None:
                        count += 1
                        nbytes += length
                        acks_in += 1
                        _ack(sendq, sid, _be(p + 10, 8), now, ctrl, run)
                        continue
                elif (whole_ok and length <= MAX_FRAME and <int64_t>ready._count < hwm
                        and _whole_frame(p, length, room)):
                    sid = _be(p + 2, 8)
                    peer = cache.get(peers, sid, addr, now)
                    if peer is not None:
                        mid = _be(p + 10, 8)
                        until_c = dedup.find(sid, mid)
                        if not until_c > now_c:  # absent (NaN) or past (a duplicate takes the slow path)
                            if not noted or sid != noted_sid:  # the owner entry add() would make
                                noted = reassembler.note_owner(PyLong_FromUnsignedLongLong(sid))
                                noted_sid = sid
                            count += 1  # (cache.get recorded it heard: now, for this batch)
                            nbytes += length
                            whole += 1
                            ready.push_bytes(p + DATA_HEADER, length - DATA_HEADER)
                            completed += 1
                            dedup.store(sid, mid, now_c + ttl_c)
                            if len(ctrl) < MAX_CTRL:
                                ctrl.append(_pair(_ack_frame(sid, hashes[i - 1]), addr))
                                queued += 1
                            else:
                                counters.control_dropped += 1
                            acks_out += 1
                            if peer is not sent_to:  # (now, for the whole batch)
                                peer.sent(now)
                                sent_to = peer
                            continue
            # the Python twin's loop body for any other data frame (a chunk of a larger
            # message) of a connected peer on its known path
            run.store(sendq)
            data = _datagram(buffer, offsets, lengths, i - 1, off, length)
            try:
                frame = _parse_frame(data)
            except DecodeError:
                frame = None
            if type(frame) is DataFrame:
                sid_o = (<tuple>frame)[0]
                peer = peers.get(sid_o)
                if _peer_ok(peer, addr) and <int64_t>ready._count < hwm:
                    key = (sid_o, (<tuple>frame)[1])
                    sid = PyLong_AsUnsignedLongLongMask(sid_o)
                    mid = PyLong_AsUnsignedLongLongMask(key[1])
                    until_c = dedup.find(sid, mid)
                    if not until_c > now_c:  # absent (NaN) or past
                        peer.heard(now)
                        count += 1
                        nbytes += length
                        stale = True  # the reassembler may hold an incomplete message now
                        evicted = reassembler.evicted
                        try:
                            parts = reassembler.add(frame, now, key)
                        except DecodeError as exc:  # FrameTooLarge too: not acked
                            self._data_result(recvq.push_failed(exc, evicted), frame)
                            continue
                        if reassembler.evicted != evicted:
                            recvq.report_evicted()
                        if parts is not None:
                            ready.append(parts)
                            completed += 1
                            dedup.store(sid, mid, now_c + ttl_c)
                        if len(ctrl) < MAX_CTRL:
                            ctrl.append(_pair(_ack_frame(sid,
                                                         PyLong_AsUnsignedLongLongMask(_ack_hash(data))),
                                              addr))
                            queued += 1
                        else:
                            counters.control_dropped += 1
                        acks_out += 1
                        peer.sent(now)
                        continue
            _flush_safe(self, counters, recvq, reassembler, count, nbytes, whole, completed,
                        acks_out, queued, acks_in)
            count = nbytes = whole = completed = acks_out = queued = acks_in = 0
            cache.peer = None
            stale = True
            slow(data, addr, now)
            if self._closed or recvq.reassembler is not reassembler:
                _receive_rest(slow, buffer, offsets, lengths, addrs, i, total, now)
                return
            hwm = recvq.recv_hwm
        _flush_safe(self, counters, recvq, reassembler, count, nbytes, whole, completed,
                    acks_out, queued, acks_in)
    finally:
        run.store(sendq)  # (also before any slow datagram: see above)
        PyMem_Free(hashes)
        PyBuffer_Release(&view)


cdef void _prepare_batch(DedupWindow dedup, InflightTable inflight, const unsigned char* base,
                         Py_ssize_t size, object offsets, object lengths, Py_ssize_t total,
                         uint64_t* hashes) except *:
    """For every data frame of the batch (at most MAX_FRAME bytes; offsets and lengths checked
    as the loop checks them): start loading its dedup slot (a random access into a table of
    the messages of the last ``dedup_ttl``: the misses overlap instead of stalling the loop
    one by one), and put its Ack's hash (FNV-1a 64 of the whole frame) at ``hashes[i]``,
    four frames at a time (``fnv1a64x4``). Other entries of ``hashes`` are left unset. For
    every Ack: start loading the in-flight slot of the frame it acks (the same random access,
    into the table of a window's frames)."""
    cdef Py_ssize_t i, off, length, j
    cdef const unsigned char* p
    cdef const unsigned char* ps[4]
    cdef Py_ssize_t ns[4]
    cdef Py_ssize_t at[4]
    cdef uint64_t hs[4]
    cdef int lanes = 0
    for i in range(total):
        off = offsets[i]
        length = lengths[i]
        if length == ACK_FRAME and 0 <= off <= size - length:
            p = base + off
            if p[0] == 1 and p[1] == ACK_KIND:
                inflight.prefetch(_be(p + 10, 8))
        elif DATA_HEADER < length <= MAX_FRAME and 0 <= off <= size - length:
            p = base + off
            if p[1] == 0:
                dedup.prefetch(_be(p + 2, 8), _be(p + 10, 8))
                ps[lanes] = p
                ns[lanes] = length
                at[lanes] = i
                lanes += 1
                if lanes == 4:
                    _fnv4(ps, ns, hs)
                    for j in range(4):
                        hashes[at[j]] = hs[j]
                    lanes = 0
    for j in range(lanes):
        hashes[at[j]] = _fnv(ps[j], ns[j], FNV_BASIS)


cdef inline void _flush_safe(object self, object counters, RecvQueueState recvq, object reassembler,
                             Py_ssize_t count, Py_ssize_t nbytes, Py_ssize_t whole,
                             Py_ssize_t completed, Py_ssize_t acks_out, Py_ssize_t queued,
                             Py_ssize_t acks_in) except *:
    """:func:`_flush`, plus the ack counters: ``acks_out`` acked frames (``queued`` of them
    queued, and held as ``Connection._hold_acks`` holds them) and ``acks_in`` Acks taken."""
    _flush(counters, recvq, reassembler, count, nbytes, whole, completed)
    if acks_out:
        counters.acks_out += acks_out
    if acks_in:
        counters.acks_in += acks_in
        counters.control_frames_in += acks_in
    if queued:
        self._ctrl_out += queued
        self._ctrl_bytes += ACK_FRAME * queued
        self._hold_acks(queued)


# SendQueue.ack of a safe queue with congestion control, compiled

from nbmq.engine.congestion import DUPTHRESH as _DUPTHRESH_PY
from nbmq.engine.congestion import RESENDS_PER_ACK as _RESENDS_PER_ACK_PY
from nbmq.engine.congestion import MAX_WINDOW as _MAX_WINDOW_PY
from nbmq.engine.congestion import CSS_GROWTH_DIVISOR as _CSS_GROWTH_DIVISOR_PY
from nbmq.engine.congestion import QDELAY_TARGET as _QDELAY_TARGET_PY

cdef Py_ssize_t DUPTHRESH_C = _DUPTHRESH_PY
cdef Py_ssize_t RESENDS_PER_ACK_C = _RESENDS_PER_ACK_PY
cdef double MAX_WINDOW_C = _MAX_WINDOW_PY
cdef double QDELAY_TARGET_C = _QDELAY_TARGET_PY
cdef double CSS_GROWTH_DIVISOR_C = _CSS_GROWTH_DIVISOR_PY
cdef object _ack_py = SendQueue.ack


def ack(sendq, uint64_t session_id, h, now, out):
    """``SendQueue.ack(session_id, h, now, out)`` (same arguments, effects and result),
    compiled for its common case: a :class:`Flight` (of a small or a sharded message) in
    flight to ``session_id``, sent once,
    under congestion control, ``now`` a float and ``out`` a list (``Window.acked`` /
    ``sample`` / ``end_round`` inlined; a frame the ack shows lost goes to
    ``SendQueue.fast_resend``). Every other case is ``SendQueue.ack`` itself
    (tests/engine/test_engine_safe_receive_fast.py, tests/engine/test_engine_congestion*.py)."""
    cdef _AckRun run
    if type(h) is not int or h < 0 or h > _U64_MAX:
        return _ack_py(sendq, PyLong_FromUnsignedLongLong(session_id), h, now, out)
    run = _AckRun.__new__(_AckRun)
    try:
        return _ack(sendq, session_id, PyLong_AsUnsignedLongLongMask(h), now, out, run)
    finally:
        run.store(sendq)


@cython.final
cdef class _AckRun:
    """The window state the acks of one batch change, kept in C between them (most acks of
    a batch are for one peer's window) and written back by :meth:`store` before any Python
    code could read it (``end_round``, ``reorder_wait``, ``fast_resend``, the Python ack,
    a slow datagram) and at the end of the batch; plus the queue's counters they change."""
    cdef object win           # the Window cached, or None
    cdef TransmissionOrder order  # its transmission order
    cdef object srtt_obj      # its srtt / rttvar as found (None before a sample)
    cdef Py_ssize_t in_flight, round_acked, round_end
    cdef double srtt, rttvar, rto, floor, cwnd, ssthresh, min_rtt, round_min_rtt, increase
    cdef bint sampled         # an ack gave an RTT sample: write srtt, rttvar, rto, backoff
    cdef bint draining        # a drain round is under way: the window is held (Window.acked)
    cdef bint competing       # a queue-filling neighbour holds the queue: delay ends no slow start
    cdef Py_ssize_t acked, released
    cdef object sid_obj       # the last peer session id found a u64 int, and its value
    cdef uint64_t sid

    cdef int load(self, object win) except -1:
        self.win = win
        self.order = <TransmissionOrder?>win.order
        self.in_flight = win.in_flight
        self.round_acked = win.round_acked
        self.round_end = win.round_end
        srtt = win.srtt
        rttvar = win.rttvar
        self.srtt_obj = None if srtt is None or rttvar is None else srtt
        if self.srtt_obj is not None:
            self.srtt = srtt
            self.rttvar = rttvar
        self.rto = win.rto
        self.floor = win.floor
        self.cwnd = win.cwnd
        self.ssthresh = win.ssthresh
        self.min_rtt = win.min_rtt
        self.round_min_rtt = win.round_min_rtt
        self.increase = win.increase
        self.draining = win.drain_cwnd != 0.0
        self.competing = win.competing
        self.sampled = False
        return 0

    cdef int store(self, object sendq) except -1:
        win = self.win
        if win is not None:
            self.win = None
            win.in_flight = self.in_flight
            win.round_acked = self.round_acked
            win.cwnd = self.cwnd
            win.ssthresh = self.ssthresh
            if self.sampled:
                win.min_rtt = self.min_rtt
                win.round_min_rtt = self.round_min_rtt
                win.backoff = 1.0
                win.srtt = self.srtt
                win.rttvar = self.rttvar
                win.rto = self.rto
        if self.acked:
            sendq.acked += self.acked
            self.acked = 0
            sendq.window_opened()
        if self.released:
            sendq.held -= self.released
            self.released = 0
        return 0


cdef object _ack_slow(SendQueueState sendq, uint64_t session_id, uint64_t h, object now, object out,
                      _AckRun run):
    """The Python ``SendQueue.ack`` for a case :func:`_ack` leaves to it, after ``run`` is
    stored (the Python code reads the window and the queue)."""
    run.store(sendq)
    return _ack_py(sendq, PyLong_FromUnsignedLongLong(session_id), PyLong_FromUnsignedLongLong(h), now, out)


cdef object _ack(SendQueueState sendq, uint64_t session_id, uint64_t h, object now, object out,
                 _AckRun run):
    """:func:`ack`, called from C with the batch's ``run`` (its state is written back by
    ``run.store``: the caller stores it before other code reads the window or the queue)."""
    cdef double t, rtt, srtt, rttvar, cwnd, x, reo
    cdef Py_ssize_t size, used, in_flight, tx, limit, otx, resent = 0
    cdef Flight flight
    cdef SmallMessage sm
    cdef TransmissionOrder order
    cdef TxRecord* rec
    cdef InflightTable inflight = <InflightTable?>sendq._inflight
    cdef PyObject* found = inflight.find(h)
    obj = None if found == NULL else <object>found
    if type(obj) is SmallMessage:  # a small message, its own flight
        flight = <Flight>obj
        msg = obj
    elif type(obj) is Flight:
        flight = <Flight>obj
        msg = flight.message
    else:
        msg = None
    if msg is None or type(now) is not float or type(out) is not list:
        return _ack_slow(sendq, session_id, h, now, out, run)
    if type(msg) is SmallMessage:
        sm = <SmallMessage>msg
        peer = sm.peer
    elif type(msg) is OutMessage:  # a sharded message's frame
        sm = None
        peer = msg.peer
    else:
        return _ack_slow(sendq, session_id, h, now, out, run)
    win = flight.win
    if peer is None or win is None or flight.resends != 0 or flight.fast != 0:
        return _ack_slow(sendq, session_id, h, now, out, run)
    sid_obj = peer._sid
    if sid_obj is not run.sid_obj:  # (checked once per peer of the batch)
        if type(sid_obj) is not int or sid_obj < 0 or sid_obj > _U64_MAX:
            return _ack_slow(sendq, session_id, h, now, out, run)
        run.sid_obj = sid_obj
        run.sid = PyLong_AsUnsignedLongLongMask(sid_obj)
    if run.sid != session_id:
        return _ack_slow(sendq, session_id, h, now, out, run)
    if win is not run.win:
        run.store(sendq)
        run.load(win)
    inflight.take(h)
    t = now
    flight.due = -1.0  # marks its resend-queue entries stale
    # Window.acked(len(flight.view), now - flight.sent_at), inlined
    view = flight.view
    size = PyBytes_GET_SIZE(view) if type(view) is bytes else len(view)
    used = run.in_flight
    in_flight = used - size
    run.in_flight = in_flight if in_flight > 0 else 0
    rtt = t - flight.sent_at
    if not rtt > 0.0:  # max(0.0, rtt)
        rtt = 0.0
    if rtt < run.min_rtt:
        run.min_rtt = rtt
    if rtt < run.round_min_rtt:
        run.round_min_rtt = rtt
    if run.srtt_obj is None:
        srtt = rtt
        rttvar = rtt / 2
        run.srtt_obj = True
    else:
        srtt = run.srtt
        rttvar = 0.75 * run.rttvar + 0.25 * abs(srtt - rtt)
        srtt = 0.875 * srtt + 0.125 * rtt
    run.srtt = srtt
    run.rttvar = rttvar
    x = srtt + 4 * rttvar
    run.rto = x if x > run.floor else run.floor
    run.sampled = True
    cwnd = run.cwnd
    if run.draining:
        pass  # a drain round holds the window
    elif cwnd < run.ssthresh and rtt - run.min_rtt > QDELAY_TARGET_C and not run.competing:
        run.ssthresh = cwnd  # a queue is building: slow start is over (HyStart)
    if cwnd < MAX_WINDOW_C and not run.draining:
        if cwnd < run.ssthresh:
            if 2 * used >= cwnd:  # (slow start grows only a window in use)
                cwnd += size if not run.competing else size / CSS_GROWTH_DIVISOR_C
        else:
            cwnd += run.increase * size / cwnd
        run.cwnd = cwnd if cwnd < MAX_WINDOW_C else MAX_WINDOW_C
    flight.win = None
    run.acked += 1  # (sendq.window_opened() at store)
    run.round_acked += 1
    tx = flight.tx
    if tx >= run.round_end:
        run.store(sendq)
        win.end_round(now)
        run.load(win)
    order = run.order
    limit = tx - DUPTHRESH_C
    sent_before = None
    while order.count:  # oldest transmissions first: skip the acked, resend the lost
        rec = &order.ring[order.head]
        otx = rec.tx
        if isinstance(<object>rec.flight, Flight):  # (a SmallMessage too)
            if (<Flight>rec.flight).tx != otx or (<Flight>rec.flight).win is None:
                order.drop_front()
                continue
        elif (<object>rec.flight).tx != otx or (<object>rec.flight).win is None:
            order.drop_front()
            continue
        if otx <= limit:
            other = <object>rec.flight
            run.store(sendq)  # Python code reads the window from here on
            if sent_before is None:  # (SendQueue.ack; Window.reorder_window / reorder_wait inlined)
                reo = <double>win.reo_mult * <double>win.min_rtt / 4
                if reo > srtt:
                    reo = srtt
                x = srtt / 4
                if 2 * rttvar > x:
                    x = 2 * rttvar
                reo = <double>flight.last_sent - reo
                x = t - (srtt + x)
                sent_before = reo if reo > x else x
            if other.last_sent > sent_before:
                break
            order.drop_front()
            if not sendq.fast_resend(other, win, now, out):
                order.push_front(otx, other)  # left to its timer
                break
            resent += 1
            if resent >= RESENDS_PER_ACK_C:
                break  # (SendQueue.ack: the rest on the next acks)
        else:
            break
    if sm is None:  # (OutMessage: the same, on its slots)
        if msg.dropped:  # (SendQueue.ack counts no ack of a dropped message's frame)
            run.acked -= 1
            sendq.window_opened()
            return True
        unacked = msg.unacked - 1
        msg.unacked = unacked
        frames = msg.frames
        if unacked == 0 and frames is not None and msg.sent == len(frames):
            if msg.group is None:  # SendQueue.release_message
                run.released += 1
            else:
                run.store(sendq)
                sendq.release_message(msg)
        return True
    if sm.dropped:
        return True
    sm.unacked -= 1
    if sm.unacked == 0 and sm.sent == 1:  # (its one frame made and sent; group: None)
        run.released += 1  # SendQueue.release_message
    return True


# SendQueue._take_safe under congestion control, compiled (small messages and sharded ones)

from nbmq.engine.congestion import Window as _Window


cdef object _take_safe_py = SendQueue._take_safe
cdef object _frames_of_py = _frames_of


cdef list _frames(object sharded, object session_id):
    """``queues._frames_of(sharded, session_id)``: memoryviews of each frame in
    ``sharded.buffer``, the session id (u64, big-endian, at byte 2) written into each when
    ``session_id`` is not None; anything the C loop does not cover (a read-only or strided
    buffer, a session id not a u64, a frame past the buffer) takes ``_frames_of``."""
    cdef Py_ssize_t k, count, o, size
    cdef Py_buffer* b
    cdef unsigned char* base
    cdef uint64_t sid = 0
    cdef list offsets, lengths, frames
    view = memoryview(sharded.buffer)
    if not _flat_bytes(view):
        return _frames_of_py(sharded, session_id)
    b = PyMemoryView_GET_BUFFER(view)
    if session_id is not None:
        if type(session_id) is not int or session_id < 0 or session_id > _U64_MAX or b.readonly:
            return _frames_of_py(sharded, session_id)
        sid = PyLong_AsUnsignedLongLongMask(session_id)
    base = <unsigned char*>b.buf
    lengths = sharded.lengths.tolist()
    count = len(lengths)
    if count == 1:
        if session_id is not None:
            if b.len < 10:
                return _frames_of_py(sharded, session_id)
            _put_be(base + 2, sid, 8)
        return [view]
    offsets = sharded.offsets.tolist()
    if len(offsets) != count:
        return _frames_of_py(sharded, session_id)
    frames = [None] * count
    for k in range(count):
        o = offsets[k]
        size = lengths[k]
        if o < 0 or size < 10 or o + size > b.len:
            return _frames_of_py(sharded, session_id)
        frames[k] = view[o : o + size]
    if session_id is not None:
        for k in range(count):
            _put_be(base + <Py_ssize_t>offsets[k] + 2, sid, 8)
    return frames


cdef inline bint _one_bytes_frame(object frames):
    """``frames`` is a list of one ``bytes`` frame (a small message's, made by the twin)."""
    if type(frames) is tuple:
        return len(<tuple>frames) == 1 and type((<tuple>frames)[0]) is bytes
    return type(frames) is list and len(<list>frames) == 1 and type((<list>frames)[0]) is bytes


cdef enum:
    HASH_RUN = 8        # small messages whose frames take_safe hashes together


cdef int _fly(list sent, InflightTable inflight, TransmissionOrder order, double due, double now, object win,
              Py_ssize_t tx_end) except -1:
    """Keep the small messages of ``sent`` (sent in that order, the last with transmission
    number ``tx_end - 1``, their frames in ``view``) as their own flights: each frame's
    FNV-1a 64 (four at a time), the flight's fields, its entry in ``inflight`` and its place in
    the window's transmission order; then empty ``sent``."""
    cdef Py_ssize_t n = len(sent), j, k, tx = tx_end - n
    cdef const unsigned char* p[4]
    cdef Py_ssize_t size[4]
    cdef uint64_t hashes[HASH_RUN]
    cdef SmallMessage sm
    for j in range(n):
        view = (<SmallMessage>sent[j]).view
        p[j & 3] = <const unsigned char*>PyBytes_AS_STRING(view)
        size[j & 3] = PyBytes_GET_SIZE(view)
        if j & 3 == 3:
            _fnv4(p, size, hashes + j - 3)
    for k in range(n & ~3, n):
        hashes[k] = _fnv(p[k & 3], size[k & 3], FNV_BASIS)
    for j in range(n):  # (their slots load together, not one miss after the other)
        inflight.prefetch(hashes[j])
    for j in range(n):
        sm = <SmallMessage>sent[j]
        _flight(sm, hashes[j], sm.view, None, due, now, win, tx)
        inflight.store(hashes[j], sm)
        order.push(tx, sm)
        tx += 1
    del sent[:]
    return 0


def take_safe(SendQueueState sendq not None, double now, Py_ssize_t limit, list out, list ring):
    """``SendQueue._take_safe(now, limit, out, ring)`` (same arguments, return and effects).

    Runs the leading messages of a safe queue under congestion control while the peer's
    window has room: small messages (``push_small``: one ``bytes`` part, no peer or frame yet,
    or a frame the twin made for a peer whose window was full, none sent; not dropped) each go
    to the next peer of ``ring`` in turn as one frame; sharded (multi-frame) messages go to
    their fixed peer or the next of ``ring``, frame after frame (each a memoryview into the
    message's buffer, its session id written in), up to the window (at least one frame per
    message when the window has room at its start, as the twin). Each frame
    is kept as a :class:`Flight` (a small message: the message itself) in the peer's
    transmission order. From the first other
    message (dropped, a peer not connected, a full window) on, ``SendQueue._take_safe`` does
    the rest, from the same state."""
    cdef Py_ssize_t n = 0, nbytes = 0, size, nring = len(ring), rr, tx = 0, in_flight = 0
    cdef Py_ssize_t i, j, end, total
    cdef uint64_t sid = 0
    cdef double cwnd = 0.0, due_c = 0.0, room, pace = 0.0
    cdef bint multi, rest, full = False
    cdef const unsigned char* p
    cdef Py_buffer* b
    cdef bytes frame
    cdef Flight flight
    cdef object small, msg, peer, addr = None, last = None, win = None
    cdef TransmissionOrder order = None
    cdef uint64_t h
    cdef object frames, view
    cdef SmallMessage sm
    cdef list sent = []  # small messages sent, not yet kept as flights (see _fly)
    if not sendq.congestion or not nring:
        return _take_safe_py(sendq, now, limit, out, ring)
    queue = sendq._queue
    cdef InflightTable inflight = <InflightTable?>sendq._inflight
    windows = sendq.windows
    ivl = sendq.resend_ivl
    rr = sendq._rr
    popleft = queue.popleft
    py_now = now
    while queue and n < limit:
        msg = queue[0]
        frame = None
        multi = False
        if type(msg) is SmallMessage:
            sm = <SmallMessage>msg
            if sm.dropped:
                break
            if sm._frames is not None:
                # its frame was made, but its window was full (the Python code assigns the
                # peer and encodes before that check): send it as that code would
                if sm.peer is None or sm.sent != 0 or not _one_bytes_frame(sm._frames):
                    break
                peer = sm.peer
                frame = <bytes>sm._frames[0]
            elif sm.peer is not None:
                break
            small = sm.small
        elif type(msg) is OutMessage:
            if sent:  # (its flights come after theirs in the window's order)
                _fly(sent, inflight, order, due_c, now, win, tx)
            small = msg.small
            if small is None:  # sharded: its peer and frames made as the twin makes them
                if msg.dropped or msg.sharded is None:
                    break
                frames = msg.frames
                peer = msg.peer
                if frames is None:
                    if peer is None:
                        if rr >= nring:
                            rr = 0
                        peer = ring[rr]
                        rr += 1
                        msg.peer = peer
                        frames = _frames(msg.sharded, peer._sid)
                    else:
                        frames = _frames(msg.sharded, None)
                    msg.frames = frames
                if type(frames) is not list or peer is None:
                    break
                multi = True
            elif msg.peer is not None or msg.frames is not None or msg.dropped:
                break
        else:
            break
        if not multi:
            if type(small) is not bytes or PyBytes_GET_SIZE(small) > MAX_CHUNK:
                break
            if frame is None:
                if rr >= nring:
                    rr = 0
                peer = ring[rr]
        if peer is not last and last is not None:
            if sent:
                _fly(sent, inflight, order, due_c, now, win, tx)
            win.tx = tx
            win.pace_tokens -= in_flight - win.in_flight  # (Window.pace_allow's bucket)
            win.in_flight = in_flight
            last.sent(py_now)  # (the Python code records it per message: the same value)
            last = None  # (written back: a break below must not write it into another window)
        if peer is not last and peer._state is not _CONNECTED:
            break  # (the Python code drops it, from the same state)
        if peer is not last:
            win = windows.get(peer)
            if win is None:
                win = windows[peer] = _Window(ivl, peer._handshake_rtt)
            if win.in_flight > 0 and win.cwnd - win.in_flight <= 0:
                full = True
                break  # full: the queue blocks (below), from the same state
            pace = win.pace_allow(py_now)
            if pace <= 0:
                break  # paced: the Python code waits, from the same state
            last = peer
            sid = PyLong_AsUnsignedLongLongMask(peer._sid)
            addr = peer._addr
            order = <TransmissionOrder?>win.order
            rto = win.rto
            due_c = py_now + (rto if rto >= ivl else ivl)  # now + max(win.rto, ivl)
            tx = win.tx
            in_flight = win.in_flight
            cwnd = win.cwnd
            if in_flight + pace < cwnd:  # pacing's bytes bound this call as the window does
                cwnd = in_flight + pace
        elif in_flight > 0 and cwnd - in_flight <= 0:
            full = True
            break  # full, as above (win.tx / in_flight written back below)
        if multi:
            # the twin's frame loop: room as it counts it, at least one frame
            i = msg.sent
            total = len(<list>frames)
            end = total if total < i + limit - n else i + limit - n
            room = cwnd - in_flight
            rest = False
            j = i
            while j < end and (room > 0 or j == i):
                view = (<list>frames)[j]
                if type(view) is bytes:
                    p = <const unsigned char*>PyBytes_AS_STRING(view)
                    size = PyBytes_GET_SIZE(view)
                elif _flat_bytes(view) and type(view) is memoryview:
                    b = PyMemoryView_GET_BUFFER(view)
                    p = <const unsigned char*>b.buf
                    size = b.len
                else:
                    rest = True  # (not made by _frames_of: the twin hashes it)
                    break
                out.append(_pair(view, addr))
                nbytes += size
                room -= size
                in_flight += size
                h = _fnv(p, size, FNV_BASIS)
                flight = _flight(Flight.__new__(Flight), h, view, msg, due_c, now, win, tx)
                inflight.store(h, flight)
                order.push(tx, flight)
                tx += 1
                j += 1
            msg.unacked += j - i
            n += j - i
            msg.sent = j
            if j == total:
                popleft()
            if rest:
                break
            continue
        if frame is None:
            rr += 1
            if type(msg) is SmallMessage:
                frame = _small_frame(sid, sm.mid, <bytes>small)
                sm.peer = peer
            else:
                frame = _small_frame(sid, PyLong_AsUnsignedLongLongMask(msg.message_id),
                                     <bytes>small)
                msg.peer = peer
                msg.frames = [frame]
        size = PyBytes_GET_SIZE(frame)
        out.append(_pair(frame, addr))
        nbytes += size
        in_flight += size
        if type(msg) is SmallMessage:  # its own flight, made by _fly (tx: its place in win.order)
            sm.view = frame
            sent.append(sm)
            if len(sent) == HASH_RUN:
                _fly(sent, inflight, order, due_c, now, win, tx + 1)
        else:
            h = _fnv(<const unsigned char*>PyBytes_AS_STRING(frame), size, FNV_BASIS)
            flight = _flight(Flight.__new__(Flight), h, frame, msg, due_c, now, win, tx)
            inflight.store(h, flight)
            order.push(tx, flight)
        tx += 1
        if type(msg) is SmallMessage:
            sm.unacked += 1
            sm.sent = 1
        else:
            msg.unacked += 1
            msg.sent = 1
        n += 1
        popleft()
    if sent:
        _fly(sent, inflight, order, due_c, now, win, tx)
    if last is not None:
        win.tx = tx
        win.pace_tokens -= in_flight - win.in_flight
        win.in_flight = in_flight
        last.sent(py_now)
    if full and not multi and type(msg) is SmallMessage:
        # a small message stopped by its peer's full window, as the Python code leaves it:
        # its peer assigned and its frame made (sent once the window opens), the queue blocked
        if frame is None:
            rr += 1
            sm.peer = peer
            sm.frames = [_small_frame(PyLong_AsUnsignedLongLongMask(peer._sid), sm.mid, <bytes>small)]
        sendq.window_full()
    else:
        full = False
    sendq.took(rr, n, nbytes, 0)
    if n < limit and queue and not full:
        n += _take_safe_py(sendq, now, limit - n, out, ring)
    return n
