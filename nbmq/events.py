"""Events an nbmq engine reports through ``next_event()``.

One :class:`Event` base with no fields (as h11, wsproto and aioquic do); each subclass is a
frozen, slotted dataclass. Timeouts are events, not exceptions (STYLE.md section 4). Events
own their fields: nothing in them is a view into an engine buffer.

Addresses (``addr``) are whatever the transport uses: a ``(host, port)`` tuple for UDP, a path
for Unix datagrams, any hashable for inproc.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "Event",
    "DisconnectReason",
    "DropReason",
    "RejectReason",
    "PeerConnected",
    "PeerDisconnected",
    "MessageDropped",
    "FrameRejected",
    "DatagramsDropped",
    "PeerMoved",
    "PathRejected",
    # stream protocols (nbmq.streams.bqsp, nbmq.streams.rqueue)
    "PacketReceived",
    "ConnectionClosed",
    "Notification",
    "ClientConnected",
    "Subscribed",
    "Removed",
    "Deregistered",
    "SlowConsumer",
    "ClientError",
    "ClientGone",
    "NotificationsDropped",
    "Authenticated",
    "Denied",
    "DeniedByServer",
]


class Event:
    """Base class of every engine event (no fields)."""

    __slots__ = ()


class DisconnectReason(Enum):
    """Why a peer left the peer table."""

    #: Nothing was heard from the peer for ``peer_keepalive`` seconds.
    KEEPALIVE_EXPIRED = "keepalive expired"
    #: The peer sent ``Disconnected`` for this session (it does not know it any more).
    DISCONNECTED_BY_PEER = "disconnected by peer"
    #: The peer table was full and this peer was pushed out (half-open peers go first).
    EVICTED = "evicted"
    #: This engine was closed.
    CLOSED = "closed"


class DropReason(Enum):
    """Why a message was dropped (also the keys of ``Counters.dropped``)."""

    #: An incomplete message outlived ``uncompleted_message_ttl``.
    TTL_EXPIRED = "ttl expired"
    #: A data frame stayed unacked after ``safe_resend_limit`` resends (SafeDealer).
    RESEND_LIMIT = "resend limit"
    #: The message completed while ``recv_hwm`` completed messages were waiting.
    RECV_HWM = "recv hwm"
    #: A frame contradicted earlier frames of its message; the message was discarded.
    REJECTED = "rejected"
    #: The message claimed more than ``max_message_size`` or the incomplete-bytes budget.
    TOO_LARGE = "too large"
    #: An incomplete message evicted to make room in the incomplete-bytes budgets: its peer
    #: held the most (``max_peer_incomplete_bytes`` / ``max_incomplete_bytes``).
    EVICTED = "evicted"
    #: The peer the message was going to left before it was sent (or acked), or the peer an
    #: incomplete message was coming from was removed (its budget is released at once).
    PEER_GONE = "peer gone"
    #: Radio: no peer was connected when the message was sent (pub/sub semantics).
    NO_PEER = "no peer"
    #: The engine was closed with the message still queued.
    CLOSED = "closed"


class RejectReason(Enum):
    """Why an inbound datagram was not used."""

    #: It does not decode (``detail`` holds the codec's reason).
    MALFORMED = "malformed"
    #: It names a session this engine does not know (answered with ``Disconnected``).
    UNKNOWN_SESSION = "unknown session"
    #: A valid frame this socket type or role does not take (e.g. data to a Radio,
    #: ``Connected`` to a bound socket, a ``Connect`` refused because the peer table is full).
    UNEXPECTED = "unexpected"
    #: Secure mode: a plain frame to a secure socket, a sealed frame that failed its tag or
    #: was replayed, or a handshake that did not verify (a wrong or refused key).
    UNAUTHENTICATED = "unauthenticated"


@dataclass(frozen=True, slots=True)
class PeerConnected(Event):
    """A peer completed the handshake.

    On a bound socket: the first frame after our ``Connected`` arrived (the peer is no longer
    half-open). On a connecting socket: ``Connected`` arrived and we answered ``Heartbeat``.
    """

    #: The session's u64 id (int), as echoed in every frame of the session.
    session_id: int
    #: The peer's address as the transport gave it.
    addr: Hashable


@dataclass(frozen=True, slots=True)
class PeerDisconnected(Event):
    """A peer left the peer table; frames it had in flight are dropped."""

    #: The session's u64 id (int).
    session_id: int
    #: The peer's last known address.
    addr: Hashable
    #: Why it left.
    reason: DisconnectReason


@dataclass(frozen=True, slots=True)
class MessageDropped(Event):
    """A message was dropped (inbound or outbound; counted in ``Counters.dropped`` too)."""

    #: The u64 session the message belongs to (0 when it never had one).
    session_id: int
    #: The u64 message id (FNV-1a 64 of its parts and the sender's nonce).
    message_id: int
    #: Why it was dropped.
    reason: DropReason


@dataclass(frozen=True, slots=True)
class DatagramsDropped(Event):
    """Datagrams the OS dropped before the engine saw them, because the socket's receive
    buffer was full (Linux ``SO_RXQ_OVFL``, reported by the transport; also counted in
    ``Counters.kernel_drops``). Which messages they belonged to is unknown: a Dealer loses
    those messages (their other frames expire as TTL_EXPIRED), a SafeDealer resends them.

    Counted in datagrams: exact without UDP GRO; under GRO the kernel counts a dropped
    coalesced run once and the transport sizes it as the largest run it has read (the
    sender's GSO run), an estimate between the kernel's count and 64 times it (see
    ``DatagramLink._report_drops`` in :mod:`nbmq.transports.udp`, and docs/asyncio.md)."""

    #: Datagrams dropped since the previous such event (estimated under GRO, see above).
    count: int
    #: Datagrams dropped on this socket since it opened.
    total: int


@dataclass(frozen=True, slots=True)
class FrameRejected(Event):
    """An inbound datagram was counted and dropped; never an exception (UDP rule)."""

    #: Where the datagram came from.
    addr: Hashable
    #: Why it was not used.
    reason: RejectReason
    #: A short human-readable detail (the codec's decode reason, or the frame kind); owned str.
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PeerMoved(Event):
    """A peer's session was validated on a new address (NAT rebinding): replies and
    data go there from now on. See :class:`~nbmq.engine.connection.Connection` for the rule."""

    #: The session's u64 id (int).
    session_id: int
    #: The address it was reached at until now.
    old_addr: Hashable
    #: The validated new address.
    new_addr: Hashable


@dataclass(frozen=True, slots=True)
class PathRejected(Event):
    """A candidate new address of a peer was given up without moving the peer there."""

    #: The session's u64 id (int).
    session_id: int
    #: The candidate address.
    addr: Hashable
    #: Why: ``"old path alive"`` (a frame came from the current address meanwhile),
    #: ``"too many candidates"`` (the oldest of a full set made room) or ``"expired"`` (not
    #: validated within ``peer_keepalive``); owned str.
    reason: str


# -- stream protocols: BQSP (nbmq.streams.bqsp) and rqueue (nbmq.streams.rqueue) -------------------------------
# Exception to "events own their fields": a payload (``PacketReceived.data``,
# ``Notification.content``) is a memoryview, for zero-copy delivery; it views the bytes object
# the driver fed (asyncio hands over immutable bytes) or a buffer built for that one packet, and
# is never reused or modified by the engine.


@dataclass(frozen=True, slots=True)
class PacketReceived(Event):
    """BQSP: one whole packet arrived."""

    #: u16 application-defined type of the data.
    data_type: int
    #: u8 queue number; a response carries its request's queue number.
    queue: int
    #: The payload (memoryview, see above); ``bytes(data)`` for a copy.
    data: memoryview


@dataclass(frozen=True, slots=True)
class ConnectionClosed(Event):
    """BQSP or rqueue client: the peer ended the stream cleanly, on a packet boundary.
    Reported once; ``next_event()`` returns None afterwards."""


@dataclass(frozen=True, slots=True)
class Notification(Event):
    """rqueue client: a notification from the server."""

    #: The topic (bytes, owned).
    topic: bytes
    #: The content (memoryview, see above); ``bytes(content)`` for a copy.
    content: memoryview


@dataclass(frozen=True, slots=True)
class ClientConnected(Event):
    """rqueue broker: a client connected."""

    #: The driver's connection object.
    conn: Hashable


@dataclass(frozen=True, slots=True)
class Subscribed(Event):
    """rqueue broker: a client subscribed to a topic (repeats are reported too)."""

    conn: Hashable
    #: The topic (bytes).
    topic: bytes


@dataclass(frozen=True, slots=True)
class Removed(Event):
    """rqueue broker: a client sent REMOVE for a topic."""

    conn: Hashable
    #: The topic (bytes).
    topic: bytes
    #: False when the client had no such subscription.
    existed: bool


@dataclass(frozen=True, slots=True)
class Deregistered(Event):
    """rqueue broker: a client sent DEREGISTER."""

    conn: Hashable
    #: How many subscriptions were purged.
    topics: int


@dataclass(frozen=True, slots=True)
class SlowConsumer(Event):
    """rqueue broker: a client's outgoing buffer reached its bound (driver's pause_writing)."""

    conn: Hashable
    #: "drop": its notifications are dropped and counted until it drains; "disconnect": it is
    #: listed for closing.
    policy: str


@dataclass(frozen=True, slots=True)
class ClientError(Event):
    """rqueue broker: a client broke the protocol; it is purged and listed for closing."""

    conn: Hashable
    #: The ProtocolError (the codec's DecodeError as its ``__cause__``).
    error: Exception


@dataclass(frozen=True, slots=True)
class ClientGone(Event):
    """rqueue broker: a client is gone; reported once, the last of its events."""

    conn: Hashable
    #: "eof", "lost", "protocol error", "slow consumer", or the driver's reason given to
    #: ``RqueueBroker.disconnect`` ("read timeout", "idle timeout").
    reason: str


@dataclass(frozen=True, slots=True)
class NotificationsDropped(Event):
    """rqueue client, our drop-notice extension: the server dropped notifications meant for this
    client while it was slow (its outgoing buffer was full). Reported where the gap is in the
    stream, only after ``RqueueClientConnection.subscribe_drop_notices()``."""

    #: How many notifications were dropped (int).
    count: int


@dataclass(frozen=True, slots=True)
class Authenticated(Event):
    """rqueue broker with access rules: a client proved an identity (a token it sent, or its TLS
    client certificate when it connected)."""

    conn: Hashable
    #: The identity's name in the access rules (str).
    identity: str


@dataclass(frozen=True, slots=True)
class Denied(Event):
    """rqueue broker with access rules: a client's SUBSCRIBE or NOTIFICATION was refused (not
    applied, not forwarded, counted in ``denied``); the client is sent a denial notice."""

    conn: Hashable
    #: The refused message's rqueue type (``RqueueType.SUBSCRIBE`` or ``NOTIFICATION``, int).
    message_type: int
    #: The topic (bytes).
    topic: bytes
    #: The client's identity, or None when it has none.
    identity: str | None


@dataclass(frozen=True, slots=True)
class DeniedByServer(Event):
    """rqueue client: the server's access rules refused one of this client's messages (a denial
    notice, an nbmq extension). Reported where the notice is in the stream."""

    #: The refused message's rqueue type (``RqueueType.SUBSCRIBE`` or ``NOTIFICATION``, int).
    message_type: int
    #: The topic (bytes).
    topic: bytes
