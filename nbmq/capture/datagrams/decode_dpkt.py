"""Packet-at-a-time decoding with dpkt: the reference the fast path is checked against.

Rules (the fast path implements exactly the same ones for the rows it handles itself):

* link layer: Ethernet (with up to two VLAN tags, as dpkt unwraps them), Linux cooked v1 and
  v2, raw IP (by version nibble), BSD NULL / LOOP (by address family);
* IPv4: version 4, header length >= 20, total length >= header length (0 means "TSO, use the
  captured bytes", as dpkt does); fragments with a non-zero offset are skipped (no reassembly),
  a first fragment yields the UDP payload bytes it carries, marked truncated;
* IPv6: extension headers are walked by dpkt; a fragment header with a non-zero offset skips;
* UDP: length >= 8; the payload is bounded by the UDP length, the IP length (which drops
  Ethernet padding and trailers) and the captured bytes; captured < announced -> truncated.
* checksums are not verified (loopback captures carry offloaded, invalid ones).
"""

from __future__ import annotations

import struct

from ..dpkt_extra import load_dpkt
from .linktypes import (
    AF_INET,
    AF_INET6_VALUES,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    RAW_LINKTYPES,
    LinkType,
)
from .rows import ERROR, OK, SKIP, Decoded

__all__ = ["decode_packet"]

dpkt = load_dpkt("decoding the packets the fast path leaves aside (or the dpkt engine)")

_SKIPPED = Decoded(SKIP)
_IP = dpkt.ip.IP
_IP6 = dpkt.ip6.IP6
_UDP = dpkt.udp.UDP


def _error(reason: str) -> Decoded:
    return Decoded(ERROR, reason)


def decode_packet(linktype: int, frame: bytes) -> Decoded:
    """Decode one captured link-layer frame down to its UDP payload.

    Args:
        linktype: LINKTYPE_* value of the frame (see ``LinkType``).
        frame: the captured bytes of the packet record.

    Returns:
        A ``Decoded`` with status ``OK`` (a UDP datagram), ``SKIP`` (not UDP over IP, or a
        non-first fragment) or ``ERROR`` (with a short reason). Never raises.
    """
    try:
        return _decode(linktype, frame)
    except dpkt.NeedData:  # escapes dpkt only from link-layer extras (VLAN tags, MPLS labels)
        return _error("truncated link header")
    except Exception as exc:  # dpkt raises many types on hostile bytes; one packet never stops a read
        return _error(f"undecodable packet ({type(exc).__name__})")


def _decode(linktype: int, buf: bytes) -> Decoded:
    if linktype == LinkType.ETHERNET:
        if len(buf) < 14:
            return _error("truncated link header")
        eth = dpkt.ethernet.Ethernet(buf)
        if isinstance(eth.data, (_IP, _IP6)):
            return _decode_ip(eth.data)
        return _not_ip(getattr(eth, "_next_type", None) or eth.type)
    if linktype == LinkType.LINUX_SLL:
        if len(buf) < 16:
            return _error("truncated link header")
        sll = dpkt.sll.SLL(buf)
        return _decode_typed(sll.ethtype, sll.data)
    if linktype == LinkType.LINUX_SLL2:
        if len(buf) < 20:
            return _error("truncated link header")
        sll2 = dpkt.sll2.SLL2(buf)
        return _decode_typed(sll2.ethtype, sll2.data)
    if linktype in RAW_LINKTYPES:
        if not buf:
            return _error("truncated link header")
        version = buf[0] >> 4
        if version == 4:
            return _decode_ip4_bytes(buf)
        if version == 6:
            return _decode_ip6_bytes(buf)
        return _error("unknown IP version")
    if linktype in (LinkType.NULL, LinkType.LOOP):
        if len(buf) < 4:
            return _error("truncated link header")
        family = _null_family(linktype, buf)
        if family == AF_INET:
            return _decode_ip4_bytes(buf[4:])
        if family in AF_INET6_VALUES:
            return _decode_ip6_bytes(buf[4:])
        return _SKIPPED
    return _error(f"unsupported link type {linktype}")


def _null_family(linktype: int, buf: bytes) -> int:
    (be,) = struct.unpack_from(">I", buf, 0)
    if linktype == LinkType.LOOP:
        return int(be)
    # DLT_NULL stores the family in the writer's byte order: the small reading is the right one
    (le,) = struct.unpack_from("<I", buf, 0)
    return int(le if le < 0x10000 else be)


def _not_ip(ethertype: int) -> Decoded:
    if ethertype == ETHERTYPE_IPV4:
        return _error("bad IPv4 header")
    if ethertype == ETHERTYPE_IPV6:
        return _error("bad IPv6 header")
    return _SKIPPED


def _decode_typed(ethertype: int, data: object) -> Decoded:
    if ethertype == ETHERTYPE_IPV4:
        return _decode_ip(data) if isinstance(data, _IP) else _error("bad IPv4 header")
    if ethertype == ETHERTYPE_IPV6:
        return _decode_ip(data) if isinstance(data, _IP6) else _error("bad IPv6 header")
    return _SKIPPED


def _decode_ip4_bytes(buf: bytes) -> Decoded:
    try:
        ip = _IP(buf)
    except (dpkt.UnpackError, struct.error):
        return _error("bad IPv4 header")
    return _decode_ip(ip)


def _decode_ip6_bytes(buf: bytes) -> Decoded:
    try:
        ip6 = _IP6(buf)
    except (dpkt.UnpackError, struct.error):
        return _error("bad IPv6 header")
    return _decode_ip(ip6)


def _decode_ip(ip: object) -> Decoded:
    if isinstance(ip, _IP):
        hl = ip.hl * 4
        if ip.v != 4 or hl < 20 or (ip.len != 0 and ip.len < hl):
            return _error("bad IPv4 header")
        if ip.offset:  # non-first fragment (13-bit offset field): no UDP header here
            return _SKIPPED
        family = 4
    else:
        assert isinstance(ip, _IP6)
        if ip.v != 6:
            return _error("bad IPv6 header")
        for ext in ip.all_extension_headers:
            if isinstance(ext, dpkt.ip6.IP6FragmentHeader) and ext.frag_off:
                return _SKIPPED
        family = 6
    if ip.p != 17:
        return _SKIPPED
    udp = ip.data
    if not isinstance(udp, _UDP):
        return _error("truncated UDP header")
    if udp.ulen < 8:
        return _error("bad UDP length")
    want = udp.ulen - 8
    payload = bytes(udp.data[:want])
    return Decoded(
        OK,
        family=family,
        src=bytes(ip.src),
        dst=bytes(ip.dst),
        sport=udp.sport,
        dport=udp.dport,
        payload=payload,
        truncated=len(payload) < want,
    )
