"""The rqueue broker engine, sans-IO (STYLE.md section 3; seed 004).

:class:`RqueueBroker` is the server side, one engine for all clients (aioquic's ``H3Connection``
layering: the driver hands it connection objects and bytes, and pulls ``data_to_send()``)::

    broker = RqueueBroker()
    broker.connection_made(conn)
    broker.receive_data(conn, data)
    for c, out in broker.data_to_send(): c.write(out)          # always flush after each call
    for c in broker.connections_to_close(): c.close()
    while (event := broker.next_event()) is not None: log(event)

Where we differ from the reference server: REMOVE is implemented; a protocol error closes only
the offending client; a client whose outgoing buffer is full is handled by an explicit
slow-consumer policy (see :meth:`RqueueBroker.pause_writing`); with
:class:`~nbmq.streams.rqueue_access.AccessRules`, who may publish and subscribe where.

Events (in :mod:`nbmq.events`, each with the driver's ``conn``): :class:`ClientConnected`,
:class:`Subscribed`, :class:`Removed`, :class:`Deregistered`, :class:`SlowConsumer`,
:class:`ClientError`, :class:`ClientGone`; with access rules, :class:`Authenticated` and
:class:`Denied`.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable
from typing import Any

from .. import codec
from ..errors import DecodeError, ProtocolError
from ..events import (
    Authenticated,
    ClientConnected,
    ClientError,
    ClientGone,
    Denied,
    Deregistered,
    Event,
    Removed,
    SlowConsumer,
    Subscribed,
)
from ..wire import RQUEUE_MAX_PAYLOAD, RQUEUE_SERVER_MAX_PAYLOAD, RqueueType
from .receiver import Buffer
from .rqueue_access import AUTH_TOPIC, DENIED_TOPIC, AccessRules, Grant, encode_denial
from .rqueue_topics import DROP_NOTICE_TOPIC, Topic, encode_drop_count
from .rqueue_topics import topic_bytes as _topic_bytes

__all__ = ["RqueueBroker", "SLOW_CONSUMER_POLICIES"]

_SUBSCRIBE = int(RqueueType.SUBSCRIBE)
_REMOVE = int(RqueueType.REMOVE)
_DEREGISTER = int(RqueueType.DEREGISTER)
_NOTIFICATION = int(RqueueType.NOTIFICATION)
_PREAMBLE = struct.Struct(">HB")
SLOW_CONSUMER_POLICIES = ("drop", "disconnect")


class _Client:
    __slots__ = (
        "conn",
        "decoder",
        "topics",
        "out",
        "paused",
        "dead",
        "dropped",
        "delivered",
        "gap",
        "wants_notices",
        "identity",
        "grant",
    )

    def __init__(self, conn: Hashable, max_payload: int, identity: str | None, grant: Grant | None) -> None:
        self.conn = conn
        self.decoder = codec.RqueueDecoder(max_payload)
        self.topics: set[bytes] = set()
        self.out: list[bytes] = []
        self.paused = False
        self.dead = False
        self.dropped = 0
        self.delivered = 0
        self.gap = 0  # dropped since it was last paused: the next drop notice's count
        self.wants_notices = False  # subscribed to DROP_NOTICE_TOPIC (with the extension on)
        self.identity = identity
        self.grant = grant  # None: no access rules, everything allowed


class RqueueBroker:
    """The rqueue server's engine: subscriptions, fan-out and protocol checks for every client.

    Args:
        max_payload: the largest payload accepted from a client, bytes (default 2048, the seed's
            cap; at most 65535). A larger one is a protocol error for that client.
        slow_consumer: what happens to a client while the driver reports its outgoing buffer full
            (:meth:`pause_writing`): ``"drop"`` (default) drops its notifications and counts
            them until :meth:`resume_writing`, like a ZeroMQ PUB socket at its high-water mark;
            ``"disconnect"`` closes it, like Redis' ``client-output-buffer-limit pubsub``.
        drop_notices: enable our drop-notice extension (default off: the broker then behaves as
            seed 004 describes). A client that subscribes to
            :data:`~nbmq.streams.rqueue_topics.DROP_NOTICE_TOPIC` (``$nbmq/dropped``) gets, when its
            buffer drains after drops under "drop", one NOTIFICATION on that topic whose content
            is the number of notifications it missed (u64 big-endian), placed in its stream
            where the gap is. Notifications published on that topic are never forwarded
            (counted as ``unrouted``), so nobody can forge one.
        access: :class:`~nbmq.streams.rqueue_access.AccessRules` (default None: every client may
            subscribe to and publish on every topic, as in seed 004). With rules, a SUBSCRIBE or
            NOTIFICATION outside the client's grant is not applied, is counted (``denied``),
            emits :class:`Denied`, and the client gets a denial notice (a NOTIFICATION on
            :data:`~nbmq.streams.rqueue_access.DENIED_TOPIC`). A token (a NOTIFICATION on
            :data:`~nbmq.streams.rqueue_access.AUTH_TOPIC`) proves an identity once; an unknown
            token, or a second one, closes the client (``auth_failures``). Publishes on either
            reserved topic are never forwarded, rules or not.

    Raises:
        ValueError: an option out of range.

    Connections (``conn``) are any hashable objects chosen by the driver. Topics match exactly,
    as in the reference. A notification goes to every client subscribed to its topic, the
    publisher included when it is subscribed, in the order the broker received them.

    Fan-out is batched: consecutive notifications on one topic within one ``receive_data`` call
    are encoded once into one bytes object shared by every subscriber, and
    :meth:`data_to_send` gives each client its whole share as one bytes object.

    Counters (ints, read-only by contract; see :meth:`stats`).
    """

    def __init__(
        self,
        max_payload: int = RQUEUE_SERVER_MAX_PAYLOAD,
        slow_consumer: str = "drop",
        drop_notices: bool = False,
        access: AccessRules | None = None,
    ) -> None:
        if not 0 <= max_payload <= RQUEUE_MAX_PAYLOAD:
            raise ValueError("max_payload must be 0..65535")
        if slow_consumer not in SLOW_CONSUMER_POLICIES:
            raise ValueError(f"slow_consumer must be one of {SLOW_CONSUMER_POLICIES}")
        self.max_payload = max_payload
        self.slow_consumer = slow_consumer
        self.drop_notices = drop_notices
        self.access = access
        self._clients: dict[Hashable, _Client] = {}
        self._topics: dict[bytes, dict[_Client, None]] = {}  # ordered sets: deterministic fan-out
        self._dirty: dict[_Client, None] = {}
        self._to_close: dict[Hashable, None] = {}
        self._events: list[Event] = []
        self._event_pos = 0
        self.connections = 0  # accepted since start
        self.notifications_in = 0  # notifications received from clients
        self.unrouted = 0  # notifications on a topic with no subscriber
        self.delivered = 0  # notifications queued to subscribers (one per subscriber)
        self.dropped = 0  # notifications dropped for paused (slow) subscribers
        self.bytes_in = 0
        self.bytes_out = 0  # bytes handed out by data_to_send
        self.protocol_errors = 0
        self.slow_consumers = 0  # pause_writing calls
        self.notices_sent = 0  # drop notices queued (extension)
        self.timeouts = 0  # clients the driver closed for a timeout (disconnect())
        self.denied = 0  # SUBSCRIBEs and NOTIFICATIONs refused by the access rules
        self.authenticated = 0  # clients that proved an identity (token or certificate)
        self.auth_failures = 0  # unknown or repeated tokens (the client is closed)

    # -- connection lifecycle -----------------------------------------------------------------

    def connection_made(self, conn: Hashable, certificate: str | None = None) -> None:
        """A client connected. Emits :class:`ClientConnected`, then :class:`Authenticated` when
        the access rules know its certificate.

        Args:
            conn: the driver's connection object (hashable).
            certificate: the subject commonName of the client's verified TLS certificate, or None.

        Raises:
            ValueError: ``conn`` is already known.
        """
        if conn in self._clients:
            raise ValueError("connection already known")
        access = self.access
        identity = access.identify_certificate(certificate) if access is not None else None
        grant = access.grant(identity) if access is not None else None
        self._clients[conn] = _Client(conn, self.max_payload, identity, grant)
        self.connections += 1
        self._events.append(ClientConnected(conn))
        if identity is not None:
            self.authenticated += 1
            self._events.append(Authenticated(conn, identity))

    def identity(self, conn: Hashable) -> str | None:
        """The identity ``conn`` proved (None: none, no access rules, or unknown connection)."""
        client = self._clients.get(conn)
        return client.identity if client is not None else None

    def connection_lost(self, conn: Hashable) -> None:
        """The client's connection ended. Purges its subscriptions and output; emits
        :class:`ClientGone` unless already reported. Unknown connections are ignored."""
        client = self._clients.pop(conn, None)
        if client is None:
            return
        self._to_close.pop(conn, None)
        if not client.dead:
            self._kill(client, "lost")
        self._dirty.pop(client, None)

    def disconnect(self, conn: Hashable, reason: str) -> None:
        """The driver closes ``conn`` for a reason of its own (e.g. ``"read timeout"``, ``"idle
        timeout"``): purges it, emits :class:`ClientGone` with ``reason`` and lists it in
        :meth:`connections_to_close`. Counted in ``timeouts``. Unknown or dead connections are
        ignored."""
        client = self._clients.get(conn)
        if client is None or client.dead:
            return
        self.timeouts += 1
        self._kill(client, reason)
        self._to_close[conn] = None

    def buffered(self, conn: Hashable) -> int:
        """Bytes of an unfinished message held for ``conn`` (0 when none, or unknown): the
        driver's cue for a read timeout on a started message."""
        client = self._clients.get(conn)
        return int(client.decoder.buffered) if client is not None and not client.dead else 0

    def connections_to_close(self) -> list[Any]:
        """Connections the driver must close (protocol errors, end of stream, slow consumers
        under the "disconnect" policy). Each is listed once; the list is cleared by this call.
        Call :meth:`connection_lost` when the close completes."""
        if not self._to_close:
            return []
        out = list(self._to_close)
        self._to_close.clear()
        return out

    # -- flow control from the driver ---------------------------------------------------------

    def pause_writing(self, conn: Hashable) -> None:
        """The driver says ``conn``'s outgoing buffer is at its bound (asyncio's
        ``Protocol.pause_writing``). Emits :class:`SlowConsumer`. Under "drop", notifications for
        it are dropped and counted (``dropped``) until :meth:`resume_writing`; under
        "disconnect", it is purged and listed for closing."""
        client = self._clients.get(conn)
        if client is None or client.dead or client.paused:
            return
        client.paused = True
        self.slow_consumers += 1
        self._events.append(SlowConsumer(conn, self.slow_consumer))
        if self.slow_consumer == "disconnect":
            self._kill(client, "slow consumer")
            self._to_close[conn] = None

    def resume_writing(self, conn: Hashable) -> None:
        """The driver says ``conn``'s outgoing buffer drained below its low-water mark. With the
        drop-notice extension on, queues the notice of the notifications ``conn`` missed (call
        :meth:`data_to_send`)."""
        client = self._clients.get(conn)
        if client is None:
            return
        client.paused = False
        gap, client.gap = client.gap, 0
        if gap and client.wants_notices and not client.dead:
            client.out.append(codec.encode_notification(DROP_NOTICE_TOPIC, encode_drop_count(gap)))
            self._dirty[client] = None
            self.notices_sent += 1

    # -- data ---------------------------------------------------------------------------------

    def receive_data(self, conn: Hashable, data: Buffer) -> None:
        """Feed bytes read from ``conn``; ``b""`` means it ended its stream (treated as gone:
        purged and listed for closing). Handles every whole message in the bytes: subscriptions
        change and notifications are queued to their subscribers. The decoder keeps views of
        bytes of an unfinished message: do not modify ``data`` afterwards.

        Queues output: call :meth:`data_to_send`, :meth:`connections_to_close` and drain
        :meth:`next_event` afterwards. A client that breaks the protocol gets a
        :class:`ClientError`; its messages before the fault are still handled. Never raises
        for bad client input. Data from a connection already failed or unknown is ignored.
        """
        client = self._clients.get(conn)
        if client is None or client.dead:
            return
        size = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        if not size:
            if client.decoder.buffered:
                self._protocol_error(client, ProtocolError("stream ended inside a message"))
            else:
                self._kill(client, "eof")
                self._to_close[conn] = None
            return
        self.bytes_in += size
        decoder = client.decoder
        topics = self._topics
        run_topic: bytes | None = None  # consecutive notifications on one topic form a run
        run_subs: dict[_Client, None] | None = None
        run: list[Any] = []
        run_count = 0
        header = b""  # preamble + topic_len + topic of the last routed notification
        header_len = -1  # its content length
        checked = self.access is not None
        run_special = False  # a reserved topic, or a topic the client may not publish on
        notifications = unrouted = 0
        try:
            decoder.feed(data)
            message = decoder.next_message()
            while message is not None:
                kind, topic, content = message
                if kind == _NOTIFICATION:
                    notifications += 1
                    if run_topic is None or topic != run_topic:
                        if run_count:
                            self._fan_out(run_subs, run, run_count)
                            run = []
                            run_count = 0
                        run_topic = bytes(topic)
                        run_subs = topics.get(run_topic)
                        header_len = -1
                        run_special = run_topic in (AUTH_TOPIC, DENIED_TOPIC) or (
                            checked and not client.grant.may_publish(run_topic)  # type: ignore[union-attr]
                        )
                    if run_special:
                        if run_topic == AUTH_TOPIC and checked:
                            if not self._authenticate(client, content):
                                return
                        elif run_topic in (AUTH_TOPIC, DENIED_TOPIC):  # reserved: never forwarded
                            unrouted += 1
                        else:
                            self._deny(client, _NOTIFICATION, run_topic)
                    elif run_subs:
                        if len(content) != header_len:
                            header_len = len(content)
                            header = (
                                _PREAMBLE.pack(1 + len(run_topic) + header_len, _NOTIFICATION)
                                + bytes((len(run_topic),))
                                + run_topic
                            )
                        run.append(header)
                        run.append(content)
                        run_count += 1
                    else:
                        unrouted += 1
                else:
                    if run_count:
                        self._fan_out(run_subs, run, run_count)
                        run = []
                        run_count = 0
                    run_topic = None
                    self._control(client, kind, topic)
                message = decoder.next_message()
        except DecodeError as exc:
            if run_count:
                self._fan_out(run_subs, run, run_count)
            error = ProtocolError(f"bad message: {exc}")
            error.__cause__ = exc
            self._protocol_error(client, error)
            return
        finally:
            self.notifications_in += notifications
            self.unrouted += unrouted
        if run_count:
            self._fan_out(run_subs, run, run_count)

    def _fan_out(self, subs: dict[_Client, None] | None, run: list[Any], count: int) -> None:
        if not subs:
            return
        shared = b"".join(run)  # encoded once, shared by every subscriber
        dirty = self._dirty
        for sub in subs:
            if sub.paused:
                sub.dropped += count
                sub.gap += count
                self.dropped += count
                continue
            sub.out.append(shared)
            sub.delivered += count
            self.delivered += count
            dirty[sub] = None

    def _authenticate(self, client: _Client, token: memoryview) -> bool:
        """A token on AUTH_TOPIC: True when the client may go on."""
        access = self.access
        assert access is not None
        identity = access.identify_token(token) if client.identity is None else None
        if identity is None:  # unknown, or a second identity: refuse it outright
            self.auth_failures += 1
            self._kill(client, "authentication failed")
            self._to_close[client.conn] = None
            return False
        client.identity = identity
        client.grant = access.grant(identity)
        self.authenticated += 1
        self._events.append(Authenticated(client.conn, identity))
        return True

    def _deny(self, client: _Client, kind: int, topic: bytes) -> None:
        self.denied += 1
        self._events.append(Denied(client.conn, kind, topic, client.identity))
        client.out.append(codec.encode_notification(DENIED_TOPIC, encode_denial(kind, topic)))
        self._dirty[client] = None

    def _control(self, client: _Client, kind: int, topic: memoryview) -> None:
        conn = client.conn
        if kind == _SUBSCRIBE:
            topic_b = bytes(topic)
            grant = client.grant
            if grant is not None and not grant.may_subscribe(topic_b) and topic_b != DROP_NOTICE_TOPIC:
                self._deny(client, _SUBSCRIBE, topic_b)
                return
            if self.drop_notices and topic_b == DROP_NOTICE_TOPIC:
                client.topics.add(topic_b)  # an opt-in, not a route: no publisher reaches it
                client.wants_notices = True
            elif topic_b not in client.topics:
                client.topics.add(topic_b)
                self._topics.setdefault(topic_b, {})[client] = None
            self._events.append(Subscribed(conn, topic_b))
        elif kind == _REMOVE:
            topic_b = bytes(topic)
            existed = topic_b in client.topics
            if existed:
                client.topics.discard(topic_b)
                self._unsubscribe(client, topic_b)
                if topic_b == DROP_NOTICE_TOPIC:
                    client.wants_notices = False
            self._events.append(Removed(conn, topic_b, existed))
        elif kind == _DEREGISTER:
            count = len(client.topics)
            self._purge(client)
            self._events.append(Deregistered(conn, count))

    def _unsubscribe(self, client: _Client, topic: bytes) -> None:
        subs = self._topics.get(topic)
        if subs is not None:
            subs.pop(client, None)
            if not subs:
                del self._topics[topic]

    def _purge(self, client: _Client) -> None:
        for topic in client.topics:
            self._unsubscribe(client, topic)
        client.topics.clear()
        client.wants_notices = False

    def _kill(self, client: _Client, reason: str) -> None:
        client.dead = True
        self._purge(client)
        client.out.clear()
        self._dirty.pop(client, None)
        self._events.append(ClientGone(client.conn, reason))

    def _protocol_error(self, client: _Client, error: ProtocolError) -> None:
        self.protocol_errors += 1
        self._events.append(ClientError(client.conn, error))
        self._kill(client, "protocol error")
        self._to_close[client.conn] = None

    def data_to_send(self) -> list[tuple[Any, bytes]]:
        """Everything queued for clients since the last call: at most one ``(conn, bytes)`` per
        connection, in first-queued order. The bytes are owned (often one object shared by
        several connections: do not modify). Clears the queue."""
        dirty = self._dirty
        if not dirty:
            return []
        out = []
        total = 0
        for client in dirty:
            chunks = client.out
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            client.out = []
            total += len(data)
            out.append((client.conn, data))
        dirty.clear()
        self.bytes_out += total
        return out

    def next_event(self) -> Event | None:
        """The next broker event (:class:`ClientConnected`, :class:`Subscribed`,
        :class:`Removed`, :class:`Deregistered`, :class:`SlowConsumer`, :class:`ClientError`,
        :class:`ClientGone`), or None."""
        events = self._events
        if self._event_pos < len(events):
            event = events[self._event_pos]
            self._event_pos += 1
            if self._event_pos == len(events):
                events.clear()
                self._event_pos = 0
            return event
        return None

    # -- introspection ------------------------------------------------------------------------

    def subscriptions(self, conn: Hashable) -> frozenset[bytes]:
        """The topics ``conn`` is subscribed to (empty for unknown connections)."""
        client = self._clients.get(conn)
        return frozenset(client.topics) if client is not None else frozenset()

    def subscribers(self, topic: Topic) -> list[Any]:
        """The connections subscribed to ``topic``, in subscription order."""
        return [c.conn for c in self._topics.get(_topic_bytes(topic), ())]

    def dropped_for(self, conn: Hashable) -> int:
        """Notifications dropped for ``conn`` because it was slow (0 for unknown)."""
        client = self._clients.get(conn)
        return client.dropped if client is not None else 0

    def stats(self) -> dict[str, int]:
        """Counters as a dict: clients (now), topics (now), subscriptions (now), connections,
        notifications_in, unrouted, delivered, dropped, bytes_in, bytes_out, protocol_errors,
        slow_consumers, notices_sent, timeouts, denied, authenticated, auth_failures."""
        return {
            "clients": len(self._clients),
            "topics": len(self._topics),
            "subscriptions": sum(len(s) for s in self._topics.values()),
            "connections": self.connections,
            "notifications_in": self.notifications_in,
            "unrouted": self.unrouted,
            "delivered": self.delivered,
            "dropped": self.dropped,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "protocol_errors": self.protocol_errors,
            "slow_consumers": self.slow_consumers,
            "notices_sent": self.notices_sent,
            "timeouts": self.timeouts,
            "denied": self.denied,
            "authenticated": self.authenticated,
            "auth_failures": self.auth_failures,
        }
