"""Peers of an nbmq engine: their state Enum, the record kept per peer, and address text.

Only :class:`~nbmq.engine.connection.Connection` changes a peer's state (all transitions live in
its ``_set_state`` / ``_remove``); the engine records traffic with :meth:`Peer.heard` and
:meth:`Peer.sent` (the Python code and the compiled ``_fast`` alike); everyone else reads the
properties.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from enum import Enum

__all__ = ["PeerState", "Peer", "addr_text"]


class PeerState(Enum):
    """Where a peer is in the handshake.

    ``HALF_OPEN`` -> ``CONNECTED`` -> ``CLOSED``; ``HALF_OPEN`` -> ``CLOSED``.
    """

    #: Bound side: ``Connected`` was sent, nothing heard back yet. Gets no data; evicted when
    #: the peer table is full and a peer echoes a valid cookie (``cookies.py``).
    HALF_OPEN = "half-open"
    #: Handshake done; data flows.
    CONNECTED = "connected"
    #: Removed from the table (kept only by whoever still holds the object).
    CLOSED = "closed"


class Peer:
    """One peer of an engine: read-only to users (the ``engine.peers`` values).

    Attributes (read-only properties):
        session_id: u64 session id of the peer (int).
        addr: its current address (changes when a known session arrives from a new address).
        state: a :class:`PeerState`.
        last_seen: when a frame from it last arrived, seconds (the engine's clock).
        last_sent: when a datagram last went to it, seconds.
        since: when it entered the table, seconds.
        outbound: True for the peer a connecting engine dialled, False for one that connected
            to this (bound) engine.
        path_candidates: new addresses its session came from, awaiting validation.
        handshake_rtt: seconds from our ``Connect`` to its ``Connected`` (a dialled peer
            answering the only ``Connect`` sent), else ``inf``; SafeDealer's congestion
            window counts it as a sample of the path's base RTT.
    """

    __slots__ = (
        "_sid",
        "_addr",
        "_state",
        "_last_seen",
        "_last_sent",
        "_since",
        "_outbound",
        "_timer",
        "_paths",
        "_handshake_rtt",
    )

    def __init__(self, session_id: int, addr: Hashable, state: PeerState, now: float, outbound: bool) -> None:
        self._sid = session_id
        self._addr = addr
        self._state = state
        self._last_seen = now
        self._last_sent = now
        self._since = now
        self._outbound = outbound
        self._timer = -1.0  # due time of this peer's live entry in the engine's timer heap
        # candidate new addresses (NAT rebinding) -> [frames since the challenge, first seen]
        self._paths: dict[Hashable, list[float]] | None = None
        self._handshake_rtt = math.inf

    @property
    def session_id(self) -> int:
        return self._sid

    @property
    def addr(self) -> Hashable:
        return self._addr

    @property
    def state(self) -> PeerState:
        return self._state

    @property
    def last_seen(self) -> float:
        return self._last_seen

    @property
    def last_sent(self) -> float:
        return self._last_sent

    @property
    def since(self) -> float:
        return self._since

    @property
    def outbound(self) -> bool:
        return self._outbound

    @property
    def handshake_rtt(self) -> float:
        return self._handshake_rtt

    @property
    def path_candidates(self) -> list[Hashable]:
        """New addresses this peer's session was seen from, not yet validated (oldest first)."""
        return list(self._paths or ())

    def heard(self, now: float) -> None:
        """Record that a frame from this peer arrived at ``now`` (seconds, the engine's clock):
        what keeps it alive for ``peer_keepalive``."""
        self._last_seen = now

    def sent(self, now: float) -> None:
        """Record that a datagram went to this peer at ``now`` (seconds, the engine's clock):
        what defers its next heartbeat by ``peer_heartbeat_ivl``."""
        self._last_sent = now

    def __repr__(self) -> str:
        return (
            f"Peer(session_id={self._sid:#018x}, addr={self._addr!r}, state={self._state.name}, "
            f"last_seen={self._last_seen}, last_sent={self._last_sent})"
        )


def addr_text(addr: Hashable) -> str:
    """An address as the reference writes it into a session id: ``"ip:port"``.

    A ``(host, port)`` tuple (or a 4-tuple IPv6 address) gives ``"host:port"``, with an IPv6
    host in brackets as Rust's ``SocketAddr`` prints it (``"[::1]:8000"``). Anything else gives
    ``str(addr)``. Non-ASCII characters are backslash-escaped, so the result is always ASCII.
    """
    if isinstance(addr, tuple) and len(addr) >= 2 and isinstance(addr[1], int):
        host = str(addr[0])
        text = f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    elif isinstance(addr, bytes):
        text = addr.decode("ascii", "backslashreplace")
    else:
        text = str(addr)
    return text.encode("ascii", "backslashreplace").decode("ascii")
