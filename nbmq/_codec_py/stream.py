"""The byte buffer under the stream decoders (BQSP, rqueue): transactional, zero-copy when a
record lies within one fed chunk."""

from __future__ import annotations

from collections import deque

from ..errors import DecodeError
from .frames import Buffer


class StreamBuffer:
    """Fed bytes not yet consumed, kept as views of the fed objects (no copy on feed)."""

    def __init__(self) -> None:
        self._chunks: deque[memoryview] = deque()
        self._pos = 0  # consumed bytes of _chunks[0]
        self._buffered = 0
        self._consumed = 0  # stream offset of the next unconsumed byte, for error offsets
        self._error: DecodeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet handed out."""
        return self._buffered

    def feed(self, data: Buffer) -> None:
        """Add bytes from the stream. Nothing is parsed until iteration; the decoder keeps views
        of ``data``, so do not modify it afterwards.

        Raises:
            DecodeError: the stream already failed (the same error again).
            TypeError: ``data`` is not a C-contiguous buffer.
        """
        if self._error is not None:
            raise self._error
        view = memoryview(data).cast("B")
        if len(view):
            self._chunks.append(view)
            self._buffered += len(view)

    def _fail(self, error: DecodeError) -> DecodeError:
        self._error = error
        return error

    def _peek(self, size: int) -> Buffer:
        """At least ``size`` unconsumed bytes from the front, consuming nothing."""
        head = self._chunks[0]
        if len(head) - self._pos >= size:
            return head[self._pos :]
        raw = bytearray(head[self._pos :])
        for index in range(1, len(self._chunks)):
            raw += self._chunks[index]
            if len(raw) >= size:
                break
        return raw

    def _take(self, size: int) -> memoryview:
        """Consume ``size`` buffered bytes: a view when they lie in one chunk, else a copy."""
        head = self._chunks[0]
        if len(head) - self._pos >= size:
            out = head[self._pos : self._pos + size]
            self._pos += size
            if self._pos == len(head):
                self._chunks.popleft()
                self._pos = 0
        else:
            gathered = bytearray(size)
            filled = 0
            while filled < size:
                head = self._chunks[0]
                n = min(size - filled, len(head) - self._pos)
                gathered[filled : filled + n] = head[self._pos : self._pos + n]
                filled += n
                self._pos += n
                if self._pos == len(head):
                    self._chunks.popleft()
                    self._pos = 0
            out = memoryview(gathered)
        self._buffered -= size
        self._consumed += size
        return out
