"""Structured Streaming over growing captures: the source's offsets survive a restart, the
stateful messages equal the batch pipeline's on the same bytes while a writer appends them,
and ``nbmq monitor`` shows the sessions stream, also of a capture that stops growing."""

from __future__ import annotations

import argparse
import os
import random
import time

import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

pytestmark = pytest.mark.spark


def _generated_capture(path, seed=14, messages=120, late_every=7):
    """A pcap of one Dealer-like peer: messages of 0..2 KB (multi-frame ones straddle the
    writer's pieces), some frames resent, some lost (incomplete messages), and every
    ``late_every``-th message's last frame resent again 40 messages later (~0.3 s after it
    completed: a late duplicate)."""
    from nbmq import codec
    from nbmq.capture import write_pcap

    rng = random.Random(seed)
    rows, t, late = [], 1_700_000_000.0, []
    for nonce in range(1, messages + 1):
        parts = [rng.randbytes(rng.randrange(0, 900)) for _ in range(rng.randrange(1, 4))]
        mid = codec.message_id(parts, nonce=nonce)
        frames = [bytes(f) for f in codec.shard_message(parts, session_id=77, message_id=mid).frames()]
        if nonce % 17 == 0 and len(frames) > 1:
            frames.pop(0)  # lost: the message stays incomplete
        if nonce % 11 == 0:
            frames.insert(1, frames[0])  # resent before completion: a duplicate
        while late and late[0][0] <= nonce:
            frames.insert(0, late.pop(0)[1])
        for f in frames:
            t += 0.004
            rows.append((t, "10.0.0.1", 40000, "10.0.0.2", 5555, f))
        if late_every and nonce % late_every == 0:
            late.append((nonce + 40, frames[-1]))
    return write_pcap(path, rows), t


def _append_in_pieces(src: bytes, dst, pieces: int, pause: float, cuts_from: int = 24):
    """Append ``src`` to ``dst`` in ``pieces`` uneven pieces (cut anywhere, mid-record too)."""
    rng = random.Random(3)
    cuts = sorted(rng.sample(range(cuts_from + 1, len(src)), pieces - 1)) + [len(src)]
    done = os.path.getsize(dst) if os.path.exists(dst) else 0
    for cut in cuts:
        if cut <= done:
            continue
        with open(dst, "ab") as f:
            f.write(src[done:cut])
        done = cut
        time.sleep(pause)


def _same(a, b) -> bool:
    """The same rows, duplicates included; ``a`` and ``b`` are collected rows (one collect per
    table, the other checks read the same list: every Spark job here recomputes its plan)."""
    from collections import Counter

    def rows(collected):
        return Counter(repr(tuple(r)) for r in collected)  # repr: rows hold lists

    return rows(a) == rows(b)


def _wait(predicate, timeout=180.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.3)
    return False


