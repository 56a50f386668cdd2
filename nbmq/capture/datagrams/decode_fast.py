"""Vectorised (numpy) decoding of the common case: UDP over IPv4/IPv6 over a known link layer.

Every header field of every packet is gathered at once with fancy indexing on unaligned views
of the capture buffer. Rows are classified OK (decoded here), SKIP (certainly not a UDP
datagram we return) or FALLBACK: anything unusual (VLAN tags cut short, MPLS, 802.3 frames,
IPv4 total length 0, IPv6 extension headers or jumbograms, short or malformed headers) is left
to ``decode_packet`` (dpkt), so both engines give identical results by construction on those
rows, and the rules in ``decode_dpkt`` define the behaviour on the rest.
"""

from __future__ import annotations

import numpy as np

from ... import extensions
from .linktypes import (
    AF_INET,
    AF_INET6_VALUES,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPES_MPLS,
    ETHERTYPES_VLAN,
    RAW_LINKTYPES,
    LinkType,
)
from .rows import ERROR, FALLBACK, OK, SKIP, RowTable
from .views import ByteViews

__all__ = ["decode_fast", "decode_packets", "decode_fallbacks", "COMPILED"]

_decode = extensions.load("nbmq.capture.datagrams._decode")  # None: numpy does the work

#: True when ``decode_packets`` uses the compiled decoder (``nbmq.capture.datagrams._decode``) by default.
COMPILED = _decode is not None

_VLAN = np.array(sorted(ETHERTYPES_VLAN), np.int64)
_MPLS = np.array(sorted(ETHERTYPES_MPLS), np.int64)
_IP_TYPES = np.array([ETHERTYPE_IPV4, ETHERTYPE_IPV6], np.int64)
_AF6 = np.array(sorted(AF_INET6_VALUES), np.int64)
_IP6_EXT = np.array([0, 43, 44, 50, 51, 60], np.int64)  # the extension headers dpkt walks


def decode_fast(views: ByteViews, starts: np.ndarray, caplens: np.ndarray, linktype: int) -> RowTable:
    """Classify and decode n packet records of one link type.

    Args:
        views: unaligned integer views over the buffer holding the packets.
        starts: int64 (n,), byte position of each packet's first link-layer byte in the buffer.
        caplens: int64 (n,), captured length of each packet (bytes).
        linktype: LINKTYPE_* value shared by all n packets.

    Returns:
        A ``RowTable``; OK rows have ``pstart``/``pend`` pointing into the buffer, FALLBACK
        rows still need ``decode_packet``. An unsupported link type makes every row ERROR.
    """
    n = int(starts.shape[0])
    table = RowTable.allocate(n, FALLBACK)
    if n == 0:
        return table
    link = _link_layer(views, starts, caplens, linktype)
    if link is None:
        table.status[:] = ERROR
        table.reasons.update(dict.fromkeys(range(n), f"unsupported link type {linktype}"))
        return table
    is4, is6, l3, skip_link = link
    end = starts + caplens
    rem = end - l3

    b0 = views.u8(l3).astype(np.int64)
    ihl = (b0 & 15) * 4
    tot = views.be16(l3 + 2).astype(np.int64)
    frag = views.be16(l3 + 6).astype(np.int64) & 0x1FFF
    proto = views.u8(l3 + 9)
    good4 = is4 & (rem >= 20) & ((b0 >> 4) == 4) & (ihl >= 20) & (tot >= ihl)
    skip4 = good4 & ((frag != 0) | (proto != 17))
    udp4 = good4 & ~skip4

    plen = views.be16(l3 + 4).astype(np.int64)
    nxt = views.u8(l3 + 6).astype(np.int64)
    good6 = is6 & (rem >= 40) & ((b0 >> 4) == 6) & (plen > 0)
    skip6 = good6 & (nxt != 17) & ~np.isin(nxt, _IP6_EXT)
    udp6 = good6 & (nxt == 17)

    udp = np.where(udp6, l3 + 40, l3 + ihl)
    ip_end = np.where(udp6, l3 + 40 + plen, l3 + tot)
    ulen = views.be16(udp + 4).astype(np.int64)
    ok = (udp4 | udp6) & (udp + 8 <= end) & (udp + 8 <= ip_end) & (ulen >= 8)

    status = table.status
    status[skip_link | skip4 | skip6] = SKIP
    status[ok] = OK
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return table
    l3o, udpo = l3[rows], udp[rows]
    v6 = udp6[rows]
    declared = udpo + ulen[rows]
    pend = np.minimum(np.minimum(declared, ip_end[rows]), end[rows])
    table.pstart[rows] = udpo + 8
    table.pend[rows] = pend
    table.truncated[rows] = pend < declared
    table.sport[rows] = views.be16(udpo)
    table.dport[rows] = views.be16(udpo + 2)
    table.family[rows] = np.where(v6, 6, 4)
    r4, r6 = rows[~v6], rows[v6]
    if r4.size:
        table.src[r4, :4] = _be32_bytes(views.be32(l3o[~v6] + 12))
        table.dst[r4, :4] = _be32_bytes(views.be32(l3o[~v6] + 16))
    if r6.size:
        table.src[r6] = views.bytes16(l3o[v6] + 8)
        table.dst[r6] = views.bytes16(l3o[v6] + 24)
    return table


