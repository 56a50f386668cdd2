"""TCP reassembly and BQSP / rqueue decoding of captured connections (after :mod:`.segments`).

Each direction of each connection becomes an in-order byte stream by sequence number
(:class:`~nbmq.capture.tcp.reassembly.HalfStream`), fed to the codec's stream decoder (``BqspDecoder`` for BQSP, seed 002;
``RqueueDecoder`` for rqueue, seed 004). Rules (our own choices, documented in the README):

* Connections are keyed by their two endpoints; the client is the SYN sender (the SYN+ACK
  receiver), else the side whose port is not a service port, else the higher port.
* No SYN seen (capture started mid-connection): the direction starts at its first segment.
* Sequence numbers are unwrapped (mod 2**32) around the highest byte seen, so streams past 4 GiB
  and wrap-around read as one stream.
* Overlap with bytes already received: identical = a duplicate (counted); different = an
  ``overlap`` error row, and the first copy is kept (what the receiving TCP delivered).
* Out-of-order segments wait in a heap capped at ``max_buffered`` bytes per direction (each
  segment also charged ``SEGMENT_OVERHEAD``). A hole never filled (at the cap, at the end of the
  capture, or before a FIN) is a ``gap`` row; decoding of that direction stops there (a record
  cannot be resumed mid-way) and what follows is one ``unparsed`` row with its byte count.
* A codec ``DecodeError`` is an error row with the reason at its stream offset; that direction
  stops decoding. Bytes left in the decoder at the end are a ``truncated`` row.
* Every packet / message gets the timestamp of the segment whose arrival completed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from ...errors import DecodeError
from ...wire import BQSP_DEFAULT_MAX_PACKET, RQUEUE_MAX_PAYLOAD
from ..files.errorlog import ErrorLog
from ..files.source import CaptureSource
from .reassembly import DEFAULT_MAX_BUFFERED, RETRANSMIT_WINDOW, SEGMENT_OVERHEAD, HalfStream
from .segments import ACK, RST, SYN, TcpSegment, iter_tcp_segments

__all__ = [
    "StreamRow",
    "HalfStream",
    "TcpStreams",
    "decode_tcp_streams",
    "PROTOCOLS",
    "DEFAULT_MAX_BUFFERED",
    "SEGMENT_OVERHEAD",
    "RETRANSMIT_WINDOW",
]

PROTOCOLS = ("bqsp", "rqueue")


class StreamRow(NamedTuple):
    """One output row: a decoded packet / message, or an error (``error`` set).

    Attributes:
        client, server: ``"addr:port"`` (None on capture error rows).
        direction: ``"c2s"`` or ``"s2c"`` (None on capture error rows).
        stream_offset: byte offset in that direction's stream (of the record, or of the problem).
        ts_ns: nanoseconds since the epoch of the segment that completed the record.
        kind: BQSP data_type, or the rqueue message type (1, 2, 5, 7).
        queue: BQSP queue number (None for rqueue).
        topic: rqueue topic bytes (None for BQSP).
        data: BQSP payload / rqueue content (owned bytes; None when payloads are off).
        length: bytes of BQSP payload / rqueue content.
        error: None, or ``"gap: ..."``, ``"unparsed: ..."``, ``"overlap: ..."``,
            ``"truncated: ..."``, ``"decode: <codec reason>"``, ``"capture: ..."``.
    """

    client: str | None
    server: str | None
    direction: str | None
    stream_offset: int | None
    ts_ns: int | None
    kind: int | None
    queue: int | None
    topic: bytes | None
    data: bytes | None
    length: int | None
    error: str | None


class _Decoding:
    """One direction's protocol decoder: stream bytes in, rows out; stops at the first error."""

    def __init__(self, protocol: str, codec: Any, max_record: int | None) -> None:
        if protocol == "bqsp":
            self.dec = codec.BqspDecoder(BQSP_DEFAULT_MAX_PACKET if max_record is None else max_record)
            self.next = self.dec.next_packet
        else:
            self.dec = codec.RqueueDecoder(RQUEUE_MAX_PAYLOAD if max_record is None else max_record)
            self.next = self.dec.next_message
        self.bqsp = protocol == "bqsp"
        self.fed = self.pos = 0
        self.error_at: int | None = None

    def feed(self, chunks: list[bytes], emit: Any) -> None:
        for chunk in chunks:
            self.fed += len(chunk)
            if self.error_at is None:
                self.dec.feed(chunk)
        while self.error_at is None:
            try:
                rec = self.next()
            except DecodeError as exc:
                self.error_at = exc.offset
                emit(exc.offset, None, f"decode: {exc.reason}")
                return
            if rec is None:
                return
            start, self.pos = self.pos, self.fed - self.dec.buffered
            emit(start, rec, None)


