"""A corpus of malformed input: every decoder parses it or raises DecodeError (or a subclass),
nothing else: no IndexError, no MemoryError, no crash (STYLE.md section 7). On both twins."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.errors import DecodeError

# The codec fixture only selects a module: nothing to reset between examples.
FIXTURE_OK = [HealthCheck.function_scoped_fixture]


def header(kind=0, sid=1, mid=2, pc=1, pi=0, msize=5, psize=5, csize=5, coff=0) -> bytes:
    return (
        bytes([1, kind])
        + sid.to_bytes(8, "big")
        + mid.to_bytes(8, "big")
        + bytes([pc, pi])
        + msize.to_bytes(4, "big")
        + psize.to_bytes(4, "big")
        + csize.to_bytes(2, "big")
        + coff.to_bytes(4, "big")
    )


DATAGRAMS = [
    b"",
    b"\x01",
    b"\x00\x00",
    b"\xff" * 10,
    b"\x01\x06" + bytes(8),
    b"\x01\xff" + bytes(40),
    b"\x01\x00" + bytes(32),
    b"\x01\x05" + bytes(7),
    b"\x01\x00" + bytes(498),
    b"\x01\x03" + bytes(600),
    header(pc=0, pi=0) + b"hello",
    header(pc=2, pi=5, msize=10) + b"hello",
    header(pc=255, pi=255) + b"hello",
    header(psize=6) + b"hello",
    header(csize=5) + b"hel",
    header(csize=2) + b"hello",
    header(csize=0) + b"hello",
    header(coff=2**32 - 1, csize=2) + b"hi",
    header(coff=1) + b"hello",
    header(msize=2**32 - 1, psize=2**32 - 1, coff=2**32 - 5) + b"hello",
    header(msize=0, psize=0, csize=0),
    header(msize=2**32 - 1, psize=2**32 - 1) + b"hello",
    header(kind=0) + bytes(466) + b"x",
]

BQSP_STREAMS = [
    b"\xff\xff\xff\xff\x00\x00\x00",
    b"\x05\x00\x00",
    b"\x00\x00\x00\x01\x00\x00\x00" + bytes(10),
    b"\x10\x00\x00\x00\xff\xaa\x01" + bytes(5),
    bytes(7) * 50,
    b"\xff" * 100,
]

RQUEUE_STREAMS = [
    b"\x00\x01\x03x",
    b"\x00\x00\x07",
    b"\x00\x01\x07\x05",
    b"\x00\x03\x07\xffab",
    b"\xff\xff\x07" + bytes(10),
    b"\x01\x00\x01" + bytes(256),
    b"\x08\x01\x02",
    b"\x00\x00\x00",
    b"\x00\x00\x05\x00\x00\x05\x00\x00\x63",
    b"\x00",
]


def only_decode_errors(call) -> None:
    try:
        call()
    except DecodeError:
        pass


def run_datagram(codec, raw: bytes, r) -> None:
    only_decode_errors(lambda: codec.parse_frame(raw))
    only_decode_errors(lambda: r.add_datagram(raw))
    try:
        frame = codec.parse_frame(raw)
    except DecodeError:
        return
    if len(frame) == 8:
        only_decode_errors(lambda: r.add(frame))


def run_stream(codec, stream: bytes, rng: random.Random) -> None:
    for make in (lambda: codec.BqspDecoder(1 << 16), codec.RqueueDecoder):
        for step in (1, 3, len(stream) or 1, rng.randint(1, 9)):
            decoder = make()

            def go(decoder=decoder, step=step):
                for i in range(0, len(stream), step):
                    decoder.feed(stream[i : i + step])
                    list(decoder)

            only_decode_errors(go)


def test_corpus(codec):
    rng = random.Random(0)
    r = codec.Reassembler(max_incomplete_bytes=1 << 20)
    for raw in DATAGRAMS:
        run_datagram(codec, raw, r)
    buffer = b"".join(DATAGRAMS)
    lengths = np.array([len(d) for d in DATAGRAMS])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows = codec.parse_frames(buffer, offsets, lengths)  # never raises for a bad row
    assert (rows["error"] != 0).sum() >= len(DATAGRAMS) - 3
    r.add_datagrams(buffer, offsets, lengths)
    for stream in BQSP_STREAMS + RQUEUE_STREAMS + DATAGRAMS:
        run_stream(codec, stream, rng)


@settings(max_examples=300, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.binary(max_size=520))
def test_random_datagrams(codec, raw):
    run_datagram(codec, raw, codec.Reassembler(max_incomplete_bytes=1 << 20))
    codec.parse_frames(raw, [0, 1, len(raw)], [len(raw), len(raw), 1])


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.binary(max_size=300), st.integers(0, 2**32))
def test_random_streams(codec, stream, seed):
    run_stream(codec, stream, random.Random(seed))


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.integers(0, 2**32))
def test_mutated_valid_traffic(codec, seed):
    rng = random.Random(seed)
    parts = [rng.randbytes(rng.choice([0, 5, 466, 1000])) for _ in range(rng.randint(1, 3))]
    r = codec.Reassembler(max_incomplete_bytes=1 << 20)
    for raw in codec.shard_message_bytes(parts, 1, 2):
        raw = bytearray(raw)
        for _ in range(rng.randint(0, 3)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        run_datagram(codec, bytes(raw), r)
    stream = bytearray(codec.encode_bqsp_packet(parts[0], 1, 2) + codec.encode_notification(b"t", parts[-1]))
    for _ in range(rng.randint(1, 3)):
        stream[rng.randrange(len(stream))] = rng.randrange(256)
    run_stream(codec, bytes(stream), rng)
