"""Reassembler: any order, duplicates, interleaving, hostile input and memory bounds, on both twins."""

from __future__ import annotations

import itertools
import random
import tracemalloc

import numpy as np
import pytest

from nbmq.errors import DecodeError, FrameTooLarge


def frames_of(codec, parts, session_id=1, message_id=2) -> list[bytes]:
    return codec.shard_message_bytes(parts, session_id, message_id)


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def counters(r) -> dict:
    names = (
        "frames",
        "duplicates",
        "rejected",
        "completed",
        "expired",
        "dropped_too_large",
        "malformed",
        "incomplete_bytes",
    )
    return {n: getattr(r, n) for n in names}


def test_every_order(codec):
    parts = [payload(500, 1), b"", payload(470, 2)]  # 2 + 1 + 2 frames
    frames = frames_of(codec, parts)
    assert len(frames) == 5
    for order in itertools.permutations(frames):
        r = codec.Reassembler()
        results = [r.add_datagram(f) for f in order]
        # complete once the non-empty parts are in: the empty part's chunk may come after
        # (then a duplicate), as the reference never sends it at all
        done = [x for x in results if x is not None]
        assert len(done) == 1 and [p.tobytes() for p in done[0]] == parts
        assert len(r) == 0 and r.incomplete_bytes == 0 and r.completed == 1
        assert (r.frames, r.duplicates) in ((5, 0), (4, 1))


def test_three_entry_points_agree(codec):
    parts = [payload(2000, 3), payload(10, 4)]
    frames = frames_of(codec, parts, 9, 10)
    random.Random(5).shuffle(frames)
    by_add = codec.Reassembler()
    done = [by_add.add(codec.parse_frame(f), 1.0) for f in frames]
    by_datagram = codec.Reassembler()
    assert [by_datagram.add_datagram(f, 1.0) is None for f in frames] == [d is None for d in done]
    by_batch = codec.Reassembler()
    buffer = b"".join(frames)
    lengths = [len(f) for f in frames]
    offsets = np.cumsum([0] + lengths[:-1])
    out = by_batch.add_datagrams(buffer, offsets, lengths, 1.0)
    assert len(out) == 1 and out[0][0] == (9, 10)
    assert [p.tobytes() for p in out[0][1]] == [p.tobytes() for p in done[-1]] == parts
    assert counters(by_add) == counters(by_datagram) == counters(by_batch)


def test_parts_own_their_memory(codec):
    frames = frames_of(codec, [payload(1000, 6), b"abc"])
    r = codec.Reassembler()
    for f in frames:
        parts = r.add_datagram(f)
    for p in parts:
        assert isinstance(p, np.ndarray) and p.dtype == np.uint8 and p.ndim == 1
        assert p.flags.owndata and p.flags.writeable
    assert len(r) == 0


def test_duplicates_ignored(codec):
    frames = frames_of(codec, [payload(1398, 7)])  # 3 frames
    r = codec.Reassembler()
    assert r.add_datagram(frames[0]) is None
    assert r.add_datagram(frames[0]) is None
    assert r.add_datagram(frames[2]) is None
    assert r.add_datagram(frames[2]) is None
    assert (r.frames, r.duplicates) == (2, 2)
    parts = r.add_datagram(frames[1])
    assert parts is not None
    assert parts[0].tobytes() == payload(1398, 7) and r.rejected == 0
    # After completion the message is forgotten: a repeat starts it again (no de-dup here).
    assert r.add_datagram(frames[0]) is None and len(r) == 1


def test_sub_range_duplicate_and_partial_overlap(codec):
    data = payload(100, 8)
    r = codec.Reassembler()
    whole = codec.encode_data_frame(1, 2, 1, 0, 100, 100, 0, data[:60])
    inside = codec.encode_data_frame(1, 2, 1, 0, 100, 100, 10, data[10:30])
    assert r.add_datagram(whole) is None and r.add_datagram(inside) is None
    assert r.duplicates == 1
    # Same bytes, but sticking out of what was received: any partial overlap is refused.
    across = codec.encode_data_frame(1, 2, 1, 0, 100, 100, 50, data[50:70])
    with pytest.raises(DecodeError) as info:
        r.add_datagram(across)
    assert (info.value.offset, info.value.reason) == (30, "chunk overlaps received bytes differently")
    assert r.rejected == 1 and len(r) == 0 and r.incomplete_bytes == 0


