"""Secure mode's frame layer: sealing and opening nbmq frames, the replay window and rekeying.

Source: the Noise Protocol Framework (rev. 34: sections 5.1, 11.3 "Rekey", 11.4 "Out-of-order
transport messages"), WireGuard's explicit counter and sliding replay window (RFC 6479), and
``docs/secure.md`` for the wire. The handshake itself is :mod:`nbmq.engine.noise`; the
connection layer (:mod:`nbmq.engine.connection`) drives both.

A secure frame is a plain frame whose version byte is :data:`SECURE_VERSION` (0x81):

- handshake: ``Connect`` (session 0) carries Noise IK message 1 as its payload and
  ``Connected(session)`` carries message 2, whose encrypted payload is the session id (so the
  session id in the clear header is authenticated too);
- every other frame: the plain header (34 bytes for data, 10 for control) with the version
  byte replaced, then the frame's counter (u64 big-endian), then the payload (chunk or
  control payload) encrypted with ChaCha20-Poly1305 and its 16-byte tag. The associated data
  is everything before the ciphertext (header and counter): a flipped header bit fails the
  tag as surely as a flipped payload bit.

Several sealed frames of one session may share a datagram and a seal: a *bundle*, version byte
:data:`BUNDLE_VERSION` (0x82), a frame count (u8, 2..255), per frame its ciphertext length (u16
BE) and its clear sealed header, then one counter, the frames' encrypted payloads back to back and
one tag; the associated data is everything before the ciphertext. A bundle takes one counter (one
nonce, one slot of the replay window) and one ChaCha20-Poly1305 call, whose cost is mostly fixed:
that is what makes small frames cheap. A lone frame stays a 0x81 frame.

A reference peer (version byte 1 only) rejects every secure frame as ``FrameError.VERSION``; a
secure socket rejects every plain frame (counted as a downgrade). Nothing falls back.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable
from typing import Any

from .. import codec as _codec
from .. import extensions
from ..errors import DecodeError
from ..wire import (
    BUNDLE_ENTRY_SIZE,
    BUNDLE_HEAD_SIZE,
    BUNDLE_OVERHEAD,
    BUNDLE_VERSION,
    CONTROL_HEADER_SIZE,
    DATA_HEADER_SIZE,
    MAX_BUNDLE_FRAMES,
    MAX_SEALED_FRAME_SIZE,
    MIN_BUNDLE_FRAMES,
    SECURE_COUNTER_SIZE,
    SECURE_OVERHEAD,
    SECURE_VERSION,
    VERSION,
    FrameKind,
)
from .noise import KEY_SIZE, TAG_SIZE, CipherState, HandshakeError, HandshakeState, InvalidTag, public_key

__all__ = [
    "SECURE_VERSION",
    "COUNTER_SIZE",
    "SECURE_OVERHEAD",
    "MAX_SEALED_FRAME_SIZE",
    "BUNDLE_VERSION",
    "BUNDLE_SESSION_OFFSET",
    "REPLAY_WINDOW",
    "REKEY_FRAMES",
    "PROLOGUE",
    "ReplayWindow",
    "SessionKeys",
    "bundle_layout",
    "session_keys",
    "seal_frames",
    "open_frames",
    "active_seal_frames",
    "active_open_frames",
    "OpenError",
    "FrameCipher",
    "COMPILED",
    "SecureLayer",
    "MAX_SEEN_EPHEMERALS",
]

# SECURE_VERSION (0x81), COUNTER_SIZE, SECURE_OVERHEAD (counter and tag: a 500-byte plain frame
# is sent as 524 bytes, which only secure peers read) and MAX_SEALED_FRAME_SIZE are wire facts
# (nbmq.wire), which the codec reads too.
COUNTER_SIZE = SECURE_COUNTER_SIZE
if SECURE_OVERHEAD != COUNTER_SIZE + TAG_SIZE:  # pragma: no cover - a wire fact changed
    raise ImportError("nbmq.wire.SECURE_OVERHEAD is not the counter and Noise's tag")
#: Counters accepted behind the highest seen (bits of the sliding window).
REPLAY_WINDOW = 2048
#: Frames sent under one key before both sides move to the next (Noise's REKEY).
REKEY_FRAMES = 1 << 16
#: Handshake ephemerals a bound socket remembers, to refuse a replayed ``Connect`` (oldest forgotten).
MAX_SEEN_EPHEMERALS = 65536
#: Bound into the handshake hash: a handshake made for another protocol does not verify here.
PROLOGUE = b"nbmq secure 1"

_COUNTER = struct.Struct(">Q")
_SECURE_PREFIX = bytes((SECURE_VERSION,))
_PLAIN_PREFIX = bytes((VERSION,))
_DATA = FrameKind.DATA
_CONTROL_KINDS = (FrameKind.DISCONNECTED, FrameKind.HEARTBEAT, FrameKind.ACK)
_HANDSHAKE_KINDS = (FrameKind.CONNECT, FrameKind.CONNECTED)
#: Where a bundle's first header has its session id (the bundle's keys); bundle_layout checks
#: that every header has the same.
BUNDLE_SESSION_OFFSET = BUNDLE_HEAD_SIZE + BUNDLE_ENTRY_SIZE + 2
_LAST_COUNTER = (1 << 64) - 2  # 2**64 - 1 is REKEY's nonce


class OpenError(Exception):
    """Why a secure frame was not opened: ``reason`` is one of ``"malformed"``,
    ``"auth"`` (tag, or a counter past the next key) and ``"replay"``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def bundle_layout(datagram: bytes | memoryview) -> tuple[list[tuple[int, int, int]], int]:
    """The codec's :func:`nbmq.codec.bundle_layout` (where a bundle's frames lie), its
    DecodeError as ``OpenError("malformed", reason)``."""
    try:
        return _codec.bundle_layout(datagram)
    except DecodeError as exc:
        raise OpenError("malformed", exc.reason) from None