def decode_packets(
    buf: object, size: int, starts: np.ndarray, caplens: np.ndarray, linktype: int, compiled: bool | None = None
) -> RowTable:
    """``decode_fast`` over packets of ``buf``, by the compiled twin when it is built.

    Args:
        buf: the capture's bytes (any buffer; read-only is fine).
        size: its length in bytes.
        starts: int64 (n,), first link-layer byte of each packet; ``starts + caplens <= size``.
        caplens: int64 (n,), captured lengths (bytes).
        linktype: LINKTYPE_* value of the n packets.
        compiled: True requires ``nbmq.capture.datagrams._decode``, False uses numpy, None (default)
            the compiled decoder when built and ``NBMQ_NO_EXTENSIONS`` is not set. Both give
            identical tables (tests hold them to it).

    Returns:
        The ``RowTable`` (FALLBACK rows still need ``decode_packet``).
    """
    if compiled is None:
        compiled = _decode is not None
    elif compiled and _decode is None:
        raise RuntimeError("nbmq.capture.datagrams._decode is not built")
    if not compiled or linktype not in _decode.SUPPORTED:  # unsupported: decode_fast's ERROR rows
        return decode_fast(ByteViews(buf, size), starts, caplens, linktype)
    n = int(starts.shape[0])
    table = RowTable.allocate(n, FALLBACK)
    if n:
        _decode.decode_udp(
            np.frombuffer(buf, np.uint8, size),  # type: ignore[call-overload]
            np.ascontiguousarray(starts, np.int64),
            np.ascontiguousarray(caplens, np.int64),
            int(linktype),
            _VLAN,
            _MPLS,
            _AF6,
            _IP6_EXT,
            table.status,
            table.family,
            table.src,
            table.dst,
            table.sport,
            table.dport,
            table.pstart,
            table.pend,
            table.truncated.view(np.uint8),
        )
    return table


def decode_fallbacks(
    table: RowTable, buf: object, starts: np.ndarray, caplens: np.ndarray, linktypes: int | np.ndarray
) -> int:
    """Decode the rows the fast path left (FALLBACK) with dpkt's ``decode_packet``, in place.

    Args:
        table: decode results for n packets.
        buf: the capture's bytes; packet i is ``buf[starts[i] : starts[i] + caplens[i]]``.
        starts, caplens: int64 (n,).
        linktypes: the packets' LINKTYPE_* value, one for all or int64 (n,) per packet.

    Returns:
        How many rows were handed to dpkt.

    Raises:
        DpktMissing: some row needs dpkt and it is not installed.
    """
    rows = np.flatnonzero(table.status == FALLBACK)
    if not rows.size:
        return 0
    from .decode_dpkt import decode_packet  # dpkt only when a packet needs it

    for i in rows.tolist():
        s = int(starts[i])
        lt = int(linktypes if np.isscalar(linktypes) else linktypes[i])  # type: ignore[index]
        table.put(i, decode_packet(lt, bytes(buf[s : s + int(caplens[i])])))  # type: ignore[index]
    return int(rows.size)


def _be32_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(">u4").view(np.uint8).reshape(-1, 4)


def _link_layer(
    views: ByteViews, starts: np.ndarray, caplens: np.ndarray, linktype: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Return (is IPv4, is IPv6, network-layer start, certainly-not-IP) per row, or None."""
    none = np.zeros(starts.shape[0], bool)
    if linktype == LinkType.ETHERNET:
        ok = caplens >= 14
        outer = views.be16(starts + 12).astype(np.int64)
        tag1 = ok & np.isin(outer, _VLAN)
        t1 = tag1 & (caplens >= 18)
        inner1 = views.be16(starts + 16).astype(np.int64)
        tag2 = t1 & (inner1 == 0x8100)  # dpkt unwraps a second tag only if it is 802.1Q
        t2 = tag2 & (caplens >= 22)
        et = np.where(t2, views.be16(starts + 20).astype(np.int64), np.where(t1, inner1, outer))
        l3 = starts + np.where(t2, 22, np.where(t1, 18, 14))
        resolved = ok & ~(tag1 & ~t1) & ~(tag2 & ~t2)
        # dpkt treats MPLS and 802.3 length fields specially: leave those rows to it
        special = ~t1 & (np.isin(outer, _MPLS) | (outer <= 1500))
        is4 = resolved & (et == ETHERTYPE_IPV4)
        is6 = resolved & (et == ETHERTYPE_IPV6)
        skip = resolved & ~special & ~np.isin(et, _IP_TYPES)
        return is4, is6, l3, skip
    if linktype in (LinkType.LINUX_SLL, LinkType.LINUX_SLL2):
        v2 = linktype == LinkType.LINUX_SLL2
        hlen = 20 if v2 else 16
        ok = caplens >= hlen
        et = views.be16(starts if v2 else starts + 14).astype(np.int64)
        is4 = ok & (et == ETHERTYPE_IPV4)
        is6 = ok & (et == ETHERTYPE_IPV6)
        return is4, is6, starts + hlen, ok & ~is4 & ~is6
    if linktype in RAW_LINKTYPES:
        ok = caplens >= 1
        version = views.u8(starts) >> 4
        return ok & (version == 4), ok & (version == 6), starts, none
    if linktype in (LinkType.NULL, LinkType.LOOP):
        ok = caplens >= 4
        be = views.be32(starts).astype(np.int64)
        if linktype == LinkType.NULL:  # writer's byte order: the small reading is the right one
            le = views.le32(starts).astype(np.int64)
            family = np.where(le < 0x10000, le, be)
        else:
            family = be
        is4 = ok & (family == AF_INET)
        is6 = ok & np.isin(family, _AF6)
        return is4, is6, starts + 4, ok & ~is4 & ~is6
    return None