def test_overlap_with_different_bytes_rejected(codec):
    r = codec.Reassembler()
    r.add_datagram(codec.encode_data_frame(1, 2, 1, 0, 600, 600, 0, b"\x11" * 300))
    with pytest.raises(DecodeError) as info:
        r.add_datagram(codec.encode_data_frame(1, 2, 1, 0, 600, 600, 0, b"\x22" * 300))
    assert info.value.offset == 30 and r.rejected == 1 and len(r) == 0
    # Ranges merge on both sides; a chunk bridging two ranges exactly fits.
    r.add_datagram(codec.encode_data_frame(3, 4, 1, 0, 9, 9, 0, b"abc"))
    r.add_datagram(codec.encode_data_frame(3, 4, 1, 0, 9, 9, 6, b"ghi"))
    with pytest.raises(DecodeError):
        r.add_datagram(codec.encode_data_frame(3, 4, 1, 0, 9, 9, 2, b"xdef"))
    r.add_datagram(codec.encode_data_frame(3, 4, 1, 0, 9, 9, 0, b"abc"))  # message was dropped
    r.add_datagram(codec.encode_data_frame(3, 4, 1, 0, 9, 9, 6, b"ghi"))
    done = r.add_datagram(codec.encode_data_frame(3, 4, 1, 0, 9, 9, 3, b"def"))
    assert done[0].tobytes() == b"abcdefghi"


