"""The connection layer: handshake, liveness and the peer table, sans-IO.

Source: seed 000 ("Connection Flow"), ARCHITECTURE.md (wire facts). The bound side answers
``Connect`` with ``Connected(session)`` where session = ``codec.session_id(rng.getrandbits(64),
"ip:port")``; the connecting side sends ``Connect`` (session 0), adopts the session from
``Connected`` and answers ``Heartbeat(session)``. A heartbeat goes to a connected peer nothing
was sent to for ``peer_heartbeat_ivl`` (one per interval: the reference forgets to record it and
heartbeats every tick once idle); a peer silent for ``peer_keepalive`` is removed; a frame from an
unknown session is answered ``Disconnected(session)``; a connecting engine that gets
``Disconnected`` (or loses its peer) sends ``Connect`` at once and again every ``reconnect_wait``
while it has no peer.

Beyond the reference:

- ``max_peers`` bounds the table. A peer is *half-open* from our ``Connected`` until its first
  frame; half-open peers get no data and no heartbeats. While the table has room the handshake
  is the reference's (a random session, a half-open entry). When it is full, partly of half-open
  peers, a ``Connect`` is answered with a stateless cookie (``cookies.py``: a keyed hash of the
  address) and leaves no trace; a first frame that echoes a valid cookie creates the peer,
  CONNECTED at once, evicting the oldest half-open peer. So a flood of Connects costs a hash and
  a reply each, pushes no one out, and a real client connecting during it still gets in. A table
  full of connected peers refuses Connects (counted).
- A repeated ``Connect`` from an address that has a peer is answered with that peer's session
  (idempotent: a lost ``Connected`` or a duplicated ``Connect`` does not make a second peer).
- Path validation (QUIC's path validation, RFC 9000 section 8.2, is the model). A
  known session arriving from a new address (NAT rebinding) keeps its session and its frames
  are taken, but replies and data keep going to the validated address until the new one is
  validated: its first frame there makes it a candidate and queues a ``Heartbeat(session)`` to
  it (the challenge; the old reference peer needs nothing new to answer it, it keeps sending
  heartbeats or data); the peer moves (``PeerMoved``, ``addr_changes``) when
  ``PATH_VALIDATION_FRAMES`` (2) more frames of the session arrive from that address. A frame
  from the current address meanwhile cancels every candidate (the old path is alive, so the
  new one is a spoof, a replay or a stray); at most ``MAX_PATH_CANDIDATES`` (4) per peer, the
  oldest giving way; a candidate not validated within ``peer_keepalive`` starts over. Given up
  candidates count in ``paths_rejected`` with a ``PathRejected`` event. Threat model: README,
  "Path validation".

Secure mode (``secret_key`` set; ``docs/secure.md``): the handshake above rides in secure
``Connect``/``Connected`` frames (version byte 0x81) that carry Noise IK's two messages
(:mod:`nbmq.engine.noise`); the bound side admits the peer exactly as above, after the client's key
verified and passed ``allowed_public_keys`` (no cookies: the handshake keeps state anyway). Every
later frame is sealed in :meth:`Connection.datagrams_to_send` and opened before the socket type's
own receive path sees it (:mod:`nbmq.engine.secure`); plain frames, failed tags, replays and
unknown sessions are counted and never answered.

All peer-state transitions live in :meth:`Connection._set_state` and :meth:`Connection._remove`.
"""

from __future__ import annotations

import heapq
import random
import struct
from collections import deque
from collections.abc import Hashable, Mapping
from itertools import accumulate
from types import MappingProxyType
from typing import Any

from .. import codec
from ..errors import DecodeError, NbmqError, OptionError
from ..events import (
    DisconnectReason,
    Event,
    FrameRejected,
    PathRejected,
    PeerConnected,
    PeerDisconnected,
    PeerMoved,
    RejectReason,
)
from ..options import OPTION_SPECS, SocketOptions
from ..wire import ETHERNET_DATAGRAM_SIZE, VERSION, ControlFrame, DataFrame, FrameKind
from .cookies import CookieJar
from .counters import Counters
from .noise import HandshakeError
from .peers import Peer, PeerState, addr_text
from .secure import BUNDLE_SESSION_OFFSET, BUNDLE_VERSION, SECURE_VERSION, OpenError, SecureLayer, active_open_frames

__all__ = ["Connection", "Role"]

Datagram = tuple[Any, Hashable]

_HALF_OPEN = PeerState.HALF_OPEN
_CONNECTED = PeerState.CONNECTED
_CLOSED = PeerState.CLOSED
_CONNECT = FrameKind.CONNECT
_CONNECTED_KIND = FrameKind.CONNECTED
_DISCONNECTED = FrameKind.DISCONNECTED
_HEARTBEAT = FrameKind.HEARTBEAT
_ACK = FrameKind.ACK
_CONNECT_FRAME = codec.encode_control_frame(FrameKind.CONNECT, 0)
_CONTROL_HEADER_SIZE = len(_CONNECT_FRAME)
_unpack_sid = struct.Struct(">Q").unpack_from  # a frame's session id, at offset 2
_SECURE_CONNECT_HEAD = bytes((SECURE_VERSION,)) + _CONNECT_FRAME[1:]
_SECURE_CONNECTED_HEAD = bytes((SECURE_VERSION, FrameKind.CONNECTED))
#: Control frames held for the driver at most; past it they are dropped and counted.
MAX_CONTROL_QUEUE = 65536
#: Bytes of the buffer a secure engine opens a batch's sealed datagrams into, reused from run to
#: run (four of the largest UDP datagrams; a larger datagram takes the one-by-one path).
OPENED_ROOM = 4 * 65536
#: Seconds an Ack of a SafeDealer's fast receive path may wait in the control queue for other
#: output (a reply) to go out with, so that the sender wakes once for both; a flush for any
#: other reason carries it at once. Far below the reference's ``safe_resend_ivl`` (0.2 s) and
#: the congestion controller's queueing-delay target (``congestion.QDELAY_TARGET``).
ACK_DELAY = 0.0002
#: Candidate new addresses held per peer (NAT rebinding); a new one evicts the oldest.
MAX_PATH_CANDIDATES = 4
#: Frames of the session from a candidate address, after its challenge, that validate it.
PATH_VALIDATION_FRAMES = 2


