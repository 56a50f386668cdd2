"""Reading integers at arbitrary (unaligned) byte positions of a buffer, many at once.

numpy accepts a 1-byte stride for multi-byte dtypes, so ``view[p]`` is the integer stored at
byte ``p``; fancy indexing with an int64 position array then gathers one field for every
packet with no per-packet Python and no index arrays as large as the packets.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ByteViews"]


def _strided(buf: object, dtype: str, size: int) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    count = max(size - width + 1, 0)
    if count == 0:
        return np.zeros(1, dtype)  # keeps clipped gathers valid on tiny buffers
    return np.ndarray((count,), dtype=dtype, buffer=buf, offset=0, strides=(1,))  # type: ignore[call-overload]


class ByteViews:
    """Unaligned integer views over one buffer, with position-clipping gathers.

    Positions passed to the gather methods may lie outside the buffer (for rows a mask will
    discard anyway); they are clipped instead of raising.

    Attributes:
        size: buffer length in bytes.
    """

    __slots__ = ("size", "_u8", "_be16", "_be32", "_le32", "_buf")

    def __init__(self, buf: object, size: int) -> None:
        self._buf = buf
        self.size = size
        self._u8 = _strided(buf, "u1", size)
        self._be16 = _strided(buf, ">u2", size)
        self._be32 = _strided(buf, ">u4", size)
        self._le32 = _strided(buf, "<u4", size)

    @staticmethod
    def _at(view: np.ndarray, pos: np.ndarray) -> np.ndarray:
        # positions are never negative; past-the-end ones belong to rows masked out later.
        # (ndarray.take would copy the whole strided view first.)
        return view[np.minimum(pos, view.shape[0] - 1)]

    def u8(self, pos: np.ndarray) -> np.ndarray:
        """uint8 at each int64 position in ``pos`` (shape preserved)."""
        return self._at(self._u8, pos)

    def be16(self, pos: np.ndarray) -> np.ndarray:
        """Big-endian uint16 starting at each position."""
        return self._at(self._be16, pos)

    def be32(self, pos: np.ndarray) -> np.ndarray:
        """Big-endian uint32 starting at each position."""
        return self._at(self._be32, pos)

    def le32(self, pos: np.ndarray) -> np.ndarray:
        """Little-endian uint32 starting at each position."""
        return self._at(self._le32, pos)

    def u32(self, pos: np.ndarray, byte_order: str) -> np.ndarray:
        """uint32 in ``byte_order`` (``"<"`` or ``">"``) starting at each position."""
        return self.le32(pos) if byte_order == "<" else self.be32(pos)

    def bytes16(self, pos: np.ndarray) -> np.ndarray:
        """The 16 bytes starting at each position, shape (n, 16) uint8 (for IPv6 addresses)."""
        return self._u8[np.minimum(pos[:, None] + np.arange(16, dtype=np.int64), self._u8.shape[0] - 1)]
