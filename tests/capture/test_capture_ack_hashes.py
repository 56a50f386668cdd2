"""The frames table's ack_hash column (nbmq.capture.datagrams.ack_hashes): the compiled
FNV-1a loop against its numpy twin and the codec, on bundled captures and random frames."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbmq import _codec_py as py
from nbmq.capture import read_datagrams
from nbmq.capture.datagrams.ack_hashes import COMPILED, ack_hashes, fnv1a64_ranges
from nbmq.examples import bundled_captures
from nbmq.wire import FrameKind

REQUIRED = os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0")
#: The twins to run: numpy always; the compiled loop when built (a missing build fails when required).
TWINS = [False] + ([True] if COMPILED or REQUIRED else [])


def _expected(grams: list[bytes]) -> list[int | None]:
    """The column by its rule, datagram by datagram, from the Python codec."""
    out: list[int | None] = []
    for g in grams:
        try:
            frame = py.parse_frame(g)
        except Exception:  # DecodeError: an error row
            out.append(None)
            continue
        if g[1] == FrameKind.DATA:
            out.append(py.ack_hash(g))
        elif g[1] == FrameKind.ACK and len(frame.payload) == 8:
            out.append(int.from_bytes(frame.payload, "big"))
        else:
            out.append(None)
    return out


def _column(buffer: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, compiled: bool) -> list[int | None]:
    rows = py.parse_frames(buffer, offsets, lengths)
    values, valid = ack_hashes(buffer, rows, compiled=compiled)
    assert values.dtype == np.int64 and valid.dtype == np.bool_ and values.shape == valid.shape == (len(rows),)
    assert not values[~valid].any()  # 0 under the null mask
    return [int(v) % 2**64 if ok else None for v, ok in zip(values.tolist(), valid.tolist())]


def _laid_out(grams: list[bytes], gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    buf, offsets = bytearray(), []
    for g in grams:
        buf += b"\xee" * gap
        offsets.append(len(buf))
        buf += g
    return np.frombuffer(bytes(buf), np.uint8), np.array(offsets, np.int64), np.array([len(g) for g in grams], np.int64)


def test_compiled_loop_is_in_use():
    """With NBMQ_REQUIRE_EXTENSIONS=1 a missing build fails here; with NBMQ_NO_EXTENSIONS=1 numpy is the default."""
    if os.environ.get("NBMQ_NO_EXTENSIONS", "") not in ("", "0"):
        assert not COMPILED
    elif REQUIRED:
        assert COMPILED


@pytest.mark.parametrize("compiled", TWINS)
@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(min_size=0, max_size=3000),
    cuts=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 600)), max_size=23),
)
def test_fnv1a64_ranges_is_the_codecs_fnv(compiled, data, cuts):
    ranges = [(min(s, len(data)), min(n, len(data) - min(s, len(data)))) for s, n in cuts]
    starts = np.array([s for s, _ in ranges], np.int64)
    lengths = np.array([n for _, n in ranges], np.int64)
    got = fnv1a64_ranges(np.frombuffer(data, np.uint8), starts, lengths, compiled=compiled)
    assert got.dtype == np.uint64
    assert got.tolist() == [py.fnv1a64(data[s : s + n]) for s, n in ranges]


@pytest.mark.parametrize("compiled", TWINS)
@pytest.mark.parametrize("start,length", [(-1, 4), (0, 11), (10, 1), (3, -1)])
def test_ranges_outside_the_buffer_raise(compiled, start, length):
    with pytest.raises(ValueError):
        fnv1a64_ranges(np.zeros(10, np.uint8), np.array([0, start]), np.array([2, length]), compiled=compiled)
    with pytest.raises(ValueError):
        fnv1a64_ranges(np.zeros(10, np.uint8), np.array([0, 1]), np.array([2]), compiled=compiled)


@pytest.mark.parametrize("path", bundled_captures(pcapng=True), ids=lambda p: p.name)
def test_bundled_captures(path):
    b = read_datagrams(path)
    buffer = np.asarray(b.payload, np.uint8)
    grams = [bytes(b.payload_at(i)) for i in range(len(b))]
    want = _expected(grams)
    for compiled in TWINS:
        assert _column(buffer, b.offsets, b.lengths, compiled) == want
    data = {h for h, g in zip(want, grams) if h is not None and g[1] == FrameKind.DATA}
    acks = [h for h, g in zip(want, grams) if h is not None and g[1] == FrameKind.ACK]
    assert len(data) > 1000
    if path.name == "safe_dealer.pcap":  # every Ack names a data frame of the capture
        assert len(acks) > 1000 and set(acks) <= data
    else:
        assert not acks


def _random_grams(rng: random.Random, n: int) -> list[bytes]:
    """Data frames of random messages, Acks of 7/8/9 payload bytes, other control frames and broken ones."""
    out: list[bytes] = []
    while len(out) < n:
        pick = rng.random()
        sid = rng.getrandbits(64)
        if pick < 0.5:
            parts = [rng.randbytes(rng.randrange(0, 1400)) for _ in range(rng.randrange(1, 4))]
            sharded = py.shard_message(parts, session_id=sid, message_id=rng.getrandbits(64))
            out += [bytes(f) for f in sharded.frames()]
        elif pick < 0.75:
            out.append(py.encode_control_frame(FrameKind.ACK, sid, rng.randbytes(rng.choice([0, 7, 8, 8, 8, 9]))))
        elif pick < 0.85:
            out.append(py.encode_control_frame(rng.choice([1, 2, 3, 4]), sid, rng.randbytes(rng.choice([0, 8]))))
        else:  # cut, flipped or junk: error rows (or, by chance, still valid)
            g = bytearray(out[-1] if out else rng.randbytes(40))
            if g and rng.random() < 0.5:
                g = g[: rng.randrange(len(g))]
            elif g:
                g[rng.randrange(len(g))] ^= 1 << rng.randrange(8)
            out.append(bytes(g))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_random_frames(seed):
    rng = random.Random(seed)
    grams = _random_grams(rng, 300 + seed)  # not a multiple of four rows either
    want = _expected(grams)
    assert sum(h is not None for h in want) > 100 and sum(h is None for h in want) > 10
    for gap in (0, 5):
        for compiled in TWINS:
            assert _column(*_laid_out(grams, gap), compiled) == want
