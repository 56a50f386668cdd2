"""What an engine counts: frames and bytes in and out, resends, drops by reason, bad input;
and, per SafeDealer peer, the path's congestion state."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..events import DropReason

__all__ = ["Counters", "PathState"]


@dataclass(frozen=True, slots=True)
class PathState:
    """One SafeDealer peer's path, as its congestion window sees it (a snapshot).

    Attributes:
        srtt: smoothed round-trip time from acks, seconds (RFC 6298); None before a sample.
        min_rtt: the smallest round-trip time sampled, seconds; None before a sample.
        qdelay: the standing queue the last round found (its smallest RTT minus ``min_rtt``),
            seconds.
        cwnd: congestion window, bytes. in_flight: bytes sent and not acked.
        pacing_rate: bytes per second the window is paced at (``inf`` before an RTT sample).
        transmissions: data frames sent to the peer, resends included.
        resends: frames sent again (timer, fast resend, tail loss probe).
        lost: frames found lost (fast resends on loss detection, timeouts).
        competing: True while a queue-filling flow holds the bottleneck (the window reacts to
            loss only; see :mod:`nbmq.engine.congestion`).
        drains: drain rounds done (the window dropped to re-measure ``min_rtt``).
        path_rate: the fastest delivery over a span of rounds of at least 20 ms lately, bytes
            per second (0.0 before one):
            the path's rate as the delay target reads it.
    """

    srtt: float | None
    min_rtt: float | None
    qdelay: float
    cwnd: int
    in_flight: int
    pacing_rate: float
    transmissions: int
    resends: int
    lost: int
    competing: bool
    drains: int = 0
    path_rate: float = 0.0

    @classmethod
    def of(cls, win: Any) -> PathState:
        """The snapshot of a :class:`~nbmq.engine.congestion.Window`."""
        return cls(
            srtt=win.srtt,
            min_rtt=None if win.min_rtt == math.inf else win.min_rtt,
            qdelay=win.qdelay,
            cwnd=int(win.cwnd),
            in_flight=int(win.in_flight),
            pacing_rate=win.pacing_rate,
            transmissions=win.tx,
            resends=win.resends,
            lost=win.lost,
            competing=win.competing,
            drains=win.drains,
            path_rate=win.path_rate,
        )

    @property
    def loss_rate(self) -> float:
        """Frames found lost over transmissions (0.0 before any)."""
        return self.lost / self.transmissions if self.transmissions else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The fields and ``loss_rate`` as a flat dict."""
        return {**asdict(self), "loss_rate": self.loss_rate}


