"""How one fuzz input (bytes) becomes several datagrams, stream feeds or operations.

The layouts are length-prefixed so that a mutation of one record's body rarely moves the
others, which keeps the fuzzer's mutations local:

- pieces: ``[length u16 BE][body]...``; a length past the end takes what is left.
- operations: ``[op u8][length u16 BE][body]...``, the same with an operation byte in front.

``join_pieces`` / ``join_operations`` are the inverses, used to build seeds.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["split_pieces", "join_pieces", "split_operations", "join_operations"]

_LEN = 2  # bytes of the big-endian length prefix


def split_pieces(data: bytes) -> list[bytes]:
    """Cut ``data`` laid out as ``[length u16 BE][body]...`` into its bodies (a trailing single
    byte is one more, empty, body: every input means something)."""
    out, pos, size = [], 0, len(data)
    while pos < size:
        n = int.from_bytes(data[pos : pos + _LEN], "big")
        pos += _LEN
        out.append(data[pos : pos + n])
        pos += n
    return out


def join_pieces(pieces: Iterable[bytes]) -> bytes:
    """Lay pieces out for ``split_pieces`` (each at most 65535 bytes).

    Raises:
        ValueError: a piece is longer than 65535 bytes.
    """
    out = bytearray()
    for p in pieces:
        if len(p) > 0xFFFF:
            raise ValueError(f"a piece of {len(p)} bytes does not fit a u16 length")
        out += len(p).to_bytes(_LEN, "big") + p
    return bytes(out)


def split_operations(data: bytes) -> list[tuple[int, bytes]]:
    """Cut ``data`` laid out as ``[op u8][length u16 BE][body]...`` into ``(op, body)`` pairs."""
    out, pos, size = [], 0, len(data)
    while pos < size:
        op = data[pos]
        n = int.from_bytes(data[pos + 1 : pos + 1 + _LEN], "big")
        pos += 1 + _LEN
        out.append((op, data[pos : pos + n]))
        pos += n
    return out


def join_operations(ops: Iterable[tuple[int, bytes]]) -> bytes:
    """Lay ``(op, body)`` pairs out for ``split_operations`` (op 0..255, body <= 65535 bytes)."""
    return b"".join(bytes([op]) + join_pieces([body]) for op, body in ops)
