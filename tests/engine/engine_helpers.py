"""Shared helpers for the engine tests: a pcap reader (dpkt), the reference's xorshift64* rng,
the captures' payload pattern, and small drivers for engine pairs without the simulator.

The pcap reader is local on purpose: ``nbmq.capture`` is written by another helper.
"""

from __future__ import annotations

import hashlib
import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dpkt

from nbmq import codec
from nbmq.examples import CAPTURE_DIR as CAPTURES  # noqa: F401 (for the replay tests)

Addr = tuple[str, int]
_M64 = (1 << 64) - 1


def udp_datagrams(path: Path) -> Iterator[tuple[float, Addr, Addr, bytes]]:
    """``(timestamp, src, dst, payload)`` for every UDP/IPv4 datagram of a classic pcap."""
    with open(path, "rb") as fh:
        for ts, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.udp.UDP):
                continue
            udp = ip.data
            yield (
                float(ts),
                (socket.inet_ntoa(ip.src), udp.sport),
                (socket.inet_ntoa(ip.dst), udp.dport),
                bytes(udp.data),
            )


def parse_addr(text: str) -> Addr:
    host, port = text.rsplit(":", 1)
    return host, int(port)


class XorShift(random.Random):
    """The reference's XORShift (xorshift64*: >>12, <<25, >>27, * 0x2545F4914F6CDD1D).

    Only ``getrandbits(64)`` is used by the engines (one sample per Connect received), so a
    bound engine given ``XorShift(rng_seed)`` draws the capture's session ids.
    """

    def __init__(self, seed: int) -> None:
        self._x = seed & _M64
        super().__init__(seed)

    def seed(self, a: Any = None, version: int = 2) -> None:  # keep our state
        super().seed(a, version)

    def getrandbits(self, k: int) -> int:
        x = self._x
        x ^= x >> 12
        x ^= (x << 25) & _M64
        x ^= x >> 27
        self._x = x
        return ((x * 0x2545F4914F6CDD1D) & _M64) >> (64 - k)


def pattern_parts(sender: int, seq: int, part_sizes: list[int]) -> list[bytes]:
    """The captures' payload: byte i of part p of message m = (S*31 + m*7 + p*13 + i) % 256."""
    out = []
    for p, size in enumerate(part_sizes):
        start = (sender * 31 + seq * 7 + p * 13) % 256
        out.append(bytes((start + i) % 256 for i in range(size)))
    return out


def part_digests(parts: Any) -> list[str]:
    return [hashlib.sha256(bytes(p)).hexdigest() for p in parts]


def is_data(datagram: Any) -> bool:
    return bytes(datagram[:2]) == b"\x01\x00"


def kind_of(datagram: Any) -> int:
    return bytes(datagram[1:2])[0]


def pump(a: Any, a_addr: Any, b: Any, b_addr: Any, now: float, rounds: int = 1000) -> int:
    """Exchange datagrams between two engines on a perfect, instant link until both are quiet.

    Returns the datagrams moved. Bounded by ``rounds``.
    """
    moved = 0
    for _ in range(rounds):
        out_a = a.datagrams_to_send(now)
        out_b = b.datagrams_to_send(now)
        if not out_a and not out_b:
            return moved
        for data, dst in out_a:
            assert dst == b_addr
            b.receive_datagram(bytes(data), a_addr, now)
        for data, dst in out_b:
            assert dst == a_addr
            a.receive_datagram(bytes(data), b_addr, now)
        moved += len(out_a) + len(out_b)
    raise AssertionError("engines never went quiet")


def drain_events(engine: Any, limit: int = 100_000) -> list[Any]:
    out = []
    for _ in range(limit):
        event = engine.next_event()
        if event is None:
            break
        out.append(event)
    return out


def recv_all(engine: Any, limit: int = 1_000_000) -> list[list[bytes]]:
    from nbmq.errors import WouldBlock

    out = []
    for _ in range(limit):
        try:
            out.append([bytes(p) for p in engine.recv()])
        except WouldBlock:
            break
    return out


def control(kind: int, session_id: int, payload: bytes = b"") -> bytes:
    return codec.encode_control_frame(kind, session_id, payload)
