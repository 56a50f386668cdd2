"""Per-packet decode results, one row per packet record, filled by either decoder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

__all__ = ["OK", "SKIP", "ERROR", "FALLBACK", "Decoded", "RowTable"]

OK, SKIP, ERROR, FALLBACK = 0, 1, 2, 3  # FALLBACK: the fast path left this row to dpkt


class Decoded(NamedTuple):
    """What the packet-at-a-time decoder found in one link-layer frame.

    Attributes:
        status: ``OK``, ``SKIP`` (not a UDP datagram, non-first fragment) or ``ERROR``.
        reason: why it is an error (``""`` otherwise).
        family: 4 or 6 for an OK row.
        src: source address, 4 or 16 bytes.
        dst: destination address, 4 or 16 bytes.
        sport: UDP source port.
        dport: UDP destination port.
        payload: the captured UDP payload bytes.
        truncated: fewer payload bytes captured than the UDP length announces.
    """

    status: int
    reason: str = ""
    family: int = 0
    src: bytes = b""
    dst: bytes = b""
    sport: int = 0
    dport: int = 0
    payload: bytes = b""
    truncated: bool = False


@dataclass(slots=True)
class RowTable:
    """Decode results for n packet records, in record order.

    Attributes:
        status: int8 (n,), ``OK`` / ``SKIP`` / ``ERROR`` / ``FALLBACK``.
        family: uint8 (n,), 4 or 6 on OK rows.
        src: uint8 (n, 16), source address (IPv4 in the first 4 bytes).
        dst: uint8 (n, 16), destination address.
        sport: uint16 (n,). dport: uint16 (n,).
        pstart: int64 (n,), payload start in the source buffer (fast-path OK rows).
        pend: int64 (n,), payload end (exclusive) in the source buffer.
        truncated: bool (n,).
        payloads: row -> payload bytes, for OK rows decoded by dpkt (not in the buffer).
        reasons: row -> error reason, for ERROR rows.
    """

    status: np.ndarray
    family: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    pstart: np.ndarray
    pend: np.ndarray
    truncated: np.ndarray
    payloads: dict[int, bytes] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)

    @classmethod
    def allocate(cls, n: int, status: int = FALLBACK) -> RowTable:
        """Return a table of ``n`` rows, every row set to ``status``."""
        return cls(
            status=np.full(n, status, np.int8),
            family=np.zeros(n, np.uint8),
            src=np.zeros((n, 16), np.uint8),
            dst=np.zeros((n, 16), np.uint8),
            sport=np.zeros(n, np.uint16),
            dport=np.zeros(n, np.uint16),
            pstart=np.zeros(n, np.int64),
            pend=np.zeros(n, np.int64),
            truncated=np.zeros(n, bool),
        )

    def put(self, i: int, d: Decoded) -> None:
        """Store the packet-at-a-time result ``d`` in row ``i``."""
        self.status[i] = d.status
        if d.status == ERROR:
            self.reasons[i] = d.reason
        elif d.status == OK:
            self.family[i] = d.family
            self.src[i, : len(d.src)] = np.frombuffer(d.src, np.uint8)
            self.dst[i, : len(d.dst)] = np.frombuffer(d.dst, np.uint8)
            self.sport[i] = d.sport
            self.dport[i] = d.dport
            self.truncated[i] = d.truncated
            self.payloads[i] = d.payload

    @classmethod
    def from_decoded(cls, results: list[Decoded]) -> RowTable:
        """Build a table from packet-at-a-time results (the dpkt engine), column-wise."""
        n = len(results)
        table = cls.allocate(n, OK)
        if n == 0:
            return table
        table.status[:] = [d.status for d in results]
        table.family[:] = [d.family for d in results]
        table.sport[:] = [d.sport for d in results]
        table.dport[:] = [d.dport for d in results]
        table.truncated[:] = [d.truncated for d in results]
        pad = bytes(16)
        table.src[:] = np.frombuffer(b"".join((d.src + pad)[:16] for d in results), np.uint8).reshape(n, 16)
        table.dst[:] = np.frombuffer(b"".join((d.dst + pad)[:16] for d in results), np.uint8).reshape(n, 16)
        for i, d in enumerate(results):
            if d.status == OK:
                table.payloads[i] = d.payload
            elif d.status == ERROR:
                table.reasons[i] = d.reason
        return table
