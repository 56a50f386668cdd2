# rqueue (seed 004): 3-byte preamble (payload length u16 big-endian, type u8), then the payload
# (twin: _codec_py/rqueue.py).

cdef enum:
    RQ_PREAMBLE = 3
    RQ_SUBSCRIBE = 1
    RQ_REMOVE = 2
    RQ_DEREGISTER = 5
    RQ_NOTIFICATION = 7

cdef object _RQ_EMPTY = memoryview(b"")
cdef object _T_SUBSCRIBE = RqueueType.SUBSCRIBE
cdef object _T_REMOVE = RqueueType.REMOVE
cdef object _T_DEREGISTER = RqueueType.DEREGISTER
cdef object _T_NOTIFICATION = RqueueType.NOTIFICATION


cdef object _topic(object topic):
    view = nbmq_byteview(topic)
    if nbmq_len(view) > 255:
        raise ValueError(f"a topic is at most 255 bytes, got {nbmq_len(view)}")
    return view


cdef bytes _rq_message(int kind, object first, object second, bint with_len):
    """Preamble, then [len(first) as u8 if with_len], first, second."""
    cdef Py_ssize_t n1 = nbmq_len(first) if first is not None else 0
    cdef Py_ssize_t n2 = nbmq_len(second) if second is not None else 0
    cdef Py_ssize_t size = (1 if with_len else 0) + n1 + n2
    if size > 0xFFFF:
        raise ValueError(f"an rqueue payload is at most 65535 bytes, got {size}")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, RQ_PREAMBLE + size)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    nbmq_put_be16(o, <uint16_t>size)
    o[2] = <unsigned char>kind
    o += RQ_PREAMBLE
    if with_len:
        o[0] = <unsigned char>n1
        o += 1
    if n1:
        memcpy(o, nbmq_ptr(first), n1)
    if n2:
        memcpy(o + n1, nbmq_ptr(second), n2)
    return out


def encode_subscribe(topic):
    """A SUBSCRIBE message: preamble then the topic."""
    return _rq_message(RQ_SUBSCRIBE, _topic(topic), None, False)


def encode_remove(topic):
    """A REMOVE message: preamble then the topic."""
    return _rq_message(RQ_REMOVE, _topic(topic), None, False)


def encode_deregister():
    """A DEREGISTER message: the preamble alone."""
    return _rq_message(RQ_DEREGISTER, None, None, False)


def encode_notification(topic, content):
    """A NOTIFICATION: preamble, topic_len u8, topic, content."""
    view = _topic(topic)
    return _rq_message(RQ_NOTIFICATION, view, nbmq_byteview(content), True)


cdef class RqueueDecoder(_StreamBuffer):
    """Incremental rqueue stream decoder: feed bytes, iterate messages."""

    cdef object _max_payload
    cdef int64_t _max

    def __init__(self, max_payload=RQUEUE_SERVER_MAX_PAYLOAD):
        """Set the largest payload_length accepted, bytes."""
        if not 0 <= operator.index(max_payload) <= 0xFFFF:
            raise ValueError("max_payload must be 0..65535")
        self.max_payload = max_payload

    @property
    def max_payload(self):
        """Largest payload_length accepted, bytes."""
        return self._max_payload

    @max_payload.setter
    def max_payload(self, value):
        self._max = _i64(value)
        self._max_payload = value

    cdef object _next(self):
        cdef unsigned char tmp[RQ_PREAMBLE + 1]
        cdef const unsigned char* hp
        cdef Py_ssize_t have, topic_len
        cdef uint16_t size
        cdef uint8_t kind
        if self._error is not None:
            raise self._error
        if self._buffered < RQ_PREAMBLE:
            return None
        start = self._consumed
        have = self._hlen - self._pos
        if have >= RQ_PREAMBLE:
            hp = self._hp + self._pos
        else:
            self._peek(tmp, RQ_PREAMBLE)
            hp = tmp
        size = nbmq_be16(hp)
        kind = hp[2]
        if size > self._max:
            raise self._fail(FrameTooLarge(start, "payload over max_payload"))
        if kind == RQ_SUBSCRIBE:
            message_type = _T_SUBSCRIBE
        elif kind == RQ_REMOVE:
            message_type = _T_REMOVE
        elif kind == RQ_DEREGISTER:
            message_type = _T_DEREGISTER
        elif kind == RQ_NOTIFICATION:
            message_type = _T_NOTIFICATION
        else:
            raise self._fail(DecodeError(start + 2, "unknown type"))
        if (kind == RQ_SUBSCRIBE or kind == RQ_REMOVE) and size > 255:
            raise self._fail(DecodeError(start + 3, "topic over 255 bytes"))
        if kind == RQ_NOTIFICATION and size == 0:
            raise self._fail(DecodeError(start + 3, "notification without topic_len"))
        if self._buffered < RQ_PREAMBLE + <uint64_t>size:
            return None
        if kind == RQ_NOTIFICATION:
            if have >= RQ_PREAMBLE + <Py_ssize_t>size:
                topic_len = hp[RQ_PREAMBLE]
                if 1 + topic_len > size:
                    self._skip(RQ_PREAMBLE + size)
                    raise self._fail(DecodeError(start + 3, "topic_len past the payload"))
                topic = nbmq_subview(self._head, self._pos + RQ_PREAMBLE + 1, topic_len)
                content = self._take_in_head(RQ_PREAMBLE + 1 + topic_len, size - 1 - topic_len)
            else:
                self._skip(RQ_PREAMBLE)
                payload = self._take(size)
                topic_len = nbmq_ptr(payload)[0]
                if 1 + topic_len > size:
                    raise self._fail(DecodeError(start + 3, "topic_len past the payload"))
                topic = nbmq_subview(payload, 1, topic_len)
                content = nbmq_subview(payload, 1 + topic_len, size - 1 - topic_len)
            return nbmq_tuple3(RqueueMessage, message_type, topic, content)
        if kind == RQ_DEREGISTER:
            self._skip(RQ_PREAMBLE + size)
            return nbmq_tuple3(RqueueMessage, message_type, _RQ_EMPTY, _RQ_EMPTY)
        if size == 0:
            self._skip(RQ_PREAMBLE)
            return nbmq_tuple3(RqueueMessage, message_type, _RQ_EMPTY, _RQ_EMPTY)
        if have >= RQ_PREAMBLE + <Py_ssize_t>size:
            payload = self._take_in_head(RQ_PREAMBLE, size)
        else:
            self._skip(RQ_PREAMBLE)
            payload = self._take(size)
        return nbmq_tuple3(RqueueMessage, message_type, payload, _RQ_EMPTY)

    def next_message(self):
        """The next whole message, or None until more bytes are fed."""
        return self._next()

    def __iter__(self):
        return self

    def __next__(self):
        message = self._next()
        if message is None:
            raise StopIteration
        return message
