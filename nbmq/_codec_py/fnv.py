"""FNV-1a 64 and the identifiers the reference derives from it.

Source: tests/data/VECTORS.md ("Derivations the vectors pin down"): offset basis
0xcbf29ce484222325, prime 0x100000001b3, xor then multiply, mod 2**64.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

from ..wire import FNV_OFFSET_BASIS, FNV_PRIME

_MASK = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data: bytes | bytearray | memoryview, state: int = FNV_OFFSET_BASIS) -> int:
    """FNV-1a 64 of ``data``, continuing from ``state``.

    Args:
        data: any C-contiguous buffer (bytes, bytearray, memoryview, numpy uint8 array).
        state: the running hash to continue from (u64); the offset basis starts a new hash.

    Returns:
        The u64 hash (int). ``fnv1a64(b, fnv1a64(a)) == fnv1a64(a + b)``.

    Raises:
        TypeError: ``data`` does not support the buffer protocol.
        OverflowError: ``state`` is not a u64.
    """
    state = operator.index(state)
    if not 0 <= state <= _MASK:
        raise OverflowError("state must be a u64")
    h = state
    for byte in memoryview(data).cast("B"):
        h = ((h ^ byte) * FNV_PRIME) & _MASK
    return h


def message_id(parts: Iterable[bytes | bytearray | memoryview], nonce: int) -> int:
    """The reference's message id: FNV-1a 64 over every part in order, then the nonce.

    Part boundaries are not hashed, so ``[b"hello"]`` and ``[b"he", b"llo"]`` with the same
    nonce share an id (vectors, ``message_id``).

    Args:
        parts: the message's parts, any buffers.
        nonce: u64 per-sender counter, hashed as 8 bytes big-endian.

    Returns:
        The u64 message id (int).

    Raises:
        OverflowError: ``nonce`` is not a u64.
    """
    nonce = operator.index(nonce)
    if not 0 <= nonce <= _MASK:
        raise OverflowError("nonce must be a u64")
    h = FNV_OFFSET_BASIS
    for part in parts:
        h = fnv1a64(part, h)
    return fnv1a64(nonce.to_bytes(8, "big"), h)


def session_id(sample: int, peer_addr: str) -> int:
    """The reference's session id: FNV-1a 64 of an 8-byte big-endian random sample, then the
    peer's address as ASCII ``"ip:port"`` (vectors, ``session_id``; ARCHITECTURE.md).

    Args:
        sample: a u64 random sample (the reference uses xorshift64*; any source serves).
        peer_addr: the connecting peer's address as text, e.g. ``"127.0.0.1:54321"``.

    Returns:
        The u64 session id (int).

    Raises:
        OverflowError: ``sample`` is not a u64.
        UnicodeEncodeError: ``peer_addr`` is not ASCII.
    """
    sample = operator.index(sample)
    if not 0 <= sample <= _MASK:
        raise OverflowError("sample must be a u64")
    return fnv1a64(peer_addr.encode("ascii"), fnv1a64(sample.to_bytes(8, "big")))


def ack_hash(frame: bytes | bytearray | memoryview) -> int:
    """The hash a SafeDealer receiver acks: FNV-1a 64 over the whole data frame, header and chunk.

    Args:
        frame: the data frame's exact bytes, as sent.

    Returns:
        The u64 hash; the Ack's payload is its 8 big-endian bytes.
    """
    return fnv1a64(frame)