class Counters:
    """An engine's counters (ints; read them, do not write them).

    Traffic:
        datagrams_in, bytes_in: every datagram handed to ``receive_datagram`` (bytes as given).
        datagrams_out, bytes_out: every datagram handed out by ``datagrams_to_send``
            (control frames, first sends and resends).
        data_frames_in, control_frames_in: decoded inbound frames by class.
        data_frames_out: first sends of data frames. resends, resend_bytes: SafeDealer resends.
        messages_out: messages accepted by ``send``. messages_in: messages completed and queued.
        heartbeats_in, heartbeats_out, acks_in, acks_out, connects_out (Connect frames sent).

    Bad or unexpected input (all dropped; none raises):
        malformed: datagrams that do not decode.
        unknown_session: frames naming a session we do not know (answered ``Disconnected``).
        unexpected: valid frames this socket type or role does not take.
        acks_unknown: acks for frames never sent, already acked or sent to another session.
        duplicate_frames: frames of messages delivered within the dedup window (SafeDealer)
            plus repeated chunks of incomplete messages.
        refused_frames: SafeDealer frames refused (unacked) while ``recv_hwm`` was reached.
        connects_refused: Connects (or verified cookies) refused because the table was full
            of connected peers.
        peers_evicted: half-open peers pushed out of a full table by a peer whose cookie
            verified.
        half_open_expired: half-open peers that never answered within ``peer_keepalive``.
        addr_changes: peers moved to a new address after validating it (NAT rebinding).
        path_challenges: Heartbeats sent to a candidate new address of a peer.
        paths_rejected: candidate addresses given up (old path alive, too many, expired).
        events_dropped: events not queued because ``max_events`` were waiting, in the engine or
            in a socket driver's own queue (which drops the oldest).
        control_dropped: control frames not queued because the output queue was full
            (the driver is not flushing).
        kernel_drops: datagrams the OS dropped for want of receive buffer before this engine
            saw them (reported by the transport: Linux ``SO_RXQ_OVFL``; 0 where the OS does not
            tell). Exact without UDP GRO; under GRO an estimate (each dropped coalesced run
            counted as the largest run read, see ``DatagramsDropped``). Each report is also a
            ``DatagramsDropped`` event.
        cookies_sent: Connects answered with a stateless cookie (the table was full, partly
            of half-open peers; see ``nbmq.engine.cookies``).
        cookies_accepted: peers created by a frame echoing a valid cookie.
        cookies_rejected: frames with an unknown session, checked against the cookie while
            cookies were out, that did not verify (forged or stale); also in unknown_session.

    Secure mode (``docs/secure.md``; all 0 with it off):
        secure_handshakes: Noise handshakes completed (a bound socket counts the Connects it
            answered, a connecting one the Connected it verified).
        secure_handshakes_failed: handshake frames that did not verify (a wrong server key, a
            forged or altered message) or named a client key not allowed.
        secure_auth_failed: sealed frames whose tag did not verify (altered, forged, or sealed
            under other keys) or whose counter lay past the next key.
        secure_replays: sealed frames whose counter was taken before or fell behind the replay
            window, and Connects whose handshake was seen before.
        secure_downgrades: plain (version 1) frames to a secure socket, Connect included.
        secure_unsealed: outbound frames dropped because their session had no keys left.
        secure_rekeys: key changes after ``REKEY_FRAMES`` frames, both directions.

    Drops:
        dropped: messages dropped, by :class:`~nbmq.events.DropReason` (a dict; every reason
            present, 0 when none).

    Paths (SafeDealer with ``safe_congestion``):
        paths: ``{session_id: PathState}``, one per peer with a congestion window, as of the
            last read of the engine's ``counters`` (not in :meth:`as_dict`).
    """

    __slots__ = (
        "datagrams_in",
        "bytes_in",
        "datagrams_out",
        "bytes_out",
        "data_frames_in",
        "control_frames_in",
        "data_frames_out",
        "resends",
        "resend_bytes",
        "messages_out",
        "messages_in",
        "heartbeats_in",
        "heartbeats_out",
        "acks_in",
        "acks_out",
        "connects_out",
        "malformed",
        "unknown_session",
        "unexpected",
        "acks_unknown",
        "duplicate_frames",
        "refused_frames",
        "connects_refused",
        "peers_evicted",
        "half_open_expired",
        "addr_changes",
        "path_challenges",
        "paths_rejected",
        "events_dropped",
        "control_dropped",
        "kernel_drops",
        "cookies_sent",
        "cookies_accepted",
        "cookies_rejected",
        "secure_handshakes",
        "secure_handshakes_failed",
        "secure_auth_failed",
        "secure_replays",
        "secure_downgrades",
        "secure_unsealed",
        "secure_rekeys",
        "dropped",
        "paths",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)
        self.dropped: dict[DropReason, int] = {reason: 0 for reason in DropReason}
        self.paths: dict[int, PathState] = {}

    datagrams_in: int
    bytes_in: int
    datagrams_out: int
    bytes_out: int
    data_frames_in: int
    control_frames_in: int
    data_frames_out: int
    resends: int
    resend_bytes: int
    messages_out: int
    messages_in: int
    heartbeats_in: int
    heartbeats_out: int
    acks_in: int
    acks_out: int
    connects_out: int
    malformed: int
    unknown_session: int
    unexpected: int
    acks_unknown: int
    duplicate_frames: int
    refused_frames: int
    connects_refused: int
    peers_evicted: int
    half_open_expired: int
    addr_changes: int
    path_challenges: int
    paths_rejected: int
    events_dropped: int
    control_dropped: int
    kernel_drops: int
    cookies_sent: int
    cookies_accepted: int
    cookies_rejected: int
    secure_handshakes: int
    secure_handshakes_failed: int
    secure_auth_failed: int
    secure_replays: int
    secure_downgrades: int
    secure_unsealed: int
    secure_rekeys: int

    @property
    def dropped_total(self) -> int:
        """Messages dropped for any reason."""
        return sum(self.dropped.values())

    def as_dict(self) -> dict[str, int]:
        """Every counter as a flat dict; drops as ``dropped_<reason name lower>``."""
        out = {name: getattr(self, name) for name in self.__slots__ if name not in ("dropped", "paths")}
        for reason, count in self.dropped.items():
            out[f"dropped_{reason.name.lower()}"] = count
        return out

    def __repr__(self) -> str:
        nonzero = {k: v for k, v in self.as_dict().items() if v}
        return f"Counters({nonzero})"
