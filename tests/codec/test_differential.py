"""Differential tests: the same random and mutated bytes into both twins give identical results
or identical errors (class, and for DecodeError offset and reason).

This is the check h11's maintainer asked for before accepting an accelerated parser (#191):
both implementations accept exactly the same byte streams.
"""

from __future__ import annotations

import importlib
import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.twins import norm  # one picture of a codec result for the tests and the fuzz targets
from nbmq.errors import DecodeError
from nbmq.wire import DataFrame

py = importlib.import_module("nbmq._codec_py")
try:
    c = importlib.import_module("nbmq._codec")
except ImportError:
    if os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        raise
    c = None

pytestmark = [
    pytest.mark.c_extension,
    pytest.mark.skipif(c is None, reason="the Cython codec is not built"),
]
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _c_extension_wanted(request):
    if not request.config.getoption("c_extensions"):
        pytest.skip("the Cython case is off (--no-c-extensions / NBMQ_NO_EXTENSIONS)")


def outcome(fn, *args, **kwargs):
    try:
        return ("ok", norm(fn(*args, **kwargs)))
    except DecodeError as e:
        return ("raise", type(e).__name__, e.offset, e.reason)
    except Exception as e:  # noqa: BLE001 - the class must match, whatever it is
        return ("raise", type(e).__name__)


def same(name, *args, **kwargs):
    a = outcome(getattr(py, name), *args, **kwargs)
    b = outcome(getattr(c, name), *args, **kwargs)
    assert a == b, (name, args, kwargs)
    return a


# -- strategies --------------------------------------------------------------------------------

ints = st.one_of(
    st.integers(-3, 600),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**8 - 1, 2**8, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64]),
)


@st.composite
def valid_frames(draw) -> bytes:
    if draw(st.booleans()):
        return py.encode_control_frame(
            draw(st.integers(1, 5)), draw(st.integers(0, 2**64 - 1)), draw(st.binary(max_size=20))
        )
    chunk = draw(st.binary(max_size=draw(st.sampled_from([8, 466]))))
    part_count = draw(st.integers(1, 255))
    part_size = draw(st.integers(len(chunk), len(chunk) + 600))
    return py.encode_data_frame(
        draw(st.integers(0, 2**64 - 1)),
        draw(st.integers(0, 2**64 - 1)),
        part_count,
        draw(st.integers(0, part_count - 1)),
        draw(st.integers(part_size, part_size + 900)),
        part_size,
        draw(st.integers(0, part_size - len(chunk))),
        chunk,
    )


@st.composite
def mutated(draw, base) -> bytes:
    raw = bytearray(draw(base))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.integers(0, 3))
        if op == 0 and raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        elif op == 1:
            del raw[draw(st.integers(0, len(raw))) :]
        elif op == 2:
            raw += draw(st.binary(max_size=10))
        elif raw:
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << draw(st.integers(0, 7))
    return bytes(raw)


datagrams = st.one_of(st.binary(max_size=520), mutated(valid_frames()), valid_frames())


# -- frames, ids, sharding, batch --------------------------------------------------------------


@settings(max_examples=400, **SETTINGS)
@given(datagrams)
def test_parse_frame(raw):
    same("parse_frame", raw)
    same("parse_frame", bytearray(raw))
    same("ack_hash", raw)


@settings(max_examples=100, **SETTINGS)
@given(st.lists(datagrams, max_size=10), st.lists(st.tuples(ints, ints), max_size=3))
def test_parse_frames(grams, extra):
    buffer = b"".join(grams)
    lengths = [len(g) for g in grams]
    offsets = list(np.cumsum([0] + lengths)[:-1]) if grams else []
    same("parse_frames", buffer, np.array(offsets, np.int64), np.array(lengths, np.int64))
    for start, length in extra:  # odd rows, odd dtypes
        arrays = np.array(offsets + [start], object), np.array(lengths + [length], object)
        try:
            arrays = tuple(a.astype(np.int64) for a in arrays)
        except OverflowError:
            pass
        same("parse_frames", buffer, *arrays)
    same("parse_frames", np.frombuffer(buffer, np.uint8), offsets, lengths)


@settings(max_examples=300, **SETTINGS)
@given(st.tuples(ints, ints, ints, ints, ints, ints, ints), st.binary(max_size=470), ints)
def test_encode_data_frame(fields, chunk, offset):
    same("encode_data_frame", *fields, chunk)
    same("encode_data_frame_into", bytearray(600), offset, *fields, chunk)


