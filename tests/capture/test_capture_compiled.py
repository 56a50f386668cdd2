"""The compiled capture decoder (nbmq.capture.datagrams._decode) against its numpy twin, row for row."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbmq.capture import LinkType
from nbmq.capture.datagrams.assemble import address_table
from nbmq.capture.datagrams.decode_fast import COMPILED, decode_packets
from nbmq.capture.files.errorlog import ErrorLog
from nbmq.capture.files.formats import parse_pcap_header
from nbmq.capture.files.records import RecordScanner

REQUIRED = os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0")
pytestmark = [
    pytest.mark.c_extension,
    pytest.mark.skipif(
        not COMPILED and not REQUIRED, reason="nbmq.capture.datagrams._decode not built (or NBMQ_NO_EXTENSIONS)"
    ),
]


def test_compiled_decoder_is_in_use():
    """With NBMQ_REQUIRE_EXTENSIONS=1 (as `make test` sets) a missing build fails here, not skips."""
    assert COMPILED


BUNDLED_PCAPS = ("dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap")
COLUMNS = ("status", "family", "src", "dst", "sport", "dport", "pstart", "pend", "truncated")


def _packets(frames: list[bytes], gap: int = 3) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Frames laid out in one buffer with junk between them (as records are)."""
    buf, starts = bytearray(), []
    for f in frames:
        buf += b"\xee" * gap
        starts.append(len(buf))
        buf += f
    return bytes(buf), np.array(starts, np.int64), np.array([len(f) for f in frames], np.int64)


def _same_tables(buf: bytes, starts: np.ndarray, caplens: np.ndarray, linktype: int) -> None:
    compiled = decode_packets(buf, len(buf), starts, caplens, linktype, compiled=True)
    numpy_ = decode_packets(buf, len(buf), starts, caplens, linktype, compiled=False)
    for name in COLUMNS:
        np.testing.assert_array_equal(getattr(compiled, name), getattr(numpy_, name), err_msg=name)
    assert compiled.reasons == numpy_.reasons


def test_mixed_ethernet_frames_decode_identically(mixed_frames):
    frames = mixed_frames
    _same_tables(*_packets(frames), int(LinkType.ETHERNET))
    # every prefix of every frame: cut headers must classify the same way too
    cuts = [f[:k] for f in frames for k in range(0, len(f) + 1, 3)]
    _same_tables(*_packets(cuts, gap=0), int(LinkType.ETHERNET))


@pytest.mark.parametrize("linktype", [int(t) for t in LinkType] + [147])
def test_every_link_type_decodes_identically(pkt, linktype):
    p = b"payload"
    l3s = [
        pkt.ipv4(pkt.udp(p)),
        pkt.ipv6(pkt.udp(p)),
        pkt.ipv4(pkt.udp(p), proto=6),
        pkt.ipv6(pkt.udp(p), nh=0, ext=bytes([17, 0]) + bytes(6)),
        pkt.ipv4(pkt.udp(p, ulen=3)),
        pkt.ipv4(p, frag_offset=1),
        pkt.ipv4(pkt.udp(p), more_fragments=True),
        pkt.ipv6(pkt.udp(p), plen=0),
        pkt.ipv4(pkt.udp(p), total_len=0),
        pkt.ipv4(pkt.udp(p), options=b"\x01" * 8),
    ]
    frames = []
    for l3 in l3s:
        et = 0x86DD if l3[0] >> 4 == 6 else 0x0800
        frames += [
            pkt.eth(l3),
            pkt.eth(l3, vlans=(0x8100,)),
            pkt.sll(l3, et),
            pkt.sll2(l3, et),
            l3,
            pkt.null(l3, 2 if et == 0x0800 else 24, "<"),
            pkt.null(l3, 2 if et == 0x0800 else 30, ">"),
        ]
    frames += [b"", b"\x45", bytes(30)]
    _same_tables(*_packets(frames), linktype)


@pytest.mark.parametrize("name", BUNDLED_PCAPS)
def test_bundled_captures_decode_identically(captures_dir, name):
    data = (captures_dir / name).read_bytes()
    header = parse_pcap_header(data, len(data))
    offs = RecordScanner(data, len(data), header).walk(24, len(data), ErrorLog())
    caplens = np.array([struct.unpack_from(header.byte_order + "I", data, int(o) + 8)[0] for o in offs], np.int64)
    _same_tables(data, offs + 16, caplens, header.linktype)


@settings(max_examples=150, deadline=None)
@given(
    frames=st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=20),
    linktype=st.sampled_from([0, 1, 101, 108, 113, 276]),
    seeds=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20),
)
def test_random_and_mutated_packets_decode_identically(pkt, frames, linktype, seeds):
    """Random bytes, and valid packets with a byte changed: same classification and fields."""
    valid = pkt.eth(pkt.ipv4(pkt.udp(b"abcdef")))
    if linktype != 1:
        valid = {
            0: pkt.null(valid[14:], 2),
            101: valid[14:],
            108: pkt.null(valid[14:], 2, ">"),
            113: pkt.sll(valid[14:]),
            276: pkt.sll2(valid[14:]),
        }[linktype]
    for seed in seeds:
        b = bytearray(valid)
        b[seed % len(b)] = (seed >> 8) & 0xFF
        frames.append(bytes(b[: len(b) - (seed >> 16) % 4]))
    _same_tables(*_packets(frames), linktype)


def test_address_table_compiled_equals_numpy():
    rng = np.random.default_rng(7)
    n = 5000
    family = np.where(rng.random(n) < 0.3, 6, 4).astype(np.uint8)
    pool = rng.integers(0, 256, (40, 16), dtype=np.uint8)
    src = pool[rng.integers(0, 40, n)].copy()
    dst = pool[rng.integers(0, 40, n)].copy()
    src[family == 4, 4:] = 0
    dst[family == 4, 4:] = 0
    t1, s1, d1 = address_table(family, src, dst, compiled=True)
    t2, s2, d2 = address_table(family, src, dst, compiled=False)
    assert list(t1[s1]) == list(t2[s2]) and list(t1[d1]) == list(t2[d2])
    assert len(t1) == len(t2) == len(set(t1))  # one code per distinct address, shared by both sides
    assert s1.dtype == d1.dtype == np.int32


def test_address_table_grows_past_its_first_size():
    n = 30000  # distinct addresses: the hash table must grow several times
    family = np.full(n, 4, np.uint8)
    src = np.zeros((n, 16), np.uint8)
    src[:, :4] = np.arange(n, dtype=">u4").view(np.uint8).reshape(n, 4)
    dst = src[::-1].copy()
    texts, s, d = address_table(family, src, dst, compiled=True)
    assert len(texts) == n
    assert texts[s[0]] == "0.0.0.0" and texts[s[-1]] == texts[d[0]] == "0.0.117.47"