class FrameCipher:
    """One key of one direction of a secure session: seals plain frames, or opens sealed ones
    (the Python twin of ``nbmq.engine._seal.FrameCipher``, which runs when it is built; both
    give the same bytes and refuse the same frames).

    Args:
        key: the 32-byte ChaCha20-Poly1305 key.
        encrypt: True to seal (our sending direction), False to open.
    """

    __slots__ = ("key", "encrypt", "_cipher")

    def __init__(self, key: bytes, encrypt: bool) -> None:
        if len(key) != KEY_SIZE:
            raise ValueError(f"key must be {KEY_SIZE} bytes, got {len(key)}")
        self.key = bytes(key)
        self.encrypt = encrypt
        self._cipher = CipherState(self.key)

    def seal(self, frame: bytes | memoryview, counter: int) -> bytes:
        """The sealed form of a plain frame under ``counter`` (``len(frame) + SECURE_OVERHEAD``
        bytes): its header with the version byte 0x81, the counter, then the payload encrypted
        with the header and counter as associated data.

        Raises:
            ValueError: this cipher opens, or the frame is shorter than its header.
        """
        if not self.encrypt:
            raise ValueError("this FrameCipher opens frames")
        size = DATA_HEADER_SIZE if frame[1] == _DATA else CONTROL_HEADER_SIZE
        if len(frame) < size:
            raise ValueError("frame shorter than its header")
        head = _SECURE_PREFIX + bytes(frame[1:size]) + _COUNTER.pack(counter)
        return head + self._cipher.encrypt_at(counter, head, frame[size:])

    def open(self, datagram: bytes | memoryview, size: int) -> bytes | None:
        """The plain frame inside a sealed one whose plain header is ``size`` bytes (34 or 10),
        or None when the tag does not verify. The caller checked the length and the counter.

        Raises:
            ValueError: this cipher seals, or the datagram is shorter than a sealed frame.
        """
        if self.encrypt:
            raise ValueError("this FrameCipher seals frames")
        if size not in (DATA_HEADER_SIZE, CONTROL_HEADER_SIZE) or len(datagram) < size + SECURE_OVERHEAD:
            raise ValueError("datagram shorter than a sealed frame")
        head_end = size + COUNTER_SIZE
        view = memoryview(datagram)
        counter = _COUNTER.unpack_from(view, size)[0]
        try:
            plain = self._cipher.decrypt_at(counter, bytes(view[:head_end]), view[head_end:])
        except InvalidTag:
            return None
        return _PLAIN_PREFIX + bytes(view[1:size]) + plain

    def seal_bundle(self, frames: list[Any], counter: int) -> bytes:
        """One bundle (docs/secure.md) of 2..255 plain frames under ``counter``: ``BUNDLE_OVERHEAD
        + sum(BUNDLE_ENTRY_SIZE + len(frame))`` bytes.

        Raises:
            ValueError: this cipher opens, a frame count outside 2..255, a frame shorter than
                its header or a payload over 65535 bytes.
        """
        if not self.encrypt:
            raise ValueError("this FrameCipher opens frames")
        if not MIN_BUNDLE_FRAMES <= len(frames) <= MAX_BUNDLE_FRAMES:
            raise ValueError(f"a bundle holds 2..255 frames, got {len(frames)}")
        head = bytearray((BUNDLE_VERSION, len(frames)))
        payloads = []
        for frame in frames:
            frame = memoryview(frame).cast("B")  # bytes, bytearray, numpy uint8: sliced as bytes
            size = DATA_HEADER_SIZE if frame[1] == _DATA else CONTROL_HEADER_SIZE
            length = len(frame) - size
            if not 0 <= length <= 0xFFFF:
                raise ValueError("frame shorter than its header, or its payload over 65535 bytes")
            head += length.to_bytes(2, "big")
            head += _SECURE_PREFIX
            head += frame[1:size]
            payloads.append(frame[size:])
        head += _COUNTER.pack(counter)
        ad = bytes(head)
        return ad + self._cipher.encrypt_at(counter, ad, b"".join(payloads))

    def open_bundle(
        self, datagram: bytes | memoryview, entries: list[tuple[int, int, int]], end: int
    ) -> list[bytes] | None:
        """The plain frames of a bundle whose :func:`bundle_layout` is ``(entries, end)``, or None
        when the tag does not verify. The caller checked the counter.

        Raises:
            ValueError: this cipher seals.
        """
        if self.encrypt:
            raise ValueError("this FrameCipher seals frames")
        view = memoryview(datagram)
        start = end + COUNTER_SIZE
        counter = _COUNTER.unpack_from(view, end)[0]
        try:
            plain = self._cipher.decrypt_at(counter, bytes(view[:start]), view[start:])
        except InvalidTag:
            return None
        frames = []
        at = 0
        for head, size, length in entries:
            frames.append(_PLAIN_PREFIX + bytes(view[head + 1 : head + size]) + plain[at : at + length])
            at += length
        return frames


