"""Link-layer types (LINKTYPE_* values) the capture layer reads and writes.

See https://www.tcpdump.org/linktypes.html. Values 12 and 14 are the DLT_RAW numbers some
platforms (OpenBSD, BSD/OS) wrote into pcap files before LINKTYPE_RAW (101) existed.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["LinkType", "SUPPORTED_LINKTYPES", "RAW_LINKTYPES", "ETHERTYPE_IPV4", "ETHERTYPE_IPV6"]


class LinkType(IntEnum):
    """Link-layer header types understood by the reader and writer."""

    NULL = 0  # BSD loopback: 4-byte address family in the writer's byte order
    ETHERNET = 1
    RAW_OPENBSD = 12  # raw IPv4/IPv6, old OpenBSD numbering
    RAW_BSDOS = 14  # raw IPv4/IPv6, old BSD/OS numbering
    RAW = 101
    LOOP = 108  # OpenBSD loopback: address family in network byte order
    LINUX_SLL = 113
    IPV4 = 228
    IPV6 = 229
    LINUX_SLL2 = 276


RAW_LINKTYPES: frozenset[int] = frozenset(
    {LinkType.RAW, LinkType.RAW_OPENBSD, LinkType.RAW_BSDOS, LinkType.IPV4, LinkType.IPV6}
)
SUPPORTED_LINKTYPES: frozenset[int] = frozenset(int(t) for t in LinkType)

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
# 802.1Q / 802.1ad / legacy QinQ tags: dpkt.ethernet unwraps these (first tag any of them,
# second tag only 0x8100), so the fast path does the same.
ETHERTYPES_VLAN: frozenset[int] = frozenset({0x8100, 0x88A8, 0x9100, 0x9200})
ETHERTYPES_MPLS: frozenset[int] = frozenset({0x8847, 0x8848})

# Address families in NULL / LOOP headers. AF_INET is 2 everywhere; AF_INET6 differs:
# Linux 10, NetBSD/OpenBSD 24, FreeBSD 28, macOS 30.
AF_INET = 2
AF_INET6_VALUES: frozenset[int] = frozenset({10, 24, 28, 30})
