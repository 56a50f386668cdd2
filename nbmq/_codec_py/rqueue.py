"""rqueue (seed 004): a 3-byte preamble (payload length u16 big-endian, type u8), then the
payload. SUBSCRIBE (1) and REMOVE (2) carry a topic; DEREGISTER (5) carries nothing;
NOTIFICATION (7) carries topic_len u8, the topic, then the content.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterator

from ..errors import DecodeError, FrameTooLarge
from ..wire import (
    RQUEUE_MAX_PAYLOAD,
    RQUEUE_PREAMBLE_SIZE,
    RQUEUE_SERVER_MAX_PAYLOAD,
    RqueueMessage,
    RqueueType,
)
from .frames import Buffer
from .stream import StreamBuffer

PREAMBLE = struct.Struct(">HB")
_TYPES = {int(t): t for t in RqueueType}
_EMPTY = memoryview(b"")


def _topic(topic: Buffer) -> memoryview:
    view = memoryview(topic).cast("B")
    if len(view) > 255:
        raise ValueError(f"a topic is at most 255 bytes, got {len(view)}")
    return view


def _message(kind: RqueueType, payload: bytes) -> bytes:
    if len(payload) > RQUEUE_MAX_PAYLOAD:
        raise ValueError(f"an rqueue payload is at most {RQUEUE_MAX_PAYLOAD} bytes, got {len(payload)}")
    return PREAMBLE.pack(len(payload), kind) + payload


def encode_subscribe(topic: Buffer) -> bytes:
    """A SUBSCRIBE message: preamble then the topic.

    Raises:
        ValueError: the topic is over 255 bytes.
    """
    return _message(RqueueType.SUBSCRIBE, _topic(topic).tobytes())


def encode_remove(topic: Buffer) -> bytes:
    """A REMOVE message: preamble then the topic.

    Raises:
        ValueError: the topic is over 255 bytes.
    """
    return _message(RqueueType.REMOVE, _topic(topic).tobytes())


def encode_deregister() -> bytes:
    """A DEREGISTER message: the preamble alone, ``00 00 05``."""
    return _message(RqueueType.DEREGISTER, b"")


def encode_notification(topic: Buffer, content: Buffer) -> bytes:
    """A NOTIFICATION: preamble, topic_len u8, topic, content.

    Raises:
        ValueError: the topic is over 255 bytes, or 1 + topic + content is over 65535 bytes.
    """
    view = _topic(topic)
    return _message(
        RqueueType.NOTIFICATION,
        bytes((len(view),)) + view.tobytes() + memoryview(content).cast("B").tobytes(),
    )


class RqueueDecoder(StreamBuffer):
    """Incremental rqueue stream decoder: ``feed`` bytes, iterate messages.

    Args:
        max_payload: largest payload_length accepted, bytes (default 2048, the seed's server
            cap; at most 65535).

    Raises:
        ValueError: ``max_payload`` out of range.

    Iterating yields :class:`~nbmq.wire.RqueueMessage`; topic and content are views into the
    fed object when the message arrived in one feed (do not modify fed objects afterwards),
    else into a buffer of its own. After a :class:`~nbmq.errors.DecodeError` the stream is
    unusable and every later call raises it again; messages before it were all yielded.
    A DEREGISTER's payload, if any, is ignored.
    """

    def __init__(self, max_payload: int = RQUEUE_SERVER_MAX_PAYLOAD) -> None:
        if not 0 <= operator.index(max_payload) <= RQUEUE_MAX_PAYLOAD:
            raise ValueError("max_payload must be 0..65535")
        self.max_payload = max_payload
        super().__init__()

    def next_message(self) -> RqueueMessage | None:
        """The next whole message, or None until more bytes are fed.

        Raises:
            FrameTooLarge: payload_length over ``max_payload`` (offset: the preamble's position
                in the stream).
            DecodeError: unknown type (offset of the type byte); a SUBSCRIBE or REMOVE topic
                over 255 bytes (offset of the payload); a NOTIFICATION with no topic_len or a
                topic_len past the payload (offset of topic_len).
        """
        if self._error is not None:
            raise self._error
        if self._buffered < RQUEUE_PREAMBLE_SIZE:
            return None
        start = self._consumed
        size, kind = PREAMBLE.unpack_from(self._peek(RQUEUE_PREAMBLE_SIZE))
        if size > self.max_payload:
            raise self._fail(FrameTooLarge(start, "payload over max_payload"))
        message_type = _TYPES.get(kind)
        if message_type is None:
            raise self._fail(DecodeError(start + 2, "unknown type"))
        if message_type in (RqueueType.SUBSCRIBE, RqueueType.REMOVE) and size > 255:
            raise self._fail(DecodeError(start + 3, "topic over 255 bytes"))
        if message_type == RqueueType.NOTIFICATION and size == 0:
            raise self._fail(DecodeError(start + 3, "notification without topic_len"))
        if self._buffered < RQUEUE_PREAMBLE_SIZE + size:
            return None
        self._take(RQUEUE_PREAMBLE_SIZE)
        payload = self._take(size) if size else _EMPTY
        if message_type == RqueueType.NOTIFICATION:
            topic_len = payload[0]
            if 1 + topic_len > size:
                raise self._fail(DecodeError(start + 3, "topic_len past the payload"))
            return RqueueMessage(message_type, payload[1 : 1 + topic_len], payload[1 + topic_len :])
        if message_type == RqueueType.DEREGISTER:
            return RqueueMessage(message_type, _EMPTY, _EMPTY)
        return RqueueMessage(message_type, payload, _EMPTY)

    def __iter__(self) -> Iterator[RqueueMessage]:
        return self

    def __next__(self) -> RqueueMessage:
        message = self.next_message()
        if message is None:
            raise StopIteration
        return message