_seal = extensions.load("nbmq.engine._seal")
#: True when the compiled FrameCipher runs (``nbmq.engine._seal``, OpenSSL's libcrypto).
COMPILED = _seal is not None
_Cipher: Any = FrameCipher if _seal is None else _seal.FrameCipher


def _rekeyed(key: bytes) -> bytes:
    """Noise's REKEY(k) (section 11.3), the same for both twins."""
    return CipherState(key).rekeyed().key  # type: ignore[return-value]


class ReplayWindow:
    """Which of the last :data:`REPLAY_WINDOW` counters were taken (RFC 6479's sliding window,
    as one Python int).

    Bit ``i`` of ``bits`` says counter ``top - i`` was taken. A counter above ``top`` slides
    the window; one more than ``size - 1`` below it is too old. Check with :meth:`fresh` before
    the (costly) decryption and :meth:`take` only after it verified, so forged frames never
    move the window.

    Args:
        size: window width in counters (> 0).
    """

    __slots__ = ("size", "top", "bits", "_mask")

    def __init__(self, size: int = REPLAY_WINDOW) -> None:
        if size <= 0:
            raise ValueError(f"size must be > 0, got {size}")
        self.size = size
        self.top = -1
        self.bits = 0
        self._mask = (1 << size) - 1

    def fresh(self, counter: int) -> bool:
        """True when ``counter`` was never taken and is inside (or above) the window."""
        top = self.top
        if counter > top:
            return True
        back = top - counter
        return back < self.size and not (self.bits >> back) & 1

    def take(self, counter: int) -> None:
        """Mark ``counter`` taken (call only after :meth:`fresh` said True and the frame
        verified)."""
        top = self.top
        if counter > top:
            shift = counter - top
            self.bits = ((self.bits << shift) | 1) & self._mask if shift < self.size else 1
            self.top = counter
        else:
            self.bits |= 1 << (top - counter)