def test_interleaved_hundreds(codec):
    rng = random.Random(11)
    sent = {}
    frames = []
    for mid in range(300):
        parts = [payload(rng.choice([0, 1, 200, 466, 467, 1500]), mid * 10 + i) for i in range(rng.randint(1, 4))]
        sid = rng.choice([1, 2, 3])
        sent[(sid, mid)] = parts
        frames += frames_of(codec, parts, sid, mid)
    frames += rng.sample(frames, len(frames) // 10)  # duplicates
    rng.shuffle(frames)
    r = codec.Reassembler()
    got: dict = {}
    for f in frames:
        parts = r.add_datagram(f, 0.0)
        if parts is not None:
            frame = codec.parse_frame(f)
            got.setdefault((frame.session_id, frame.message_id), []).append([p.tobytes() for p in parts])
    # Every message arrives whole. A duplicate that lands after its message completed starts
    # that message again (de-duplication of whole messages is the queueing layer's job), so a
    # one-frame message can complete twice and a longer one can be left incomplete.
    assert set(got) == set(sent)
    assert all(copy == sent[key] for key, copies in got.items() for copy in copies)
    assert r.rejected == 0 and r.completed == sum(map(len, got.values()))
    assert r.incomplete_bytes == sum(sum(map(len, sent[k])) + codec.MESSAGE_OVERHEAD for k in r.expire(1.0))
    # The same traffic through the batch entry point, in a few batches.
    r2 = codec.Reassembler()
    got2: dict = {}
    for start in range(0, len(frames), 97):
        batch = frames[start : start + 97]
        lengths = np.array([len(f) for f in batch])
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        for key, parts in r2.add_datagrams(b"".join(batch), offsets, lengths):
            got2.setdefault(key, []).append([p.tobytes() for p in parts])
    r2.expire(1.0)
    assert got2 == got and counters(r2) == counters(r)


def test_custom_keys_keep_messages_apart(codec):
    frames = frames_of(codec, [payload(900, 12)])
    r = codec.Reassembler()
    for f in frames[:-1]:
        assert r.add_datagram(f, key=("a", 1)) is None
        assert r.add(codec.parse_frame(f), key=("b", 1)) is None
    assert len(r) == 2
    assert r.add_datagram(frames[-1], key=("a", 1))[0].tobytes() == payload(900, 12)
    assert r.add_datagram(frames[-1]) is None  # the default key is a third message
    assert len(r) == 2


def test_empty_messages_and_parts(codec):
    r = codec.Reassembler()
    (only,) = frames_of(codec, [b""])
    parts = r.add_datagram(only)
    assert [p.tobytes() for p in parts] == [b""]
    frames = frames_of(codec, [b"a", b"", b"", b"c"], 4, 5)
    random.Random(3).shuffle(frames)
    out = [r.add_datagram(f) for f in frames]
    (done,) = [x for x in out if x is not None]
    assert [p.tobytes() for p in done] == [b"a", b"", b"", b"c"]
    late = r.duplicates  # empty chunks after completion: recognised, not a new message
    assert len(r) == 0 and r.frames + late == 5  # with the [b""] message's one frame
    # An empty chunk anywhere but an empty part carries nothing: counted as a duplicate.
    r.add_datagram(codec.encode_data_frame(6, 7, 1, 0, 5, 5, 2, b""))
    assert r.duplicates == late + 1 and len(r) == 1


def test_header_disagreements_reject_the_message(codec):
    base = dict(
        session_id=1,
        message_id=2,
        part_count=2,
        part_index=0,
        message_size=10,
        part_size=5,
        chunk_offset=0,
        chunk=b"ab",
    )
    for change, offset in [({"part_count": 3}, 18), ({"message_size": 11, "part_size": 5}, 20), ({"part_size": 6}, 24)]:
        r = codec.Reassembler()
        r.add_datagram(codec.encode_data_frame(**base))
        budget = r.incomplete_bytes
        assert budget == 10 + codec.MESSAGE_OVERHEAD
        with pytest.raises(DecodeError) as info:
            r.add_datagram(codec.encode_data_frame(**{**base, **change, "chunk_offset": 2, "chunk": b"c"}))
        assert info.value.offset == offset and type(info.value) is DecodeError
        assert r.rejected == 1 and len(r) == 0 and r.incomplete_bytes == 0


def test_part_sizes_that_do_not_add_up(codec):
    r = codec.Reassembler()
    r.add_datagram(codec.encode_data_frame(1, 2, 2, 0, 10, 8, 0, b"x"))
    with pytest.raises(DecodeError) as info:  # 8 + 8 > 10
        r.add_datagram(codec.encode_data_frame(1, 2, 2, 1, 10, 8, 0, b"y"))
    assert (info.value.offset, info.value.reason) == (24, "part sizes exceed message_size")
    r.add_datagram(codec.encode_data_frame(1, 3, 2, 0, 10, 2, 0, b"ab"))
    with pytest.raises(DecodeError) as info:  # 2 + 3 < 10, found once every part is in
        r.add_datagram(codec.encode_data_frame(1, 3, 2, 1, 10, 3, 0, b"cde"))
    assert (info.value.offset, info.value.reason) == (24, "part sizes do not add up to message_size")
    assert r.rejected == 2 and r.completed == 0 and len(r) == 0 and r.incomplete_bytes == 0


def test_hand_built_frames_out_of_range(codec):
    good = codec.parse_frame(codec.encode_data_frame(1, 2, 2, 0, 10, 5, 0, b"abc"))
    r = codec.Reassembler()
    r.add(good)
    for change, offset in [
        ({"part_index": 2}, 19),
        ({"part_index": -1}, 19),
        ({"part_count": 0, "part_index": 0}, 18),
        ({"part_count": 256}, 18),
        ({"message_size": -1}, 20),
        ({"message_size": 2**32}, 20),
        ({"part_size": -5}, 24),
        ({"part_size": 2**40}, 24),
        ({"chunk_offset": -1}, 30),
        ({"chunk_offset": 2**64}, 30),
        ({"chunk_offset": 4}, 30),
    ]:
        with pytest.raises(DecodeError) as info:
            r.add(good._replace(**change))
        assert info.value.offset == offset, change
        r.add(good)  # each rejection dropped the message; start it again
    assert r.rejected == 11 and len(r) == 1
    with pytest.raises(TypeError):
        r.add(good._replace(part_count=2.0))
    with pytest.raises(TypeError):
        r.add(good._replace(chunk="abc"))
    with pytest.raises(TypeError):
        r.add(good, now=None)
    # Any object with the attributes serves, and any buffer as the chunk.
    from types import SimpleNamespace

    r2 = codec.Reassembler()
    parts = r2.add(
        SimpleNamespace(
            **{**good._asdict(), "part_count": 1, "message_size": 3, "part_size": 3, "chunk": bytearray(b"xyz")}
        )
    )
    assert parts[0].tobytes() == b"xyz"


def test_add_datagram_refusals_are_counted(codec):
    r = codec.Reassembler()
    with pytest.raises(DecodeError) as info:
        r.add_datagram(codec.encode_control_frame(4, 1))
    assert (info.value.offset, info.value.reason) == (1, "not a data frame")
    with pytest.raises(DecodeError):
        r.add_datagram(b"\x01\x00\x00")
    with pytest.raises(FrameTooLarge):
        r.add_datagram(b"\x01\x00" + bytes(600))
    assert r.malformed == 3 and r.rejected == 0
    with pytest.raises(TypeError):
        r.add_datagram("text")


def test_add_datagrams_never_raises_for_bad_rows(codec):
    good = frames_of(codec, [b"hello"], 1, 1)[0]
    conflicting = codec.encode_data_frame(1, 2, 1, 0, 5, 5, 0, b"abc")
    other = codec.encode_data_frame(1, 2, 1, 0, 5, 5, 0, b"xyz")
    rows = [
        good,
        b"junk",
        codec.encode_control_frame(2, 3),
        conflicting,
        other,
        codec.encode_data_frame(1, 3, 1, 0, 2**31, 2**31, 0, b"x"),
    ]
    buffer = b"".join(rows)
    lengths = [len(x) for x in rows] + [10, 5]
    offsets = list(np.cumsum([0] + lengths[:5])) + [len(buffer) - 2, -1]
    r = codec.Reassembler(max_message_size=1 << 30)
    out = r.add_datagrams(buffer, offsets, lengths)
    assert [(k, [p.tobytes() for p in v]) for k, v in out] == [((1, 1), [b"hello"])]
    assert (r.malformed, r.rejected, r.dropped_too_large, r.completed) == (4, 1, 1, 1)


def test_caps_and_budget(codec):
    r = codec.Reassembler(max_message_size=1000, max_incomplete_bytes=3000)
    with pytest.raises(FrameTooLarge) as info:
        r.add_datagram(codec.encode_data_frame(1, 1, 1, 0, 1001, 1001, 0, b"x"))
    assert (info.value.offset, info.value.reason) == (20, "message over max_message_size")
    for mid in range(2):  # 2 * (1000 + 256) fits in 3000
        r.add_datagram(codec.encode_data_frame(1, mid, 1, 0, 1000, 1000, 0, b"x"))
    # a third claim of the same owner evicts its oldest (the offender pays)
    r.add_datagram(codec.encode_data_frame(1, 9, 1, 0, 1000, 1000, 0, b"x"))
    assert r.take_evicted() == [(1, 0)] and r.take_evicted() == []
    assert r.evicted == 1 and r.dropped_too_large == 1 and r.incomplete_bytes == 2 * 1256
    assert r.owner_bytes(1) == 2 * 1256 and r.owner_bytes(2) == 0
    assert r.drop((1, 1)) is True and r.drop((1, 1)) is False
    r.max_incomplete_bytes = 0  # caps are plain attributes, as in the twin
    with pytest.raises(FrameTooLarge) as info:
        r.add_datagram(codec.encode_data_frame(1, 10, 1, 0, 0, 0, 0, b""))
    assert info.value.reason == "incomplete-bytes budget exhausted"
    assert r.max_incomplete_bytes == 0 and r.max_message_size == 1000


def test_peer_budget_evicts_the_offender_first(codec):
    r = codec.Reassembler(max_incomplete_bytes=4000, max_peer_incomplete_bytes=2600)
    claim = lambda sid, mid: codec.encode_data_frame(sid, mid, 2, 0, 1000, 500, 0, b"x")  # noqa: E731
    for mid in range(3):  # peer 1: its budget holds two 1256-byte claims; the third evicts
        r.add_datagram(claim(1, mid))
    assert r.take_evicted() == [(1, 0)] and r.owner_bytes(1) == 2512
    r.add_datagram(claim(2, 0))  # peer 2 fits beside it (3768 of 4000)
    # socket full: peer 3's claim evicts from the peer holding the most (1), not from 2
    r.add_datagram(claim(3, 0))
    assert r.take_evicted() == [(1, 1)]
    assert [r.owner_bytes(s) for s in (1, 2, 3)] == [1256, 1256, 1256]
    # all equal: a fourth peer cannot take from anyone holding no more than it would
    with pytest.raises(FrameTooLarge):
        r.add_datagram(claim(4, 0))
    # a claim over the per-peer budget by itself is refused before evicting anything
    r.max_peer_incomplete_bytes = 1000
    with pytest.raises(FrameTooLarge) as info:
        r.add_datagram(claim(2, 5))
    assert info.value.reason == "peer's incomplete-bytes budget exhausted"
    assert r.evicted == 2 and len(r) == 3 and r.incomplete_bytes == 3 * 1256


def test_large_claims_are_charged_by_received_bytes(codec):
    big = 16 << 20
    r = codec.Reassembler(max_incomplete_bytes=64 << 20, max_peer_incomplete_bytes=32 << 20)
    base = codec.MESSAGE_OVERHEAD + codec.MESSAGE_RESERVATION
    for mid in range(8):  # 8 claims of 16 MiB: charged 1 MiB each, not 16
        r.add_datagram(codec.encode_data_frame(1, mid, 1, 0, big, big, big - 466, bytes(466)))
    assert len(r) == 8 and r.incomplete_bytes == 8 * base and r.evicted == 0
    # the charge follows the bytes received: 3 MiB in order grows one claim past its reservation
    chunk = bytes(466)
    for off in range(0, 3 << 20, 466):
        r.add_datagram(codec.encode_data_frame(1, 0, 1, 0, big, big, off, chunk))
    received = -(-(3 << 20) // 466) * 466 + 466
    assert r.owner_bytes(1) == 7 * base + codec.MESSAGE_OVERHEAD + received + 2 * 8192


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"max_message_size": -1}, ValueError),
        ({"max_message_size": 2**32}, ValueError),
        ({"max_incomplete_bytes": -1}, ValueError),
        ({"max_message_size": 1.5}, TypeError),
    ],
)
def test_constructor_checks(codec, kwargs, error):
    with pytest.raises(error):
        codec.Reassembler(**kwargs)


