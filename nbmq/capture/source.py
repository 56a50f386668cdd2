"""Opening a capture: a path is memory-mapped, a bytes-like object is used as it is."""

from __future__ import annotations

import mmap
import os
from types import TracebackType
from typing import Union

import numpy as np

__all__ = ["CaptureSource", "OpenedCapture"]

CaptureSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class OpenedCapture:
    """A capture's bytes, readable with ``struct.unpack_from`` and slicing, plus its size.

    Use as a context manager. Paths are memory-mapped read-only so a Spark task reading one
    byte range of a large file only touches the pages it needs.

    Attributes:
        buf: the bytes (``mmap.mmap`` for a path, ``bytes``/``memoryview`` otherwise).
        size: length of the capture in bytes.
        name: the path, or ``"<bytes>"``.
    """

    __slots__ = ("buf", "size", "name", "_mmap")

    def __init__(self, source: CaptureSource) -> None:
        self._mmap: mmap.mmap | None = None
        if isinstance(source, (bytes, bytearray)):
            self.buf: bytes | bytearray | memoryview | mmap.mmap = source  # slicing bytes is fast
            self.name = "<bytes>"
        elif isinstance(source, memoryview):
            self.buf = source if source.format == "B" and source.ndim == 1 else source.cast("B")
            self.name = "<bytes>"
        else:
            self.name = os.fspath(source)
            with open(self.name, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:  # mmap refuses empty files
                    self.buf = b""
                else:
                    self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    self.buf = self._mmap
        self.size = len(self.buf)

    def array(self) -> np.ndarray:
        """Return the whole capture as a read-only uint8 array, shape (size,), without copying."""
        return np.frombuffer(self.buf, dtype=np.uint8)

    def close(self) -> None:
        """Unmap the file. Views still exported (arrays, memoryviews) keep it mapped until freed."""
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a view is still alive; the mapping goes away with it
                pass
            self._mmap = None

    def __enter__(self) -> OpenedCapture:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