class SessionKeys:
    """The transport keys of one secure session: sealing outbound frames and opening inbound
    ones, with a counter per frame, a replay window and rekeying every ``rekey_frames`` frames.

    Args:
        send_key: the 32-byte key of frames we send (from the handshake's split).
        recv_key: the 32-byte key of frames we receive.
        remote_static: the peer's 32-byte static public key (authenticated by the handshake).
        rekey_frames: frames per key (> 0); both sides must use the same value.

    The key for counter ``c`` is the handshake's key rekeyed ``c // rekey_frames`` times. The
    receiver keeps the current key and the previous one (frames reordered across a key change)
    and derives the next one on demand; a counter past the next key is refused before any
    decryption (a forged counter far ahead must not cost a chain of REKEYs).
    """

    __slots__ = (
        "remote_static",
        "rekey_frames",
        "rekeys",
        "_send",
        "_send_counter",
        "_send_epoch",
        "_recv",
        "_recv_prev",
        "_recv_epoch",
        "_window",
    )

    def __init__(
        self, send_key: bytes, recv_key: bytes, remote_static: bytes, rekey_frames: int = REKEY_FRAMES
    ) -> None:
        if rekey_frames <= 0:
            raise ValueError(f"rekey_frames must be > 0, got {rekey_frames}")
        self.remote_static = remote_static
        self.rekey_frames = rekey_frames
        self.rekeys = 0  # key changes, both directions
        self._send = _Cipher(send_key, True)
        self._send_counter = 0
        self._send_epoch = 0
        self._recv = _Cipher(recv_key, False)
        self._recv_prev: Any = None
        self._recv_epoch = 0
        self._window = ReplayWindow()

    @property
    def frames_sealed(self) -> int:
        """Seals so far, lone frames and bundles (the next counter)."""
        return self._send_counter

    def seal(self, frame: bytes | memoryview) -> bytes:
        """The secure form of one plain frame (version byte 1, any kind but Connect/Connected).

        Args:
            frame: a whole plain frame as the engine encodes it (bytes-like).

        Returns:
            ``len(frame) + SECURE_OVERHEAD`` bytes (owned).

        Raises:
            OverflowError: 2**64 - 1 frames were sealed under this session (re-handshake).
        """
        counter = self._next_counter()  # first: it may move to the next key
        return self._send.seal(frame, counter)  # type: ignore[no-any-return]

    def seal_bundle(self, frames: list[Any]) -> bytes:
        """One bundle of 2..255 plain frames of this session under one counter (docs/secure.md).

        Args:
            frames: whole plain frames (bytes-like), each payload at most 65535 bytes.

        Returns:
            ``BUNDLE_OVERHEAD + sum(BUNDLE_ENTRY_SIZE + len(frame))`` bytes (owned): bytes, or
            from the compiled twin a bytearray when 32 KiB or more, whose buffer a later
            bundle reuses once nobody else holds it (a new 64 KiB allocation is fresh pages to
            fault in, about as much as sealing it costs).

        Raises:
            ValueError: a frame count outside 2..255 or a frame shorter than its header.
            OverflowError: the session's counter is exhausted (re-handshake).
        """
        if not MIN_BUNDLE_FRAMES <= len(frames) <= MAX_BUNDLE_FRAMES:
            raise ValueError(f"a bundle holds 2..255 frames, got {len(frames)}")
        counter = self._next_counter()  # first: it may move to the next key
        return self._send.seal_bundle(frames, counter)  # type: ignore[no-any-return]

    def _next_counter(self) -> int:
        """Take the next send counter, moving to the next key every ``rekey_frames`` seals."""
        counter = self._send_counter
        if counter > _LAST_COUNTER:
            raise OverflowError("secure session exhausted its frame counter")
        epoch = counter // self.rekey_frames
        if epoch != self._send_epoch:
            self._send = _Cipher(_rekeyed(self._send.key), True)
            self._send_epoch = epoch
            self.rekeys += 1
        self._send_counter = counter + 1
        return counter

    def open(self, datagram: bytes | memoryview) -> bytes:
        """The plain frame a secure frame carries (version byte 1 again), after its tag and
        counter checked out.

        Args:
            datagram: a secure frame (first byte :data:`SECURE_VERSION`, kind data, Disconnected,
                Heartbeat or Ack) whose session is this one's.

        Returns:
            The plain frame, owned bytes (``len(datagram) - SECURE_OVERHEAD``).

        Raises:
            OpenError: ``"malformed"`` (too short, or a kind that is never sealed),
                ``"replay"`` (a counter taken before, or behind the window) or ``"auth"`` (the
                tag did not verify, or a counter past the next key). Nothing changed then.
        """
        n = len(datagram)
        kind = datagram[1] if n > 1 else -1
        if kind == _DATA:
            size = DATA_HEADER_SIZE
        elif kind in _CONTROL_KINDS:
            size = CONTROL_HEADER_SIZE
        else:
            raise OpenError("malformed", "secure frame of an unknown or unsealed kind")
        if n < size + SECURE_OVERHEAD:
            raise OpenError("malformed", "secure frame truncated")
        counter = _COUNTER.unpack_from(datagram, size)[0]
        cipher = self._recv_cipher(counter)
        plain = cipher.open(datagram, size)
        if plain is None:
            raise OpenError("auth", "secure frame failed authentication")
        self._opened(cipher, counter)
        return plain  # type: ignore[no-any-return]

    def open_bundle(self, datagram: bytes | memoryview) -> list[bytes]:
        """The plain frames of a sealed bundle (docs/secure.md), in order, after its layout,
        counter and tag checked out.

        Args:
            datagram: a whole bundle (first byte :data:`BUNDLE_VERSION`) of this session.

        Returns:
            Its plain frames (version byte 1), owned bytes each.

        Raises:
            OpenError: as :meth:`open`; ``"malformed"`` as :func:`bundle_layout` says. A
                refused bundle is refused whole and changes nothing.
        """
        entries, end = bundle_layout(datagram)
        counter = _COUNTER.unpack_from(datagram, end)[0]
        cipher = self._recv_cipher(counter)
        frames = cipher.open_bundle(datagram, entries, end)
        if frames is None:
            raise OpenError("auth", "secure frame failed authentication")
        self._opened(cipher, counter)
        return frames  # type: ignore[no-any-return]

    def _recv_cipher(self, counter: int) -> Any:
        """The key that opens ``counter``, checked against the replay window first.

        Raises:
            OpenError: ``"replay"`` or ``"auth"`` (a counter past the next key)."""
        if not self._window.fresh(counter):
            raise OpenError("replay", "secure frame replayed or too old")
        epoch = counter // self.rekey_frames
        cur = self._recv_epoch
        if epoch == cur:
            return self._recv
        if epoch == cur - 1 and self._recv_prev is not None:
            return self._recv_prev
        if epoch == cur + 1:
            return _Cipher(_rekeyed(self._recv.key), False)
        raise OpenError("auth", "secure frame counter outside the current keys")

    def _opened(self, cipher: Any, counter: int) -> None:
        """A frame or bundle under ``counter`` verified: take the counter, and follow the peer
        to its next key when ``cipher`` is that key."""
        if counter // self.rekey_frames == self._recv_epoch + 1:
            self._recv_prev = self._recv
            self._recv = cipher
            self._recv_epoch += 1
            self.rekeys += 1
        self._window.take(counter)


