"""Noise IK (nbmq.engine.noise) against the cacophony test vectors, and the secure frame layer
(nbmq.engine.secure): sealing, opening, the replay window and rekeying."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("cryptography")

from nbmq.engine import secure  # noqa: E402
from nbmq.engine.noise import CipherState, HandshakeError, HandshakeState, generate_keypair, public_key  # noqa: E402
from nbmq.engine.secure import (  # noqa: E402
    SECURE_OVERHEAD,
    SECURE_VERSION,
    OpenError,
    ReplayWindow,
    SessionKeys,
)
from nbmq.wire import FrameKind  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
VECTORS = json.loads((DATA / "noise_vectors.json").read_text())["vectors"]


def _h(text: str) -> bytes:
    return bytes.fromhex(text)


@pytest.mark.parametrize("case", VECTORS, ids=[v["protocol_name"] for v in VECTORS])
def test_ik_matches_the_cacophony_vectors(case):
    init = HandshakeState(
        True,
        _h(case["init_static"]),
        _h(case["init_remote_static"]),
        _h(case["init_prologue"]),
        _h(case["init_ephemeral"]),
    )
    resp = HandshakeState(False, _h(case["resp_static"]), None, _h(case["resp_prologue"]), _h(case["resp_ephemeral"]))
    messages = case["messages"]
    m1, m2 = messages[0], messages[1]
    assert init.write_message(_h(m1["payload"])) == _h(m1["ciphertext"])
    assert resp.read_message(_h(m1["ciphertext"])) == _h(m1["payload"])
    assert resp.remote_static == public_key(_h(case["init_static"]))
    assert resp.write_message(_h(m2["payload"])) == _h(m2["ciphertext"])
    assert init.read_message(_h(m2["ciphertext"])) == _h(m2["payload"])
    assert init.handshake_hash == resp.handshake_hash == _h(case["handshake_hash"])
    i2r, r2i = init.split()
    ri2r, rr2i = resp.split()
    for index, message in enumerate(messages[2:]):
        send, recv = (i2r, ri2r) if index % 2 == 0 else (rr2i, r2i)
        assert send.encrypt_with_ad(b"", _h(message["payload"])) == _h(message["ciphertext"])
        assert recv.decrypt_with_ad(b"", _h(message["ciphertext"])) == _h(message["payload"])


def test_a_wrong_server_key_fails_the_handshake_and_a_forgery_leaves_it_open():
    server_pub, server_sec = generate_keypair()
    other_pub, _ = generate_keypair()
    _, client_sec = generate_keypair()
    wrong = HandshakeState(True, client_sec, other_pub)
    server = HandshakeState(False, server_sec)
    with pytest.raises(HandshakeError):
        server.read_message(wrong.write_message())
    client = HandshakeState(True, client_sec, server_pub)
    m1 = client.write_message()
    server = HandshakeState(False, server_sec)
    server.read_message(m1)
    m2 = server.write_message(b"sid")
    forged = bytearray(m2)
    forged[-1] ^= 1
    with pytest.raises(HandshakeError):
        client.read_message(bytes(forged))
    assert client.read_message(m2) == b"sid"  # the genuine reply still completes it
    with pytest.raises(HandshakeError):
        HandshakeState(False, server_sec).read_message(m1[:40])


KEY_A, KEY_B = bytes(range(32)), bytes(range(1, 33))


def _make(twin: str, send_key: bytes, recv_key: bytes, rekey_frames: int):
    if twin == "python":
        return SessionKeys(send_key, recv_key, b"k" * 32, rekey_frames)
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    return secure._seal.SessionKeys(send_key, recv_key, b"k" * 32, rekey_frames, secure._rekeyed, OpenError)


@pytest.fixture(params=["python", "compiled"])
def twin(request):
    return request.param


def _pair(twin: str = "python", rekey_frames: int = 1 << 16):
    return _make(twin, KEY_A, KEY_B, rekey_frames), _make(twin, KEY_B, KEY_A, rekey_frames)


HEARTBEAT = bytes((1, FrameKind.HEARTBEAT)) + (77).to_bytes(8, "big")
DATA_FRAME = bytes((1, 0)) + (77).to_bytes(8, "big") + bytes(range(24)) + b"chunk"


def test_seal_keeps_the_header_readable_and_open_restores_the_frame(twin):
    alice, bob = _pair(twin)
    sealed = alice.seal(DATA_FRAME)
    assert sealed[0] == SECURE_VERSION and sealed[1:34] == DATA_FRAME[1:34]
    assert len(sealed) == len(DATA_FRAME) + SECURE_OVERHEAD
    assert b"chunk" not in sealed
    assert bob.open(sealed) == DATA_FRAME
    assert bob.open(alice.seal(HEARTBEAT)) == HEARTBEAT


@pytest.mark.parametrize("offset", [0, 1, 5, 20, 34, 41, 44, -1])
def test_every_flipped_bit_fails_authentication(offset, twin):
    alice, bob = _pair(twin)
    sealed = bytearray(alice.seal(DATA_FRAME))
    sealed[offset] ^= 0x10
    with pytest.raises(OpenError) as info:
        bob.open(bytes(sealed))
    assert info.value.reason in ("auth", "malformed")
    assert bob.open(alice.seal(DATA_FRAME)) == DATA_FRAME  # the window did not move for the forgery


def test_replays_and_frames_behind_the_window_are_refused(twin):
    alice, bob = _pair(twin)
    frames = [alice.seal(HEARTBEAT) for _ in range(2100)]
    bob.open(frames[5])
    with pytest.raises(OpenError, match="replayed") as info:
        bob.open(frames[5])
    assert info.value.reason == "replay"
    bob.open(frames[2099])
    bob.open(frames[60])  # reordered, inside the window: taken once
    with pytest.raises(OpenError):
        bob.open(frames[60])
    with pytest.raises(OpenError) as info:
        bob.open(frames[10])  # 2089 behind the top: outside the 2048-frame window
    assert info.value.reason == "replay"


def test_replay_window_slides():
    window = ReplayWindow(8)
    for counter in (0, 3, 2, 9):
        assert window.fresh(counter)
        window.take(counter)
    assert not window.fresh(3) and not window.fresh(9) and not window.fresh(1)  # 1 is 8 behind
    assert window.fresh(4) and window.fresh(100)


def test_keys_change_every_rekey_frames_and_both_sides_follow(twin):
    alice, bob = _pair(twin, rekey_frames=4)
    frames = [alice.seal(HEARTBEAT) for _ in range(17)]
    assert alice.rekeys == 4
    bob.open(frames[0])
    bob.open(frames[5])  # next key, derived on demand
    bob.open(frames[3])  # the previous key is kept for frames reordered across the change
    bob.open(frames[9])
    assert bob.rekeys == 2
    with pytest.raises(OpenError) as info:
        bob.open(frames[16])  # counter 16 is two keys ahead: refused unopened
    assert info.value.reason == "auth"
    # sealed under another key but a valid counter: the tag fails
    other, _ = _pair(twin, rekey_frames=4)
    with pytest.raises(OpenError):
        bob.open(b"".join([frames[10][:18], other.seal(HEARTBEAT)[18:]]))


def _twins() -> list[type]:
    twins = [secure.FrameCipher]
    if secure.COMPILED:
        twins.append(secure._seal.FrameCipher)
    return twins


@pytest.mark.parametrize("frame", [HEARTBEAT, DATA_FRAME, DATA_FRAME[:34], bytes((1, 5)) + bytes(8) + bytes(range(8))])
@pytest.mark.parametrize("counter", [0, 1, 2**32 + 5, 2**64 - 2])
def test_both_frame_ciphers_give_the_same_bytes_and_refuse_the_same_frames(frame, counter):
    sealers = [cls(KEY_A, True) for cls in _twins()]
    openers = [cls(KEY_A, False) for cls in _twins()]
    sealed = {s.seal(frame, counter) for s in sealers}
    assert len(sealed) == 1
    (one,) = sealed
    size = 34 if frame[1] == 0 else 10
    head = one[: size + 8]
    assert head == bytes((SECURE_VERSION,)) + frame[1:size] + counter.to_bytes(8, "big")
    # the cryptography package's ChaCha20-Poly1305 under Noise's nonce, header as associated data
    assert one == head + CipherState(KEY_A).encrypt_at(counter, head, frame[size:])
    for opener in openers:
        assert opener.open(one, size) == frame
        assert opener.open(memoryview(bytearray(one)), size) == frame
        for offset in (0, 1, size, size + 7, len(one) - 1):
            bad = bytearray(one)
            bad[offset] ^= 0x40
            assert opener.open(bytes(bad), size) is None
        assert opener.open(one[:-1] + bytes(1), size) is None
        with pytest.raises(ValueError):
            opener.open(one[: size + 23], size)
        with pytest.raises(ValueError):
            opener.seal(frame, counter)
    assert all(cls(KEY_B, False).open(one, size) is None for cls in _twins())


def test_the_compiled_frame_cipher_runs_when_built():
    from nbmq import extensions

    if extensions.flag("NBMQ_REQUIRE_EXTENSIONS"):
        assert secure.COMPILED


def test_both_session_keys_twins_agree_on_a_hostile_sequence():
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    rng = random.Random(5)
    pairs = [_pair(t, rekey_frames=16) for t in ("python", "compiled")]
    sent: list[bytes] = []
    for step in range(6000):  # past 2048 frames: the compiled window is a ring
        action = rng.random()
        if action < 0.5 or not sent:
            frame = DATA_FRAME if rng.random() < 0.5 else HEARTBEAT
            sealed = {alice.seal(frame) for alice, _ in pairs}
            assert len(sealed) == 1, step
            sent.append(sealed.pop())
            continue
        if action < 0.8:  # a recent frame, maybe again (reorder, replay)
            datagram = sent[-1 - min(len(sent) - 1, int(rng.expovariate(0.05)))]
        elif action < 0.9:  # an old one, maybe behind the window or two keys back
            datagram = rng.choice(sent)
        else:  # an altered one
            bad = bytearray(rng.choice(sent))
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            datagram = bytes(bad)
        results = []
        for _, bob in pairs:
            try:
                results.append(("ok", bob.open(datagram)))
            except OpenError as exc:
                results.append((exc.reason, exc.detail))
        assert results[0] == results[1], step
    assert pairs[0][1].rekeys == pairs[1][1].rekeys > 10


def test_both_batch_twins_seal_and_open_alike():
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    sid = 77
    twins = batch_twins()
    results = {}
    for name, (seal_frames, open_frames) in twins.items():
        alice, bob = _pair(name)
        out = [
            (DATA_FRAME, "b"),
            (HEARTBEAT, "b"),
            (b"\x81\x01" + bytes(40), "b"),
            (DATA_FRAME[:2] + bytes(8) + DATA_FRAME[10:], "c"),
        ]
        sealed, merged, added, unsealed = seal_frames({sid: alice}, out)
        assert (merged, added, unsealed) == (0, 2 * SECURE_OVERHEAD, 1) and sealed[2][0] == out[2][0]
        frames = [d for d, _ in sealed]
        flipped = bytearray(frames[0])
        flipped[-1] ^= 1
        batch = [frames[0], frames[0], frames[1], bytes(flipped), frames[2], b"\x81", frames[1]]
        lengths = [len(d) for d in batch] + [5, 2**40]
        offsets = [sum(lengths[:i]) for i in range(len(batch))] + [-3, 0]
        addrs = [("a", i) for i in range(len(lengths))]
        steps = open_in_runs(open_frames, {sid: bob}, memoryview(b"".join(batch)), offsets, lengths, addrs)
        results[name] = (sealed, steps)
    assert results["python"] == results["compiled"]
    assert [len(sizes) for _, _, sizes, _ in results["python"][1]] == [1, 1, 0, 0, 0, 0, 0, 0]


def batch_twins() -> dict[str, tuple]:
    """name -> (seal_frames, open_frames) of both twins (the compiled one is built)."""
    return {
        "python": (secure.seal_frames, secure.open_frames),
        "compiled": (secure._seal.seal_frames, secure._seal.open_frames),
    }


ROOM = 1 << 16  # bytes a test run opens into


def open_in_runs(open_frames, sessions, buffer, offsets, lengths, addrs) -> list[tuple]:
    """The connection's loop over a batch: open a run, skip the first datagram not opened, and so
    on; per run ``(index it stopped at, plain frames back to back, their sizes, addresses)``."""
    steps = []
    i = 0
    for _ in range(20):
        plain, sizes, froms = bytearray(ROOM), [], []
        i = open_frames(sessions, buffer, offsets, lengths, addrs, i, plain, sizes, froms)
        steps.append((i, bytes(plain[: sum(sizes)]), sizes, froms))
        if i >= len(lengths):
            return steps
        i += 1
    raise AssertionError("a batch of at most 20 datagrams took more runs")


EXTREMES = [0, 1, -1, 2**31, -(2**31), 2**63 - 1, -(2**63 - 1)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offsets=st.lists(st.sampled_from(EXTREMES + [0, 63]), min_size=0, max_size=4),
    lengths=st.lists(st.sampled_from(EXTREMES + [63, 63, 200]), min_size=0, max_size=4),
    start=st.sampled_from(EXTREMES),
)
def test_batch_open_twins_agree_on_extreme_offsets_lengths_and_start(offsets, lengths, start):
    if not secure.COMPILED:
        pytest.skip("nbmq.engine._seal is not built")
    alice, _ = _pair("python")
    sealed = alice.seal(DATA_FRAME)
    buffer = memoryview(sealed + sealed)
    addrs = [("a", i) for i in range(4)]
    outcomes = []
    for name, open_frames in (("python", secure.open_frames), ("compiled", secure._seal.open_frames)):
        _, bob = _pair(name)
        plain = bytearray(ROOM)
        sizes: list[int] = []
        froms: list[object] = []
        try:
            i = open_frames({77: bob}, buffer, offsets, lengths, addrs, start, plain, sizes, froms)
            outcomes.append(("ok", i, plain[: sum(sizes)]))
        except ValueError as exc:
            outcomes.append(("ValueError", str(exc), plain[: sum(sizes)]))
    assert outcomes[0] == outcomes[1]
    if start < 0:
        assert outcomes[0][0] == "ValueError" and "start" in outcomes[0][1]
