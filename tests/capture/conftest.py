"""Fixtures for the nbmq.capture tests: bundled captures and hand-built packets."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

BUNDLED_PCAPS = ("dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap")


@pytest.fixture(scope="session")
def captures_dir() -> Path:
    """Directory of the bundled captures."""
    return CAPTURES


# -- hand-built packets (valid and deliberately broken) ------------------------------------


def _addr(text: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6 if ":" in text else socket.AF_INET, text)


def udp(payload: bytes, sport: int = 40000, dport: int = 47101, ulen: int | None = None) -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(payload) if ulen is None else ulen, 0) + payload


def ipv4(
    data: bytes,
    src: str = "10.1.2.3",
    dst: str = "10.9.8.7",
    proto: int = 17,
    options: bytes = b"",
    frag_offset: int = 0,
    more_fragments: bool = False,
    total_len: int | None = None,
    version: int = 4,
    ihl: int | None = None,
) -> bytes:
    hl = 20 + len(options)
    ihl_words = hl // 4 if ihl is None else ihl
    tot = hl + len(data) if total_len is None else total_len
    flags = (0x2000 if more_fragments else 0) | (frag_offset & 0x1FFF)
    hdr = struct.pack(
        ">BBHHHBBH4s4s", (version << 4) | ihl_words, 0, tot, 1, flags, 64, proto, 0, _addr(src), _addr(dst)
    )
    return hdr + options + data


def ipv6(
    data: bytes,
    src: str = "fd00::1",
    dst: str = "fd00::2",
    nh: int = 17,
    ext: bytes = b"",
    plen: int | None = None,
    version: int = 6,
) -> bytes:
    payload = ext + data
    length = len(payload) if plen is None else plen
    return struct.pack(">IHBB16s16s", version << 28, length, nh, 64, _addr(src), _addr(dst)) + payload


def eth(l3: bytes, ethertype: int | None = None, vlans: tuple[int, ...] = (), pad_to: int = 0) -> bytes:
    if ethertype is None:  # from the IP version nibble
        ethertype = 0x86DD if l3[:1] and l3[0] >> 4 == 6 else 0x0800
    head = bytes(12)
    for tpid in vlans:
        head += struct.pack(">HH", tpid, 5)
    frame = head + struct.pack(">H", ethertype) + l3
    return frame + bytes(max(0, pad_to - len(frame)))


def sll(l3: bytes, proto: int = 0x0800) -> bytes:
    return struct.pack(">HHH8sH", 0, 772, 6, bytes(8), proto) + l3


def sll2(l3: bytes, proto: int = 0x0800) -> bytes:
    return struct.pack(">HHIHBB8s", proto, 0, 1, 772, 0, 6, bytes(8)) + l3


def null(l3: bytes, family: int, order: str = "<") -> bytes:
    return struct.pack(order + "I", family) + l3


@pytest.fixture(scope="session")
def pkt() -> SimpleNamespace:
    """Builders for link-layer frames: udp, ipv4, ipv6, eth, sll, sll2, null."""
    return SimpleNamespace(udp=udp, ipv4=ipv4, ipv6=ipv6, eth=eth, sll=sll, sll2=sll2, null=null)


def mixed_ethernet_frames() -> list[bytes]:
    """Ethernet frames covering the fast path, its fallbacks, skips and errors."""
    p = bytes(range(40))
    hop_by_hop = bytes([17, 0]) + bytes(6)  # next header UDP, 8 bytes
    frag_first = bytes([17, 0]) + struct.pack(">HI", 0x0001, 7)  # offset 0, M=1
    frag_later = bytes([17, 0]) + struct.pack(">HI", 0x0008, 7)  # offset 1 (x8 bytes)
    return [
        eth(ipv4(udp(p))),  # plain
        eth(ipv4(udp(b"")), pad_to=60),  # empty payload + Ethernet padding
        eth(ipv4(udp(p[:3])), pad_to=60),  # padding must not leak into the payload
        eth(ipv4(udp(p)), vlans=(0x8100,)),  # VLAN
        eth(ipv4(udp(p)), vlans=(0x88A8, 0x8100)),  # QinQ
        eth(ipv4(udp(p), options=b"\x01\x01\x01\x00")),  # IP options
        eth(ipv6(udp(p))),  # IPv6
        eth(ipv6(udp(p), nh=0, ext=hop_by_hop)),  # IPv6 extension header -> dpkt
        eth(ipv6(udp(p), nh=44, ext=frag_first)),  # IPv6 first fragment
        eth(ipv6(p, nh=44, ext=frag_later)),  # IPv6 later fragment -> skipped
        eth(ipv4(udp(p), more_fragments=True)),  # IPv4 first fragment
        eth(ipv4(p, frag_offset=10)),  # IPv4 later fragment -> skipped
        eth(ipv4(p, proto=6)),  # TCP-ish -> skipped
        eth(bytes(28), ethertype=0x0806),  # ARP -> skipped
        eth(ipv4(udp(p, ulen=200))),  # UDP length past the data -> truncated
        eth(ipv4(udp(p, ulen=4))),  # bad UDP length -> error
        eth(ipv4(udp(p)[:5])),  # truncated UDP header -> error
        eth(ipv4(udp(p), version=5)),  # bad IPv4 version -> error
        eth(ipv4(udp(p), ihl=4)),  # bad IHL -> error
        eth(ipv4(udp(p), total_len=10)),  # total length < header -> error
        eth(ipv4(udp(p), total_len=0)),  # TSO: length 0 -> dpkt uses the captured bytes
        eth(ipv4(udp(p))[:15]),  # IPv4 cut short -> error
        eth(ipv6(udp(p), plen=0)),  # IPv6 payload length 0 -> dpkt
        eth(ipv6(udp(p), version=4), ethertype=0x86DD),  # bad IPv6 version
        eth(ipv6(udp(p))[:30], ethertype=0x86DD),  # IPv6 cut short
        bytes(10),  # shorter than an Ethernet header -> error
        eth(b"\x00" * 4, vlans=(0x8100,))[:16],  # VLAN tag cut short
        eth(bytes(20), ethertype=0x8847),  # MPLS -> dpkt
        bytes(12) + struct.pack(">H", 46) + bytes(46),  # 802.3 length field -> dpkt
        eth(ipv4(udp(p), src="0.0.0.0", dst="255.255.255.255")),
        eth(ipv6(udp(p), src="::ffff:1.2.3.4", dst="fe80::1:2")),
    ]


@pytest.fixture(scope="session")
def mixed_frames() -> list[bytes]:
    """See ``mixed_ethernet_frames``."""
    return mixed_ethernet_frames()