def session_keys(send_key: bytes, recv_key: bytes, remote_static: bytes, rekey_frames: int = REKEY_FRAMES) -> Any:
    """A session's keys: the compiled ``nbmq.engine._seal.SessionKeys`` when it is built, else
    :class:`SessionKeys` (the same arguments, results and errors)."""
    if _seal is None:
        return SessionKeys(send_key, recv_key, remote_static, rekey_frames)
    if rekey_frames <= 0:
        raise ValueError(f"rekey_frames must be > 0, got {rekey_frames}")
    return _seal.SessionKeys(send_key, recv_key, remote_static, rekey_frames, _rekeyed, OpenError)


def seal_frames(
    sessions: dict[int, Any], out: list[tuple[Any, Hashable]], max_datagram_size: int = 0
) -> tuple[list[tuple[Any, Hashable]], int, int, int]:
    """Seal every plain frame (version 1) of ``out`` under its session's keys; other datagrams
    (handshake frames) pass as they are. Frames of one session to one address are packed, in
    their order, into bundles of at most ``max_datagram_size`` bytes and 255 frames (one seal
    each); a frame that shares its datagram with no other is sealed alone (0x81).

    Args:
        sessions: session id -> :class:`SessionKeys`.
        out: ``(datagram, addr)`` pairs, as ``datagrams_to_send`` gives them.
        max_datagram_size: bytes a bundle may take (the ``max_datagram_size`` option); below
            two frames' size (0 included) every frame goes alone.

    Returns:
        ``(datagrams, merged, added, unsealed)``: the new list to send (each session's
        datagrams where its first frame was; a bundle as :meth:`SessionKeys.seal_bundle` makes
        it), how many frames went into a bundle behind its
        first (frames sealed less datagrams sealed), the bytes sealing added (counters, tags,
        bundle heads), and how many frames were left out because their session has no keys.
    """
    slots: list[Any] = []  # (datagram, addr) pairs, or [keys, addr, frames] of one session
    groups: dict[tuple[int, Hashable], list[Any]] = {}
    unsealed = 0
    for data, addr in out:
        if len(data) >= CONTROL_HEADER_SIZE and data[0] == VERSION:
            sid = _COUNTER.unpack_from(data, 2)[0]
            if data[1] == _DATA and len(data) < DATA_HEADER_SIZE:
                raise ValueError("frame shorter than its header")
            group = groups.get((sid, addr))
            if group is None:
                keys = sessions.get(sid)
                if keys is None:
                    unsealed += 1
                    continue
                group = groups[sid, addr] = [keys, addr, []]
                slots.append(group)
            group[2].append(data)
        else:
            slots.append((data, addr))
    sealed: list[tuple[Any, Hashable]] = []
    merged = added = 0
    for slot in slots:
        if slot.__class__ is tuple:
            sealed.append(slot)
            continue
        keys, addr, queued = slot
        n = len(queued)
        i = 0
        while i < n:
            size = BUNDLE_OVERHEAD + BUNDLE_ENTRY_SIZE + len(queued[i])
            j = i + 1
            while j < n and j - i < MAX_BUNDLE_FRAMES:
                grown = size + BUNDLE_ENTRY_SIZE + len(queued[j])
                if grown > max_datagram_size:
                    break
                size = grown
                j += 1
            if j - i == 1:
                sealed.append((keys.seal(queued[i]), addr))
                added += SECURE_OVERHEAD
            else:
                sealed.append((keys.seal_bundle(queued[i:j]), addr))
                added += BUNDLE_OVERHEAD + BUNDLE_ENTRY_SIZE * (j - i)
                merged += j - i - 1
            i = j
    return sealed, merged, added, unsealed