@settings(max_examples=200, **SETTINGS)
@given(ints, ints, st.binary(max_size=495), ints)
def test_encode_control_frame(kind, session_id, payload, offset):
    same("encode_control_frame", kind, session_id, payload)
    same("encode_control_frame_into", bytearray(520), offset, kind, session_id, payload)


@settings(max_examples=150, **SETTINGS)
@given(st.binary(max_size=100), ints, st.lists(st.binary(max_size=30), max_size=4), st.text(max_size=8))
def test_hashes(data, number, parts, address):
    same("fnv1a64", data, number)
    same("message_id", parts, number)
    same("session_id", number, address)


@settings(max_examples=100, **SETTINGS)
@given(st.lists(st.binary(max_size=1000), max_size=5), ints, ints)
def test_shard(parts, session_id, message_id):
    same("shard_message", parts, session_id, message_id)
    same("shard_message_bytes", parts, session_id, message_id)
    same("frame_count", [len(p) for p in parts])


@settings(max_examples=150, **SETTINGS)
@given(ints, ints, ints, st.binary(max_size=12), ints, st.binary(max_size=300))
def test_stream_codecs(size, kind, queue, data, offset, topic):
    same("encode_bqsp_header", size, kind, queue)
    same("encode_bqsp_packet", data, kind, queue)
    same("decode_bqsp_header", data, offset)
    same("encode_subscribe", topic)
    same("encode_remove", topic)
    same("encode_notification", topic, data * 100)
    same("encode_deregister")


# -- stream decoders: valid and mutated streams, any slicing ------------------------------------


def drive(decoder, pieces) -> list:
    """Everything a decoder says, feed by feed, up to and including its first error."""
    events = []
    for piece in pieces:
        try:
            decoder.feed(piece)
            events.append(("feed", norm(list(decoder)), decoder.buffered))
        except DecodeError as e:
            events.append(("raise", type(e).__name__, e.offset, e.reason))
            break
    return events


@st.composite
def streams(draw, kind: str):
    rng = random.Random(draw(st.integers(0, 2**32)))
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        if kind == "bqsp":
            parts.append(
                py.encode_bqsp_packet(
                    rng.randbytes(rng.choice([0, 3, 100, 2000])), rng.randrange(65536), rng.randrange(256)
                )
            )
        else:
            topic = rng.randbytes(rng.randint(0, 20))
            parts.append(
                rng.choice(
                    [
                        py.encode_subscribe(topic),
                        py.encode_remove(topic),
                        py.encode_deregister(),
                        py.encode_notification(topic, rng.randbytes(rng.randint(0, 2100))),
                    ]
                )
            )
    stream = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 3))):
        if stream:
            stream[rng.randrange(len(stream))] = rng.randrange(256)
    cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(draw(st.integers(0, 12))))
    pieces = [bytes(stream[a:b]) for a, b in zip([0] + cuts, cuts + [len(stream)])]
    return pieces


@settings(max_examples=150, **SETTINGS)
@given(streams("bqsp"), st.sampled_from([0, 100, 2048, 64 * 1024 * 1024]))
def test_bqsp_decoder(pieces, limit):
    assert drive(py.BqspDecoder(limit), pieces) == drive(c.BqspDecoder(limit), pieces)


@settings(max_examples=150, **SETTINGS)
@given(streams("rqueue"), st.sampled_from([0, 300, 2048, 65535]))
def test_rqueue_decoder(pieces, limit):
    assert drive(py.RqueueDecoder(limit), pieces) == drive(c.RqueueDecoder(limit), pieces)


@settings(max_examples=100, **SETTINGS)
@given(st.binary(max_size=300), st.integers(1, 50))
def test_decoders_on_noise(noise, step):
    pieces = [noise[i : i + step] for i in range(0, len(noise), step)]
    assert drive(py.BqspDecoder(5000), pieces) == drive(c.BqspDecoder(5000), pieces)
    assert drive(py.RqueueDecoder(), pieces) == drive(c.RqueueDecoder(), pieces)


# -- reassembly: the same traffic, the same outcomes and counters -------------------------------

COUNTERS = (
    "frames",
    "duplicates",
    "rejected",
    "completed",
    "expired",
    "dropped_too_large",
    "malformed",
    "incomplete_bytes",
)


def state(r) -> tuple:
    return tuple(getattr(r, n) for n in COUNTERS) + (len(r), r.oldest())


