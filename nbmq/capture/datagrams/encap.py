"""Wrapping UDP payloads into link-layer frames, all rows at once (for the writers)."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .batch import DatagramBatch
from .linktypes import ETHERTYPE_IPV4, ETHERTYPE_IPV6, RAW_LINKTYPES, LinkType

__all__ = ["DatagramColumns", "DatagramRow", "columns_from_rows", "frame_headers", "link_header_len", "seconds_to_ns"]

# (timestamp seconds, src ip, src port, dst ip, dst port, payload)
DatagramRow = tuple[float, str, int, str, int, bytes]
Payload = bytes | bytearray | memoryview

_ARPHRD_LOOPBACK = 772
_NULL_AF6 = 30  # DLT_NULL as macOS writes it (host order, little-endian here)
_LOOP_AF6 = 24  # DLT_LOOP as OpenBSD writes it (network order)
_LINK_LEN = {LinkType.ETHERNET: 14, LinkType.LINUX_SLL: 16, LinkType.LINUX_SLL2: 20, LinkType.NULL: 4, LinkType.LOOP: 4}


@dataclass(slots=True)
class DatagramColumns:
    """Datagrams to write, column-wise.

    Attributes:
        ts_ns: int64 (n,), timestamps in nanoseconds since the epoch.
        family: uint8 (n,), 4 or 6.
        src: uint8 (n, 16), packed source addresses (IPv4 in the first 4 bytes).
        dst: uint8 (n, 16), packed destination addresses.
        sport: uint16 (n,). dport: uint16 (n,).
        payloads: n bytes-like payloads.
        lengths: int64 (n,), payload lengths in bytes.
    """

    ts_ns: np.ndarray
    family: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    payloads: Sequence[Payload]
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])


def link_header_len(linktype: int) -> int:
    """Bytes of link-layer header the writers put before the IP header.

    Raises:
        ValueError: the writers do not support ``linktype``.
    """
    if linktype in RAW_LINKTYPES:
        return 0
    try:
        return _LINK_LEN[LinkType(linktype)]
    except (ValueError, KeyError):
        raise ValueError(f"cannot write link type {linktype}") from None


def seconds_to_ns(seconds: Sequence[float]) -> np.ndarray:
    """Convert float seconds since the epoch to int64 nanoseconds, rounding to the nearest ns.

    Args:
        seconds: n timestamps in seconds (float or int).

    Returns:
        int64 (n,) nanoseconds since the epoch.
    """
    ts = np.asarray(seconds, dtype=np.float64)
    whole = np.floor(ts)
    frac_ns = np.round((ts - whole) * 1e9).astype(np.int64)  # ts - whole is exact in float64
    return whole.astype(np.int64) * 1_000_000_000 + frac_ns


def _pack_addresses(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    packed: dict[str, tuple[int, bytes]] = {}
    for text in set(texts):
        try:
            if ":" in text:
                packed[text] = (6, socket.inet_pton(socket.AF_INET6, text))
            else:
                packed[text] = (4, socket.inet_pton(socket.AF_INET, text) + bytes(12))
        except (OSError, TypeError):
            raise ValueError(f"not an IP address: {text!r}") from None
    order = {t: j for j, t in enumerate(packed)}
    table = np.frombuffer(b"".join(v[1] for v in packed.values()), np.uint8).reshape(-1, 16)
    fams = np.array([v[0] for v in packed.values()], np.uint8)
    idx = np.fromiter((order[t] for t in texts), np.int64, len(texts))
    return fams[idx], table[idx]


def _ports(values: Iterable[int], name: str) -> np.ndarray:
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFF):
        raise ValueError(f"{name} out of range 0..65535")
    return arr.astype(np.uint16)


def columns_from_rows(rows: Iterable[DatagramRow] | DatagramBatch) -> DatagramColumns:
    """Turn rows (or a batch read earlier) into ``DatagramColumns``.

    Args:
        rows: ``(timestamp_s, src_ip, src_port, dst_ip, dst_port, payload)`` tuples, where
            ``timestamp_s`` is float (or int) seconds since the epoch, addresses are IPv4 or
            IPv6 text and ``payload`` is bytes-like; or a ``DatagramBatch`` (its exact
            ``timestamp_ns`` are used).

    Returns:
        The columns.

    Raises:
        ValueError: a bad address or port.
    """
    if isinstance(rows, DatagramBatch):
        fam_s, src = _pack_addresses(list(rows.src_addr))
        _fam_d, dst = _pack_addresses(list(rows.dst_addr))
        view = memoryview(rows.payload)
        starts, lens = rows.offsets.tolist(), rows.lengths.tolist()
        return DatagramColumns(
            ts_ns=rows.timestamp_ns.astype(np.int64),
            family=fam_s,
            src=src,
            dst=dst,
            sport=rows.src_port.astype(np.uint16),
            dport=rows.dst_port.astype(np.uint16),
            payloads=[view[s : s + n] for s, n in zip(starts, lens)],
            lengths=rows.lengths.astype(np.int64),
        )
    items = rows if isinstance(rows, (list, tuple)) else list(rows)
    if not items:
        z = np.zeros(0, np.uint16)
        e16 = np.zeros((0, 16), np.uint8)
        return DatagramColumns(np.zeros(0, np.int64), np.zeros(0, np.uint8), e16, e16, z, z, [], np.zeros(0, np.int64))
    ts, src_t, sport, dst_t, dport, payloads = zip(*items)
    fam_s, src = _pack_addresses(src_t)
    fam_d, dst = _pack_addresses(dst_t)
    if np.any(fam_s != fam_d):
        raise ValueError("source and destination address of a datagram must be the same IP version")
    return DatagramColumns(
        ts_ns=seconds_to_ns(ts),
        family=fam_s,
        src=src,
        dst=dst,
        sport=_ports(sport, "source port"),
        dport=_ports(dport, "destination port"),
        payloads=payloads,
        lengths=np.fromiter(map(len, payloads), np.int64, len(payloads)),
    )


def _put16(out: np.ndarray, col: int, values: np.ndarray | int) -> None:
    v = np.asarray(values, np.int64)
    out[:, col] = (v >> 8) & 0xFF
    out[:, col + 1] = v & 0xFF


def _link_header(linktype: int, family: int, m: int) -> np.ndarray:
    out = np.zeros((m, link_header_len(linktype)), np.uint8)
    ethertype = ETHERTYPE_IPV4 if family == 4 else ETHERTYPE_IPV6
    if linktype == LinkType.ETHERNET:  # zero MACs, as on Linux loopback
        _put16(out, 12, ethertype)
    elif linktype == LinkType.LINUX_SLL:
        _put16(out, 2, _ARPHRD_LOOPBACK)
        _put16(out, 4, 6)
        _put16(out, 14, ethertype)
    elif linktype == LinkType.LINUX_SLL2:
        _put16(out, 0, ethertype)
        out[:, 7] = 1  # interface index 1
        _put16(out, 8, _ARPHRD_LOOPBACK)
        out[:, 11] = 6
    elif linktype == LinkType.NULL:
        out[:, 0] = 2 if family == 4 else _NULL_AF6
    elif linktype == LinkType.LOOP:
        out[:, 3] = 2 if family == 4 else _LOOP_AF6
    return out


def frame_headers(cols: DatagramColumns, rows: np.ndarray, linktype: int, family: int) -> np.ndarray:
    """Link + IP + UDP headers for the given rows, all of one IP version.

    IPv4 headers get DF, TTL 64, an IP id counting rows, and a valid header checksum; UDP
    checksums are 0 (none; loopback captures look the same).

    Args:
        cols: all datagrams.
        rows: int64 (m,), the rows to build (all with ``cols.family == family``).
        linktype: LINKTYPE_* of the frames.
        family: 4 or 6.

    Returns:
        uint8 (m, link_len + 28 or + 48), one frame header per row.

    Raises:
        ValueError: a payload too large for one IP packet; unsupported link type.
    """
    m = int(rows.shape[0])
    lens = cols.lengths[rows]
    ip_len = 20 if family == 4 else 40
    limit = 0xFFFF - 28 if family == 4 else 0xFFFF - 8
    if m and int(lens.max()) > limit:
        raise ValueError(f"payload of {int(lens.max())} bytes does not fit in one IPv{family} packet")
    link = _link_header(linktype, family, m)
    ip = np.zeros((m, ip_len), np.uint8)
    if family == 4:
        ip[:, 0] = 0x45
        _put16(ip, 2, 28 + lens)
        _put16(ip, 4, rows & 0xFFFF)
        ip[:, 6] = 0x40  # don't fragment
        ip[:, 8] = 64
        ip[:, 9] = 17
        ip[:, 12:16] = cols.src[rows, :4]
        ip[:, 16:20] = cols.dst[rows, :4]
        words = ip.view(">u2").astype(np.int64).sum(axis=1)
        words = (words & 0xFFFF) + (words >> 16)
        words = (words & 0xFFFF) + (words >> 16)
        _put16(ip, 10, ~words & 0xFFFF)
    else:
        ip[:, 0] = 0x60
        _put16(ip, 4, 8 + lens)
        ip[:, 6] = 17
        ip[:, 7] = 64
        ip[:, 8:24] = cols.src[rows]
        ip[:, 24:40] = cols.dst[rows]
    udp = np.zeros((m, 8), np.uint8)
    _put16(udp, 0, cols.sport[rows])
    _put16(udp, 2, cols.dport[rows])
    _put16(udp, 4, 8 + lens)
    return np.concatenate([link, ip, udp], axis=1)