@dataclass(slots=True)
class _Connection:
    client: str
    server: str
    halves: dict[str, HalfStream]
    decoders: dict[str, _Decoding]
    last_ts: dict[str, int]


_MISSING = object()


class TcpStreams:
    """The connection table: TCP segments in (file order), BQSP / rqueue rows out.

    Args:
        protocol: ``"bqsp"`` or ``"rqueue"``.
        ports: the service ports (decide the server when no SYN was seen); None: any.
        max_buffered: out-of-order bytes held per direction before declaring a gap (bytes).
        payload: keep payload / content bytes in the rows (else ``data`` is None).
        codec: the codec module providing ``BqspDecoder`` / ``RqueueDecoder`` (default
            ``nbmq.codec``; tests pass either twin).
        max_record: largest record accepted by the decoder (bytes; default: BQSP 64 MiB, the
            codec's default; rqueue 65535, the wire maximum, not one server's 2 KiB policy).
        keep_stats: keep each finished connection's :class:`HalfStream` counters in ``stats``.

    Raises:
        ValueError: unknown ``protocol``.

    Memory: a closed connection (RST, or both FINs reached) is finished at once and leaves only a
    tombstone key (later stray segments are ignored until a new SYN reuses the key).
    """

    def __init__(
        self,
        protocol: str,
        ports: Iterable[int] | None = None,
        *,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        payload: bool = True,
        codec: Any = None,
        max_record: int | None = None,
        keep_stats: bool = False,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        if codec is None:
            from ... import codec as default_codec

            codec = default_codec
        self.protocol, self.codec, self.max_record = protocol, codec, max_record
        self.ports = None if ports is None else frozenset(int(p) for p in ports)
        self.max_buffered, self.payload, self.keep_stats = max_buffered, payload, keep_stats
        self._conns: dict[tuple[str, str], _Connection | None] = {}  # None: a closed connection
        self.stats: list[dict[str, Any]] = []

    def _roles(self, seg: TcpSegment) -> tuple[str, str]:
        if seg.flags & (SYN | ACK) == SYN:
            return seg.src, seg.dst
        if seg.flags & (SYN | ACK) == SYN | ACK:
            return seg.dst, seg.src
        if self.ports is not None:
            s_in, d_in = seg.sport in self.ports, seg.dport in self.ports
            if d_in != s_in:
                return (seg.src, seg.dst) if d_in else (seg.dst, seg.src)
        return (seg.dst, seg.src) if seg.sport < seg.dport else (seg.src, seg.dst)

    def segment(self, seg: TcpSegment) -> list[StreamRow]:
        """Take one segment; return the rows it completes (packets, messages, problems)."""
        rows: list[StreamRow] = []
        key = (seg.src, seg.dst) if seg.src < seg.dst else (seg.dst, seg.src)
        conn = self._conns.get(key, _MISSING)
        pure_syn = seg.flags & (SYN | ACK) == SYN
        if isinstance(conn, _Connection) and pure_syn and all(h.closed for h in conn.halves.values()):
            self._finish(conn, rows)  # the port pair is reused by a new connection
            conn = None
        if conn is None and not pure_syn:
            return rows  # a straggler of a finished connection
        if not isinstance(conn, _Connection):
            client, server = self._roles(seg)
            conn = _Connection(
                client,
                server,
                {d: HalfStream(self.max_buffered) for d in ("c2s", "s2c")},
                {d: _Decoding(self.protocol, self.codec, self.max_record) for d in ("c2s", "s2c")},
                {},
            )
            self._conns[key] = conn
        direction = "c2s" if seg.src == conn.client else "s2c"
        half = conn.halves[direction]
        conn.last_ts[direction] = seg.ts_ns
        chunks = half.add(seg.seq, seg.flags, seg.data)
        self._problems(conn, direction, seg.ts_ns, rows)
        if chunks:
            conn.decoders[direction].feed(chunks, self._emitter(conn, direction, seg.ts_ns, rows))
        if seg.flags & RST or all(h.done for h in conn.halves.values()):
            self._finish(conn, rows)
            self._conns[key] = None
        return rows

    def finish(self) -> list[StreamRow]:
        """End of the capture: finish every open connection; return their last rows."""
        rows: list[StreamRow] = []
        for key, conn in self._conns.items():
            if conn is not None:
                self._finish(conn, rows)
                self._conns[key] = None
        return rows

    def _emitter(self, conn: _Connection, direction: str, ts: int | None, rows: list[StreamRow]) -> Any:
        bqsp, payload = self.protocol == "bqsp", self.payload

        def emit(offset: int, rec: Any, error: str | None) -> None:
            if rec is None:
                rows.append(
                    StreamRow(conn.client, conn.server, direction, offset, ts, None, None, None, None, None, error)
                )
            elif bqsp:
                data = bytes(rec.data) if payload else None
                rows.append(
                    StreamRow(
                        conn.client,
                        conn.server,
                        direction,
                        offset,
                        ts,
                        rec.data_type,
                        rec.queue,
                        None,
                        data,
                        len(rec.data),
                        None,
                    )
                )
            else:
                data = bytes(rec.content) if payload else None
                rows.append(
                    StreamRow(
                        conn.client,
                        conn.server,
                        direction,
                        offset,
                        ts,
                        int(rec.type),
                        None,
                        bytes(rec.topic),
                        data,
                        len(rec.content),
                        None,
                    )
                )

        return emit

    def _problems(self, conn: _Connection, direction: str, ts: int | None, rows: list[StreamRow]) -> None:
        half = conn.halves[direction]
        emit = self._emitter(conn, direction, ts, rows)
        for offset, reason in half.problems:
            emit(offset, None, reason)
        half.problems.clear()

    def _finish(self, conn: _Connection, rows: list[StreamRow]) -> None:
        for direction, half in conn.halves.items():
            if not half.started:
                continue
            ts = conn.last_ts.get(direction)
            half.finish()
            self._problems(conn, direction, ts, rows)
            dec, emit = conn.decoders[direction], self._emitter(conn, direction, ts, rows)
            stop = dec.pos if dec.error_at is None else dec.error_at
            left = dec.fed - stop + half.unparsed
            if half.gap_at is not None or dec.error_at is not None:
                if left > 0:
                    emit(stop, None, f"unparsed: {left} bytes not decoded")
            elif left > 0:
                emit(stop, None, f"truncated: {left} bytes of an incomplete record at the end of the stream")
            half._tail = bytearray()
            half._heap.clear()
        conn.decoders.clear()
        if self.keep_stats:
            self.stats.append({"client": conn.client, "server": conn.server, **conn.halves})


def decode_tcp_streams(
    source: CaptureSource,
    protocol: str,
    ports: Iterable[int] | None,
    *,
    max_buffered: int = DEFAULT_MAX_BUFFERED,
    payload: bool = True,
    codec: Any = None,
    max_record: int | None = None,
    streams: TcpStreams | None = None,
) -> Iterator[StreamRow]:
    """Read a capture's TCP connections on ``ports`` and decode them as BQSP or rqueue.

    Args:
        source: path or bytes of a pcap / pcapng capture.
        protocol: ``"bqsp"`` or ``"rqueue"``.
        ports: TCP service ports to decode (segments from or to them); None: every connection.
        max_buffered, payload, codec, max_record: see :class:`TcpStreams`.
        streams: a :class:`TcpStreams` to use (to read its ``stats`` afterwards); the other
            decoding arguments are then ignored.

    Yields:
        :class:`StreamRow` in the order they complete; damage in the capture file itself comes
        last as rows with only ``error`` (``"capture: ..."``), one per problem (the first 16 with
        their reasons).

    Raises:
        CaptureError: ``source`` is not a pcap / pcapng capture (before any row).
        ValueError: unknown ``protocol``.
        OSError: the file cannot be opened.
    """
    if streams is None:
        streams = TcpStreams(
            protocol, ports, max_buffered=max_buffered, payload=payload, codec=codec, max_record=max_record
        )
    log = ErrorLog()
    for seg in iter_tcp_segments(source, ports, log):
        yield from streams.segment(seg)
    yield from streams.finish()
    reasons = [f"capture: {r}" for r in log.reasons]
    for i in range(log.count):
        text = reasons[i] if i < len(reasons) else "capture: unreadable record"
        yield StreamRow(None, None, None, None, None, None, None, None, None, None, text)
