"""The rqueue client engine, sans-IO (STYLE.md section 3; seed 004).

:class:`RqueueClientConnection` is the client side of an rqueue connection (h11 shape: methods
return bytes to write, ``receive_data`` / ``next_event`` for what the server sends). Events:
:class:`~nbmq.events.Notification` (``topic`` bytes, ``content`` a memoryview into the fed bytes)
and :class:`~nbmq.events.ConnectionClosed`.
"""

from __future__ import annotations

from . import codec
from .errors import DecodeError
from .events import ConnectionClosed, Notification
from .rqueue_topic import Topic
from .rqueue_topic import topic_bytes as _topic_bytes
from .stream_receiver import Buffer, StreamReceiver
from .wire import RQUEUE_SERVER_MAX_PAYLOAD, RqueueType

__all__ = ["RqueueClientConnection"]

_NOTIFICATION = int(RqueueType.NOTIFICATION)


class RqueueClientConnection(StreamReceiver):
    """The client side of an rqueue connection.

    Args:
        max_payload: the largest payload (preamble excluded) sent or accepted, bytes. Default
            2048, the seed's server cap; at most 65535.

    Raises:
        ValueError: ``max_payload`` out of range.

    Topics are ``bytes``-like or ``str`` (UTF-8), at most 255 bytes. Counters:
    ``notifications_received``, ``bytes_received``.
    """

    def __init__(self, max_payload: int = RQUEUE_SERVER_MAX_PAYLOAD) -> None:
        super().__init__(codec.RqueueDecoder(max_payload))  # ValueError when out of range
        self.max_payload = max_payload
        self.notifications_received = 0

    # send side: each returns the bytes to write; nothing is queued

    def subscribe(self, topic: Topic) -> bytes:
        """A SUBSCRIBE message for ``topic``. Raises ValueError: topic over 255 bytes."""
        return codec.encode_subscribe(_topic_bytes(topic))

    def remove(self, topic: Topic) -> bytes:
        """A REMOVE message for ``topic``. Raises ValueError: topic over 255 bytes."""
        return codec.encode_remove(_topic_bytes(topic))

    def deregister(self) -> bytes:
        """A DEREGISTER message (the server purges all of this client's subscriptions)."""
        return codec.encode_deregister()

    def notify(self, topic: Topic, content: Buffer) -> bytes:
        """A NOTIFICATION of ``content`` on ``topic``.

        Raises:
            ValueError: topic over 255 bytes, or ``1 + len(topic) + len(content)`` over
                ``max_payload`` (the server would close the connection).
        """
        raw = _topic_bytes(topic)
        size = 1 + len(raw) + memoryview(content).nbytes
        if size > self.max_payload:
            raise ValueError(f"notification payload of {size} bytes is over max_payload={self.max_payload}")
        return codec.encode_notification(raw, content)

    # receive side

    def next_event(self) -> Notification | ConnectionClosed | None:
        """The next :class:`Notification`; :class:`ConnectionClosed` once after a clean end of
        stream; None when more data is needed.

        Raises:
            ProtocolError: undecodable bytes, a payload over ``max_payload``, a message type the
                server never sends (anything but NOTIFICATION), or a stream cut inside a message.
                The connection is then unusable; every later receive call raises it again.
        """
        if self._error is not None:
            raise self._error
        try:
            message = self._decoder.next_message()
        except DecodeError as exc:
            raise self._fail(f"bad message from server: {exc}", exc) from exc
        if message is not None:
            if message[0] != _NOTIFICATION:
                raise self._fail(f"unexpected message type {int(message[0])} from server")
            self.notifications_received += 1
            return Notification(bytes(message[1]), message[2])
        return self._end_of_stream("message")