def test_expire_drop_oldest(codec):
    r = codec.Reassembler()
    assert r.oldest() is None and r.expire(100.0) == []
    r.add_datagram(codec.encode_data_frame(1, 1, 2, 0, 10, 5, 0, b"a"), now=5.0)
    r.add_datagram(codec.encode_data_frame(1, 2, 2, 0, 10, 5, 0, b"a"), now=3.0)
    r.add_datagram(codec.encode_data_frame(1, 3, 2, 0, 10, 5, 0, b"a"), now=9)
    r.add_datagram(codec.encode_data_frame(1, 1, 2, 1, 10, 5, 0, b"b"), now=99.0)  # not a new message
    assert r.oldest() == 3.0 and len(r) == 3
    assert r.expire(5.0) == [(1, 2)]
    assert r.expire(9.5) == [(1, 1), (1, 3)]
    assert (r.expired, len(r), r.incomplete_bytes) == (3, 0, 0)


# -- hostile input: rejected, counted, and never an allocation past the budget ------------------


def traced_peak(run) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_claim_of_4_gib_allocates_nothing(codec):
    r = codec.Reassembler()  # max_message_size 4 GiB - 1, budget 64 MiB
    frame = codec.encode_data_frame(1, 2, 1, 0, 2**32 - 1, 2**32 - 1, 2**32 - 467, bytes(466))

    def run():
        for _ in range(100):
            assert r.add_datagram(frame) is None

    # held lazily (pages committed as chunks land), charged its reservation, not 4 GiB
    assert traced_peak(run) < 256 * 1024
    assert len(r) == 1 and r.duplicates == 99
    assert r.incomplete_bytes == codec.MESSAGE_RESERVATION + codec.MESSAGE_OVERHEAD
    assert r.drop((1, 2)) and r.incomplete_bytes == 0


