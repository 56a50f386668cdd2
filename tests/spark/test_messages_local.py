"""Partition-local reassembly (issue 14, item 5): one read of the frames gives exactly the
shuffled messages table, also when messages straddle byte ranges and frames come late."""

from __future__ import annotations

import random

import pytest
from nbmq.examples import CAPTURE_DIR as CAPTURES

pytestmark = pytest.mark.spark

SPLIT = str(64 * 1024)  # small byte ranges: many messages straddle a range boundary


def _same(a, b) -> bool:
    return a.count() == b.count() and a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0


def _late_capture(path, seed=5, messages=300):
    """Messages of 0..2 KB from two senders, with frames lost, resent before completion,
    resent long after completion (another byte range), and whole messages resent early
    and late, so each mix of row and frame records across ranges occurs."""
    from nbmq import codec
    from nbmq.capture import write_pcap

    rng = random.Random(seed)
    rows, t, late = [], 1_700_000_000.0, []
    for nonce in range(1, messages + 1):
        parts = [rng.randbytes(rng.randrange(0, 900)) for _ in range(rng.randrange(1, 4))]
        mid = codec.message_id(parts, nonce=nonce)
        src = "10.0.0.1" if nonce % 2 else "10.0.0.3"
        frames = [bytes(f) for f in codec.shard_message(parts, session_id=77, message_id=mid).frames()]
        if nonce % 13 == 0 and len(frames) > 1:
            frames.pop(0)  # lost: incomplete unless a late resend brings it
        if nonce % 7 == 0:
            frames.insert(1, frames[0])  # resent before completion
        if nonce % 5 == 0:
            late.append((src, frames[-1]))  # resent after completion, far later
        if nonce % 9 == 0:
            late.append((src, frames[0]))  # a first frame again, after completion
        if nonce % 23 == 0:
            late.extend((src, f) for f in frames)  # the whole message again, later
        if nonce % 29 == 0:
            late.insert(0, (src, frames[0]))  # the tail of an earlier range gets it back soon
        for f in frames:
            t += 0.001
            rows.append((t, src, 40000, "10.0.0.2", 5555, f))
        if nonce % 40 == 0:  # flush the late frames in the middle of the capture
            for s, f in late:
                t += 0.001
                rows.append((t, s, 40000, "10.0.0.2", 5555, f))
            late = []
    # a few frames whose capture time goes backwards (a merged capture): interleaved times
    for s, f in late:
        rows.append((t - 0.5 * rng.random(), s, 40000, "10.0.0.2", 5555, f))
    return write_pcap(path, rows)


def test_local_reassembly_equals_the_shuffled_one(spark, tmp_path):
    """Every bundled capture and two generated ones, cut into 64 KiB ranges: same rows."""
    from test_streaming import _generated_capture

    from nbmq.spark.messages import build_messages
    from nbmq.spark.messages_local import build_messages_local

    _generated_capture(tmp_path / "gen.pcap", messages=400)
    _late_capture(tmp_path / "late.pcap")
    paths = [str(CAPTURES / n) for n in ("dealer.pcap", "dealer.pcapng", "radio_dish.pcap", "safe_dealer.pcap")]
    paths += [str(tmp_path / "gen.pcap"), str(tmp_path / "late.pcap")]
    frames = spark.read.format("nbmq").option("split_bytes", SPLIT).load(paths)
    assert frames.rdd.getNumPartitions() > 8
    assert _same(build_messages_local(frames), build_messages(frames))
    # the parts column too, on the capture with late frames
    late = spark.read.format("nbmq").option("split_bytes", SPLIT).load(str(tmp_path / "late.pcap"))
    assert _same(build_messages_local(late, parts=True), build_messages(late, parts=True))
