"""Stateless handshake cookies (SYN-cookie style) for a bound engine whose peer table is full.

Source: Connect floods from hostile peers, and the TCP SYN-cookie idea (RFC 4987, section 3.6). A bound
engine that has no room for a new half-open peer answers ``Connect`` with ``Connected(cookie)``
and keeps nothing; the peer echoes the session id in its first frame (the reference's client
sends ``Heartbeat(session)`` right after ``Connected``), and a session id equal to the cookie of
that frame's address proves the address and creates the peer. The wire is the reference's: a
session id is opaque to the peer.

The cookie is a keyed hash (BLAKE2b, 8 bytes) of the address under a random 64-bit secret
that rotates every ``period`` seconds; the current and the previous secret verify, so a cookie
lives between one and two periods. BLAKE2b rather than the reference's FNV-1a session-id rule:
FNV-1a is invertible byte by byte, so one cookie and its address would give the secret away.
"""

from __future__ import annotations

from collections.abc import Hashable
from hashlib import blake2b
from random import SystemRandom
from typing import Any

_SECRETS = SystemRandom()  # os.urandom underneath

__all__ = ["CookieJar"]


class CookieJar:
    """Makes and checks handshake cookies; O(1) memory whatever the Connect rate.

    The secrets come from ``random.SystemRandom`` (never from the engine's rng, which tests seed and
    which must draw exactly the reference's session ids for the stateful handshake).

    Args:
        period: seconds a secret is current (the engine passes ``peer_keepalive``); > 0.
        now: seconds (the engine's clock) the first secret starts at.
    """

    __slots__ = ("_period", "_current", "_previous", "_until", "_issued_until")

    def __init__(self, period: float, now: float) -> None:
        self._period = period
        self._current = self._new_key()
        self._previous = self._new_key()
        self._until = now + period
        self._issued_until = float("-inf")

    @staticmethod
    def _new_key() -> Any:
        # a keyed hash state, copied per cookie (cheaper than keying a new one each time)
        return blake2b(digest_size=8, key=_SECRETS.getrandbits(64).to_bytes(8, "big"))

    def _rotate(self, now: float) -> None:
        # on a fixed grid of periods, so a cookie verifies for at most two of them
        if now >= self._until + self._period:  # idle for two periods: both secrets are stale
            self._previous = self._new_key()
            self._until = now + self._period
        else:
            self._previous = self._current
            self._until += self._period
        self._current = self._new_key()

    def issue(self, addr: Hashable, now: float) -> int:
        """The cookie for an address: a u64 session id (int; may be 0, the caller checks).

        Args:
            addr: the peer's address as the transport gives it (hashed as its ``repr``, which
                is stable for the tuples transports produce; the reference's ``"ip:port"``
                text is not needed, as the cookie is ours alone).
            now: seconds (the engine's clock; it never goes back).
        """
        if now >= self._until:
            self._rotate(now)
        self._issued_until = self._until + self._period  # when this secret stops verifying
        h = self._current.copy()
        h.update(repr(addr).encode("utf-8", "backslashreplace"))
        return int.from_bytes(h.digest(), "big")

    def outstanding(self, now: float) -> bool:
        """True while a cookie issued earlier may still verify (so unknown sessions are worth
        checking); False lets the engine skip the hashing when it never issued one."""
        return now < self._issued_until

    def verify(self, sid: int, addr: Hashable, now: float) -> bool:
        """True when ``sid`` is the cookie of ``addr`` under the current or previous secret.

        Args:
            sid: the session id a frame carried (u64 int).
            addr: that frame's source address, as for :meth:`issue`.
            now: seconds (the engine's clock).
        """
        if now >= self._until:
            self._rotate(now)
        data = repr(addr).encode("utf-8", "backslashreplace")
        for state in (self._current, self._previous):
            h = state.copy()
            h.update(data)
            if int.from_bytes(h.digest(), "big") == sid:
                return True
        return False
