"""Sealed bundles in the batch decoder (docs/secure.md): ``split_bundles`` lays each bundled
frame out as if it had been sealed alone, so ``parse_frames`` gives one row per frame (its clear
header, the ciphertext as payload, never malformed); ``bundle_layout`` is the one rule for where
a bundle's frames lie. Run on both twins (the ``codec`` fixture), compared to each other."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nbmq import _codec_py
from nbmq.errors import DecodeError
from nbmq.wire import BUNDLE_ERROR_REASONS, BUNDLE_VERSION, SECURE_VERSION, FrameError, FrameKind

pytest.importorskip("cryptography")


def _sealed(codec):
    """(bundle of a 1000-byte message's three frames and a heartbeat, a lone sealed heartbeat,
    the plain frames)."""
    from nbmq.engine.secure import SessionKeys

    keys = SessionKeys(bytes(range(32)), bytes(32), bytes(32))
    sharded = codec.shard_message([bytes(range(250)) * 4], 7, 11)
    plain = [sharded.buffer[o : o + n].tobytes() for o, n in zip(sharded.offsets, sharded.lengths)]
    plain.append(codec.encode_control_frame(FrameKind.HEARTBEAT, 7))
    return keys.seal_bundle(plain), keys.seal(plain[-1]), plain


def _batch(datagrams):
    lengths = [len(d) for d in datagrams]
    return b"".join(datagrams), np.cumsum([0] + lengths[:-1]), np.array(lengths)


def test_one_row_per_bundled_frame_with_its_clear_header(codec):
    bundle, lone, plain = _sealed(codec)
    datagrams = [lone, bundle, plain[0], bundle[:-1], b"\x82\x00"]
    buffer, offsets, lengths, source = codec.split_bundles(*_batch(datagrams))
    assert source.tolist() == [0, 1, 1, 1, 1, 2, 3, 4]
    rows = codec.parse_frames(buffer, offsets, lengths)
    assert rows["version"].tolist() == [SECURE_VERSION] * 5 + [1, BUNDLE_VERSION, BUNDLE_VERSION]
    assert rows["error"].tolist() == [0] * 6 + [FrameError.VERSION] * 2  # a broken bundle stays one
    assert rows["kind"][:5].tolist() == [FrameKind.HEARTBEAT, 0, 0, 0, FrameKind.HEARTBEAT]
    assert rows["chunk_size"][1:4].tolist() == rows["payload_length"][1:4].tolist() == [466, 466, 68]
    assert rows["session_id"][:6].tolist() == [7] * 6 and rows["message_id"][1:4].tolist() == [11] * 3
    cipher = b"".join(
        bytes(buffer[o : o + n]) for o, n in zip(rows["payload_offset"][1:5], rows["payload_length"][1:5])
    )
    assert cipher == bundle[-16 - len(cipher) : -16]  # the ciphertext, frame by frame
    assert lengths.tolist()[1:5] == [len(f) + 24 for f in plain]  # each as if sealed alone
    unchanged = codec.split_bundles(*_batch([lone, plain[0]]))
    assert unchanged[3].tolist() == [0, 1] and unchanged[2].tolist() == [len(lone), len(plain[0])]


def test_bundle_layout_says_where_and_why(codec):
    bundle, _, plain = _sealed(codec)
    entries, end = codec.bundle_layout(bundle)
    assert [size for _, size, _ in entries] == [34, 34, 34, 10]
    assert [length for _, _, length in entries] == [len(f) - s for f, (_, s, _) in zip(plain, entries)]
    assert end == 2 + 3 * 36 + 12
    cases = {
        bundle[:1] + b"\x01" + bundle[2:]: (1, 1),
        bundle[:40]: (40, 2),
        bundle[:4] + b"\x01" + bundle[5:]: (4, 3),
        bundle[:42] + b"\xff" + bundle[43:]: (42, 4),
        bundle + b"\x00": (2, 5),
    }
    for datagram, (offset, why) in cases.items():
        with pytest.raises(DecodeError) as caught:
            codec.bundle_layout(datagram)
        assert (caught.value.offset, caught.value.reason) == (offset, BUNDLE_ERROR_REASONS[why])


def test_the_twins_agree_on_altered_bundles(codec):
    if codec is _codec_py:
        pytest.skip("compares the compiled codec with the twin")
    rng = random.Random(7)
    bundle, lone, plain = _sealed(codec)
    for step in range(400):
        altered = bytearray(bundle)
        for _ in range(rng.randrange(1, 4)):
            if rng.random() < 0.3:
                del altered[rng.randrange(len(altered)) :]
            elif altered:
                altered[rng.randrange(len(altered))] = rng.randrange(256)
        if altered:
            altered[0] = BUNDLE_VERSION
        datagrams = [bytes(altered), lone, bundle]
        results = []
        for twin in (codec, _codec_py):
            try:
                layout = twin.bundle_layout(bytes(altered))
            except DecodeError as exc:
                layout = (exc.offset, exc.reason)
            split = twin.split_bundles(*_batch(datagrams))
            rows = twin.parse_frames(*split[:3])
            results.append((layout, [a.tolist() for a in split], rows.tobytes()))
        assert results[0] == results[1], step