def open_frames(
    sessions: dict[int, Any],
    buffer: Any,
    offsets: Any,
    lengths: Any,
    addrs: Any,
    start: int,
    plain: Any,
    sizes: list[int],
    froms: list[Hashable],
) -> int:
    """Open the datagrams of a batch from index ``start`` on while each is a sealed frame (not a
    handshake) or a bundle of a session in ``sessions`` that opens and fits in ``plain``; write
    each plain frame into ``plain`` (back to back, after the ``sum(sizes)`` bytes of the frames
    already there), append its size to ``sizes`` and its address to ``froms`` (a bundle's
    frames each with the bundle's address).

    ``plain`` is a buffer the caller reuses from run to run (no allocation per run): the run
    stops before a datagram longer than the room left (its plain frames are shorter than it).

    Args:
        sessions: session id -> :class:`SessionKeys`.
        buffer, offsets, lengths, addrs: a ``receive_datagrams`` batch (datagram ``i`` is
            ``buffer[offsets[i] : offsets[i] + lengths[i]]``; the shortest list sets the count).
        start: the first index to look at.
        plain: a writable bytes-like object (bytearray, memoryview), its size the room, bytes.
        sizes, froms: the opened frames' sizes (bytes) and addresses (appended to).

    Returns:
        The index of the first datagram not opened (it is left as it was, for the caller's
        one-by-one path to take and count, or for the next run when it did not fit), or the
        count when all were.

    Raises:
        ValueError: ``start`` is negative; ``plain`` is read-only; ``sizes`` add up to more
            than ``plain`` holds.
    """
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    room = memoryview(plain).cast("B")
    if room.readonly:
        raise ValueError("plain must be a writable buffer")
    used = sum(sizes)
    if used > len(room):
        raise ValueError(f"sizes add up to {used} bytes, more than plain's {len(room)}")
    size = len(buffer)
    count = min(len(offsets), len(lengths), len(addrs))
    i = start
    while i < count:
        offset, length = offsets[i], lengths[i]
        if offset < 0 or length < 0 or offset + length > size:
            return i
        data = buffer[offset : offset + length]
        if length <= CONTROL_HEADER_SIZE or length > len(room) - used:  # (opened, it is shorter)
            return i
        if data[0] == BUNDLE_VERSION:
            if length < BUNDLE_SESSION_OFFSET + SECURE_COUNTER_SIZE:
                return i
            at = BUNDLE_SESSION_OFFSET
        elif data[0] == SECURE_VERSION and data[1] not in _HANDSHAKE_KINDS:
            at = 2
        else:
            return i
        keys = sessions.get(_COUNTER.unpack_from(data, at)[0])
        if keys is None:
            return i
        try:
            opened = keys.open_bundle(data) if at != 2 else [keys.open(data)]
        except OpenError:
            return i
        for frame in opened:
            room[used : used + len(frame)] = frame
            used += len(frame)
            sizes.append(len(frame))
        froms += [addrs[i]] * len(opened)
        i += 1
    return i


