"""Opening a capture: a path is memory-mapped, a bytes-like object is used as it is.

A gzip-compressed capture (``.pcap.gz``, ``.pcapng.gz``: recognised by the gzip magic bytes,
never by the name) is first decompressed in 1 MiB steps into an unlinked temporary file, which
is then memory-mapped like a plain capture: memory stays flat in the capture's size, and the
output is capped (``MAX_GUNZIP_BYTES``) so a small gzip bomb cannot fill the disk.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import zlib
from collections.abc import Iterator
from types import TracebackType
from typing import Union

import numpy as np

from ...errors import CaptureError

__all__ = ["CaptureSource", "OpenedCapture", "GZIP_MAGIC", "MAX_GUNZIP_BYTES"]

GZIP_MAGIC = b"\x1f\x8b"

#: Most bytes a gzip capture may decompress to (default 64 GiB; the environment variable
#: ``NBMQ_MAX_GUNZIP_BYTES`` sets another, read when a capture is opened).
MAX_GUNZIP_BYTES = 64 << 30

_STEP = 1 << 20  # compressed bytes fed and decompressed bytes taken per step

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
            plain = _gunzip(self.buf, self.name, _gunzip_cap())
            self.close()
            self._mmap = plain
            self.buf = plain
        self.size = len(self.buf)

    def array(self) -> np.ndarray:
        """Return the whole capture as a read-only uint8 array, shape (size,), without copying."""
        return np.frombuffer(self.buf, dtype=np.uint8)

    def release(self, lo: int, hi: int) -> None:
        """Drop the resident pages of bytes ``[lo, hi)``, both rounded down to a page (the caller
        is done with every byte below ``hi``; rounding ``lo`` down leaves no page behind mapped,
        which on kernels with large page-cache folios kept a whole folio resident per call).

        A walk over a big mapped capture touches every page; dropping the pages behind it keeps
        the process's resident memory flat in the capture's size. Pages are read
        again (from the page cache) if touched later. Does nothing for bytes given by the
        caller or where ``madvise(MADV_DONTNEED)`` is missing.
        """
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if self._mmap is None or advice is None:
            return
        lo -= lo % mmap.PAGESIZE
        hi = min(hi, self.size)
        hi -= hi % mmap.PAGESIZE
        if hi > lo:
            self._mmap.madvise(advice, lo, hi - lo)

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


def _gunzip_cap() -> int:
    raw = os.environ.get("NBMQ_MAX_GUNZIP_BYTES")
    return MAX_GUNZIP_BYTES if not raw else int(raw)


def _gunzip(buf: object, name: str, cap: int) -> mmap.mmap:
    """Decompress a gzip capture into an unlinked temporary file and map it.

    Damage at the stream's end keeps what came before (like a cut file: the readers count the
    cut record). Memory: one 1 MiB step at a time, whatever the sizes.

    Args:
        buf: the compressed bytes (any buffer). name: for messages. cap: most output bytes.

    Returns:
        A read-only map of the decompressed bytes.

    Raises:
        CaptureError: nothing readable came out, or the output passes ``cap`` bytes (a
            decompression bomb, or a capture larger than ``NBMQ_MAX_GUNZIP_BYTES`` allows).
    """
    written = 0
    with tempfile.TemporaryFile(prefix="nbmq-gunzip-") as out:
        try:
            for chunk in _inflate_steps(memoryview(buf).cast("B")):  # type: ignore[arg-type]
                written += len(chunk)
                if written > cap:
                    raise CaptureError(
                        f"{name}: gzip capture decompresses past {cap} bytes; not read "
                        "(raise NBMQ_MAX_GUNZIP_BYTES to allow it)"
                    )
                out.write(chunk)
        except zlib.error:  # a cut or damaged stream: the readers count the cut record
            pass
        if not written:
            raise CaptureError(f"not a capture: {name} is a gzip file with nothing readable in it")
        out.flush()
        return mmap.mmap(out.fileno(), 0, access=mmap.ACCESS_READ)  # the map outlives the file


def _inflate_steps(view: memoryview) -> Iterator[bytes]:
    """The gzip member in ``view`` decompressed, at most ``_STEP`` bytes a chunk, fed
    ``_STEP`` compressed bytes at a time; bytes after the member are ignored (as ``gzip -d``
    warns). Raises zlib.error where the stream is damaged."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pos = 0
    pending: bytes | memoryview = b""
    while True:
        if not pending:
            if pos >= len(view):
                break
            pending = view[pos : pos + _STEP]
            pos += len(pending)
        yield inflate.decompress(pending, _STEP)
        pending = inflate.unconsumed_tail
        if inflate.eof:
            break
    yield inflate.flush()
