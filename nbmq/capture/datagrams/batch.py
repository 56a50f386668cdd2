"""The columnar result of reading a capture: one row per UDP datagram."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ... import extensions

__all__ = ["DatagramBatch", "ns_to_seconds", "gather_ranges"]

_NS = 1_000_000_000

_records = extensions.load("nbmq.capture.files._records")
_gather = None if _records is None else _records.gather


def ns_to_seconds(timestamp_ns: np.ndarray) -> np.ndarray:
    """Convert int64 nanoseconds since the epoch to float64 seconds, as exactly as float64 allows.

    Whole seconds and the fraction are converted separately so the result is the float64
    nearest to the true value (a plain ``ns / 1e9`` rounds twice).

    Args:
        timestamp_ns: int64 array, shape (n,), nanoseconds since 1970-01-01 UTC.

    Returns:
        float64 array, shape (n,), seconds since 1970-01-01 UTC.
    """
    ns = np.asarray(timestamp_ns, dtype=np.int64)
    whole, frac = np.divmod(ns, _NS)
    return whole.astype(np.float64) + frac.astype(np.float64) / 1e9


def gather_ranges(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Copy ``buffer[starts[i] : starts[i] + lengths[i]]`` for every i, back to back, in one step.

    With the compiled ``nbmq.capture.files._records`` this is one memcpy per range. Otherwise, ranges
    in buffer order that do not overlap (how a capture lays datagrams out) are gathered
    with one boolean mask over the region they span (built as alternating skip / keep runs with
    ``np.repeat``); anything else falls back to concatenating slices.

    Args:
        buffer: uint8 (m,).
        starts: integer (n,), start of each range in ``buffer``.
        lengths: integer (n,), length of each range (>= 0).

    Returns:
        uint8 (lengths.sum(),), a new C-contiguous array.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if _gather is not None and buffer.dtype == np.uint8 and buffer.ndim == 1:
        try:
            return _gather(  # type: ignore[no-any-return]
                np.ascontiguousarray(buffer),
                np.ascontiguousarray(starts, dtype=np.int64),
                np.ascontiguousarray(lengths),
            )
        except IndexError:  # a range outside the buffer: let numpy slicing clip it as before
            pass
    nz = lengths > 0
    if not nz.any():
        return np.empty(0, np.uint8)
    s = np.asarray(starts, dtype=np.int64)[nz]
    e = s + lengths[nz]
    if s.size > 1 and not np.all(s[1:] >= e[:-1]):
        return np.concatenate([buffer[a:b] for a, b in zip(s.tolist(), e.tolist())])
    region = buffer[int(s[0]) : int(e[-1])]
    if region.shape[0] == int(lengths.sum()):  # already back to back
        return np.array(region, dtype=np.uint8)
    runs = np.empty(2 * s.size, dtype=np.int64)
    runs[0] = 0
    runs[2::2] = s[1:] - e[:-1]
    runs[1::2] = e - s
    keep = np.zeros(2 * s.size, dtype=np.bool_)
    keep[1::2] = True
    return region[np.repeat(keep, runs)]


@dataclass(slots=True, eq=False)
class DatagramBatch:
    """UDP datagrams read from a capture, column by column, in capture order.

    All row arrays have shape (n,) for n datagrams. Datagram i is
    ``payload[offsets[i] : offsets[i] + lengths[i]]``. This is the layout the codec's
    ``parse_frames(buffer, offsets, lengths)`` consumes.

    ``payload`` is not necessarily the payloads back to back: the fast engine reading an
    immutable capture (a memory-mapped file, ``bytes``, a read-only memoryview) makes no copy
    and ``payload`` is then the whole capture as a read-only uint8 array, with ``offsets``
    pointing at each UDP payload inside it (increasing, never overlapping; bytes between them
    are record and packet headers). A file-backed batch keeps the file mapped while it lives.
    :meth:`compact` returns a copy laid out back to back (what the dpkt engine, mutable
    sources and rows decoded by dpkt produce).

    Attributes:
        timestamp: float64 (n,), seconds since the epoch (nearest float64 to ``timestamp_ns``).
        timestamp_ns: int64 (n,), nanoseconds since the epoch, exact as stored in the capture.
        src_addr: object (n,), source IP address as ``str`` (IPv4 dotted quad or RFC 5952 IPv6).
        dst_addr: object (n,), destination IP address as ``str``.
        src_port: uint16 (n,), UDP source port.
        dst_port: uint16 (n,), UDP destination port.
        payload: uint8 (m,), a buffer holding every UDP payload (see above); ``m >=
            lengths.sum()``, equal when back to back.
        offsets: int64 (n,), start of each payload in ``payload`` (bytes), increasing.
        lengths: int32 (n,), captured payload length of each datagram (bytes).
        frame_number: int64 (n,), 1-based index of the packet in the file, as tshark numbers
            frames (every packet record counts, UDP or not).
        truncated: bool (n,), True when fewer payload bytes were captured than the UDP length
            field announces (snaplen cut, or the first fragment of a fragmented datagram).
        packets: packet records read in the requested range (int); ``packets == n + skipped +
            (errors that concern a framed packet)``.
        skipped: records that are not a UDP datagram, non-first IP fragments, and datagrams
            removed by a ``udp_ports`` filter (int). Not errors.
        errors: records that could not be read or decoded (int): truncated or implausible record
            headers, truncated records, bad link / IP / UDP headers, unsupported link types.
        error_reasons: the first few errors as short strings, in file order.
        engine: ``"fast"`` (vectorised numpy) or ``"dpkt"`` (packet-at-a-time reference).
        fallback_rows: records the fast engine handed to the dpkt decoder because they were
            not in its common case (0 for the dpkt engine).
        addresses: object (k,) of ``str``, the distinct addresses of ``src_addr`` and
            ``dst_addr``, or None; with it ``src_code`` / ``dst_code`` (int32 (n,)) index it, so
            ``src_addr == addresses[src_code]``. Readers set them; consumers that build
            per-address columns (Arrow dictionaries, string arrays) use them to skip hashing
            n strings. Batches built by hand may leave them None.
    """

    timestamp: np.ndarray
    timestamp_ns: np.ndarray
    src_addr: np.ndarray
    dst_addr: np.ndarray
    src_port: np.ndarray
    dst_port: np.ndarray
    payload: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    frame_number: np.ndarray
    truncated: np.ndarray
    packets: int = 0
    skipped: int = 0
    errors: int = 0
    error_reasons: list[str] = field(default_factory=list)
    engine: str = "fast"
    fallback_rows: int = 0
    addresses: np.ndarray | None = None
    src_code: np.ndarray | None = None
    dst_code: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.frame_number.shape[0])

    def __repr__(self) -> str:
        return (
            f"DatagramBatch({len(self)} datagrams, {int(self.lengths.sum())} payload bytes, "
            f"packets={self.packets}, skipped={self.skipped}, errors={self.errors}, engine={self.engine!r})"
        )

    def payload_at(self, i: int) -> bytes:
        """Return the UDP payload of one datagram.

        Args:
            i: row index, 0 <= i < len(self) (negative indexes count from the end).

        Returns:
            A copy of its payload bytes.

        Raises:
            IndexError: ``i`` out of range.
        """
        start = int(self.offsets[i])
        return self.payload[start : start + int(self.lengths[i])].tobytes()

    def is_compact(self) -> bool:
        """True when the payloads are back to back in ``payload`` (no other bytes)."""
        n = len(self)
        if n == 0:
            return self.payload.shape[0] == 0
        if self.payload.shape[0] != int(self.lengths.sum()) or int(self.offsets[0]) != 0:
            return False
        return bool(np.array_equal(self.offsets[1:], np.cumsum(self.lengths[:-1], dtype=np.int64)))

    def compact(self) -> DatagramBatch:
        """Return this batch with its payloads copied back to back (self if they already are).

        Returns:
            A batch with the same rows whose ``payload`` holds exactly the datagrams' bytes, in
            row order, ``offsets[0] == 0`` and ``payload.shape[0] == lengths.sum()``.
        """
        if self.is_compact():
            return self
        data = gather_ranges(self.payload, self.offsets, self.lengths)
        offsets = np.zeros(len(self), np.int64)
        if len(self) > 1:
            np.cumsum(self.lengths[:-1], dtype=np.int64, out=offsets[1:])
        return DatagramBatch(
            self.timestamp,
            self.timestamp_ns,
            self.src_addr,
            self.dst_addr,
            self.src_port,
            self.dst_port,
            data,
            offsets,
            self.lengths,
            self.frame_number,
            self.truncated,
            self.packets,
            self.skipped,
            self.errors,
            list(self.error_reasons),
            self.engine,
            self.fallback_rows,
            self.addresses,
            self.src_code,
            self.dst_code,
        )

    def same_rows(self, other: DatagramBatch) -> bool:
        """True when both batches hold the same datagrams with the same values in every column.

        The counters (``packets``, ``skipped``, ``errors``), ``engine`` and ``fallback_rows``
        are not compared; ``payload`` is compared datagram by datagram, so two batches whose
        buffers are laid out differently but hold the same payloads are the same.

        Args:
            other: the batch to compare with.

        Returns:
            True when every row matches.
        """
        cols = ("timestamp_ns", "src_port", "dst_port", "lengths", "frame_number", "truncated")
        if len(self) != len(other):
            return False
        if not all(np.array_equal(getattr(self, c), getattr(other, c)) for c in cols):
            return False
        if not (np.array_equal(self.timestamp, other.timestamp)):
            return False
        if list(self.src_addr) != list(other.src_addr) or list(self.dst_addr) != list(other.dst_addr):
            return False
        return bool(np.array_equal(self.compact().payload, other.compact().payload))

    @classmethod
    def empty(cls, engine: str = "fast") -> DatagramBatch:
        """Return a batch with no rows and zeroed counters.

        Args:
            engine: value of the ``engine`` attribute.

        Returns:
            The empty batch (every array of length 0, with the column dtypes).
        """
        return cls(
            timestamp=np.empty(0, np.float64),
            timestamp_ns=np.empty(0, np.int64),
            src_addr=np.empty(0, object),
            dst_addr=np.empty(0, object),
            src_port=np.empty(0, np.uint16),
            dst_port=np.empty(0, np.uint16),
            payload=np.empty(0, np.uint8),
            offsets=np.empty(0, np.int64),
            lengths=np.empty(0, np.int32),
            frame_number=np.empty(0, np.int64),
            truncated=np.empty(0, bool),
            engine=engine,
        )

    @classmethod
    def concat(cls, batches: Sequence[DatagramBatch]) -> DatagramBatch:
        """Join batches row-wise (e.g. the splits of one file, in order).

        Counters are summed, ``error_reasons`` concatenated; the payloads are copied back to
        back (``compact``) so joining file-backed batches never copies whole files.

        Args:
            batches: batches to join, in the order their rows should appear.

        Returns:
            A new batch; an empty one (engine ``"fast"``) when ``batches`` is empty.
        """
        if not batches:
            return cls.empty()
        batches = [b.compact() for b in batches]
        bases = np.cumsum([0] + [int(b.payload.shape[0]) for b in batches[:-1]], dtype=np.int64)
        return cls(
            timestamp=np.concatenate([b.timestamp for b in batches]),
            timestamp_ns=np.concatenate([b.timestamp_ns for b in batches]),
            src_addr=np.concatenate([b.src_addr for b in batches]),
            dst_addr=np.concatenate([b.dst_addr for b in batches]),
            src_port=np.concatenate([b.src_port for b in batches]),
            dst_port=np.concatenate([b.dst_port for b in batches]),
            payload=np.concatenate([b.payload for b in batches]),
            offsets=np.concatenate([b.offsets + base for b, base in zip(batches, bases)]),
            lengths=np.concatenate([b.lengths for b in batches]),
            frame_number=np.concatenate([b.frame_number for b in batches]),
            truncated=np.concatenate([b.truncated for b in batches]),
            packets=sum(b.packets for b in batches),
            skipped=sum(b.skipped for b in batches),
            errors=sum(b.errors for b in batches),
            error_reasons=[r for b in batches for r in b.error_reasons],
            engine=batches[0].engine,
            fallback_rows=sum(b.fallback_rows for b in batches),
        )