class Role:
    """Flags: a Connection may be bound (accepts Connect), connecting (dials), or both."""

    NONE = 0
    BIND = 1
    CONNECT = 2


class _Remote:
    """A remote address this engine dials (connect role). ``connect_at``: when the last
    ``Connect`` went out, seconds; ``connects``: how many went out since the last session
    (the handshake's round trip is timed only from a single one, Karn's rule)."""

    __slots__ = ("addr", "peer", "next_connect", "connect_at", "connects")

    def __init__(self, addr: Hashable, now: float) -> None:
        self.addr = addr
        self.peer: Peer | None = None
        self.next_connect = now
        self.connect_at = now
        self.connects = 0


class Connection:
    """Connection layer of every nbmq socket type (the sockets in ``sockets.py`` extend it).

    Args:
        options: a :class:`~nbmq.options.SocketOptions` (copied), or None for the defaults.
        rng: a ``random.Random`` for session ids; None uses ``random.SystemRandom()`` (session
            ids are then unpredictable, as they should be on a network).

    Raises:
        OptionError: ``server_public_key`` or ``allowed_public_keys`` without ``secret_key``.
        NbmqError: ``secret_key`` set but ``cryptography`` missing (the ``secure`` extra).

    With ``secret_key`` set the engine is in secure mode (``docs/secure.md``,
    :mod:`nbmq.engine.secure`): the handshake is Noise IK inside secure Connect/Connected frames,
    every later frame is sealed, and plain frames are refused. Nothing falls back to plain.
    """

    def __init__(self, options: SocketOptions | None = None, rng: random.Random | None = None):
        self._opts = SocketOptions() if options is None else options.copy()
        self._rng: random.Random = random.SystemRandom() if rng is None else rng
        self._role = Role.NONE
        self._local_addr: Hashable = None
        self._closed = False
        self._now = 0.0
        self._peers: dict[int, Peer] = {}
        self._peers_view: Mapping[int, Peer] = MappingProxyType(self._peers)
        self._by_addr: dict[Hashable, Peer] = {}
        self._half_open: dict[int, Peer] = {}
        self._cookies: CookieJar | None = None  # made at the first cookie (a full table)
        self._ring: list[Peer] = []
        self._remotes: dict[Hashable, _Remote] = {}
        self._timers: list[tuple[float, int, Peer]] = []
        self._timer_seq = 0
        self._ctrl: list[Datagram] = []
        # Acks among the control frames that may wait until ``_ack_due`` (see ACK_DELAY);
        # every other control frame is due at once.
        self._acks_held = 0
        self._ack_due = 0.0
        self._disc_pending: set[tuple[int, Hashable]] = set()
        self._events: deque[Event] = deque()
        self._counters = Counters()
        self._ctrl_out = 0
        self._ctrl_bytes = 0
        self._secure: SecureLayer | None = None
        self._secure_unopened = 0  # secure datagrams dropped before they were frames
        self._bundled_in = 0  # frames that came in a bundle behind its first
        self._opened_room: memoryview | None = None  # made at the first secure batch
        opts = self._opts
        if opts.secret_key is not None:
            self._secure = SecureLayer(
                opts.secret_key,
                opts.server_public_key,
                opts.allowed_public_keys,
                # an engine alone knows no path: Ethernet's size unless the transport said
                max_datagram_size=(
                    ETHERNET_DATAGRAM_SIZE if opts.max_datagram_size is None else opts.max_datagram_size
                ),
            )
            # every datagram is opened first; the socket type's own receive path (compiled or
            # Python) then takes the plain frame
            self._receive_plain = type(self).receive_datagram.__get__(self)
            self._receive_plain_batch = type(self).receive_datagrams.__get__(self)
            self.receive_datagram = self._receive_secure  # type: ignore[method-assign]
            self.receive_datagrams = self._receive_secure_batch  # type: ignore[method-assign]
        elif opts.server_public_key is not None or opts.allowed_public_keys is not None:
            raise OptionError("server_public_key and allowed_public_keys need secret_key (secure mode)")

    # ------------------------------------------------------------------ public surface

    @property
    def options(self) -> SocketOptions:
        """A copy of the options this engine uses (changing it has no effect on the engine)."""
        return self._opts.copy()

    def option(self, name: str) -> Any:
        """The current value of option ``name``, read without a copy (change it with
        ``set_option``).

        Raises:
            OptionError: no option has that name.
        """
        if name not in OPTION_SPECS:
            raise OptionError(f"unknown socket option {name!r}")
        return getattr(self._opts, name)

    @property
    def peers(self) -> Mapping[int, Peer]:
        """Read-only live view: session id -> :class:`~nbmq.engine.peers.Peer` (half-open and
        connected peers)."""
        return self._peers_view

    @property
    def connected_peers(self) -> list[Peer]:
        """Connected peers (the ones data goes to), in the order they connected."""
        return list(self._ring)

    @property
    def local_addr(self) -> Hashable:
        """The address given to :meth:`bind` (None when not bound)."""
        return self._local_addr

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    @property
    def counters(self) -> Counters:
        """The engine's :class:`~nbmq.engine.counters.Counters` (live object, read-only)."""
        self._sync_counters()
        return self._counters

    def bind(self, local_addr: Hashable = None) -> None:
        """Accept ``Connect`` frames (the bound role). Queues nothing.

        Args:
            local_addr: the address the transport is bound to (informational, any hashable).
        """
        self._check_open()
        self._role |= Role.BIND
        self._local_addr = local_addr

    def connect(self, remote_addr: Hashable, now: float) -> None:
        """Dial ``remote_addr``: queues a ``Connect`` at once (flush with
        :meth:`datagrams_to_send`), then one every ``reconnect_wait`` while it has no peer.

        Dialling an address already dialled does nothing.

        Raises:
            OptionError: secure mode without ``server_public_key``.

        Args:
            remote_addr: where the bound engine is (a ``(host, port)`` tuple for UDP).
            now: seconds (monotonic).
        """
        self._check_open()
        if self._secure is not None and self._opts.server_public_key is None:
            raise OptionError("server_public_key is required to connect in secure mode")
        self._now = now
        self._role |= Role.CONNECT
        if remote_addr in self._remotes:
            return
        remote = _Remote(remote_addr, now)
        self._remotes[remote_addr] = remote
        self._send_connect(remote, now)

    def next_event(self) -> Event | None:
        """The oldest event not yet taken, or None. Mutates the event queue."""
        events = self._events
        return events.popleft() if events else None

    def close(self, now: float) -> None:
        """Close the engine: queues ``Disconnected(session)`` to every peer (flush once more
        with :meth:`datagrams_to_send`), removes every peer (``PeerDisconnected(CLOSED)``),
        drops every queued message (``MessageDropped(CLOSED)``) and stops dialling. Later
        inbound datagrams are ignored; ``send`` raises. Idempotent.

        Lingering (flushing until queued messages are out) is the transport's job: keep
        ticking and flushing while ``pending_messages`` is non-zero, up to ``linger`` seconds,
        then call this.
        """
        if self._closed:
            return
        self._now = now
        self._remotes.clear()  # stop dialling first: removing the peers must not redial
        for peer in list(self._peers.values()):
            self._queue_ctrl(codec.encode_control_frame(_DISCONNECTED, peer._sid), peer._addr)
            self._remove(peer, DisconnectReason.CLOSED, now)
        self._on_close(now)
        self._closed = True

    # ------------------------------------------------------------------ inbound

    def receive_datagram(self, data: Any, addr: Hashable, now: float) -> None:
        """Feed one datagram the network delivered.

        Args:
            data: the datagram, any bytes-like object (bytes, bytearray, memoryview, numpy
                uint8). It may be a view of a buffer the transport reuses after this call: the
                engine copies what it keeps (a data chunk goes once into its message's buffer).
            addr: where it came from (hashable; a ``(host, port)`` tuple for UDP).
            now: arrival time, seconds (monotonic).

        Never raises for bad input: a malformed datagram is counted (``malformed``) and
        reported as ``FrameRejected``. May queue output (handshake replies, acks,
        ``Disconnected``): flush with :meth:`datagrams_to_send` after calling this, and drain
        :meth:`next_event`. Mutates engine state.
        """
        self._now = now
        counters = self._counters
        counters.datagrams_in += 1
        counters.bytes_in += len(data)
        if self._closed:
            return
        try:
            frame = _parse_frame(data)
        except DecodeError as exc:
            self._malformed(addr, exc)
            return
        if frame.__class__ is DataFrame:  # (data_frames_in is derived in _sync_counters)
            peer = self._peers.get(frame[0])
            if peer is None or peer._addr != addr or peer._paths or peer._state is not _CONNECTED:
                peer = self._data_peer(frame[0], peer, addr, now)
                if peer is None:
                    return
            else:  # the common case: a connected peer on its known path
                peer.heard(now)
            self._on_data(frame, data, peer, now)
            return
        counters.control_frames_in += 1
        self._on_control(frame, addr, now)  # type: ignore[arg-type]

    def receive_datagrams(
        self, buffer: Any, offsets: list[int], lengths: list[int], addrs: list[Hashable], now: float
    ) -> None:
        """Feed a batch of datagrams that lie in one buffer (a ``recvmmsg`` read): datagram
        ``i`` is ``buffer[offsets[i] : offsets[i] + lengths[i]]`` from ``addrs[i]``.

        Args:
            buffer: a memoryview (or other sliceable bytes-like object) the transport may reuse
                after this call; offsets, lengths: ints, bytes; addrs: one per datagram (the
                shortest of the three lists sets the count); now: seconds (monotonic).

        Exactly :meth:`receive_datagram` for each in turn (same errors: none for bad input;
        may queue output: flush with :meth:`datagrams_to_send`, drain :meth:`next_event`).
        Socket types override it with a faster loop.
        """
        feed = self.receive_datagram
        for offset, length, addr in zip(offsets, lengths, addrs):
            feed(buffer[offset : offset + length], addr, now)

    # ------------------------------------------------------------------ secure mode

    def _receive_secure(self, data: Any, addr: Hashable, now: float) -> None:
        """``receive_datagram`` in secure mode: a handshake frame is taken here, a sealed frame
        is opened and its plain frame handed to the socket type's own receive path; every
        other datagram is refused and counted (never raises; flush and drain as for
        :meth:`receive_datagram`)."""
        n = len(data)
        first = data[0] if n else -1
        if first == BUNDLE_VERSION and not self._closed:
            self._receive_bundle(data, addr, now)
            return
        if first != SECURE_VERSION:
            if first == VERSION:  # a plain frame to a secure socket: a downgrade, or a plain peer
                self._secure_drop(n, addr, "secure_downgrades", "plain frame to a secure socket")
            else:
                self._receive_plain(data, addr, now)  # counted as malformed there
            return
        if self._closed:
            self._receive_plain(data, addr, now)  # counted, then ignored, as a closed engine does
            return
        self._now = now
        if n < _CONTROL_HEADER_SIZE:
            self._secure_drop(n, addr, "malformed", "secure frame truncated")
            return
        kind = data[1]
        sid = _unpack_sid(data, 2)[0]
        if kind == _CONNECT or kind == _CONNECTED_KIND:
            counters = self._counters
            counters.datagrams_in += 1
            counters.bytes_in += n
            counters.control_frames_in += 1
            if kind == _CONNECT:
                self._on_secure_connect(data[_CONTROL_HEADER_SIZE:], addr, now)
            else:
                self._on_secure_connected(sid, data[_CONTROL_HEADER_SIZE:], addr, now)
            return
        frames = self._open_sealed(data, sid, addr, False)
        if frames is not None:
            self._receive_plain(frames[0], addr, now)

    def _receive_bundle(self, data: Any, addr: Hashable, now: float) -> None:
        """A sealed bundle (docs/secure.md): opened whole or refused whole and counted; its
        frames then take the path of a lone opened frame, in order."""
        self._now = now
        if len(data) < BUNDLE_SESSION_OFFSET + 8:
            self._secure_drop(len(data), addr, "malformed", "secure bundle truncated")
            return
        frames = self._open_sealed(data, _unpack_sid(data, BUNDLE_SESSION_OFFSET)[0], addr, True)
        if frames is not None:
            receive = self._receive_plain
            for frame in frames:
                receive(frame, addr, now)

    def _open_sealed(self, data: Any, sid: int, addr: Hashable, bundle: bool) -> list[bytes] | None:
        """The plain frames of a sealed frame (``bundle`` False) or bundle of session ``sid``,
        counted by :meth:`_opened`; None when it was refused (counted and reported)."""
        n = len(data)
        keys = self._secure.sessions.get(sid)  # type: ignore[union-attr]
        if keys is None:  # no reply: an unauthenticated Disconnected could end any session
            self._secure_drop(n, addr, "unknown_session", "secure frame of an unknown session")
            return None
        try:
            frames = keys.open_bundle(data) if bundle else [keys.open(data)]
        except OpenError as exc:
            counter = {"replay": "secure_replays", "auth": "secure_auth_failed"}.get(exc.reason, "malformed")
            self._secure_drop(n, addr, counter, exc.detail)
            return None
        self._opened(1, n, len(frames), sum(map(len, frames)))
        return frames

    def _opened(self, datagrams: int, size: int, frames: int, plain: int) -> None:
        """Count ``datagrams`` opened (``size`` bytes in all) into ``frames`` plain frames
        (``plain`` bytes in all), before the plain path counts each frame as a datagram of its
        own size: the difference is the seals' bytes and the frames that shared a bundle."""
        counters = self._counters
        bundled = frames - datagrams
        counters.bytes_in += size - plain
        counters.datagrams_in -= bundled
        self._bundled_in += bundled

    def _receive_secure_batch(
        self, buffer: Any, offsets: list[int], lengths: list[int], addrs: list[Hashable], now: float
    ) -> None:
        """``receive_datagrams`` in secure mode: the same as :meth:`_receive_secure` for each
        datagram in turn. Runs of sealed frames of known sessions are opened here and handed,
        laid out in one buffer, to the socket type's own batch path (compiled or Python); any
        other datagram first flushes the run, then goes through :meth:`_receive_secure`, so the
        order of effects is the datagrams' order."""
        sessions = self._secure.sessions  # type: ignore[union-attr]
        feed = self._receive_secure
        size = len(buffer)
        count = min(len(offsets), len(lengths), len(addrs))
        room = self._opened_room
        if room is None:  # reused: the receive paths copy what they keep (receive_datagram)
            room = self._opened_room = memoryview(bytearray(OPENED_ROOM))
        i = 0
        while i < count:
            if not self._closed:
                start = i
                sizes: list[int] = []
                froms: list[Hashable] = []
                i = active_open_frames(sessions, buffer, offsets, lengths, addrs, i, room, sizes, froms)
                if sizes:
                    self._opened(i - start, int(sum(lengths[start:i])), len(sizes), sum(sizes))
                    self._receive_opened(room, sizes, froms, now)
                    continue  # the next run begins where this one stopped (it may not have fit)
                if i >= count:
                    return
            offset, length, addr = offsets[i], lengths[i], addrs[i]
            if offset < 0 or length < 0 or offset + length > size:
                self._secure_drop(0, addr, "malformed", "datagram outside the buffer")
            else:
                feed(buffer[offset : offset + length], addr, now)
            i += 1

    def _receive_opened(self, plain: memoryview, sizes: list[int], froms: list[Hashable], now: float) -> None:
        """Hand opened plain frames (back to back from the start of ``plain``, counted by
        :meth:`_opened`) to the socket type's batch path."""
        offsets = list(accumulate(sizes, initial=0))
        offsets.pop()
        # the batch paths hand the frames they do not finish to self.receive_datagram: for these
        # opened frames that must be the plain one, not the secure entry point
        self.receive_datagram = self._receive_plain  # type: ignore[method-assign]
        try:
            self._receive_plain_batch(plain, offsets, sizes, froms, now)
        finally:
            self.receive_datagram = self._receive_secure  # type: ignore[method-assign]

    def _secure_drop(self, n: int, addr: Hashable, counter: str, detail: str) -> None:
        counters = self._counters
        counters.datagrams_in += 1
        counters.bytes_in += n
        setattr(counters, counter, getattr(counters, counter) + 1)
        self._secure_unopened += counter != "malformed"  # (malformed is subtracted already)
        reason = RejectReason.MALFORMED if counter == "malformed" else RejectReason.UNAUTHENTICATED
        if counter == "unknown_session":
            reason = RejectReason.UNKNOWN_SESSION
        self._emit(FrameRejected(addr, reason, detail))

    def _handshake_refused(self, addr: Hashable, counter: str, detail: str) -> None:
        counters = self._counters
        setattr(counters, counter, getattr(counters, counter) + 1)
        self._emit(FrameRejected(addr, RejectReason.UNAUTHENTICATED, detail))

    def _on_secure_connect(self, payload: Any, addr: Hashable, now: float) -> None:
        if not self._role & Role.BIND:
            self._reject(addr, "Connect to a socket that is not bound")
            return
        secure = self._secure
        try:
            hs = secure.accept(payload)  # type: ignore[union-attr]
        except HandshakeError as exc:
            replayed = str(exc).startswith("replayed")
            self._handshake_refused(addr, "secure_replays" if replayed else "secure_handshakes_failed", str(exc))
            return
        old = self._by_addr.get(addr)
        if old is not None:  # the client starts over (its Connected was lost, or it restarted)
            keys = secure.sessions.get(old._sid)  # type: ignore[union-attr]
            if keys is not None and keys.remote_static != hs.remote_static:
                self._handshake_refused(addr, "secure_handshakes_failed", "another key from a live peer's address")
                return
        sid = self._admit(addr, now)
        if not sid:  # full: no cookies here, the handshake keeps state whatever we do
            self._counters.connects_refused += 1
            self._reject(addr, "Connect refused: peer table full")
            return
        frame = _SECURE_CONNECTED_HEAD + sid.to_bytes(8, "big") + secure.connected_payload(hs, sid)  # type: ignore[union-attr]
        self._counters.secure_handshakes += 1
        self._queue_ctrl(frame, addr)

    def _on_secure_connected(self, sid: int, payload: Any, addr: Hashable, now: float) -> None:
        remote = self._remotes.get(addr)
        if remote is None:
            self._reject(addr, "Connected from an address this socket does not dial")
            return
        if remote.peer is not None or sid == 0 or sid in self._peers:
            self._reject(addr, "Connected while connected, or with an unusable session id")
            return
        try:
            self._secure.complete(addr, sid, payload)  # type: ignore[union-attr]
        except HandshakeError as exc:
            self._handshake_refused(addr, "secure_handshakes_failed", str(exc))
            return
        self._counters.secure_handshakes += 1
        self._on_connected(sid, addr, now)

    def _malformed(self, addr: Hashable, exc: DecodeError) -> None:
        self._counters.malformed += 1
        self._emit(FrameRejected(addr, RejectReason.MALFORMED, exc.reason))

    def _data_peer(self, sid: int, peer: Peer | None, addr: Hashable, now: float) -> Peer | None:
        """The peer a data frame of session ``sid`` from ``addr`` belongs to, its liveness, path
        and state updated (``peer``: the table's entry, or None); None when the session is
        unknown (counted and reported)."""
        if peer is None and (peer := self._cookie_peer(sid, addr, now)) is None:
            self._unknown_session(sid, addr, "data")
            return None
        peer.heard(now)
        if peer._addr != addr:
            self._path_frame(peer, addr, now)
        elif peer._paths:
            self._cancel_paths(peer, "old path alive")
        if peer._state is not _CONNECTED:
            self._set_state(peer, _CONNECTED, now)
        return peer

    def _on_control(self, frame: ControlFrame, addr: Hashable, now: float) -> None:
        kind = frame.kind
        sid = frame.session_id
        if kind == _CONNECT:
            self._on_connect(addr, now)
            return
        if kind == _CONNECTED_KIND:
            self._on_connected(sid, addr, now)
            return
        peer = self._peers.get(sid)
        if kind == _DISCONNECTED:
            if peer is None:  # never answered: two engines would bounce Disconnected for ever
                self._counters.unknown_session += 1
                self._emit(FrameRejected(addr, RejectReason.UNKNOWN_SESSION, "Disconnected"))
                return
            self._remove(peer, DisconnectReason.DISCONNECTED_BY_PEER, now)
            return
        if peer is None and (peer := self._cookie_peer(sid, addr, now)) is None:
            self._unknown_session(sid, addr, FrameKind(kind).name.capitalize())
            return
        peer.heard(now)
        if peer._addr != addr:
            self._path_frame(peer, addr, now)
        elif peer._paths:
            self._cancel_paths(peer, "old path alive")
        if peer._state is not _CONNECTED:
            self._set_state(peer, _CONNECTED, now)
        if kind == _HEARTBEAT:
            self._counters.heartbeats_in += 1
        else:  # ACK
            self._counters.acks_in += 1
            self._on_ack(peer, frame.payload, addr, now)

    def _on_connect(self, addr: Hashable, now: float) -> None:
        if not self._role & Role.BIND:
            self._reject(addr, "Connect to a socket that is not bound")
            return
        sid = self._admit(addr, now)
        if sid:
            self._queue_ctrl(codec.encode_control_frame(_CONNECTED_KIND, sid), addr)
            return
        if not self._half_open:
            self._counters.connects_refused += 1
            self._reject(addr, "Connect refused: peer table full")
            return
        # Full, but not of real peers: answer with a cookie and keep nothing (a flood of
        # Connects then costs one hash and one reply each, and cannot push anyone out).
        jar = self._cookies
        if jar is None:
            jar = self._cookies = CookieJar(self._opts.peer_keepalive, now)
        sid = jar.issue(addr, now)
        if sid == 0 or sid in self._peers:  # 2**-64 odds: the peer's next Connect retries
            self._counters.connects_refused += 1
            return
        self._counters.cookies_sent += 1
        self._queue_ctrl(codec.encode_control_frame(_CONNECTED_KIND, sid), addr)

    def _admit(self, addr: Hashable, now: float) -> int:
        """The session a ``Connect`` from ``addr`` gets: the peer's there already (a lost
        Connected or a duplicated Connect), else a new half-open peer's; 0 when the table is
        full (the caller decides)."""
        peer = self._by_addr.get(addr)
        if peer is not None:
            peer.heard(now)
            peer.sent(now)
            return peer._sid
        if len(self._peers) < self._opts.max_peers:
            peer = Peer(self._new_session_id(addr), addr, _HALF_OPEN, now, False)
            self._add(peer)
            return peer._sid
        return 0

    def _cookie_peer(self, sid: int, addr: Hashable, now: float) -> Peer | None:
        """The peer a frame with an unknown session creates when ``sid`` is the cookie we sent
        to ``addr`` (CONNECTED at once: the echo proved the address), else None."""
        jar = self._cookies
        if jar is None or not jar.outstanding(now):
            return None
        if not jar.verify(sid, addr, now):
            self._counters.cookies_rejected += 1
            return None
        old = self._by_addr.get(addr)
        if old is not None:
            if old._state is not _HALF_OPEN:
                return None  # the address has a live session: this one is stale
            self._remove(old, DisconnectReason.EVICTED, now)  # superseded by the verified one
        elif len(self._peers) >= self._opts.max_peers:
            if not self._half_open:
                self._counters.connects_refused += 1
                return None
            self._counters.peers_evicted += 1
            self._remove(next(iter(self._half_open.values())), DisconnectReason.EVICTED, now)
        peer = Peer(sid, addr, _HALF_OPEN, now, False)
        self._add(peer)
        self._counters.cookies_accepted += 1
        self._set_state(peer, _CONNECTED, now)
        return peer

    def _on_connected(self, sid: int, addr: Hashable, now: float) -> None:
        remote = self._remotes.get(addr)
        if remote is None:
            self._reject(addr, "Connected from an address this socket does not dial")
            return
        peer = remote.peer
        if peer is not None:
            if peer._sid == sid:
                peer.heard(now)  # a repeat of the handshake reply
            else:
                self._reject(addr, "Connected with another session while connected")
            return
        if sid == 0 or sid in self._peers:
            self._reject(addr, "Connected with an unusable session id")
            return
        peer = Peer(sid, addr, _HALF_OPEN, now, True)
        if remote.connects == 1:
            peer._handshake_rtt = now - remote.connect_at
        remote.connects = 0
        remote.peer = peer
        self._add(peer)
        self._set_state(peer, _CONNECTED, now)
        self._queue_ctrl(codec.encode_control_frame(_HEARTBEAT, sid), addr)
        self._counters.heartbeats_out += 1

    def _unknown_session(self, sid: int, addr: Hashable, what: str) -> None:
        self._counters.unknown_session += 1
        self._emit(FrameRejected(addr, RejectReason.UNKNOWN_SESSION, what))
        key = (sid, addr)
        if key in self._disc_pending:
            return
        self._disc_pending.add(key)
        self._queue_ctrl(codec.encode_control_frame(_DISCONNECTED, sid), addr)

    def _reject(self, addr: Hashable, detail: str) -> None:
        self._counters.unexpected += 1
        self._emit(FrameRejected(addr, RejectReason.UNEXPECTED, detail))

    def _path_frame(self, peer: Peer, addr: Hashable, now: float) -> None:
        """A frame of ``peer``'s session from another address: challenge it or validate it."""
        counters = self._counters
        paths = peer._paths
        if paths is None:
            paths = peer._paths = {}
        entry = paths.get(addr)
        if entry is not None and entry[1] + self._opts.peer_keepalive <= now:
            del paths[addr]
            self._path_rejected(peer, addr, "expired")
            entry = None
        if entry is None:
            if len(paths) >= MAX_PATH_CANDIDATES:
                oldest = next(iter(paths))
                del paths[oldest]
                self._path_rejected(peer, oldest, "too many candidates")
            paths[addr] = [0, now]
            self._queue_ctrl(codec.encode_control_frame(_HEARTBEAT, peer._sid), addr)
            counters.path_challenges += 1
            counters.heartbeats_out += 1
            return
        entry[0] += 1
        if entry[0] < PATH_VALIDATION_FRAMES:
            return
        old = peer._addr
        del paths[addr]
        self._cancel_paths(peer, "old path alive")  # the others lost: count them
        self._rebind(peer, addr)
        self._emit(PeerMoved(peer._sid, old, addr))

    def _cancel_paths(self, peer: Peer, reason: str) -> None:
        paths = peer._paths
        if paths:
            for addr in list(paths):
                self._path_rejected(peer, addr, reason)
            paths.clear()

    def _path_rejected(self, peer: Peer, addr: Hashable, reason: str) -> None:
        self._counters.paths_rejected += 1
        self._emit(PathRejected(peer._sid, addr, reason))

    def _rebind(self, peer: Peer, addr: Hashable) -> None:
        self._counters.addr_changes += 1
        by_addr = self._by_addr
        if by_addr.get(peer._addr) is peer:
            del by_addr[peer._addr]
        by_addr[addr] = peer
        peer._addr = addr

    # ------------------------------------------------------------------ peer table

    def _new_session_id(self, addr: Hashable) -> int:
        text = addr_text(addr)
        peers = self._peers
        for _ in range(16):
            sid = codec.session_id(self._rng.getrandbits(64), text)
            if sid and sid not in peers:
                return sid
        raise NbmqError("could not draw an unused session id")  # 2**-1000 odds; rng broken

    def _add(self, peer: Peer) -> None:
        timers = self._timers
        if len(timers) > 2 * len(self._peers) + 64:  # drop stale entries (a Connect flood)
            self._timers = [t for t in timers if t[2]._timer == t[0] and t[2]._state is not _CLOSED]
            heapq.heapify(self._timers)
        self._peers[peer._sid] = peer
        self._by_addr[peer._addr] = peer
        if peer._state is _HALF_OPEN:
            self._half_open[peer._sid] = peer
        self._arm(peer)

    def _set_state(self, peer: Peer, state: PeerState, now: float) -> None:
        """The one place a live peer changes state (HALF_OPEN -> CONNECTED)."""
        old = peer._state
        if old is state:
            return
        peer._state = state
        if old is _HALF_OPEN:
            self._half_open.pop(peer._sid, None)
        if state is _CONNECTED:
            self._ring.append(peer)
            self._arm(peer)  # heartbeats start: its deadline may be earlier now
            self._emit(PeerConnected(peer._sid, peer._addr))
            self._on_peer_connected(peer, now)

    def _remove(self, peer: Peer, reason: DisconnectReason, now: float) -> None:
        """The one place a peer leaves the table (-> CLOSED)."""
        old = peer._state
        if old is _CLOSED:
            return
        peer._state = _CLOSED
        self._peers.pop(peer._sid, None)
        if self._by_addr.get(peer._addr) is peer:
            del self._by_addr[peer._addr]
        if old is _HALF_OPEN:
            self._half_open.pop(peer._sid, None)
        else:
            self._ring.remove(peer)
            self._emit(PeerDisconnected(peer._sid, peer._addr, reason))
        if self._secure is not None:
            self._secure.retire(peer._sid)
        for remote in self._remotes.values():
            if remote.peer is peer:
                remote.peer = None
                self._send_connect(remote, now)  # dial again at once, then every reconnect_wait
        self._on_peer_removed(peer, reason, now)

    def _due(self, peer: Peer) -> float:
        due = peer._last_seen + self._opts.peer_keepalive
        if peer._state is _CONNECTED:
            beat = peer._last_sent + self._opts.peer_heartbeat_ivl
            if beat < due:
                return beat
        return due

    def _arm(self, peer: Peer) -> None:
        """Give ``peer`` one live timer entry at its current due time (older ones go stale)."""
        due = self._due(peer)
        peer._timer = due
        self._timer_seq += 1
        heapq.heappush(self._timers, (due, self._timer_seq, peer))

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> None:
        """Do whatever is due at ``now``: heartbeats, keepalive expiry, reconnects (and, in
        the sockets, resends and queue expiry). Early calls do nothing harmful; a late call
        catches up on everything overdue in one go (one heartbeat per peer, not one per missed
        interval).

        May queue output and events: flush with :meth:`datagrams_to_send`, drain
        :meth:`next_event`. Mutates engine state.
        """
        self._now = now
        if self._closed:
            return
        self._tick_peers(now)
        for remote in self._remotes.values():
            if remote.peer is None and remote.next_connect <= now:
                self._send_connect(remote, now)

    def _tick_peers(self, now: float) -> None:
        timers = self._timers
        keepalive = self._opts.peer_keepalive
        heartbeat = self._opts.peer_heartbeat_ivl
        while timers and timers[0][0] <= now:
            due, _, peer = heapq.heappop(timers)
            state = peer._state
            if state is _CLOSED or peer._timer != due:
                continue  # stale entry
            if peer._last_seen + keepalive <= now:
                if state is _HALF_OPEN:
                    self._counters.half_open_expired += 1
                self._remove(peer, DisconnectReason.KEEPALIVE_EXPIRED, now)
                continue
            if state is _CONNECTED and peer._last_sent + heartbeat <= now:
                self._queue_ctrl(codec.encode_control_frame(_HEARTBEAT, peer._sid), peer._addr)
                self._counters.heartbeats_out += 1
                peer.sent(now)
            self._arm(peer)

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has work, seconds on the caller's clock, or None.

        The earliest of: a heartbeat or keepalive expiry, a reconnect, a resend, a queue
        expiry run, the time queued Acks are due (at most ``ACK_DELAY`` after the first). When
        other output is waiting (queued control frames, or data frames held back by
        ``max_tick_send`` with a peer to take them) it is the time of the last call, i.e. "now":
        call ``tick`` and flush again. Pure (does not change state, apart from discarding stale
        internal timer entries).
        """
        ctrl = self._ctrl
        if self._closed:
            return self._now if ctrl else None
        best: float | None = None
        if ctrl:
            if len(ctrl) > self._acks_held:
                return self._now
            best = self._ack_due
        if self._output_ready():
            return self._now
        timers = self._timers
        while timers and (timers[0][2]._state is _CLOSED or timers[0][2]._timer != timers[0][0]):
            heapq.heappop(timers)
        if timers and (best is None or timers[0][0] < best):
            best = timers[0][0]
        for remote in self._remotes.values():
            if remote.peer is None and (best is None or remote.next_connect < best):
                best = remote.next_connect
        other = self._queue_deadline()
        if other is not None and (best is None or other < best):
            best = other
        return best

    # ------------------------------------------------------------------ outbound

    def datagrams_to_send(self, now: float) -> list[Datagram]:
        """Everything queued for the network: control frames, resends, then up to
        ``max_tick_send`` new data frames (the rest stay queued; :meth:`next_deadline` then
        says "now"). When the control frames are only held Acks (``ACK_DELAY``) they come
        after the data frames.

        Args:
            now: seconds (monotonic); stamps ``last_sent`` of the peers written to.

        Returns:
            A new list of ``(datagram, addr)``. A datagram is ``bytes`` (control frames, and
            every frame in secure mode, sealed here; a sealed bundle of 32 KiB or more is a
            ``bytearray`` whose buffer a later bundle reuses only once nobody holds it) or a
            ``memoryview`` into a message buffer the engine never reuses (data frames); the
            transport may keep or send it as it likes. Mutates engine state.
        """
        self._now = now
        out = self._ctrl
        self._ctrl = []
        held = self._acks_held
        self._acks_held = 0
        if out:
            self._disc_pending.clear()
        if not self._closed:
            if held and held == len(out):
                # only held Acks: they go after the data frames (a reply), so that the peer,
                # woken by the data it waits for, finds the Acks read with it, not before it
                data: list[Datagram] = []
                self._take_data(now, data)
                if data:
                    data += out
                    out = data
            else:
                self._take_data(now, out)
        secure = self._secure
        if secure is not None and out:
            out, merged, added, unsealed = secure.seal_all(out)
            self._ctrl_bytes += added
            self._ctrl_out -= merged  # datagrams_out counts datagrams: a bundle is one
            self._counters.secure_unsealed += unsealed
        return out

    def _hold_acks(self, queued: int) -> None:
        """Note ``queued`` Acks just appended to the control queue (``_ctrl``) as able to wait
        until ``ACK_DELAY`` after the first held one (``self._now``, seconds)."""
        if not self._acks_held:
            self._ack_due = self._now + ACK_DELAY
        self._acks_held += queued

    def _queue_ctrl(self, frame: bytes, addr: Hashable) -> None:
        ctrl = self._ctrl
        if len(ctrl) >= MAX_CONTROL_QUEUE:
            self._counters.control_dropped += 1
            return
        ctrl.append((frame, addr))
        self._ctrl_out += 1
        self._ctrl_bytes += len(frame)

    def _send_connect(self, remote: _Remote, now: float) -> None:
        secure = self._secure
        if secure is None:
            self._queue_ctrl(_CONNECT_FRAME, remote.addr)
        else:  # a new handshake each time: a fresh ephemeral key
            self._queue_ctrl(_SECURE_CONNECT_HEAD + secure.connect_payload(remote.addr), remote.addr)
        self._counters.connects_out += 1
        remote.next_connect = now + self._opts.reconnect_wait
        remote.connect_at = now
        remote.connects += 1

    def _emit(self, event: Event) -> None:
        events = self._events
        if len(events) >= self._opts.max_events:
            self._counters.events_dropped += 1
            return
        events.append(event)

    def _check_open(self) -> None:
        if self._closed:
            raise NbmqError("the engine is closed")

    # ------------------------------------------------------------------ hooks (sockets.py)

    def _on_data(self, frame: DataFrame, data: Any, peer: Peer, now: float) -> None:
        """A data frame from a known peer arrived (its liveness is already updated)."""
        self._reject(peer._addr, "data frame to a connection without a messaging layer")

    def _on_ack(self, peer: Peer, payload: memoryview, addr: Hashable, now: float) -> None:
        """An Ack from a known peer arrived."""
        self._reject(addr, "Ack to a socket that sends no acked frames")

    def _on_peer_connected(self, peer: Peer, now: float) -> None:
        """A peer became CONNECTED."""

    def _on_peer_removed(self, peer: Peer, reason: DisconnectReason, now: float) -> None:
        """A peer left the table."""

    def _on_close(self, now: float) -> None:
        """The engine is closing (drop queues)."""

    def _output_ready(self) -> bool:
        """True when :meth:`_take_data` would hand out data frames now."""
        return False

    def _take_data(self, now: float, out: list[Datagram]) -> None:
        """Append new data frames to ``out`` (the messaging layer's part of the flush)."""

    def _queue_deadline(self) -> float | None:
        """The queueing layer's next deadline (resends, expiry)."""
        return None

    def _sync_counters(self) -> None:
        counters = self._counters
        if self._secure is not None:
            counters.secure_rekeys = self._secure.rekeys
        counters.datagrams_out = self._ctrl_out
        counters.bytes_out = self._ctrl_bytes
        counters.data_frames_in = (
            counters.datagrams_in
            + self._bundled_in
            - counters.malformed
            - counters.control_frames_in
            - self._secure_unopened
        )


_parse_frame = codec.parse_frame