@pytest.fixture
def two_state_partitions(spark):
    """The stateful queries' state store and shuffle in 2 partitions (local[2]'s cores), not the
    session's 4: each micro-batch then runs half the state tasks, same rows."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


def test_source_restart_reads_every_frame_once(spark, tmp_path):
    from nbmq.spark.streaming import register

    register(spark)
    folder = tmp_path / "ring"
    folder.mkdir()
    data = (CAPTURES / "dealer.pcap").read_bytes()
    live = folder / "a.pcap"
    live.write_bytes(data[: len(data) // 3 + 5])  # ends mid-record

    def start(**trigger):
        frames = spark.readStream.format("nbmq").option("payload", "false").load(str(folder))
        return (
            frames.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(**trigger)
            .start()
        )

    q = start(processingTime="0.5 seconds")
    assert _wait(lambda: bool(q.recentProgress) and q.recentProgress[-1]["numInputRows"] > 0)
    _append_in_pieces(data, live, 3, 0.3)
    q.stop()  # killed mid-stream: some of the appended bytes are read, some not
    (folder / "b.pcap").write_bytes((CAPTURES / "safe_dealer.pcap").read_bytes())
    q = start(availableNow=True)
    assert q.awaitTermination(120)
    streamed = spark.read.parquet(str(tmp_path / "out"))
    batch = spark.read.format("nbmq").option("payload", "false").load(str(folder))
    got = streamed.collect()
    assert got and not [r for r in got if r.error is not None]
    assert streamed.columns == batch.columns and _same(got, batch.collect())


def test_streamed_messages_equal_batch_while_writer_appends(spark, tmp_path, two_state_partitions):
    from nbmq.spark.messages import build_messages
    from nbmq.spark.streaming import register
    from nbmq.spark.streaming.messages import StreamMessageOptions, build_stream_messages

    register(spark)
    _generated_capture(tmp_path / "gen.pcap")
    data = (tmp_path / "gen.pcap").read_bytes()
    folder = tmp_path / "ring"
    folder.mkdir()
    live = folder / "live.pcap"
    live.write_bytes(data[:24])
    opts = StreamMessageOptions(uncompleted_message_ttl=1.0, watermark="1 second")

    def start(end=False, **trigger):
        source = spark.readStream.format("nbmq").option("end_row", str(end).lower())
        messages = build_stream_messages(source.load(str(folder)), opts)
        return (
            messages.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(**trigger)
            .start()
        )

    q = start(processingTime="0.5 seconds")
    _append_in_pieces(data[: 2 * len(data) // 3], live, 4, 0.3)
    q.processAllAvailable()  # a batch boundary at 2/3 that late duplicates surely cross
    q.stop()  # restart: held and incomplete messages' frames come back from the state
    _append_in_pieces(data, live, 1, 0)
    q = start(availableNow=True, end=True)  # the end row flushes what the state holds
    assert q.awaitTermination(120)
    batch = build_messages(spark.read.format("nbmq").load(str(live)))
    streamed = spark.read.parquet(str(tmp_path / "out"))
    want = batch.collect()  # one run of the batch pipeline for every check below
    late = [r for r in want if r.complete and r.duplicates > 0 and r.frames > r.part_count]
    assert [r for r in want if not r.complete] and late
    assert streamed.columns == batch.columns and _same(streamed.collect(), want)


def test_monitor_shows_the_sessions_stream(spark, tmp_path, capsys):
    from nbmq.cli import monitor as monitor_command

    folder = tmp_path / "ring"
    folder.mkdir()
    (folder / "safe_dealer.pcap").write_bytes((CAPTURES / "safe_dealer.pcap").read_bytes())
    parser = argparse.ArgumentParser()
    monitor_command.add_arguments(parser)
    out = tmp_path / "sessions"
    args = parser.parse_args(
        [
            str(folder),
            "--available-now",
            "--final",
            "--no-live",
            "--out",
            str(out),
            "--timeout",
            "150",
            "--checkpoint",
            str(tmp_path / "ck"),
            "--watermark",
            "1 second",
        ]
    )
    assert monitor_command.run(args) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "safe_dealer.pcap" in printed and "nbmq monitor" in printed, captured.err
    from pyspark.sql import functions as F

    from nbmq.spark.streaming.session_windows import WINDOW_COUNTERS

    rows = spark.read.parquet(str(out)).where("capture = 'safe_dealer.pcap'")
    sums = [F.sum(c).alias(c) for c in WINDOW_COUNTERS]  # one job for every total
    totals = rows.agg(*sums, F.max("max_silence_s").alias("gap")).collect()[0].asDict()
    frames = spark.read.format("nbmq").option("payload", "false").load(str(folder / "safe_dealer.pcap"))
    kinds = {r["kind_name"]: r["count"] for r in frames.groupBy("kind_name").count().collect()}
    for kind, n in kinds.items():
        assert totals[f"frames_{kind}"] == n
    assert totals["messages_complete"] == 400 and totals["messages_incomplete"] == 0
    assert totals["gap"] > 0
    parser2 = argparse.ArgumentParser()
    monitor_command.add_arguments(parser2)
    assert monitor_command.run(parser2.parse_args([str(tmp_path / "missing")])) == 2


def test_monitor_catches_up_when_a_growing_capture_stops(spark, tmp_path, capsys):
    """A capture grows in 5 pieces 2 s apart while ``nbmq monitor`` runs (idle 2 s, trigger 1 s):
    once it stops growing its last windows close, so the live totals equal the batch read's
    (frames by kind, complete messages; a Connect counted on the session it opens: no session-0
    row), and the peers stay alive."""
    import threading

    from pyspark.sql import functions as F

    from nbmq.cli import monitor as monitor_command
    from nbmq.spark.streaming.session_windows import WINDOW_COUNTERS

    folder = tmp_path / "ring"
    folder.mkdir()
    live = folder / "safe_dealer.pcap"
    data = (CAPTURES / "safe_dealer.pcap").read_bytes()
    live.write_bytes(data[:24])
    parser = argparse.ArgumentParser()
    monitor_command.add_arguments(parser)
    out = tmp_path / "sessions"
    args = parser.parse_args(
        [
            str(folder),
            "--no-live",
            "--out",
            str(out),
            "--timeout",
            "75",
            "--idle",
            "2",
            "--trigger",
            "1",
            "--checkpoint",
            str(tmp_path / "ck"),
            "--watermark",
            "1 second",
        ]
    )
    writer = threading.Thread(target=_append_in_pieces, args=(data, live, 5, 2.0))
    started = threading.Timer(8.0, writer.start)  # the first pieces land once the query runs
    started.start()
    try:
        assert monitor_command.run(args) == 0
    finally:
        started.cancel()
        if writer.is_alive() or started.finished.is_set():
            writer.join(timeout=30)
    assert live.read_bytes() == data
    rows = spark.read.parquet(str(out))
    sums = [F.sum(c).alias(c) for c in WINDOW_COUNTERS]
    totals = rows.agg(*sums, F.max("silent_peers").alias("silent")).collect()[0].asDict()
    frames = spark.read.format("nbmq").option("payload", "false").load(str(live))
    kinds = {r["kind_name"]: r["count"] for r in frames.groupBy("kind_name").count().collect()}
    assert kinds["connect"] >= 1 and kinds["data"] > 1000
    for kind, n in kinds.items():
        assert totals[f"frames_{kind}"] == n, kind
    assert totals["messages_complete"] == 400 and totals["messages_incomplete"] == 0
    assert rows.where("session_id = 0").count() == 0
    assert totals["silent"] == 0
    assert "0 silent" not in capsys.readouterr().out