@st.composite
def traffic(draw):
    rng = random.Random(draw(st.integers(0, 2**32)))
    frames = []
    for mid in range(draw(st.integers(1, 6))):
        parts = [rng.randbytes(rng.choice([0, 1, 100, 466, 467, 1200])) for _ in range(rng.randint(1, 3))]
        frames += py.shard_message_bytes(parts, rng.randrange(3), mid)
    frames += rng.sample(frames, len(frames) // 4)
    for i in rng.sample(range(len(frames)), len(frames) // 5):
        raw = bytearray(frames[i])
        raw[rng.randrange(2, min(len(raw), 40))] = rng.randrange(256)  # header damage
        frames[i] = bytes(raw)
    rng.shuffle(frames)
    ops = []
    for raw in frames:
        roll = rng.random()
        if roll < 0.5:
            ops.append(("add_datagram", raw, rng.choice([0.0, 1.0, 2.5])))
        elif roll < 0.8:
            ops.append(("add", raw, rng.choice([0.0, 3.0])))
        elif roll < 0.9:
            ops.append(("batch", raw, 0.0))
        elif roll < 0.95:
            ops.append(("expire", None, rng.choice([0.5, 1.5, 3.0])))
        else:
            ops.append(("drop", None, None))
    budget = draw(st.sampled_from([0, 3000, 64 * 1024 * 1024]))
    return ops, budget, draw(st.sampled_from([500, 2**32 - 1]))


def replay(module, ops, budget, cap) -> list:
    r = module.Reassembler(max_message_size=cap, max_incomplete_bytes=budget)
    log = []
    for op, raw, arg in ops:
        if op == "add_datagram":
            log.append(outcome(r.add_datagram, raw, arg))
        elif op == "add":
            try:
                frame = module.parse_frame(raw)
            except DecodeError:
                continue
            if isinstance(frame, DataFrame):
                log.append(outcome(r.add, frame, arg))
        elif op == "batch":
            log.append(outcome(r.add_datagrams, raw + raw, [0, len(raw), 3], [len(raw), len(raw), 9], arg))
        elif op == "expire":
            log.append(outcome(r.expire, arg))
        else:
            log.append(outcome(r.drop, (0, 0)))
        log.append(state(r))
    return log


@settings(max_examples=60, **SETTINGS)
@given(traffic())
def test_reassembler(case):
    ops, budget, cap = case
    assert replay(py, ops, budget, cap) == replay(c, ops, budget, cap)


@settings(max_examples=150, **SETTINGS)
@given(st.tuples(ints, ints, ints, ints, ints, ints, ints), st.binary(max_size=20), st.booleans())
def test_reassembler_hand_built_frames(fields, chunk, twice):
    frame = DataFrame(*fields, memoryview(chunk))
    results = []
    for module in (py, c):
        r = module.Reassembler()
        log = [outcome(r.add, frame)]
        if twice:
            log.append(outcome(r.add, frame._replace(chunk_offset=0)))
        results.append((log, state(r)))
    assert results[0] == results[1]


@st.composite
def budget_traffic(draw):
    """Claims from a few sessions, lazy (over 1 MiB) and whole, under tight socket and peer
    budgets: charges, evictions and refusals must match."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    ops = []
    for _ in range(draw(st.integers(5, 60))):
        sid = rng.randrange(4)
        mid = rng.randrange(6)
        size = rng.choice([0, 300, 5000, 2 << 20, 16 << 20])
        count = rng.choice([1, 2, 3])
        index = rng.randrange(count)
        part = size // count + (size % count if index == count - 1 else 0)
        chunk = rng.randbytes(min(part, rng.choice([0, 1, 466])))
        offset = rng.randrange(max(1, part - len(chunk) + 1)) if rng.random() < 0.5 else 0
        if rng.random() < 0.1:
            ops.append(("expire", rng.choice([0.5, 2.0])))
        ops.append(("add", DataFrame(sid, mid, count, index, size, part, offset, chunk), rng.choice([0.0, 1.0])))
    budgets = draw(st.sampled_from([(3 << 20, 2 << 20), (5000, 3000), (64 << 20, None)]))
    return ops, budgets


@settings(max_examples=80, **SETTINGS)
@given(budget_traffic())
def test_reassembler_budgets(case):
    ops, (total, peer) = case
    logs = []
    for module in (py, c):
        r = module.Reassembler(max_incomplete_bytes=total, max_peer_incomplete_bytes=peer)
        log = []
        for op in ops:
            if op[0] == "expire":
                log.append(outcome(r.expire, op[1]))
            else:
                log.append(outcome(r.add, op[1], op[2]))
            log.append(state(r) + (r.evicted, tuple(r.take_evicted()), tuple(r.owner_bytes(s) for s in range(4))))
        logs.append(log)
    assert logs[0] == logs[1]
