"""Opening a capture: a path is memory-mapped, a bytes-like object is used as it is.

A gzip-compressed capture (``.pcap.gz``, ``.pcapng.gz``: recognised by the gzip magic bytes,
never by the name) is decompressed into memory first.
"""

from __future__ import annotations

import mmap
import os
import zlib
from types import TracebackType
from typing import Union

import numpy as np

from ..errors import CaptureError

__all__ = ["CaptureSource", "OpenedCapture", "GZIP_MAGIC"]

GZIP_MAGIC = b"\x1f\x8b"

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
        if bytes(self.buf[:2]) == GZIP_MAGIC:  # no pcap / pcapng magic starts like this
            self.buf = _gunzip(self.buf, self.name)
            self.close()
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


def _gunzip(buf: object, name: str) -> bytes:
    """Decompress a gzip capture; damage at its end keeps what came before (like a cut file)."""
    out = bytearray()
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out += inflate.decompress(buf)  # type: ignore[arg-type]
        out += inflate.flush()
    except zlib.error:  # a cut or damaged stream: the readers count the cut record
        pass
    if not out:
        raise CaptureError(f"not a capture: {name} is a gzip file with nothing readable in it")
    return bytes(out)
