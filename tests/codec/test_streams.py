"""BQSP (seed 002) and rqueue (seed 004) encoders and incremental decoders, on both twins."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.errors import DecodeError, FrameTooLarge
from nbmq.wire import BqspPacket, RqueueMessage, RqueueType

# The codec fixture only selects a module: nothing to reset between examples.
FIXTURE_OK = [HealthCheck.function_scoped_fixture]


def feed_all(decoder, pieces) -> list:
    out = []
    for piece in pieces:
        decoder.feed(piece)
        out.extend(decoder)
    return out


def as_bytes(items) -> list:
    return [tuple(x.tobytes() if isinstance(x, memoryview) else x for x in item) for item in items]


def slices(stream: bytes, rng: random.Random, most: int) -> list[bytes]:
    pieces, pos = [], 0
    while pos < len(stream):
        n = rng.randint(0, most)
        pieces.append(stream[pos : pos + n])
        pos += n
    return pieces


# -- BQSP --------------------------------------------------------------------------------------


def test_bqsp_seed_examples(codec):
    # "Data Size: 16 [10, 0, 0, 0]; Data Type: 43775 (0xAAFF) [FF, AA]; Queue: 1 [1]"
    assert codec.encode_bqsp_header(16, 0xAAFF, 1) == bytes([0x10, 0, 0, 0, 0xFF, 0xAA, 1])
    assert codec.decode_bqsp_header(bytes([0x10, 0, 0, 0, 0xFF, 0xAA, 1])) == (16, 0xAAFF, 1)
    # The JSON example: {"status":"ok"}, Data Type 2 (JSON), Queue 1.
    body = json.dumps({"status": "ok"}, separators=(",", ":")).encode()
    packet = bytes(
        [
            0xF,
            0,
            0,
            0,
            2,
            0,
            1,
            0x7B,
            0x22,
            0x73,
            0x74,
            0x61,
            0x74,
            0x75,
            0x73,
            0x22,
            0x3A,
            0x22,
            0x6F,
            0x6B,
            0x22,
            0x7D,
        ]
    )
    assert codec.encode_bqsp_packet(body, 2, 1) == packet
    decoder = codec.BqspDecoder()
    decoder.feed(packet)
    (got,) = list(decoder)
    assert type(got) is BqspPacket and (got.data_type, got.queue) == (2, 1)
    assert json.loads(got.data.tobytes()) == {"status": "ok"}


def bqsp_stream(codec, rng: random.Random, count: int) -> tuple[bytes, list]:
    packets = [
        (rng.randrange(65536), rng.randrange(256), rng.randbytes(rng.choice([0, 1, 7, 300, 3000])))
        for _ in range(count)
    ]
    return b"".join(codec.encode_bqsp_packet(d, t, q) for t, q, d in packets), packets


@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.integers(0, 2**32), st.integers(1, 4000))
def test_bqsp_any_slicing(codec, seed, most):
    rng = random.Random(seed)
    stream, packets = bqsp_stream(codec, rng, 12)
    whole = as_bytes(feed_all(codec.BqspDecoder(), [stream]))
    assert whole == packets
    assert as_bytes(feed_all(codec.BqspDecoder(), slices(stream, rng, most))) == packets


def test_bqsp_one_byte_at_a_time(codec):
    stream, packets = bqsp_stream(codec, random.Random(1), 10)
    decoder = codec.BqspDecoder()
    out = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        out.extend(decoder)
        assert decoder.buffered <= 3007
    assert as_bytes(out) == packets and decoder.buffered == 0


def test_bqsp_views_and_partial_headers(codec):
    a = codec.encode_bqsp_packet(b"first", 1, 2)
    b = codec.encode_bqsp_packet(b"second", 3, 4)
    fed = bytearray(a + b[:3])
    decoder = codec.BqspDecoder()
    decoder.feed(fed)
    first = decoder.next_packet()
    assert first.data.obj is fed  # a view into the fed object, no copy
    assert decoder.next_packet() is None and decoder.buffered == 3  # a partial header consumes nothing
    decoder.feed(b[3:])
    second = decoder.next_packet()
    assert (second.data_type, second.queue, second.data.tobytes()) == (3, 4, b"second")
    decoder.feed(codec.encode_bqsp_header(0, 9, 9))
    assert as_bytes([decoder.next_packet()]) == [(9, 9, b"")]
    assert decoder.next_packet() is None


def test_bqsp_limits(codec):
    decoder = codec.BqspDecoder(max_packet_size=10)
    decoder.feed(codec.encode_bqsp_packet(b"x" * 10, 1, 1) + codec.encode_bqsp_header(11, 1, 1))
    assert decoder.next_packet().data.tobytes() == b"x" * 10
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_packet()
    assert (info.value.offset, info.value.reason) == (17, "packet over max_packet_size")
    for call in (decoder.next_packet, lambda: decoder.feed(b"more"), lambda: list(decoder)):
        with pytest.raises(FrameTooLarge) as again:
            call()
        assert again.value is info.value  # the stream is unusable: the same error every time


def test_bqsp_claim_allocates_as_bytes_arrive(codec):
    decoder = codec.BqspDecoder(max_packet_size=2**32 - 1)
    tracemalloc.start()
    try:
        decoder.feed(codec.encode_bqsp_header(2**32 - 1, 0, 0))
        for _ in range(100):
            decoder.feed(bytes(1000))
            assert decoder.next_packet() is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and decoder.buffered == 100_007


def test_bqsp_header_codec_errors(codec):
    for args in [(-1, 0, 0), (2**32, 0, 0), (0, 65536, 0), (0, 0, 256), (0, -1, 0)]:
        with pytest.raises(ValueError):
            codec.encode_bqsp_header(*args)
    with pytest.raises(TypeError):
        codec.encode_bqsp_header(1.0, 0, 0)
    header = codec.encode_bqsp_header(5, 6, 7)
    assert codec.decode_bqsp_header(b"xx" + header, 2) == (5, 6, 7)
    for data, offset, at in [(header[:6], 0, 6), (header, 1, 6), (header, -1, 8), (header, 100, 0)]:
        with pytest.raises(DecodeError) as info:
            codec.decode_bqsp_header(data, offset)
        assert (info.value.offset, info.value.reason) == (at, "truncated header")
    with pytest.raises(ValueError):
        codec.BqspDecoder(max_packet_size=-1)
    with pytest.raises(ValueError):
        codec.BqspDecoder(max_packet_size=2**32)
    with pytest.raises(TypeError):
        codec.BqspDecoder().feed("text")


# -- rqueue ------------------------------------------------------------------------------------


def test_rqueue_seed_tables(codec):
    topic, content = b"weather/paris", b'{"temp": 21}'
    t, c = len(topic), len(content)
    # NOTIFICATION: payload_length = T + C + 1, message_type 7, topic_len, topic, content.
    notification = (t + c + 1).to_bytes(2, "big") + bytes([7, t]) + topic + content
    assert codec.encode_notification(topic, content) == notification
    # SUBSCRIBE: payload_length T, type 1, topic. REMOVE: T, 2, topic. DEREGISTER: 00 00, 5.
    assert codec.encode_subscribe(topic) == t.to_bytes(2, "big") + b"\x01" + topic
    assert codec.encode_remove(topic) == t.to_bytes(2, "big") + b"\x02" + topic
    assert codec.encode_deregister() == b"\x00\x00\x05"
    decoder = codec.RqueueDecoder()
    decoder.feed(notification + codec.encode_subscribe(topic) + codec.encode_remove(topic) + codec.encode_deregister())
    got = list(decoder)
    assert all(type(m) is RqueueMessage for m in got)
    assert [m.type for m in got] == [
        RqueueType.NOTIFICATION,
        RqueueType.SUBSCRIBE,
        RqueueType.REMOVE,
        RqueueType.DEREGISTER,
    ]
    assert as_bytes(got) == [
        (RqueueType.NOTIFICATION, topic, content),
        (RqueueType.SUBSCRIBE, topic, b""),
        (RqueueType.REMOVE, topic, b""),
        (RqueueType.DEREGISTER, b"", b""),
    ]


def rqueue_stream(codec, rng: random.Random, count: int) -> tuple[bytes, list]:
    raw, want = [], []
    for _ in range(count):
        topic = rng.randbytes(rng.randint(0, 40))
        kind = rng.choice(list(RqueueType))
        if kind is RqueueType.NOTIFICATION:
            content = rng.randbytes(rng.randint(0, 2000))
            raw.append(codec.encode_notification(topic, content))
            want.append((kind, topic, content))
        elif kind is RqueueType.DEREGISTER:
            raw.append(codec.encode_deregister())
            want.append((kind, b"", b""))
        else:
            raw.append((codec.encode_subscribe if kind is RqueueType.SUBSCRIBE else codec.encode_remove)(topic))
            want.append((kind, topic, b""))
    return b"".join(raw), want


@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.integers(0, 2**32), st.integers(1, 3000))
def test_rqueue_any_slicing(codec, seed, most):
    rng = random.Random(seed)
    stream, want = rqueue_stream(codec, rng, 15)
    assert as_bytes(feed_all(codec.RqueueDecoder(), [stream])) == want
    assert as_bytes(feed_all(codec.RqueueDecoder(), slices(stream, rng, most))) == want
    if most < 3:
        assert as_bytes(feed_all(codec.RqueueDecoder(), [stream[i : i + 1] for i in range(len(stream))])) == want


def test_rqueue_one_byte_at_a_time(codec):
    stream, want = rqueue_stream(codec, random.Random(2), 12)
    decoder = codec.RqueueDecoder()
    assert as_bytes(feed_all(decoder, [stream[i : i + 1] for i in range(len(stream))])) == want
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    "prefix, bad, error, offset, reason",
    [
        (b"", b"\x00\x01\x03x", DecodeError, 2, "unknown type"),
        (b"\x00\x00\x05", b"\x01\x00\x01" + bytes(256), DecodeError, 6, "topic over 255 bytes"),
        (b"", b"\x00\x00\x07", DecodeError, 3, "notification without topic_len"),
        (b"\x00\x00\x05", b"\x00\x03\x07\x05ab", DecodeError, 6, "topic_len past the payload"),
        (b"\x00\x01\x01a", b"\x08\x01\x07", FrameTooLarge, 4, "payload over max_payload"),
    ],
)
def test_rqueue_errors(codec, prefix, bad, error, offset, reason):
    for pieces in ([prefix + bad], [prefix, bad], [bytes([x]) for x in prefix + bad]):
        decoder = codec.RqueueDecoder()
        out = []
        with pytest.raises(DecodeError) as info:
            for piece in pieces:
                decoder.feed(piece)
                out.extend(decoder)
        assert type(info.value) is error
        assert (info.value.offset, info.value.reason) == (offset, reason)
        assert len(out) == (1 if prefix else 0)
        with pytest.raises(error):
            decoder.feed(b"")


def test_rqueue_limits_and_encoders(codec):
    decoder = codec.RqueueDecoder(max_payload=65535)
    big = codec.encode_notification(b"t" * 255, bytes(65535 - 256))
    decoder.feed(big)
    (m,) = list(decoder)
    assert len(m.topic) == 255 and len(m.content) == 65279
    with pytest.raises(ValueError):
        codec.encode_notification(b"t" * 255, bytes(65535 - 255))
    with pytest.raises(ValueError):
        codec.encode_subscribe(bytes(256))
    with pytest.raises(TypeError):
        codec.encode_remove("topic")
    with pytest.raises(ValueError):
        codec.RqueueDecoder(max_payload=65536)
    decoder = codec.RqueueDecoder()
    assert decoder.max_payload == 2048
    decoder.feed(b"\x00\x02\x05xy\x00\x00\x01")  # a DEREGISTER's payload is ignored
    assert as_bytes(list(decoder)) == [(RqueueType.DEREGISTER, b"", b""), (RqueueType.SUBSCRIBE, b"", b"")]
