"""The rqueue client engine, sans-IO (STYLE.md section 3; seed 004).

:class:`RqueueClientConnection` is the client side of an rqueue connection (h11 shape: methods
return bytes to write, ``receive_data`` / ``next_event`` for what the server sends). Events:
:class:`~nbmq.events.Notification` (``topic`` bytes, ``content`` a memoryview into the fed bytes)
and :class:`~nbmq.events.ConnectionClosed`; with our drop-notice extension,
:class:`~nbmq.events.NotificationsDropped`; from a server with access rules,
:class:`~nbmq.events.DeniedByServer`.
"""

from __future__ import annotations

from .. import codec
from ..errors import DecodeError
from ..events import ConnectionClosed, DeniedByServer, Notification, NotificationsDropped
from ..wire import RQUEUE_SERVER_MAX_PAYLOAD, RqueueType
from .receiver import Buffer, StreamReceiver
from .rqueue_access import AUTH_TOPIC, DENIED_TOPIC, decode_denial
from .rqueue_topics import DROP_NOTICE_TOPIC, Topic, decode_drop_count
from .rqueue_topics import topic_bytes as _topic_bytes

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
    ``notifications_received``, ``bytes_received``, ``dropped_by_server`` (the sum of the drop
    notices received, see :meth:`subscribe_drop_notices`), ``denied_by_server`` (denial notices
    received).
    """

    def __init__(self, max_payload: int = RQUEUE_SERVER_MAX_PAYLOAD) -> None:
        super().__init__(codec.RqueueDecoder(max_payload))  # ValueError when out of range
        self.max_payload = max_payload
        self.notifications_received = 0
        self.dropped_by_server = 0
        self.denied_by_server = 0
        self._drop_notices = False

    # send side: each returns the bytes to write; nothing is queued

    def subscribe(self, topic: Topic) -> bytes:
        """A SUBSCRIBE message for ``topic``. Raises ValueError: topic over 255 bytes."""
        return codec.encode_subscribe(_topic_bytes(topic))

    def remove(self, topic: Topic) -> bytes:
        """A REMOVE message for ``topic``. Raises ValueError: topic over 255 bytes."""
        return codec.encode_remove(_topic_bytes(topic))

    def subscribe_drop_notices(self) -> bytes:
        """Opt in to our drop-notice extension: the SUBSCRIBE message for
        :data:`~nbmq.streams.rqueue_topics.DROP_NOTICE_TOPIC`. From now on a NOTIFICATION on that topic
        is reported as :class:`~nbmq.events.NotificationsDropped` (not as a Notification).
        Servers without the extension (the reference, or ours without ``drop_notices``) treat it
        as an ordinary topic and send nothing on it unless someone publishes there."""
        self._drop_notices = True
        return codec.encode_subscribe(DROP_NOTICE_TOPIC)

    def authenticate(self, token: Buffer | str) -> bytes:
        """The message that proves this client's identity to a server with access rules: a
        NOTIFICATION on :data:`~nbmq.streams.rqueue_access.AUTH_TOPIC` carrying ``token``. Send it
        once, first. Our server never forwards it; a reference server would forward it to anyone
        subscribed to that topic, so send tokens only to servers you run with ``--acl``.

        Raises:
            ValueError: the token is empty or does not fit ``max_payload``.
        """
        raw = token.encode("utf-8") if isinstance(token, str) else bytes(token)
        if not raw:
            raise ValueError("the token is empty")
        return self.notify(AUTH_TOPIC, raw)

    def deregister(self) -> bytes:
        """A DEREGISTER message (the server purges all of this client's subscriptions)."""
        return codec.encode_deregister()

    def notify(self, topic: Topic, content: Buffer | str) -> bytes:
        """A NOTIFICATION of ``content`` on ``topic``. ``content`` is any bytes-like object, or a
        ``str`` sent UTF-8 encoded (as topics are).

        Raises:
            ValueError: topic over 255 bytes, or ``1 + len(topic) + len(content)`` over
                ``max_payload`` (the server would close the connection).
            TypeError: ``content`` is neither bytes-like nor ``str``.
        """
        raw = _topic_bytes(topic)
        if isinstance(content, str):
            content = content.encode("utf-8")
        try:
            nbytes = memoryview(content).nbytes
        except TypeError:
            raise TypeError(f"notification content must be bytes-like or str, not {type(content).__name__}") from None
        size = 1 + len(raw) + nbytes
        if size > self.max_payload:
            raise ValueError(f"notification payload of {size} bytes is over max_payload={self.max_payload}")
        return codec.encode_notification(raw, content)

    # receive side

    def next_event(self) -> Notification | NotificationsDropped | DeniedByServer | ConnectionClosed | None:
        """The next :class:`Notification`; :class:`NotificationsDropped` for a drop notice (only
        after :meth:`subscribe_drop_notices`); :class:`DeniedByServer` for a denial notice;
        :class:`ConnectionClosed` once after a clean end of stream; None when more data is needed.

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
            topic = bytes(message[1])
            if self._drop_notices and topic == DROP_NOTICE_TOPIC:
                count = decode_drop_count(message[2])
                if count is not None:
                    self.dropped_by_server += count
                    return NotificationsDropped(count)
            elif topic == DENIED_TOPIC:
                denial = decode_denial(message[2])
                if denial is not None:
                    self.denied_by_server += 1
                    return DeniedByServer(*denial)
            self.notifications_received += 1
            return Notification(topic, message[2])
        return self._end_of_stream("message")
