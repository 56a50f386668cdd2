"""Socket options: every option of the nbmq 0.2.0 reference, with its defaults and units, plus
the bounds this implementation adds.

Sources: seed 000 (option table), seed 001 (``max_tick_recv``), ARCHITECTURE.md (reference
defaults, ``max_message_size``, ``max_peers``) and seed 003 (one per-socket ``send_hwm``,
``linger``).

Units: every duration is in seconds (a ``float``; an ``int`` is accepted and stored as float),
every count is an ``int`` (``bool`` is refused), every size is in bytes (``int``).

Values are checked when the object is built and on every later assignment
(``opts.send_hwm = 5`` validates); unknown names are refused. Every failure is an
:class:`~nbmq.errors.OptionError` whose message names the option.

>>> opts = SocketOptions(send_hwm=10, peer_keepalive=2.0)
>>> opts.send_hwm
10
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .errors import OptionError

__all__ = ["SocketOptions", "OptionSpec", "OPTION_SPECS", "DEFAULTS", "FIXED_OPTIONS"]

_U32 = 0xFFFFFFFF
#: ``busy_poll``'s default (seconds): see docs/perf.md for the measurements behind it.
BUSY_POLL_DEFAULT = 0.0001
#: ``busy_poll``'s bound (seconds): a spin is for a reply in flight, never a substitute for sleeping.
BUSY_POLL_MAX = 0.01


class OptionSpec(NamedTuple):
    """How one option is typed, bounded and documented.

    Attributes:
        kind: ``"count"`` (int), ``"seconds"`` (float), ``"bytes"`` (int), ``"flag"``
            (a bool), ``"key"`` (32 bytes or None) or ``"keys"`` (a frozenset of 32-byte keys, or
            None).
        default: the default value.
        low: smallest allowed value (inclusive).
        low_open: True when ``low`` itself is not allowed (``> low``).
        high: largest allowed value (inclusive), or None.
        layer: who reads it: ``"engine"`` or ``"transport"``.
        doc: one line on what it means.
    """

    kind: str
    default: int | float | None
    low: int | float
    low_open: bool
    high: int | float | None
    layer: str
    doc: str


#: Every option, in the order of the reference's table, then ours.
OPTION_SPECS: dict[str, OptionSpec] = {
    "send_hwm": OptionSpec(
        "count",
        1000,
        1,
        False,
        None,
        "engine",
        "messages the socket holds for sending (queued, or in flight awaiting acks on "
        "SafeDealer) before send() raises WouldBlock; one count per socket, not per peer",
    ),
    "recv_hwm": OptionSpec(
        "count",
        1000,
        1,
        False,
        None,
        "engine",
        "completed messages held for recv(); a message completed past it is dropped and "
        "counted (SafeDealer instead refuses, unacked, the frames that arrive while full)",
    ),
    "safe_resend_limit": OptionSpec(
        "count",
        10,
        0,
        False,
        None,
        "engine",
        "resends of one unacked data frame before its message is dropped (SafeDealer)",
    ),
    "max_tick_send": OptionSpec(
        "count",
        1000,
        1,
        False,
        None,
        "engine",
        "new data frames handed out per datagrams_to_send() call",
    ),
    "max_tick_recv": OptionSpec(
        "count",
        1000,
        1,
        False,
        None,
        "transport",
        "datagrams a transport reads from the OS per step before flushing and ticking",
    ),
    "uncompleted_message_ttl": OptionSpec(
        "seconds",
        10.0,
        0.0,
        True,
        None,
        "engine",
        "seconds an incomplete message is kept after its first frame before it is dropped",
    ),
    "queue_maint_ivl": OptionSpec(
        "seconds",
        1.0,
        0.0,
        True,
        None,
        "engine",
        "seconds between receive-queue maintenance runs (TTL expiry, dedup expiry)",
    ),
    "peer_keepalive": OptionSpec(
        "seconds",
        10.0,
        0.0,
        True,
        None,
        "engine",
        "seconds a silent peer is kept before it is removed",
    ),
    "peer_heartbeat_ivl": OptionSpec(
        "seconds",
        1.0,
        0.0,
        True,
        None,
        "engine",
        "a heartbeat goes to a peer nothing was sent to for this many seconds",
    ),
    "reconnect_wait": OptionSpec(
        "seconds",
        5.0,
        0.0,
        True,
        None,
        "engine",
        "seconds between Connect frames while a connecting socket has no peer",
    ),
    "safe_resend_ivl": OptionSpec(
        "seconds",
        0.2,
        0.0,
        True,
        None,
        "engine",
        "seconds before an unacked data frame is resent (SafeDealer)",
    ),
    "safe_hash_dedup_ttl": OptionSpec(
        "seconds",
        1.0,
        0.0,
        False,
        None,
        "engine",
        "seconds a delivered message's id is remembered to drop repeats (SafeDealer); the "
        "window used is at least safe_resend_ivl * (safe_resend_limit + 1), so a late resend "
        "can never be delivered twice",
    ),
    "safe_congestion": OptionSpec(
        "flag",
        True,
        0,
        False,
        1,
        "engine",
        "SafeDealer: an ack-clocked congestion window per peer (bytes in flight; grown on acks, "
        "shrunk by a standing queue's delay and by congestion loss), paced at 1.25 window per "
        "RTT, and the resend timer from measured RTT (RFC 6298, floored by safe_resend_ivl); "
        "read when the engine is built (docs/congestion.md)",
    ),
    "max_message_size": OptionSpec(
        "bytes",
        16 * 1024 * 1024,
        0,
        False,
        _U32,
        "engine",
        "largest message accepted from the network, bytes (the wire allows 2**32-1)",
    ),
    "max_incomplete_bytes": OptionSpec(
        "bytes",
        64 * 1024 * 1024,
        0,
        False,
        None,
        "engine",
        "budget for all incomplete messages together, bytes (each is charged 256 plus its "
        "claimed size up to 1 MiB, past that its received bytes); when full, the biggest "
        "holder's oldest message is evicted",
    ),
    "max_peer_incomplete_bytes": OptionSpec(
        "bytes",
        32 * 1024 * 1024,
        0,
        False,
        None,
        "engine",
        "budget for one peer's incomplete messages, bytes (charged as max_incomplete_bytes); "
        "when full, that peer's oldest message is evicted",
    ),
    "reference_compat": OptionSpec(
        "flag",
        False,
        0,
        False,
        1,
        "engine",
        "refuse to send messages the Rust reference would lose (an empty part or an empty "
        "message): send() raises InteropError instead; and derive message ids as the "
        "reference does (FNV-1a over the message's bytes, then the nonce) instead of over "
        "the nonce alone",
    ),
    "max_peers": OptionSpec(
        "count",
        1024,
        1,
        False,
        None,
        "engine",
        "size of the peer table; once full, Connects get stateless cookies (no entry) and a "
        "verified cookie evicts the oldest half-open peer",
    ),
    "max_events": OptionSpec(
        "count",
        10_000,
        1,
        False,
        None,
        "engine",
        "events held for next_event(); past it new events are dropped and counted",
    ),
    "sndbuf": OptionSpec(
        "bytes",
        4 * 1024 * 1024,
        0,
        False,
        None,
        "transport",
        "SO_SNDBUF asked of the OS, bytes (the OS may cap it; 0 keeps the OS default)",
    ),
    "rcvbuf": OptionSpec(
        "bytes",
        4 * 1024 * 1024,
        0,
        False,
        None,
        "transport",
        "SO_RCVBUF asked of the OS, bytes (the OS may cap it, e.g. net.core.rmem_max; 0 keeps the OS default)",
    ),
    "gso": OptionSpec(
        "flag",
        True,
        0,
        False,
        1,
        "transport",
        "UDP on Linux: send a run of equal-size datagrams to one peer as one UDP_SEGMENT "
        "message (the kernel splits it); False sends each datagram on its own",
    ),
    "gro": OptionSpec(
        "flag",
        True,
        0,
        False,
        1,
        "transport",
        "UDP on Linux: let the kernel hand over a run of datagrams as one buffer (UDP_GRO; "
        "used when recv_hwm >= 64; read when the socket opens): faster reads, but the kernel "
        "counts a dropped run as one drop, so kernel_drops is then a lower bound",
    ),
    "pace_rate": OptionSpec(
        "bytes",
        0,
        0,
        False,
        None,
        "transport",
        "bytes per second sent to each peer at most, bursts of up to pace_burst bytes "
        "(kind to a receiver with a small buffer); 0 = no pacing",
    ),
    "pace_burst": OptionSpec(
        "bytes",
        64 * 1024,
        500,
        False,
        None,
        "transport",
        "bytes a paced peer may be sent at once after an idle spell (the token bucket's size)",
    ),
    "linger": OptionSpec(
        "seconds",
        1.0,
        0.0,
        False,
        None,
        "transport",
        "seconds close() keeps flushing queued messages (and awaiting SafeDealer acks) before "
        "dropping them; 0 drops at once, inf waits for ever",
    ),
    "busy_poll": OptionSpec(
        "seconds",
        BUSY_POLL_DEFAULT,
        0.0,
        False,
        BUSY_POLL_MAX,
        "transport",
        "seconds the first blocking wait after a send (recv, poll, ... with a timeout) polls "
        "the socket, holding no GIL, before it sleeps: a reply that comes sooner is read without "
        "waking a sleeping thread, for at most that much CPU per send; 0 = sleep at once. "
        "Blocking sockets only: an asyncio socket's waits belong to its event loop",
    ),
    "secret_key": OptionSpec(
        "key",
        None,
        0,
        False,
        None,
        "engine",
        "this socket's 32-byte X25519 secret key (nbmq.generate_keypair()); set, it turns secure "
        "mode on (Noise IK handshake, every frame encrypted and authenticated); fixed at creation",
    ),
    "server_public_key": OptionSpec(
        "key",
        None,
        0,
        False,
        None,
        "engine",
        "the bound peer's 32-byte public key, pinned: a connecting secure socket talks to no other; fixed at creation",
    ),
    "allowed_public_keys": OptionSpec(
        "keys",
        None,
        0,
        False,
        None,
        "engine",
        "client public keys a bound secure socket accepts (an iterable of 32-byte keys); None "
        "accepts any client that completes the handshake; fixed at creation",
    ),
    "max_datagram_size": OptionSpec(
        "bytes",
        None,
        0,
        False,
        65507,
        "engine",
        "secure mode: bytes a datagram may take when several sealed frames of one peer share it "
        "and one seal (a bundle); None (the default) takes it from the path, so that a bundle "
        "never fragments: the route's MTU less the IP and UDP headers (65507 on loopback, 1472 "
        "behind Ethernet), 65507 over ipc and inproc, 1472 for an engine without a transport; "
        "0 seals every frame alone; peers may differ (a secure socket reads datagrams of up to "
        "65507 bytes); fixed at creation",
    ),
}

#: Options read once, when the engine is built (secure mode's keys and bundle size).
FIXED_OPTIONS = frozenset({"secret_key", "server_public_key", "allowed_public_keys", "max_datagram_size"})
_KEY_SIZE = 32

#: Every option's default, read off :data:`OPTION_SPECS` (the one place defaults are written):
#: the engine's queues and the codec's Reassembler take theirs from here.
DEFAULTS: dict[str, int | float] = {
    name: spec.default for name, spec in OPTION_SPECS.items() if spec.default is not None
}  # (the secure-mode keys default to None: no key, secure mode off)

_INFINITE_OK = {"linger"}


def _check_key(name: str, raw: Any) -> Any:
    if raw is None:
        return None
    if not isinstance(raw, (bytes, bytearray, memoryview)) or len(raw) != _KEY_SIZE:
        raise OptionError(
            f"{name} must be {_KEY_SIZE} raw bytes (nbmq.generate_keypair()), got {type(raw).__name__}"
            + (f" of {len(raw)} bytes" if isinstance(raw, (bytes, bytearray, memoryview)) else "")
        )
    return bytes(raw)


def _check(name: str, raw: Any) -> Any:
    spec = OPTION_SPECS.get(name)
    if spec is None:
        raise OptionError(f"unknown socket option {name!r}")
    value: int | float
    if spec.kind == "key":
        return _check_key(name, raw)
    if spec.kind == "keys":
        if raw is None:
            return None
        if isinstance(raw, (str, bytes, bytearray, memoryview)) or not hasattr(raw, "__iter__"):
            raise OptionError(f"{name} must be an iterable of {_KEY_SIZE}-byte keys or None, got {type(raw).__name__}")
        return frozenset(_check_key(name, key) for key in raw)
    if raw is None and spec.default is None:
        return None  # "from elsewhere": the path (max_datagram_size)
    if spec.kind == "flag":
        if not isinstance(raw, bool):
            raise OptionError(f"{name} must be True or False, got {raw!r}")
        return raw
    if spec.kind == "seconds":
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise OptionError(f"{name} must be a number of seconds, got {raw!r}")
        value = float(raw)
        if math.isnan(value) or (math.isinf(value) and name not in _INFINITE_OK):
            raise OptionError(f"{name} must be finite, got {value!r}")
    else:
        if isinstance(raw, bool) or not isinstance(raw, int):
            unit = "a count" if spec.kind == "count" else "a number of bytes"
            raise OptionError(f"{name} must be {unit} (int), got {raw!r}")
        value = int(raw)
    if value < spec.low or (spec.low_open and value == spec.low):
        op = ">" if spec.low_open else ">="
        raise OptionError(f"{name} must be {op} {spec.low}, got {value!r}")
    if spec.high is not None and value > spec.high:
        raise OptionError(f"{name} must be <= {spec.high}, got {value!r}")
    return value


class SocketOptions:
    """The options of one nbmq socket (engine plus transport).

    Build with keyword arguments (``SocketOptions(send_hwm=10)``) or change attributes later;
    both validate. An engine copies the options it is given when it is built, so changing the
    object afterwards does not affect that engine.

    Engine options:
        send_hwm (int, messages, default 1000), recv_hwm (int, messages, 1000),
        safe_resend_limit (int, resends, 10), max_tick_send (int, frames per
        ``datagrams_to_send`` call, 1000), uncompleted_message_ttl (s, 10.0), queue_maint_ivl
        (s, 1.0), peer_keepalive (s, 10.0), peer_heartbeat_ivl (s, 1.0), reconnect_wait (s,
        5.0), safe_resend_ivl (s, 0.2), safe_hash_dedup_ttl (s, 1.0), safe_congestion
        (bool, True: congestion window per peer, SafeDealer), max_message_size
        (bytes, 16 MiB), max_incomplete_bytes (bytes, 64 MiB), max_peers (int, 1024),
        max_events (int, 10000).
        max_peer_incomplete_bytes (bytes, 32 MiB), reference_compat (bool, False).

    Transport options (the engine carries them; a transport reads them):
        max_tick_recv (int, datagrams per step, 1000), sndbuf (bytes, 4 MiB; 0 = OS default),
        rcvbuf (bytes, 4 MiB; 0 = OS default), linger (s, 1.0; ``math.inf`` = wait for ever),
        gso (bool, True), gro (bool, True), pace_rate (bytes/s per peer, 0 = off), pace_burst
        (bytes, 64 KiB), busy_poll (s, 0.0001: the spin of a wait after a send before it
        sleeps; 0 = off; at most 0.01).

    Secure mode (``docs/secure.md``; fixed when the engine is built):
        secret_key (32 bytes or None: secure mode off), server_public_key (32 bytes or None;
        a connecting secure socket needs it), allowed_public_keys (iterable of 32-byte keys,
        stored as a frozenset, or None: any client key), max_datagram_size (bytes or None: the
        largest bundle of sealed frames; None = from the path, the route's MTU less the IP and
        UDP headers; 0 = every frame sealed alone). ``repr`` never shows the secret key.

    See :data:`OPTION_SPECS` for the bounds and a line on each.

    Raises:
        OptionError: an unknown name, a value of the wrong type, or out of range.
    """

    __slots__ = tuple(OPTION_SPECS)

    send_hwm: int
    recv_hwm: int
    safe_resend_limit: int
    max_tick_send: int
    max_tick_recv: int
    uncompleted_message_ttl: float
    queue_maint_ivl: float
    peer_keepalive: float
    peer_heartbeat_ivl: float
    reconnect_wait: float
    safe_resend_ivl: float
    safe_hash_dedup_ttl: float
    safe_congestion: bool
    max_message_size: int
    max_incomplete_bytes: int
    max_peer_incomplete_bytes: int
    reference_compat: bool
    max_peers: int
    max_events: int
    sndbuf: int
    rcvbuf: int
    gso: bool
    gro: bool
    pace_rate: int
    pace_burst: int
    linger: float
    busy_poll: float
    secret_key: bytes | None
    server_public_key: bytes | None
    allowed_public_keys: frozenset[bytes] | None
    max_datagram_size: int | None

    def __init__(self, **options: Any) -> None:
        for name, spec in OPTION_SPECS.items():
            object.__setattr__(self, name, spec.default)
        for name, value in options.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, _check(name, value))

    def __delattr__(self, name: str) -> None:
        raise OptionError(f"socket option {name!r} cannot be deleted")

    def copy(self, **changes: Any) -> SocketOptions:
        """A new, independent SocketOptions with these values changed (the changes validated;
        the values copied were validated when they were set)."""
        out = SocketOptions.__new__(SocketOptions)
        for name in OPTION_SPECS:
            object.__setattr__(out, name, getattr(self, name))
        for name, value in changes.items():
            setattr(out, name, value)
        return out

    def as_dict(self) -> dict[str, Any]:
        """Every option and its value, in the order of :data:`OPTION_SPECS`."""
        return {name: getattr(self, name) for name in OPTION_SPECS}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SocketOptions):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        changed = {name: value for name, value in self.as_dict().items() if value != OPTION_SPECS[name].default}
        if "secret_key" in changed:
            changed["secret_key"] = "<secret>"  # a repr ends up in logs
        inner = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"SocketOptions({inner})"
