"""The messaging layer: Dealer, SafeDealer, Radio and Dish engines, sans-IO.

Each socket type is a :class:`~nbmq.engine.connection.Connection` (handshake, liveness, peer
table) joined to the queueing layer (:class:`~nbmq.engine.queues.SendQueue`,
:class:`~nbmq.engine.queues.RecvQueue`). The surface, identical for every type::

    engine = Dealer(options=None, rng=None)         # or Dealer.bound(addr) / .connecting(addr, now)
    engine.bind(local_addr)                          # accept Connect frames
    engine.connect(remote_addr, now)                 # dial (queues Connect)
    engine.receive_datagram(data, addr, now)         # feed what the network gave
    engine.datagrams_to_send(now) -> [(data, addr)]  # what to put on the network
    engine.send(parts, now)                          # WouldBlock at send_hwm
    engine.recv() -> parts                           # WouldBlock when none
    engine.tick(now)                                 # heartbeats, keepalive, resend, expiry
    engine.next_deadline() -> float | None
    engine.next_event() -> Event | None
    engine.counters, engine.peers

The flush rule (STYLE.md section 3): after every call that takes input or ``now`` (``connect``,
``receive_datagram``, ``send``, ``tick``, ``close``) the driver calls ``datagrams_to_send`` and
drains ``next_event``, then sleeps until ``next_deadline()`` or the next datagram.

Socket types (seed 000):

- :class:`Dealer`: duplex, fire and forget. Messages go to connected peers in turn
  (round-robin per message); messages sent while no peer is connected wait in the one queue.
- :class:`SafeDealer`: a Dealer whose every data frame is acked by the receiver
  (``Ack(session, fnv1a64(frame))``), resent every ``safe_resend_ivl`` until acked, at most
  ``safe_resend_limit`` times; the receiver acks every data frame (duplicates too) and drops
  repeats of messages delivered within the dedup window.
- :class:`Radio`: send-only; each message goes to every peer connected at that moment, each
  copy with its own message id (as the reference does). With no peer it is dropped and counted
  (pub/sub). ``recv`` raises :class:`~nbmq.errors.NotSupported`.
- :class:`Dish`: receive-only peer of Radio. ``send`` raises NotSupported.

Message ids only need to be unique per session (ARCHITECTURE, "Message id"): each is FNV-1a 64
over the sender's nonce alone. The reference hashes the message's bytes first, about 1.1 ns per
byte (73 us for 64 KiB, more than cutting it into frames), for nothing a receiver checks; with
``reference_compat`` the ids are the reference's, over the parts then the nonce. Nonces count
as the reference's do: Dealer from 1, SafeDealer and Radio from 0.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from .. import codec, extensions
from ..errors import DecodeError, InteropError, NotSupported, OptionError, WouldBlock
from ..events import DatagramsDropped, DisconnectReason, DropReason, MessageDropped
from ..options import FIXED_OPTIONS, SocketOptions
from ..wire import FNV_OFFSET_BASIS, VERSION, ControlFrame, DataFrame, FrameKind
from . import queues
from .connection import _CONNECTED, MAX_CONTROL_QUEUE, Connection, Datagram
from .counters import PathState
from .peers import Peer
from .queues import PushResult, RecvQueue, SendQueue, hwm_count

__all__ = ["Socket", "Dealer", "SafeDealer", "Radio", "Dish"]

Parts = list[np.ndarray]
Buffer = Any  # bytes-like: bytes, bytearray, memoryview, numpy uint8
_S = TypeVar("_S", bound="Socket")

_COMPLETE = PushResult.COMPLETE
_DROPPED = PushResult.DROPPED
_DUPLICATE = PushResult.DUPLICATE
_DROP_FOR = {
    PushResult.DROPPED: DropReason.RECV_HWM,
    PushResult.REJECTED: DropReason.REJECTED,
    PushResult.TOO_LARGE: DropReason.TOO_LARGE,
}
_ACK = FrameKind.ACK
_ACK_FRAME = struct.Struct(">BBQQ")  # an Ack: the control header, then the 8-byte hash
_MAX_CHUNK = codec.MAX_CHUNK_SIZE


def _load_fast() -> Any:
    """The compiled hot path (:mod:`nbmq.engine._fast`) when the codec is compiled too (its
    receive loop does what the compiled Reassembler does); None: the Python code here runs."""
    return extensions.load("nbmq.engine._fast", needs="nbmq._codec")


class SocketStatePy:
    """The fields of :class:`Socket` that the compiled ``send`` reads and writes (the
    pure-Python twin of ``nbmq.engine._queue_state.SocketState``, which holds them as C
    fields): ``_closed``, ``_reference_compat``, ``_now``, ``_nonce``, ``_sendq``, ``_opts``.
    Meanings: see :class:`~nbmq.engine.connection.Connection` and :class:`Socket`."""

    __slots__ = ("_closed", "_reference_compat", "_now", "_nonce", "_sendq", "_opts")


if TYPE_CHECKING:
    _SocketState = SocketStatePy
else:  # the queues' module chose: the compiled fields, or the twin's slots
    _SocketState = SocketStatePy if queues._compiled_state is None else queues._compiled_state.SocketState


class Socket(Connection, _SocketState):
    """What every socket type shares: the queues, ``send``/``recv``, ``tick`` and the flush.

    Args:
        options: a :class:`~nbmq.options.SocketOptions` (copied), or None for the defaults.
        rng: a ``random.Random`` for session ids (None: ``random.SystemRandom()``).
    """

    #: Can this type send / receive messages?
    CAN_SEND = True
    CAN_RECV = True
    #: Acked frames, resends and dedup (SafeDealer).
    SAFE = False
    #: First nonce (reference: Dealer 1, SafeDealer 0, Radio 0).
    FIRST_NONCE = 1

    def __init__(self, options: SocketOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)
        opts = self._opts
        self._nonce = self.FIRST_NONCE
        self._reference_compat = opts.reference_compat  # (read per message; set_option keeps it)
        self._sendq = SendQueue(
            opts.send_hwm,
            safe=self.SAFE,
            resend_ivl=opts.safe_resend_ivl,
            resend_limit=opts.safe_resend_limit,
            on_drop=self._dropped,
            congestion=self.SAFE and opts.safe_congestion,
        )
        self._recvq = RecvQueue(
            opts.recv_hwm,
            opts.uncompleted_message_ttl,
            opts.queue_maint_ivl,
            dedup_ttl=self._dedup_window(),
            max_message_size=opts.max_message_size,
            max_incomplete_bytes=opts.max_incomplete_bytes,
            refuse_when_full=self.SAFE,
            max_peer_incomplete_bytes=opts.max_peer_incomplete_bytes,
            on_drop=self._dropped,
        )
        self._max_tick_send = opts.max_tick_send
        self._ready = self._recvq._ready

    def _dedup_window(self) -> float | None:
        if not self.SAFE:
            return None
        opts = self._opts
        # The window must outlast the sender's last resend, or a late resend of a message
        # already delivered would be delivered again.
        horizon = opts.safe_resend_ivl * (opts.safe_resend_limit + 1)
        return max(opts.safe_hash_dedup_ttl, horizon)

    def set_option(self, name: str, value: int | float) -> None:
        """Change one option of this running engine (validated as
        :class:`~nbmq.options.SocketOptions` does); it takes effect at once.

        Transport-level options (``max_tick_recv``, ``sndbuf``, ``rcvbuf``, ``linger``) are
        only recorded. Lowering ``send_hwm`` / ``recv_hwm`` below what is held drops nothing:
        it only refuses more until the count falls. Queues nothing.

        Raises:
            OptionError: an unknown name, a bad value, or a secure-mode key (fixed at creation);
                the engine is then unchanged.
        """
        if name in FIXED_OPTIONS:
            raise OptionError(f"{name} is fixed when the socket is made (pass it to bind or connect)")
        opts = self._opts
        setattr(opts, name, value)
        value = getattr(opts, name)
        sendq = self._sendq
        recvq = self._recvq
        if name == "send_hwm":
            sendq.send_hwm = hwm_count(int(value))
        elif name == "recv_hwm":
            recvq.recv_hwm = hwm_count(int(value))
        elif name == "max_tick_send":
            self._max_tick_send = int(value)
        elif name == "reference_compat":
            self._reference_compat = bool(value)
        elif name == "safe_resend_ivl":
            sendq.resend_ivl = float(value)
        elif name == "safe_resend_limit":
            sendq.resend_limit = int(value)
        elif name == "uncompleted_message_ttl":
            recvq.ttl = float(value)
        elif name == "queue_maint_ivl":
            recvq.maint_ivl = float(value)
            recvq._next_maint = min(recvq._next_maint, self._now + float(value))
        elif name == "max_message_size":
            recvq.reassembler.max_message_size = int(value)
        elif name == "max_incomplete_bytes":
            recvq.reassembler.max_incomplete_bytes = int(value)
        elif name == "max_peer_incomplete_bytes":
            recvq.reassembler.max_peer_incomplete_bytes = int(value)
        elif name in ("peer_keepalive", "peer_heartbeat_ivl"):
            for peer in self._peers.values():  # deadlines may be earlier now
                self._arm(peer)
        elif name == "reconnect_wait":
            for remote in self._remotes.values():
                remote.next_connect = min(remote.next_connect, self._now + float(value))
        if name in ("safe_resend_ivl", "safe_resend_limit", "safe_hash_dedup_ttl"):
            recvq.dedup_ttl = self._dedup_window()

    # ------------------------------------------------------------------ constructors

    @classmethod
    def bound(
        cls: type[_S],
        local_addr: Hashable = None,
        options: SocketOptions | None = None,
        rng: random.Random | None = None,
    ) -> _S:
        """A new engine in the bound role (``engine.bind(local_addr)``). Queues nothing."""
        engine = cls(options, rng)
        engine.bind(local_addr)
        return engine

    @classmethod
    def connecting(
        cls: type[_S],
        remote_addr: Hashable,
        now: float,
        options: SocketOptions | None = None,
        rng: random.Random | None = None,
    ) -> _S:
        """A new engine dialling ``remote_addr`` (``engine.connect(remote_addr, now)``): queues
        a Connect, so flush with :meth:`datagrams_to_send`."""
        engine = cls(options, rng)
        engine.connect(remote_addr, now)
        return engine

    # ------------------------------------------------------------------ messages

    def send(self, parts: Sequence[Buffer], now: float) -> None:
        """Queue one multipart message (its frames go out on the next flush).

        The parts are copied once, into the message's frame buffer (``codec.shard_message``),
        so the caller may reuse them as soon as this returns. Messages wait in the socket's one
        queue until a peer is connected (Radio: see :class:`Radio`).

        Args:
            parts: 1..255 bytes-like parts (bytes, bytearray, memoryview, numpy uint8); empty
                parts and ``[b""]`` are carried.
            now: seconds (monotonic).

        Raises:
            WouldBlock: ``send_hwm`` messages are held; nothing was queued.
            NotSupported: on a Dish.
            InteropError: ``reference_compat`` is set and a part is empty (the Rust reference
                would lose the message); nothing was queued.
            NbmqError: the engine is closed.
            TypeError / ValueError: ``parts`` is not 1..255 buffers or is over 4 GiB.

        Queues output: flush with :meth:`datagrams_to_send`. Mutates state.
        """
        if not self.CAN_SEND:
            raise NotSupported(f"{type(self).__name__} cannot send")
        if self._closed:
            self._check_open()
        if self._reference_compat:
            _check_reference_compat(parts)
        self._now = now
        sendq = self._sendq
        sendq.check_room()
        nonce = self._nonce
        message_id = codec.message_id(parts if self._reference_compat else (), nonce)
        if len(parts) == 1 and type(parts[0]) is bytes and len(parts[0]) <= _MAX_CHUNK:
            sendq.push_small(parts[0], message_id)  # immutable: no copy, one frame later
        else:
            sendq.push(codec.shard_message(parts, 0, message_id), message_id)
        self._nonce = nonce + 1

    def send_packed(self, data: Buffer, offsets: Any, lengths: Any, now: float) -> int:
        """Queue one-part messages packed back to back in one buffer, in order, while fewer
        than ``send_hwm`` are held: the batch form of :meth:`send` (the twin of
        :meth:`recv_packed`). Each message's bytes are copied once, as :meth:`send` copies.

        Args:
            data: a bytes-like buffer (bytes, bytearray, memoryview, uint8 numpy array).
            offsets, lengths: integer sequences or arrays of one shape ``(n,)`` (converted to
                ``int64``): message ``i`` is ``data[offsets[i] : offsets[i] + lengths[i]]``, bytes.
            now: seconds (monotonic).

        Returns:
            How many messages were queued (the first ones; 0 when ``send_hwm`` is reached).

        Raises:
            ValueError: ``offsets``/``lengths`` are not integers, differ in length, or name
                bytes outside ``data`` (checked before anything is queued).
            NotSupported: on a Dish. NbmqError: the engine is closed.

        Queues output: flush with :meth:`datagrams_to_send`. Mutates state.
        """
        if not self.CAN_SEND:
            raise NotSupported(f"{type(self).__name__} cannot send")
        view = memoryview(data).cast("B")
        offs, lens = packed_ranges(offsets, lengths, len(view))
        send = self.send
        taken = 0
        for off, size in zip(offs.tolist(), lens.tolist()):
            if not self.send_ready:
                break
            send([bytes(view[off : off + size])], now)
            taken += 1
        return taken

    def recv(self) -> Parts:
        """The oldest completed message.

        Returns:
            Its parts: a list of 1-D ``uint8`` numpy arrays, shape ``(part_size,)``, which own
            their memory (the reassembler copied each chunk into them; a one-frame message
            waits as bytes in the compiled queue's arena and is copied out here; the engine
            keeps no reference). ``bytes(part)`` or ``part.tobytes()`` gives bytes.

        Raises:
            WouldBlock: no message is ready.
            NotSupported: on a Radio.

        Mutates the receive queue; queues no output.
        """
        if not self.CAN_RECV:
            raise NotSupported(f"{type(self).__name__} cannot receive")
        try:
            return self._ready.popleft()  # RecvQueue.pull(), inlined: the hot path
        except IndexError:
            raise WouldBlock("no message ready") from None

    def recv_packed(self, max_messages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The oldest completed one-part messages, at most ``max_messages`` (int >= 1), packed
        back to back into one buffer: the batch form of :meth:`recv`, one array per call
        instead of one per message.

        Returns:
            ``(data, offsets, lengths)``: ``data`` a 1-D ``uint8`` array (owning its memory) of
            all their bytes, ``offsets`` and ``lengths`` 1-D ``int64`` arrays of shape ``(n,)``:
            message ``i`` is ``data[offsets[i] : offsets[i] + lengths[i]]`` (n >= 1).

        Raises:
            WouldBlock: no message is ready. NotSupported: on a Radio. ValueError: the oldest
            message has several parts (it stays queued: take it with :meth:`recv`); packing
            stops before a multipart message otherwise.

        Mutates the receive queue; queues no output.
        """
        if not self.CAN_RECV:
            raise NotSupported(f"{type(self).__name__} cannot receive")
        ready = self._ready
        if not ready:
            raise WouldBlock("no message ready")
        packed: tuple[np.ndarray, np.ndarray, np.ndarray] | None
        if type(ready) is deque:
            packed = _pack_ready(ready, max_messages)
        else:  # the compiled ReadyQueue packs its own
            packed = cast(Any, ready).pack(max_messages)
        if packed is None:
            raise ValueError(
                f"the oldest message has {len(ready[0])} parts: recv_packed takes one-part messages, recv() takes it"
            )
        return packed

    def kernel_dropped(self, count: int) -> None:
        """Record ``count`` datagrams (int > 0) the OS dropped before they reached this engine
        (the transport reads the kernel's count, e.g. Linux ``SO_RXQ_OVFL``): adds to
        ``counters.kernel_drops`` and emits :class:`~nbmq.events.DatagramsDropped`. Loss is
        never silent, even when it happens below us. Queues an event only."""
        counters = self._counters
        counters.kernel_drops += count
        self._emit(DatagramsDropped(count, counters.kernel_drops))

    def events_discarded(self, count: int) -> None:
        """Record ``count`` events (int > 0) a driver dropped from its own event queue, which
        keeps at most ``max_events`` (the oldest go first): adds to ``counters.events_dropped``,
        so a driver's trimming is counted like the engine's own. Queues nothing."""
        self._counters.events_dropped += count

    @property
    def ready_queue(self) -> Any:
        """The completed messages, oldest first: the queue :meth:`recv` pops, the same object
        for the engine's life: a ``collections.deque`` of part lists, or with the extensions
        built its compiled twin ``nbmq.engine._queue_state.ReadyQueue`` (the same ``popleft``,
        ``len`` and truth). A driver may take messages from its left end (``popleft``) instead
        of calling :meth:`recv` once per message; nothing else may change it. Always empty on
        a Radio."""
        return self._ready

    def recv_ready(self) -> int:
        """Completed messages waiting for :meth:`recv`."""
        return len(self._ready)  # len(self._recvq), inlined: polled once per message

    @property
    def incomplete_messages(self) -> int:
        """Messages partly received (held by the reassembler until complete or expired)."""
        return self._recvq.incomplete

    @property
    def frames_in_flight(self) -> int:
        """Data frames sent and not yet acked (SafeDealer; 0 otherwise)."""
        return self._sendq.in_flight

    @property
    def pending_messages(self) -> int:
        """Messages the socket still holds for sending (queued, or awaiting acks): what
        ``send_hwm`` bounds and a lingering close waits for."""
        return self._sendq.held

    @property
    def send_ready(self) -> bool:
        """True when :meth:`send` would take a message now (fewer than ``send_hwm`` held)."""
        return not self._sendq.full()

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> None:
        """Do whatever is due at ``now``: heartbeats, keepalive expiry, reconnects, resends
        (SafeDealer), incomplete-message and dedup expiry (every ``queue_maint_ivl``). Early
        calls do nothing harmful; a late call catches up in one go.

        May queue output and events: flush with :meth:`datagrams_to_send`, drain
        :meth:`next_event`. Mutates state.
        """
        Connection.tick(self, now)
        if self._closed:
            return
        if self.SAFE:
            self._sendq.resend_due(now, self._ctrl)
            self._sendq.pace_due(now)
        recvq = self._recvq
        if now >= recvq._next_maint:
            for sid, mid in recvq.maintain(now):
                self._dropped(sid, mid, DropReason.TTL_EXPIRED)

    def _queue_deadline(self) -> float | None:
        best = self._recvq.next_deadline()
        if self.SAFE:
            sendq = self._sendq
            for due in (sendq.next_resend(), sendq.next_send()):
                if due is not None and (best is None or due < best):
                    best = due
        return best

    # ------------------------------------------------------------------ hooks

    def _dropped(self, session_id: int, message_id: int, reason: DropReason) -> None:
        self._counters.dropped[reason] += 1
        self._emit(MessageDropped(session_id, message_id, reason))

    def _on_data(self, frame: DataFrame, data: Any, peer: Peer, now: float) -> None:
        if not self.CAN_RECV:
            self._reject(peer._addr, "data frame to a send-only socket")
            return
        result = self._recvq.push(frame, now)
        if result > _COMPLETE:
            self._data_result(result, frame)

    def _receive_unacked(self, data: Any, addr: Hashable, now: float) -> None:
        """Feed one datagram the network delivered (Dealer's and Dish's ``receive_datagram``).

        Args:
            data: the datagram, any bytes-like object; may be a view of a buffer the transport
                reuses after this call (a data chunk is copied once, into its message).
            addr: where it came from (hashable; ``(host, port)`` for UDP).
            now: arrival time, seconds (monotonic).

        The contract of :meth:`Connection.receive_datagram`: never raises for bad input
        (counted and reported as events); may queue output: flush with
        :meth:`datagrams_to_send` after calling this, and drain :meth:`next_event`. For a data
        frame of a connected peer on its known path, ``_on_data`` and ``RecvQueue.push``
        (without dedup or refusal, which these types do not use) are inlined: the
        per-message hot path. Every other frame and every failed push takes the
        shared code, so behaviour, counters and events are unchanged."""
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
        if frame.__class__ is not DataFrame:
            counters.control_frames_in += 1
            self._on_control(frame, addr, now)  # type: ignore[arg-type]
            return
        peer = self._peers.get(frame[0])
        if peer is None or peer._addr != addr or peer._paths or peer._state is not _CONNECTED:
            peer = self._data_peer(frame[0], peer, addr, now)
            if peer is None:
                return
        else:
            peer.heard(now)
        recvq = self._recvq
        if recvq._dedup is not None or recvq.refuse_when_full:  # (set by a subclass)
            self._on_data(frame, data, peer, now)
            return
        # RecvQueue.push without dedup or refusal, inlined; errors and evictions go to push
        reassembler = recvq.reassembler
        evicted = reassembler.evicted
        try:
            parts = reassembler.add(frame, now)
        except DecodeError as exc:  # FrameTooLarge too
            self._data_result(recvq.push_failed(exc, evicted), frame)
            return
        if reassembler.evicted != evicted:
            recvq.report_evicted()
        if parts is None:
            return
        ready = recvq._ready
        if len(ready) >= recvq.recv_hwm:
            recvq.dropped_hwm += 1
            self._data_result(_DROPPED, frame)
            return
        ready.append(parts)
        recvq.completed += 1

    def _receive_batch_unacked(
        self, buffer: Any, offsets: list[int], lengths: list[int], addrs: list[Hashable], now: float
    ) -> None:
        """Dealer's and Dish's ``receive_datagrams`` (see
        :meth:`Connection.receive_datagrams`: the same as :meth:`receive_datagram` for each
        datagram in turn; may queue output: flush with :meth:`datagrams_to_send`).

        The fast case of :meth:`_receive_unacked` (a data frame of a connected peer on its
        known path) runs in this one loop with the engine's state in locals (counters are
        summed per batch); every other datagram goes through :meth:`receive_datagram`
        itself, after the counters are brought up to date."""
        recvq = self._recvq
        if self._closed or recvq._dedup is not None or recvq.refuse_when_full:
            Connection.receive_datagrams(self, buffer, offsets, lengths, addrs, now)
            return
        self._now = now
        counters = self._counters
        peers = self._peers
        ready = recvq._ready
        reassembler = recvq.reassembler
        parse = _parse_frame
        slow = self.receive_datagram
        count = nbytes = completed = 0
        batch = zip(offsets, lengths, addrs)
        for offset, length, addr in batch:
            data = buffer[offset : offset + length]
            try:
                frame = parse(data)
            except DecodeError:
                frame = None
            if frame.__class__ is DataFrame:
                peer = peers.get(frame[0])
                if peer is not None and peer._addr == addr and not peer._paths and peer._state is _CONNECTED:
                    peer.heard(now)
                    count += 1
                    nbytes += len(data)
                    evicted = reassembler.evicted
                    try:
                        parts = reassembler.add(frame, now)
                    except DecodeError as exc:  # FrameTooLarge too
                        self._data_result(recvq.push_failed(exc, evicted), frame)
                        continue
                    if reassembler.evicted != evicted:
                        recvq.report_evicted()
                    if parts is None:
                        continue
                    if len(ready) < recvq.recv_hwm:
                        ready.append(parts)
                        completed += 1
                    else:
                        recvq.dropped_hwm += 1
                        self._data_result(_DROPPED, frame)
                    continue
            counters.datagrams_in += count
            counters.bytes_in += nbytes
            recvq.completed += completed
            count = nbytes = completed = 0
            slow(data, addr, now)
            if self._closed or recvq.reassembler is not reassembler:
                for offset, length, addr in batch:  # the rest, one by one
                    slow(buffer[offset : offset + length], addr, now)
                return
        counters.datagrams_in += count
        counters.bytes_in += nbytes
        recvq.completed += completed

    def _data_result(self, result: PushResult, frame: DataFrame) -> None:
        if result is PushResult.DUPLICATE:
            self._counters.duplicate_frames += 1
        elif result is PushResult.REFUSED:
            self._counters.refused_frames += 1
        else:
            self._dropped(frame.session_id, frame.message_id, _DROP_FOR[result])

    def _output_ready(self) -> bool:
        return self._sendq.ready(bool(self._ring))

    def _take_data(self, now: float, out: list[Datagram]) -> None:
        sendq = self._sendq
        if sendq._queue:
            if _fast is not None:  # SendQueue.take's small-message case, compiled
                _fast.take(sendq, now, self._max_tick_send, out, self._ring)
            else:
                sendq.take(now, self._max_tick_send, out, self._ring)

    def _on_peer_removed(self, peer: Peer, reason: DisconnectReason, now: float) -> None:
        # Its queued and in-flight frames are dropped lazily (PEER_GONE); its incomplete
        # messages can never complete (a reconnect is a new session): release their budget now.
        for sid, mid in self._recvq.drop_session(peer._sid):
            self._dropped(sid, mid, DropReason.PEER_GONE)

    def _on_close(self, now: float) -> None:
        self._sendq.clear(DropReason.CLOSED)
        self._recvq.clear()
        self._ready = self._recvq._ready

    def _sync_counters(self) -> None:
        Connection._sync_counters(self)
        counters = self._counters
        sendq = self._sendq
        recvq = self._recvq
        counters.messages_out = sendq.pushed
        counters.messages_in = recvq.completed
        counters.data_frames_out = sendq.frames_out
        counters.resends = sendq.resends
        counters.resend_bytes = sendq.resend_bytes
        counters.acks_unknown = sendq.acks_unknown
        counters.datagrams_out = self._ctrl_out + sendq.frames_out + sendq.resends
        counters.bytes_out = self._ctrl_bytes + sendq.bytes_out + sendq.resend_bytes
        counters.duplicate_frames = recvq.duplicates + recvq.reassembler.duplicates
        counters.paths = {peer._sid: PathState.of(win) for peer, win in sendq.windows.items()}


