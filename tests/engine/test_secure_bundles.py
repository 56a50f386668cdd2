"""Sealed bundles (docs/secure.md): several frames of one secure session under one seal, in one
datagram of at most ``max_datagram_size`` bytes. Both twins give the same bytes and refuse the
same bundles for the same reasons; a refused bundle is refused whole and moves nothing."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("cryptography")

from test_secure_mode import CLIENT, SERVER, recv_all, rejections, secure_pair  # noqa: E402
from test_secure_noise import batch_twins, open_in_runs  # noqa: E402

import nbmq  # noqa: E402
from nbmq import codec  # noqa: E402
from nbmq.engine import Dealer, secure  # noqa: E402
from nbmq.engine.secure import BUNDLE_VERSION, SECURE_VERSION, OpenError, SessionKeys, bundle_layout  # noqa: E402
from nbmq.errors import OptionError  # noqa: E402
from nbmq.events import FrameRejected, RejectReason  # noqa: E402
from nbmq.options import SocketOptions  # noqa: E402
from nbmq.wire import BUNDLE_OVERHEAD, FrameKind  # noqa: E402

KEY_A, KEY_B = bytes(range(32)), bytes(range(100, 132))
SID = 77


def _make(twin: str, send_key: bytes, recv_key: bytes, rekey_frames: int = 1 << 16):
    if twin == "python":
        return SessionKeys(send_key, recv_key, b"k" * 32, rekey_frames)
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    return secure._seal.SessionKeys(send_key, recv_key, b"k" * 32, rekey_frames, secure._rekeyed, secure.OpenError)


def _pair(twin: str, rekey_frames: int = 1 << 16):
    return _make(twin, KEY_A, KEY_B, rekey_frames), _make(twin, KEY_B, KEY_A, rekey_frames)


@pytest.fixture(params=["python", "compiled"])
def twin(request):
    return request.param


def _frames(size: int = 1000, sid: int = SID) -> list[bytes]:
    """A message's data frames and a heartbeat, all of session ``sid``."""
    sharded = codec.shard_message([bytes(range(256)) * (size // 256) + bytes(size % 256)], sid, 42)
    frames = [bytes(sharded.buffer[o : o + n]) for o, n in zip(sharded.offsets, sharded.lengths)]
    return frames + [codec.encode_control_frame(FrameKind.HEARTBEAT, sid)]


def _outcome(keys, datagram):
    try:
        return ("ok", keys.open_bundle(datagram))
    except OpenError as exc:
        return (exc.reason, exc.detail)


def test_a_bundle_keeps_each_header_readable_and_opens_to_its_frames(twin):
    alice, bob = _pair(twin)
    frames = _frames()
    bundle = alice.seal_bundle(frames)
    assert bundle[0] == BUNDLE_VERSION and bundle[1] == len(frames) == 4
    assert len(bundle) == BUNDLE_OVERHEAD + sum(2 + len(f) for f in frames)
    entries, end = bundle_layout(bundle)
    for (head, size, length), frame in zip(entries, frames):
        assert bundle[head] == SECURE_VERSION and bundle[head + 1 : head + size] == frame[1:size]
        assert length == len(frame) - size
    assert int.from_bytes(bundle[end : end + 8], "big") == 0 == alice.frames_sealed - 1
    assert bytes(range(40)) not in bundle
    assert bob.open_bundle(bundle) == frames
    assert _outcome(bob, bundle) == ("replay", "secure frame replayed or too old")


def test_a_bundle_takes_frames_as_any_buffer(twin):
    import numpy as np

    alice, bob = _pair(twin)
    frames = _frames()
    # numpy arrays (shard_message's buffer sliced), bytearrays and memoryviews seal as bytes do
    kinds = [np.frombuffer(frames[0], np.uint8), bytearray(frames[1]), memoryview(frames[2]), frames[3]]
    assert bob.open_bundle(alice.seal_bundle(kinds)) == frames


def test_both_twins_seal_the_same_bundle_and_open_each_others():
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    frames = _frames(3000)
    pairs = {t: _pair(t, rekey_frames=3) for t in ("python", "compiled")}
    for step in range(10):  # across three key changes
        bundles = {t: alice.seal_bundle(frames[: 2 + step % 5]) for t, (alice, _) in pairs.items()}
        assert bundles["python"] == bundles["compiled"], step
        assert pairs["python"][1].open_bundle(bundles["compiled"]) == frames[: 2 + step % 5]
        assert pairs["compiled"][1].open_bundle(bundles["python"]) == frames[: 2 + step % 5]
    assert pairs["python"][1].rekeys == pairs["compiled"][1].rekeys == 3


def _hostile(bundle: bytes) -> dict[str, bytes]:
    """Altered copies of a two-frame bundle (a data frame, then a heartbeat), by name."""
    entries, end = bundle_layout(bundle)
    (h0, s0, l0), (h1, _, _) = entries

    def put(at: int, value: bytes) -> bytes:
        return bundle[:at] + value + bundle[at + len(value) :]

    swapped = put(2, (l0 - 1).to_bytes(2, "big"))
    swapped = swapped[: h1 - 2] + (1).to_bytes(2, "big") + swapped[h1:]  # lengths still add up
    return {
        "count 1": put(1, b"\x01"),
        "count 0": put(1, b"\x00"),
        "count 3": put(1, b"\x03"),
        "count 255": put(1, b"\xff"),
        "length + 1": put(2, (l0 + 1).to_bytes(2, "big")),
        "length 65535": put(2, b"\xff\xff"),
        "lengths moved": swapped,
        "header of a Connect": put(h1 + 1, bytes((FrameKind.CONNECT,))),
        "header kind 9": put(h1 + 1, b"\x09"),
        "plain header": put(h0, b"\x01"),
        "other session": put(h1 + 2, b"\xee"),
        "data header as control": put(h0 + 1, bytes((FrameKind.HEARTBEAT,))),
        "flipped ciphertext": put(end + 9, bytes((bundle[end + 9] ^ 1,))),
        "flipped header": put(h0 + 20, bytes((bundle[h0 + 20] ^ 1,))),
        "flipped counter": put(end + 7, bytes((bundle[end + 7] ^ 1,))),
        "flipped tag": bundle[:-1] + bytes((bundle[-1] ^ 0x80,)),
        "truncated": bundle[:-1],
        "truncated in an entry": bundle[: h0 + 5],
        "head only": bundle[:2],
        "one byte more": bundle + b"\x00",
        "counter far ahead": put(end, (1 << 40).to_bytes(8, "big")),
    }


EXPECTED = {
    "count 1": ("malformed", "secure bundle frame count out of range"),
    "count 0": ("malformed", "secure bundle frame count out of range"),
    "count 3": ("malformed", "secure bundle holds a header that is not a sealed one"),
    "count 255": ("malformed", "secure bundle holds a header that is not a sealed one"),
    "length + 1": ("malformed", "secure bundle lengths do not add up"),
    "length 65535": ("malformed", "secure bundle lengths do not add up"),
    "lengths moved": ("auth", "secure frame failed authentication"),
    "header of a Connect": ("malformed", "secure bundle holds a header that is not a sealed one"),
    "header kind 9": ("malformed", "secure bundle holds a header that is not a sealed one"),
    "plain header": ("malformed", "secure bundle holds a header that is not a sealed one"),
    "other session": ("malformed", "secure bundle mixes sessions"),
    "data header as control": ("malformed", "secure bundle holds a header that is not a sealed one"),
    "flipped ciphertext": ("auth", "secure frame failed authentication"),
    "flipped header": ("auth", "secure frame failed authentication"),
    "flipped counter": ("auth", "secure frame failed authentication"),
    "flipped tag": ("auth", "secure frame failed authentication"),
    "truncated": ("malformed", "secure bundle lengths do not add up"),
    "truncated in an entry": ("malformed", "secure bundle truncated"),
    "head only": ("malformed", "secure bundle truncated"),
    "one byte more": ("malformed", "secure bundle lengths do not add up"),
    "counter far ahead": ("auth", "secure frame counter outside the current keys"),
}


def test_a_malformed_or_altered_bundle_is_refused_whole_and_moves_nothing(twin):
    alice, bob = _pair(twin)
    frames = [_frames(300)[0], _frames()[-1]]
    bundle = alice.seal_bundle(frames)
    hostile = _hostile(bundle)
    assert set(hostile) == set(EXPECTED)
    for name, datagram in hostile.items():
        assert _outcome(bob, datagram) == EXPECTED[name], name
    assert bob.open_bundle(bundle) == frames  # nothing moved for the forgeries
    assert _outcome(bob, bundle)[0] == "replay"


def test_the_twins_refuse_random_alterations_alike():
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    rng = random.Random(11)
    pairs = [_pair(t) for t in ("python", "compiled")]
    frames = _frames(900)
    for step in range(300):
        count = rng.randrange(2, len(frames) + 1)
        bundles = {alice.seal_bundle(frames[:count]) for alice, _ in pairs}
        assert len(bundles) == 1
        bundle = bytearray(bundles.pop())
        for _ in range(rng.randrange(1, 4)):
            if rng.random() < 0.3:
                del bundle[rng.randrange(len(bundle)) :]
            elif len(bundle):
                bundle[rng.randrange(len(bundle))] = rng.randrange(256)
        results = [_outcome(bob, bytes(bundle)) for _, bob in pairs]
        assert results[0] == results[1], step


def test_reordered_bundles_open_within_the_window(twin):
    alice, bob = _pair(twin)
    frames = _frames()
    bundles = [alice.seal_bundle(frames[: 2 + i % 3]) for i in range(6)]
    for i in (3, 0, 5, 1, 4, 2):
        assert bob.open_bundle(bundles[i]) == frames[: 2 + i % 3]
    assert all(_outcome(bob, b)[0] == "replay" for b in bundles)


def test_seal_frames_packs_each_peer_up_to_the_size_in_order(twin):
    seal_frames = secure.seal_frames if twin == "python" else (_pair(twin) and secure._seal.seal_frames)
    other_sid = 78
    alice, bob = _pair(twin)
    carol, dave = _make(twin, KEY_A, KEY_A), _make(twin, KEY_A, KEY_A)
    mine, theirs = _frames(2500), _frames(800, other_sid)
    connect = b"\x81\x01" + bytes(104)  # a handshake frame passes as it is
    out = [(f, "b") for f in mine[:3]] + [(connect, "z")] + [(f, "c") for f in theirs] + [(f, "b") for f in mine[3:]]
    sealed, merged, added, unsealed = seal_frames({SID: alice, other_sid: carol}, out, 1200)
    addrs = [addr for _, addr in sealed]  # each peer's datagrams where its first frame was
    assert unsealed == 0 and addrs == ["b"] * addrs.count("b") + ["z"] + ["c"] * addrs.count("c")
    assert all(len(d) <= 1200 for d, _ in sealed)
    assert len(out) - len(sealed) == merged > 0
    assert sum(len(d) for d, _ in sealed) - sum(len(d) for d, _ in out) == added
    opened = {"b": [], "c": []}
    for data, addr in sealed:
        if addr == "z":
            continue
        keys = bob if addr == "b" else dave
        opened[addr] += keys.open_bundle(data) if data[0] == BUNDLE_VERSION else [keys.open(data)]
    assert opened == {"b": mine, "c": theirs}


def test_at_most_255_frames_go_in_a_bundle(twin):
    seal_frames = secure.seal_frames if twin == "python" else (_pair(twin) and secure._seal.seal_frames)
    alice, bob = _pair(twin)
    heartbeat = _frames()[-1]
    sealed, merged, _, _ = seal_frames({SID: alice}, [(heartbeat, "b")] * 600, 65507)
    assert [d[1] for d, _ in sealed] == [255, 255, 90] and merged == 597
    assert sum(len(bob.open_bundle(d)) for d, _ in sealed) == 600
    lone, merged, added, _ = seal_frames({SID: alice}, [(heartbeat, "b")] * 3, 0)
    assert merged == 0 and added == 3 * 24 and {d[0] for d, _ in lone} == {SECURE_VERSION}


def test_the_option_is_checked_and_fixed_at_creation():
    assert SocketOptions().max_datagram_size is None  # from the path, once a transport knows it
    assert SocketOptions(max_datagram_size=0).max_datagram_size == 0
    # an engine without a transport knows no path: it bundles to Ethernet's size
    wire, _, client = secure_pair(max_datagram_size=None)
    client.send([bytes(range(256)) * 256], wire.now)
    assert max(len(d) for d, _ in client.datagrams_to_send(wire.now)) <= 1472
    for bad in (-1, 65508, 1.5, True, "1472"):
        with pytest.raises(OptionError, match="max_datagram_size"):
            SocketOptions(max_datagram_size=bad)
    engine = Dealer.bound(SERVER, SocketOptions(max_datagram_size=1472))
    with pytest.raises(OptionError, match="max_datagram_size"):
        engine.set_option("max_datagram_size", 0)


@pytest.mark.parametrize("batch", [False, True])
def test_engines_bundle_a_large_message_and_count_datagrams_honestly(batch):
    wire, server, client = secure_pair(max_datagram_size=1472)
    big = bytes(range(256)) * 256  # 64 KiB: 141 frames, two to a bundle and three in the last
    client.send([big], wire.now)
    out = [bytes(d) for d, _ in client.datagrams_to_send(wire.now)]
    assert {d[0] for d in out} == {BUNDLE_VERSION} and len(out) == 70 and max(map(len, out)) <= 1472
    c = server.counters
    before = (c.datagrams_in, c.bytes_in, c.data_frames_in)
    if batch:
        lengths = [len(d) for d in out]
        offsets = [sum(lengths[:i]) for i in range(len(out))]
        server.receive_datagrams(memoryview(b"".join(out)), offsets, lengths, [CLIENT] * len(out), wire.now)
    else:
        for d in out:
            server.receive_datagram(d, CLIENT, wire.now)
    assert recv_all(server) == [[big]]
    after, sent = server.counters, client.counters
    counted = (after.datagrams_in, after.bytes_in, after.data_frames_in)
    assert [b - a for a, b in zip(before, counted)] == [70, sum(map(len, out)), 141]
    assert (after.malformed, after.secure_auth_failed, after.secure_replays) == (0, 0, 0)
    wire.run()
    assert sent.datagrams_out == len([1 for src, _, _ in wire.captured if src == CLIENT]) + 70
    assert sent.bytes_out == sum(len(d) for src, _, d in wire.captured if src == CLIENT) + sum(map(len, out))


def test_an_engine_refuses_a_bad_bundle_whole_and_counts_it():
    wire, server, client = secure_pair(max_datagram_size=1472)
    for i in range(3):
        client.send([b"m%d" % i], wire.now)
    ((bundle, _),) = client.datagrams_to_send(wire.now)
    flipped = bytearray(bundle)
    flipped[-20] ^= 1
    lying = bytearray(bundle)
    lying[1] = 200
    stranger = bytearray(bundle)
    stranger[6:14] = bytes(8)  # the first header's session: unknown here
    rejections(server)
    for datagram in (bytes(flipped), bytes(lying), bytes(stranger), bytes(bundle), bytes(bundle), bundle[:9]):
        server.receive_datagram(datagram, CLIENT, wire.now)
    assert recv_all(server) == [[b"m0"], [b"m1"], [b"m2"]]
    c = server.counters
    assert (c.secure_auth_failed, c.secure_replays, c.malformed, c.unknown_session) == (1, 1, 2, 1)
    assert [e.reason for e in rejections(server)] == [
        RejectReason.UNAUTHENTICATED,
        RejectReason.MALFORMED,
        RejectReason.UNKNOWN_SESSION,
        RejectReason.UNAUTHENTICATED,
        RejectReason.MALFORMED,
    ]
    plain = Dealer.bound(("10.0.0.9", 1))  # a reference peer, or a plain socket: a wrong version
    plain.receive_datagram(bytes(bundle), CLIENT, wire.now)
    assert plain.counters.malformed == 1
    assert [e.detail for e in rejections(plain) if isinstance(e, FrameRejected)] == ["wrong version"]
    with pytest.raises(nbmq.DecodeError):
        codec.parse_frame(bytes(bundle))


def test_both_batch_twins_open_bundles_alike():
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    twins = batch_twins()
    results = {}
    for name, (seal_frames, open_frames) in twins.items():
        alice, bob = _pair(name)
        out = [(f, "b") for f in _frames(2000)] + [(_frames()[-1], "b")]
        sealed, merged, _, _ = seal_frames({SID: alice}, out, 1472)
        assert merged > 0
        frames = [d for d, _ in sealed]
        lone = alice.seal(_frames()[-1])
        flipped = bytearray(frames[0])
        flipped[-1] ^= 1
        batch = [frames[1], lone, frames[0], bytes(flipped), frames[0], *frames[2:], frames[0][:40]]
        lengths = [len(d) for d in batch]
        offsets = [sum(lengths[:i]) for i in range(len(batch))]
        addrs = [("a", i) for i in range(len(batch))]
        steps = open_in_runs(open_frames, {SID: bob}, memoryview(b"".join(batch)), offsets, lengths, addrs)
        results[name] = (sealed, steps)
    assert results["python"] == results["compiled"]
    (stop, plain, sizes, froms), *rest = results["python"][1]
    frames = [f for f, _ in out]
    assert stop == 3 and froms == [("a", 0)] * 5 + [("a", 1)] + [("a", 2)] * 2  # up to the altered one
    assert plain == b"".join(frames[2:] + [frames[-1]] + frames[:2]) and sizes == [
        len(f) for f in frames[2:] + [frames[-1]] + frames[:2]
    ]
    assert [(i, len(s)) for i, _, s, _ in rest] == [(4, 0), (5, 0), (6, 0)]  # a replay, a truncated one


def test_both_batch_twins_stop_a_run_where_the_room_ends():
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    results = {}
    for name, (seal_frames, open_frames) in batch_twins().items():
        alice, bob = _pair(name)
        sealed, _, _, _ = seal_frames({SID: alice}, [(f, "b") for f in _frames(3000)], 1472)
        batch = [d for d, _ in sealed]
        lengths = [len(d) for d in batch]
        offsets = [sum(lengths[:i]) for i in range(len(batch))]
        buffer = memoryview(b"".join(batch))
        plain, sizes, froms = bytearray(2 * 1472 + 100), [], []
        runs = []
        i = 0
        for _ in range(len(batch)):  # each run starts afresh in the same room
            sizes.clear()
            i = open_frames({SID: bob}, buffer, offsets, lengths, ["a"] * len(batch), i, plain, sizes, froms)
            runs.append((i, bytes(plain[: sum(sizes)])))
            if i == len(batch):
                break
        with pytest.raises(ValueError, match="sizes add up to"):
            open_frames({SID: bob}, buffer, offsets, lengths, ["a"] * len(batch), i, bytearray(10), [11], [])
        with pytest.raises(ValueError, match="writable"):
            open_frames({SID: bob}, buffer, offsets, lengths, ["a"] * len(batch), 0, bytes(5000), [], [])
        results[name] = runs
    assert results["python"] == results["compiled"]
    runs = results["python"]
    assert [i for i, _ in runs] == [2, 3]  # two bundles fit, the third waits for the next run
    assert b"".join(p for _, p in runs) == b"".join(_frames(3000))


def test_an_engine_opens_batches_into_one_reused_room_and_keeps_copies(monkeypatch):
    from nbmq.engine import connection

    monkeypatch.setattr(connection, "OPENED_ROOM", 7000)
    wire, server, client = secure_pair(max_datagram_size=8000)
    small, big, last = bytes([7]) * 100, bytes(range(256)) * 40, bytes([9]) * 5000
    sent = []
    for message in (small, big, last):
        client.send([message], wire.now)
        sent += [bytes(d) for d, _ in client.datagrams_to_send(wire.now)]
    # a lone frame, a bundle larger than the room (opened alone), then two that do not fit
    # together (two runs); the small message waits in the queue while batch 2 reuses the room
    assert [len(d) > 7000 for d in sent] == [False, True, False, False]
    assert len(sent[2]) + len(sent[3]) > 7000
    before = (server.counters.datagrams_in, server.counters.bytes_in)
    for batch in (sent[:2], sent[2:]):
        lengths = [len(d) for d in batch]
        offsets = [sum(lengths[:i]) for i in range(len(batch))]
        server.receive_datagrams(memoryview(b"".join(batch)), offsets, lengths, [CLIENT] * len(batch), wire.now)
    assert recv_all(server) == [[small], [big], [last]]
    counters = server.counters
    assert (counters.datagrams_in - before[0], counters.bytes_in - before[1]) == (4, sum(map(len, sent)))
    assert (counters.malformed, counters.secure_auth_failed, counters.secure_replays) == (0, 0, 0)


def test_a_large_bundle_reuses_a_buffer_only_once_nobody_holds_it():
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    alice, bob = _pair("compiled")
    frames = _frames(40_000)[:-1]
    first = alice.seal_bundle(frames)
    held = alice.seal_bundle(frames)
    assert held is not first and bytes(held) != bytes(first)  # a new counter, a new buffer
    copy, view = bytes(held), memoryview(held)
    reused = id(first)
    del first, held
    third = alice.seal_bundle(frames)
    assert id(third) == reused  # dropped: its warm buffer is taken again
    fourth = alice.seal_bundle(frames)
    assert fourth is not view.obj and view == copy  # a view still holds the second: untouched
    assert [bytes(f) for f in bob.open_bundle(third)] == [bytes(f) for f in bob.open_bundle(fourth)] == frames
