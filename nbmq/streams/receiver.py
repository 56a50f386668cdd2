"""The receive side shared by the stream engines (:class:`~nbmq.streams.bqsp.BqspConnection`,
:class:`~nbmq.streams.rqueue.RqueueClientConnection`): feed a codec stream decoder, track end of stream,
and hold the error state (h11's discipline: after a ProtocolError every receive call raises it
again). The rqueue broker keeps this state per client and never raises, so it does not use it.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from ..events import ConnectionClosed

Buffer = bytes | bytearray | memoryview


class _Released:
    """Stands in for the decoder of a failed connection, so its buffered bytes are freed at once
    (they stayed alive for as long as anything held the connection or its error)."""

    __slots__ = ()
    buffered = 0


_RELEASED = _Released()


class StreamReceiver:
    """End-of-stream and error bookkeeping around a codec stream decoder.

    Args:
        decoder: a ``codec.BqspDecoder`` or ``codec.RqueueDecoder``.

    Counter: ``bytes_received`` (stream bytes fed, int).
    """

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder
        self._eof = False
        self._closed = False  # ConnectionClosed was reported
        self._error: ProtocolError | None = None
        self.bytes_received = 0

    @property
    def their_eof(self) -> bool:
        """True once ``receive_data(b"")`` was called."""
        return self._eof

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as events."""
        return int(self._decoder.buffered)

    def receive_data(self, data: Buffer) -> None:
        """Feed bytes read from the stream; ``b""`` (any empty buffer) means end of stream.

        Parses nothing: call ``next_event`` until it returns None. The engine keeps views of
        ``data`` (no copy), so do not modify it afterwards. Mutates the receive buffer.

        Raises:
            ProtocolError: the connection already failed (the same error again).
            RuntimeError: non-empty data after end of stream (a bug in the caller, as in h11).
        """
        if self._error is not None:
            raise self._error
        size = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        if self._eof:
            if size:
                raise RuntimeError("received data after end of stream")
            return
        if not size:
            self._eof = True
            return
        self.bytes_received += size
        self._decoder.feed(data)

    def _fail(self, reason: str, cause: BaseException | None = None) -> ProtocolError:
        """Enter the error state: the decoder and every byte it held are dropped (``buffered``
        is 0 from now on). ``cause`` (the codec's DecodeError, which the caller chains) loses its
        traceback, whose frames would keep the decoder alive."""
        self._error = error = ProtocolError(reason)
        if cause is not None:
            cause.with_traceback(None)
        self._decoder = _RELEASED
        return error

    def _end_of_stream(self, record: str) -> ConnectionClosed | None:
        """With no whole record left: ConnectionClosed once after a clean end of stream, else
        None. Raises (and fails the connection) when the stream ended inside a ``record``."""
        if not self._eof or self._closed:
            return None
        if self._decoder.buffered:
            raise self._fail(f"stream ended inside a {record} ({self._decoder.buffered} bytes left over)")
        self._closed = True
        return ConnectionClosed()
