"""rqueue engines: a pub/sub client and the broker, sans-IO (STYLE.md section 3).

rqueue (seed 004) is a central pub/sub server over TCP. Every message is a 3-byte preamble
(payload length u16 big-endian, type u8) and a payload: SUBSCRIBE (1) and REMOVE (2) carry a
topic, DEREGISTER (5) nothing, NOTIFICATION (7) ``topic_len u8, topic, content``. The server
forwards each notification to every client subscribed to exactly its topic.

This module gathers the public names: the client engine lives in :mod:`nbmq.streams.rqueue_client`
(:class:`RqueueClientConnection`), the broker in :mod:`nbmq.streams.rqueue_broker`
(:class:`RqueueBroker`), the topic rule in :mod:`nbmq.streams.rqueue_topics`, the events in
:mod:`nbmq.events`: client side :class:`Notification` and :class:`ConnectionClosed`; broker side
:class:`ClientConnected`, :class:`Subscribed`, :class:`Removed`, :class:`Deregistered`,
:class:`SlowConsumer`, :class:`ClientError`, :class:`ClientGone` (each with the driver's
``conn``). Our drop-notice extension (off by default) reserves the topic
:data:`DROP_NOTICE_TOPIC`; its client-side event is :class:`NotificationsDropped`. Access rules
(:class:`AccessRules`, off by default) add :class:`Authenticated` and :class:`Denied` on the
broker side and :class:`DeniedByServer` on the client side.
"""

from __future__ import annotations

from ..events import (
    Authenticated,
    ClientConnected,
    ClientError,
    ClientGone,
    ConnectionClosed,
    Denied,
    DeniedByServer,
    Deregistered,
    Notification,
    NotificationsDropped,
    Removed,
    SlowConsumer,
    Subscribed,
)
from .rqueue_access import AUTH_TOPIC, DENIED_TOPIC, AccessRules, Grant
from .rqueue_broker import SLOW_CONSUMER_POLICIES, RqueueBroker
from .rqueue_client import RqueueClientConnection
from .rqueue_topics import DROP_NOTICE_TOPIC, Topic

__all__ = [
    "Notification",
    "ConnectionClosed",
    "ClientConnected",
    "Subscribed",
    "Removed",
    "Deregistered",
    "SlowConsumer",
    "ClientError",
    "ClientGone",
    "RqueueClientConnection",
    "RqueueBroker",
    "SLOW_CONSUMER_POLICIES",
    "Topic",
    "NotificationsDropped",
    "DROP_NOTICE_TOPIC",
    "AccessRules",
    "Grant",
    "AUTH_TOPIC",
    "DENIED_TOPIC",
    "Authenticated",
    "Denied",
    "DeniedByServer",
]