def test_flood_of_claims_stays_within_budget(codec):
    budget = 1 << 20
    r = codec.Reassembler(max_incomplete_bytes=budget)
    frames = [codec.encode_data_frame(7, mid, 3, i, 300_000, 100_000, 0, b"x") for mid in range(300) for i in range(3)]

    def run():
        for f in frames:
            try:
                r.add_datagram(f)
            except FrameTooLarge:
                pass

    peak = traced_peak(run)
    assert r.incomplete_bytes <= budget and len(r) == 3  # 3 * (300000 + 256) fits, a 4th does not
    assert r.evicted == 297 and r.dropped_too_large == 0  # each new claim evicts the oldest
    assert peak < budget + 256 * 1024, peak


def test_hostile_mix_only_decode_errors(codec):
    rng = random.Random(13)
    good = frames_of(codec, [payload(3000, 14)], 1, 1)
    r = codec.Reassembler(max_incomplete_bytes=1 << 20)

    def run():
        for _ in range(1500):
            raw = bytearray(rng.choice(good))
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            try:
                r.add_datagram(bytes(raw))
            except DecodeError:
                pass

    assert traced_peak(run) < (1 << 20) + 512 * 1024
    assert r.incomplete_bytes <= 1 << 20
    assert r.frames + r.duplicates + r.rejected + r.dropped_too_large + r.malformed >= 1500


def test_a_refused_memory_map_drops_the_message(codec, monkeypatch):
    # Under strict overcommit the OS may refuse a lazy part's map: counted, never a crash.
    import importlib

    target = "nbmq._codec_py.reassembly" if codec.__name__ == "nbmq._codec_py" else "nbmq._codec"
    mod = importlib.import_module(target)

    def refuse(size):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(mod, "_lazy_buffer", refuse)
    r = codec.Reassembler()
    big = 4 << 20
    with pytest.raises(FrameTooLarge) as info:
        r.add_datagram(codec.encode_data_frame(1, 2, 1, 0, big, big, 0, b"x"))
    assert info.value.reason == "cannot reserve memory for the message"
    assert r.dropped_too_large == 1 and len(r) == 0 and r.incomplete_bytes == 0