#: The twins that run: the compiled ones when ``nbmq.engine._seal`` is built.
active_seal_frames: Any = seal_frames if _seal is None else _seal.seal_frames
active_open_frames: Any = open_frames if _seal is None else _seal.open_frames


class SecureLayer:
    """An engine's secure mode: its static key, the peers' keys it trusts, the handshakes under
    way and the keys of every secure session. The connection layer calls it; it holds no peer
    table and no clock.

    Args:
        secret_key: this socket's 32-byte X25519 secret key.
        server_public_key: the bound peer's 32-byte public key, pinned (needed to dial).
        allowed_public_keys: the client keys a bound socket accepts (a frozenset of 32-byte
            keys), or None to accept any client that completes the handshake.
        rekey_frames: seals per key (> 0), both directions; None: :data:`REKEY_FRAMES`.
        max_datagram_size: bytes a bundle may take (0: every frame sealed alone).

    Raises:
        NbmqError: ``cryptography`` is missing (the ``secure`` extra). ValueError: a key is not
            32 bytes.
    """

    __slots__ = (
        "public_key",
        "_secret",
        "_server",
        "_allowed",
        "rekey_frames",
        "max_datagram_size",
        "sessions",
        "_retired",
        "_dialling",
        "_seen",
        "_rekeys_retired",
    )

    def __init__(
        self,
        secret_key: bytes,
        server_public_key: bytes | None = None,
        allowed_public_keys: frozenset[bytes] | None = None,
        rekey_frames: int | None = None,
        max_datagram_size: int = 0,
    ) -> None:
        self.public_key = public_key(secret_key)
        self._secret = bytes(secret_key)
        self._server = server_public_key
        self._allowed = allowed_public_keys
        self.rekey_frames = REKEY_FRAMES if rekey_frames is None else rekey_frames
        self.max_datagram_size = max_datagram_size
        #: session id -> its keys (half-open and connected peers, and peers removed since the
        #: last flush: their last frames, a Disconnected, still go out sealed)
        self.sessions: dict[int, Any] = {}  # SessionKeys, compiled or not
        self._retired: list[int] = []
        self._dialling: dict[Hashable, HandshakeState] = {}
        self._seen: dict[bytes, None] = {}  # insertion-ordered set of handshake ephemerals
        self._rekeys_retired = 0

    @property
    def rekeys(self) -> int:
        """Key changes (REKEY) so far, both directions, every session this layer had."""
        live: int = sum(keys.rekeys for keys in self.sessions.values())
        return self._rekeys_retired + live

    def connect_payload(self, addr: Hashable) -> bytes:
        """Start a new handshake with the bound socket at ``addr`` (forgetting any earlier one):
        Noise message 1, the payload of a secure ``Connect``.

        Raises:
            ValueError: no ``server_public_key`` to dial with.
        """
        if self._server is None:
            raise ValueError("server_public_key is required to connect in secure mode")
        hs = HandshakeState(True, self._secret, self._server, PROLOGUE)
        self._dialling[addr] = hs
        return hs.write_message()

    def accept(self, payload: bytes | memoryview) -> HandshakeState:
        """Read Noise message 1 of a secure ``Connect``: the handshake, its ``remote_static``
        authenticated.

        Raises:
            HandshakeError: the message did not verify (sealed to another server key, forged,
                truncated), its ephemeral was seen before (a replayed Connect: ``args[0]``
                starts with "replayed"), or the client's key is not in
                ``allowed_public_keys``.
        """
        message = bytes(payload)
        ephemeral = message[:KEY_SIZE]
        if ephemeral in self._seen:
            raise HandshakeError("replayed handshake")
        hs = HandshakeState(False, self._secret, None, PROLOGUE)
        hs.read_message(message)
        seen = self._seen
        seen[ephemeral] = None
        if len(seen) > MAX_SEEN_EPHEMERALS:
            del seen[next(iter(seen))]
        if self._allowed is not None and hs.remote_static not in self._allowed:
            raise HandshakeError("client key not allowed")
        return hs

    def connected_payload(self, hs: HandshakeState, session_id: int) -> bytes:
        """Noise message 2 (the payload of a secure ``Connected(session_id)``, whose encrypted
        payload is the session id), and install the session's keys."""
        out = hs.write_message(_COUNTER.pack(session_id))
        i2r, r2i = hs.split()
        self._install(session_id, session_keys(r2i.key, i2r.key, hs.remote_static, self.rekey_frames))  # type: ignore[arg-type]
        return out

    def complete(self, addr: Hashable, session_id: int, payload: bytes | memoryview) -> None:
        """Read Noise message 2 from ``addr`` (a secure ``Connected(session_id)``) and install the
        session's keys.

        Raises:
            HandshakeError: no handshake with ``addr`` is under way, the message did not verify
                (a wrong server key, a forgery: the handshake then stays open for the real
                reply), or its session id is not the header's.
        """
        hs = self._dialling.get(addr)
        if hs is None:
            raise HandshakeError("no handshake under way with this address")
        inner = hs.read_message(payload)
        del self._dialling[addr]
        if inner != _COUNTER.pack(session_id):
            raise HandshakeError("session id differs from the handshake's")
        i2r, r2i = hs.split()
        self._install(session_id, session_keys(i2r.key, r2i.key, self._server, self.rekey_frames))  # type: ignore[arg-type]

    def _install(self, session_id: int, keys: Any) -> None:
        if session_id in self._retired:
            self._retired.remove(session_id)
        old = self.sessions.get(session_id)
        if old is not None:
            self._rekeys_retired += old.rekeys
        self.sessions[session_id] = keys

    def retire(self, session_id: int) -> None:
        """The session's peer left: its keys go after the next :meth:`seal_all`."""
        if session_id in self.sessions:
            self._retired.append(session_id)

    def forget_dial(self, addr: Hashable) -> None:
        """Stop the handshake with ``addr`` (the engine stopped dialling it)."""
        self._dialling.pop(addr, None)

    def seal_all(self, out: list[tuple[Any, Hashable]]) -> tuple[list[tuple[Any, Hashable]], int, int, int]:
        """Seal every plain frame of ``out`` under its session's keys, bundling frames of one
        peer up to ``max_datagram_size`` bytes (handshake frames pass as they are), then drop
        the keys of retired sessions.

        Returns:
            ``(datagrams, merged, added, unsealed)`` as :func:`seal_frames` gives them.
        """
        sessions = self.sessions
        result = active_seal_frames(sessions, out, self.max_datagram_size)
        if self._retired:
            for sid in self._retired:
                keys = sessions.pop(sid, None)
                if keys is not None:
                    self._rekeys_retired += keys.rekeys
            self._retired.clear()
        return result  # type: ignore[no-any-return]