def packed_ranges(offsets: Any, lengths: Any, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``offsets`` and ``lengths`` of messages packed in a buffer of ``size`` bytes, checked
    (``send_packed``'s check, for both twins): two 1-D ``int64`` arrays of one length.

    Raises:
        ValueError: not integers, not 1-D, lengths differ, or a range outside the buffer
            (naming the first such message).
    """
    arrays = []
    for values in (offsets, lengths):
        try:
            array = np.ascontiguousarray(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"offsets and lengths must be integers: {exc}") from None
        if array.ndim != 1:
            raise ValueError(f"offsets and lengths must be 1-D, got shape {array.shape}")
        arrays.append(array)
    offs, lens = arrays
    if offs.size != lens.size:
        raise ValueError(f"offsets and lengths differ in length ({offs.size} and {lens.size})")
    bad = np.flatnonzero((offs < 0) | (lens < 0) | (offs > size - lens))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"message {i} (offset {offs[i]}, length {lens[i]}) lies outside data ({size} bytes)")
    return offs, lens


def _pack_ready(ready: Any, max_messages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Pop up to ``max_messages`` one-part messages off ``ready`` (a deque of part lists) and
    pack them (see :meth:`Socket.recv_packed`); None when the first is multipart (popped: none)."""
    parts: list[np.ndarray] = []
    while ready and len(parts) < max_messages and len(ready[0]) == 1:
        parts.append(ready.popleft()[0])
    if not parts:
        return None
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    offsets = np.zeros(len(parts), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return np.concatenate(parts), offsets, lengths


def _check_reference_compat(parts: Sequence[Buffer]) -> None:
    """Refuse what the Rust reference (nbmq 0.2.0) would lose: it emits no frame for an empty
    part, so its receiver never completes such a message."""
    _check_parts(parts)
    for index, part in enumerate(parts):
        if not memoryview(part).nbytes:
            raise InteropError(
                f"part {index} is empty: the Rust reference drops messages with empty parts "
                "(reference_compat=True refuses them)"
            )


def _check_parts(parts: Sequence[Buffer]) -> None:
    """The argument checks ``codec.shard_message`` makes, for a send that shards nothing."""
    if isinstance(parts, (bytes, bytearray, memoryview, str)):
        raise TypeError("parts must be a sequence of buffers, not one buffer")
    if not 1 <= len(parts) <= codec.MAX_PARTS:
        raise ValueError(f"a message has 1..{codec.MAX_PARTS} parts, got {len(parts)}")
    for part in parts:
        memoryview(part)


_fast = _load_fast()
if _fast is not None:
    _fast.install(Socket.send, Socket._receive_unacked, packed_ranges)


class Dealer(Socket):
    """Duplex, fire-and-forget socket: messages go to connected peers in turn (round-robin).

    See :mod:`nbmq.engine.sockets` for the surface. Nonces count from 1 (reference). With the
    extensions built, ``send``, ``receive_datagrams`` and the queue's ``take`` run compiled
    (:mod:`nbmq.engine._fast`), with the same effects as the code here.
    """

    receive_datagram = Socket._receive_unacked
    receive_datagrams = Socket._receive_batch_unacked
    if _fast is not None:
        send = _fast.send
        send_packed = _fast.send_packed
        receive_datagram = _fast.receive_one
        receive_datagrams = _fast.receive_batch


class SafeDealer(Socket):
    """A Dealer whose data frames are acked, resent and de-duplicated.

    Sender: every data frame is kept until ``Ack(session, codec.ack_hash(frame))`` arrives,
    resent every ``safe_resend_ivl``, at most ``safe_resend_limit`` times; then its message is
    dropped (``MessageDropped(RESEND_LIMIT)``). A message counts against ``send_hwm`` until
    every frame is acked. Acks for unknown hashes are ignored and counted.

    Receiver: acks every data frame it takes, duplicates included; drops frames of messages
    delivered within ``max(safe_hash_dedup_ttl, safe_resend_ivl * (safe_resend_limit + 1))``
    seconds (a window that really expires, renewed by a repeat in its second half, since
    congestion control may space resends wider than ``safe_resend_ivl``); while ``recv_hwm`` messages wait it refuses new
    frames without acking them, so the sender resends later (backpressure, no loss).

    Nonces count from 0 (reference).
    """

    SAFE = True
    FIRST_NONCE = 0

    def _receive_datagrams_py(
        self, buffer: Any, offsets: list[int], lengths: list[int], addrs: list[Hashable], now: float
    ) -> None:
        """SafeDealer's ``receive_datagrams`` (see :meth:`Connection.receive_datagrams`: the same
        as :meth:`receive_datagram` for each datagram in turn; may queue output, acks and
        fast resends among it: flush with :meth:`datagrams_to_send`).

        Two cases run inline in this one loop, with counters summed per batch: a
        data frame of a connected peer on its known path, of a message not delivered within
        the dedup window, while ``recv_hwm`` is not reached (``RecvQueue.push`` then the Ack,
        built with one ``struct`` pack, held up to ``connection.ACK_DELAY`` seconds for a
        reply to go out with: :meth:`Connection._hold_acks`), and an 8-byte Ack from such a peer
        (``SendQueue.ack``, which may queue fast resends). Every other datagram goes through
        :meth:`receive_datagram` itself, after the counters are brought up to date, so
        behaviour, counters and events are those of the generic path
        (``tests/engine/test_engine_safe_receive_fast.py``)."""
        recvq = self._recvq
        dedup = recvq._dedup
        if self._closed or dedup is None:
            Connection.receive_datagrams(self, buffer, offsets, lengths, addrs, now)
            return
        self._now = now
        counters = self._counters
        peers = self._peers
        ready = recvq._ready
        ttl = recvq.dedup_ttl
        reassembler = recvq.reassembler
        sendq = self._sendq
        ctrl = self._ctrl
        parse: Any = _parse_frame  # frames are told apart by class below
        ack_hash = codec.ack_hash
        pack = _ACK_FRAME.pack
        from_bytes = int.from_bytes
        slow = self.receive_datagram
        count = nbytes = completed = acks_out = queued = acks_in = 0
        batch = zip(offsets, lengths, addrs)
        for offset, length, addr in batch:
            data = buffer[offset : offset + length]
            try:
                frame = parse(data)
            except DecodeError:
                frame = None
            cls = frame.__class__
            if cls is DataFrame:
                sid = frame[0]
                peer = peers.get(sid)
                if (
                    peer is not None
                    and peer._addr == addr
                    and not peer._paths
                    and peer._state is _CONNECTED
                    and len(ready) < recvq.recv_hwm
                ):
                    key = (sid, frame[1])
                    until = dedup.get(sid, key[1])
                    if until is None or until <= now:  # (a duplicate takes the slow path)
                        peer.heard(now)
                        count += 1
                        nbytes += len(data)
                        evicted = reassembler.evicted
                        try:
                            parts = reassembler.add(frame, now, key)
                        except DecodeError as exc:  # FrameTooLarge too: not acked
                            self._data_result(recvq.push_failed(exc, evicted), frame)
                            continue
                        if reassembler.evicted != evicted:
                            recvq.report_evicted()
                        if parts is not None:
                            ready.append(parts)
                            completed += 1
                            dedup.put(sid, key[1], now + ttl)  # type: ignore[operator]
                        if len(ctrl) < MAX_CONTROL_QUEUE:
                            ctrl.append((pack(VERSION, _ACK, sid, ack_hash(data)), addr))
                            queued += 1
                        else:
                            counters.control_dropped += 1
                        acks_out += 1
                        peer.sent(now)
                        continue
            elif cls is ControlFrame and frame[0] == _ACK:
                sid = frame[1]
                peer = peers.get(sid)
                payload = frame[2]
                if (
                    peer is not None
                    and peer._addr == addr
                    and not peer._paths
                    and peer._state is _CONNECTED
                    and len(payload) == 8
                ):
                    peer.heard(now)
                    count += 1
                    nbytes += len(data)
                    acks_in += 1
                    sendq.ack(sid, from_bytes(payload, "big"), now, ctrl)
                    continue
            counters.datagrams_in += count
            counters.bytes_in += nbytes
            counters.acks_out += acks_out
            counters.acks_in += acks_in
            counters.control_frames_in += acks_in
            self._ctrl_out += queued
            self._ctrl_bytes += 18 * queued
            if queued:
                self._hold_acks(queued)
            recvq.completed += completed
            count = nbytes = completed = acks_out = queued = acks_in = 0
            slow(data, addr, now)
            if self._closed or recvq.reassembler is not reassembler:
                for offset, length, addr in batch:  # the rest, one by one
                    slow(buffer[offset : offset + length], addr, now)
                return
        counters.datagrams_in += count
        counters.bytes_in += nbytes
        counters.acks_out += acks_out
        counters.acks_in += acks_in
        counters.control_frames_in += acks_in
        self._ctrl_out += queued
        self._ctrl_bytes += 18 * queued
        if queued:
            self._hold_acks(queued)
        recvq.completed += completed

    receive_datagrams = _receive_datagrams_py
    if _fast is not None:  # the same, compiled
        receive_datagrams = _fast.receive_batch_safe
        send = _fast.send
        send_packed = _fast.send_packed

    def _on_data(self, frame: DataFrame, data: Any, peer: Peer, now: float) -> None:
        result = self._recvq.push(frame, now)
        if result <= _DUPLICATE:  # INCOMPLETE, COMPLETE, DUPLICATE: ack it
            h = codec.ack_hash(data)
            self._queue_ctrl(codec.encode_control_frame(_ACK, peer._sid, h.to_bytes(8, "big")), peer._addr)
            self._counters.acks_out += 1
            peer.sent(now)
            if result is _DUPLICATE:
                self._data_result(result, frame)
        else:
            self._data_result(result, frame)

    def _on_ack(self, peer: Peer, payload: memoryview, addr: Hashable, now: float) -> None:
        if len(payload) != 8:
            self._counters.malformed += 1
            self._reject(addr, "Ack payload is not 8 bytes")
            return
        self._sendq.ack(peer._sid, int.from_bytes(payload, "big"), now, self._ctrl)


if _fast is not None:
    _fast.install_safe(SafeDealer._receive_datagrams_py)


class Radio(Socket):
    """Send-only fan-out: each message goes to every peer connected when it is sent.

    Each peer's copy has its own nonce and so its own message id (as the reference does;
    nonces count from 0 across peers). A message sent with no peer connected is dropped and
    counted (``counters.dropped[NO_PEER]``, no event), as pub/sub does. A Radio message counts
    once against ``send_hwm`` however many copies it has. ``recv`` raises NotSupported; data
    frames sent to a Radio are counted (``unexpected``) and dropped.
    """

    CAN_RECV = False
    FIRST_NONCE = 0

    def send(self, parts: Sequence[Buffer], now: float) -> None:
        """Queue one copy of the message per connected peer (flush with
        :meth:`datagrams_to_send`); with no peer, drop and count it.

        Raises:
            WouldBlock: ``send_hwm`` messages are held; nothing was queued.
            InteropError: ``reference_compat`` is set and a part is empty.
            NbmqError: the engine is closed. TypeError / ValueError: bad ``parts``.
        """
        self._check_open()
        if self._reference_compat:
            _check_reference_compat(parts)
        self._now = now
        sendq = self._sendq
        sendq.check_room()
        ring = self._ring
        if not ring:
            _check_parts(parts)
            self._counters.dropped[DropReason.NO_PEER] += 1
            return
        state = FNV_OFFSET_BASIS  # the parts (reference_compat only) are hashed once for every copy
        if self._reference_compat:
            for part in parts:
                state = codec.fnv1a64(part, state)
        copies = []
        nonce = self._nonce
        for peer in ring:
            message_id = codec.fnv1a64(nonce.to_bytes(8, "big"), state)
            nonce += 1
            copies.append((codec.shard_message(parts, peer._sid, message_id), message_id, peer))
        self._nonce = nonce
        sendq.push_group(copies)


class Dish(Socket):
    """Receive-only peer of Radio; ``send`` raises NotSupported."""

    CAN_SEND = False
    receive_datagram = Socket._receive_unacked
    receive_datagrams = Socket._receive_batch_unacked
    if _fast is not None:
        receive_datagram = _fast.receive_one
        receive_datagrams = _fast.receive_batch


_parse_frame = codec.parse_frame
