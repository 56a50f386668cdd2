"""The one-pass job (a local output): frames and messages from one read of the captures give
exactly the tables of a Hadoop-compatible output (Spark's writer and the local pass, reached
here through a ``file://`` URI), also when messages straddle byte ranges, frames come late in
another range, a message completes in two ranges, and key hashes collide."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

SPLIT = 64 * 1024  # small byte ranges: many messages straddle a range boundary
_QUIET = {"report": False, "progress": False, "print_summary": False}


def _rows(df) -> list:
    """All rows, sorted (a few thousand here)."""
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _ranges_capture(path, seed=3, messages=320, backwards=False):
    """Messages of 0..2 KB from two senders (one IPv6), cut into ~130-frame byte ranges by
    ``SPLIT``: frames lost (incomplete keys), resent before completion, every 5th message's last
    frame resent ~60 messages later (a late duplicate, in another range), every 17th message
    resent whole ~90 messages later (complete in two ranges); with ``backwards`` a few late
    frames also go back in capture time (the combine's redo path)."""
    from nbmq import codec
    from nbmq.capture import write_pcap

    rng = random.Random(seed)
    rows, t, later = [], 1_700_000_000.0, []
    peers = [("10.0.0.1", 40000, "10.0.0.2", 5555), ("fe80::1", 40001, "fe80::2", 5556)]
    for nonce in range(1, messages + 1):
        parts = [rng.randbytes(rng.randrange(0, 900)) for _ in range(rng.randrange(1, 4))]
        mid = codec.message_id(parts, nonce=nonce)
        peer = peers[nonce % 2]
        frames = [bytes(f) for f in codec.shard_message(parts, session_id=77 + nonce % 2, message_id=mid).frames()]
        sent = list(frames)
        if nonce % 11 == 0 and len(sent) > 1 and (backwards or nonce % 17):
            sent.pop(0)  # lost: incomplete (with backwards, 187 is resent whole later: the redo path too)
        if nonce % 7 == 0:
            sent.insert(1, sent[0])  # resent before completion
        if nonce % 5 == 0:
            later.append((nonce + 60, peer, frames[-1]))
        if nonce % 17 == 0:
            later += [(nonce + 90, peer, f) for f in frames]
        due = [x for x in later if x[0] <= nonce]
        later = [x for x in later if x[0] > nonce]
        for p, f in [(peer, f) for f in sent] + [(p, f) for _, p, f in due]:
            t += 0.001
            rows.append((t, *p, f))
    for _, p, f in later:
        t += 0.001
        rows.append((t - (0.5 * rng.random() if backwards else 0.0), *p, f))
    return write_pcap(path, rows)


def _run_onepass(spark, paths, out, *, payload=True, parts=False):
    """write_parts + finish_messages as the pipeline calls them; returns the OnePass."""
    from nbmq.spark.onepass import finish_messages, write_parts

    options = {"paths": ",".join(map(str, paths)), "split_bytes": str(SPLIT)}
    run = write_parts(spark, options, out / "frames", out / "messages", payload=payload, parts=parts)
    source = spark.read.format("nbmq").options(**options).load()
    finish_messages(spark, run, lambda: spark.read.parquet(str(out / "frames")) if payload else source, parts=parts)
    assert not (out / "_onepass").exists()  # the staging directory is gone
    return run, source


def _scenarios(run) -> dict[str, int]:
    """How many key hashes are in each cross-range situation, from the tasks' hashes."""
    rows = [set(h.tolist()) for _, h, _ in run.tasks]
    frames = [set(f.tolist()) for _, _, f in run.tasks]
    n = len(rows)
    straddle = sum(len(frames[i] & frames[j]) for i in range(n) for j in range(i + 1, n))
    late = sum(len(rows[i] & frames[j]) for i in range(n) for j in range(n) if i != j)
    twice = sum(len(rows[i] & rows[j]) for i in range(n) for j in range(i + 1, n))
    return {"straddle": straddle, "late": late, "twice": twice}


@pytest.mark.spark
@pytest.mark.parametrize("how", ["driver", "spark", "collision"])
def test_onepass_messages_equal_the_shuffled_ones_across_ranges(spark, tmp_path, monkeypatch, how):
    """A generated capture in 64 KiB ranges (keys straddling ranges, late duplicates in another
    range, messages complete in two ranges) plus the bundled captures: the same frames and
    messages as the source and ``build_messages``. ``driver``: the few staged records are
    combined in the driver; ``spark``: by Spark (``combine_records``); ``collision``: the key
    hash cut to 2 bits, so nearly every row shares a hash with a conflict and is combined too."""
    from nbmq.spark import onepass
    from nbmq.spark.messages import build_messages

    if how == "spark":
        monkeypatch.setattr(onepass, "DRIVER_COMBINE_BYTES", 0)
    if how == "collision":
        monkeypatch.setattr(onepass, "HASH_MASK", 0x3)
    _ranges_capture(tmp_path / "ranges.pcap")
    paths = [tmp_path / "ranges.pcap", CAPTURES / "dealer.pcap", CAPTURES / "safe_dealer.pcap"]
    run, source = _run_onepass(spark, paths, tmp_path / "out")
    assert len(run.tasks) > 10
    seen = _scenarios(run)
    assert seen["straddle"] and seen["late"] and seen["twice"], seen
    assert run.combine == ("spark" if how == "spark" else "driver")
    if how == "collision":
        assert run.moved == run.row_records  # every row hash is a conflict
    else:
        assert 0 < run.moved < run.row_records / 5
    want = _rows(build_messages(source))
    got = _rows(spark.read.parquet(str(tmp_path / "out" / "messages")))
    assert len(want) > 300 and got == want
    if how == "driver":  # the frames table once: the source's rows
        frames = spark.read.parquet(str(tmp_path / "out" / "frames"))
        assert frames.schema == source.schema
        assert frames.count() == run.frames_rows == source.count()
        assert frames.exceptAll(source).count() == 0 and source.exceptAll(frames).count() == 0


def _uri(path) -> str:
    """A local directory as a Hadoop ``file://`` URI: the pipeline's plan for remote outputs."""
    return "file://" + str(path)


@pytest.mark.spark
def test_onepass_pipeline_equals_the_uri_plan_with_redo_no_payload_and_parts(spark, tmp_path):
    """The whole pipeline to a local path and to a URI on a capture in 64 KiB ranges whose late
    frames also go back in time (keys the combine cannot settle: the redo path), without the
    payload in frames/ (the reassembly still has it) and with the parts column: frames,
    messages and sessions equal."""
    from nbmq.spark.pipeline import run

    _ranges_capture(tmp_path / "back.pcap", seed=8, backwards=True)
    kw = {"spark": spark, "split_bytes": SPLIT, "payload": False, "parts": True, **_QUIET}
    remote = run([tmp_path / "back.pcap"], _uri(tmp_path / "uri"), **kw)
    one = run([tmp_path / "back.pcap"], tmp_path / "one", **kw)
    assert one["plan"] == "onepass" and remote["plan"] == "steps"
    assert one["onepass"]["combine"] == "spark"  # the redo marks send it to Spark
    assert one["totals"] == remote["totals"]
    for table in ("frames", "messages", "sessions"):
        got = spark.read.parquet(str(tmp_path / "one" / table))
        want = spark.read.parquet(str(tmp_path / "uri" / table))
        assert got.schema == want.schema, table
        assert "payload" not in got.columns or table != "frames"
        assert _rows(got) == _rows(want), table
    assert (tmp_path / "uri" / "_SUCCESS").exists() and (tmp_path / "uri" / "summary.json").exists()


@pytest.mark.spark
def test_onepass_pipeline_equals_the_uri_plan_on_bundled_captures(spark, bundled_run, tmp_path):
    """``nbmq pipeline`` (a local --out) against a ``file://`` output on every bundled capture
    (dealer.pcapng too): same summary and tables."""
    from nbmq.spark.pipeline import run

    code, out, _ = bundled_run
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plan"] == "onepass" and summary["onepass"]["tasks"] >= 3
    remote = run(None, _uri(tmp_path / "uri"), spark=spark, **_QUIET)
    assert remote["totals"] == summary["totals"]
    with contextlib.redirect_stdout(io.StringIO()):
        one = run(None, tmp_path / "one", spark=spark, pcapng=True, **_QUIET)
    also = run(None, _uri(tmp_path / "uri_ng"), spark=spark, pcapng=True, **_QUIET)
    for a, b in ((out, tmp_path / "uri"), (tmp_path / "one", tmp_path / "uri_ng")):
        for table in ("frames", "messages", "sessions"):
            got, want = spark.read.parquet(str(a / table)), spark.read.parquet(str(b / table))
            assert got.schema == want.schema, table
            assert _rows(got) == _rows(want), table
    assert one["totals"] == also["totals"]


def test_cli_offers_no_internal_choices(capsys):
    """The plan is the pipeline's: ``--plan``, ``--messages`` and ``--frames-writer`` are gone."""
    from nbmq.cli.pipeline import main

    for option in (["--plan", "steps"], ["--messages", "local"], ["--frames-writer", "arrow"]):
        with pytest.raises(SystemExit) as exc:
            main([str(CAPTURES / "dealer.pcap"), *option])
        assert exc.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err


def test_key_hashes_are_stable_across_processes():
    """Equal keys hash equal in every process (no per-process string hashing), unequal keys
    (here) apart; the mask keeps the low bits."""
    import pyarrow as pa

    from nbmq.spark.onepass import key_hashes

    code = (
        "import pyarrow as pa, decimal\n"
        "from nbmq.spark.onepass import key_hashes\n"
        "d = pa.decimal128(20, 0)\n"
        "b = pa.table({'capture': ['a.pcap', 'a.pcap', 'b.pcap', 'a.pcap'], "
        "'session_id': pa.array([decimal.Decimal(2**64 - 1), decimal.Decimal(1), decimal.Decimal(1), "
        "decimal.Decimal(1)], d), 'src': ['h:1', '[::1]:2', '[::1]:2', '[::1]:2'], "
        "'message_id': pa.array([decimal.Decimal(5), decimal.Decimal(5), decimal.Decimal(5), decimal.Decimal(6)], d)})\n"
        "print(','.join(str(int(x)) for x in key_hashes(b)))\n"
    )
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.append(
            subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120
            ).stdout.strip()
        )
    assert outs[0] == outs[1]
    values = [int(x) for x in outs[0].split(",")]
    assert len(set(values)) == 4
    import decimal

    d = pa.decimal128(20, 0)
    one = pa.table(
        {
            "capture": ["b.pcap"],
            "session_id": pa.array([decimal.Decimal(1)], d),
            "src": ["[::1]:2"],
            "message_id": pa.array([decimal.Decimal(5)], d),
        }
    )
    assert int(key_hashes(one)[0]) == values[2]
    assert int(key_hashes(one, mask=0xFF)[0]) == values[2] & 0xFF


def test_conflict_hashes_rule():
    """Conflicts: every frame record's hash, and every hash two row records share (in one task
    or two); a hash of one row record only is not one."""
    from nbmq.spark.onepass import OnePass, conflict_hashes

    u = lambda *v: np.array(v, np.uint64)  # noqa: E731
    run = OnePass(
        frames_dir=None,
        messages_dir=None,
        staging=None,
        frames_rows=0,
        row_records=6,  # type: ignore[arg-type]
        frame_records=2,
        frame_hashes=u(9, 40),
        tasks=[(0, u(1, 2, 3, 3), u(9)), (1, u(2, 4, 5), u(40))],
    )
    assert conflict_hashes(run).tolist() == [2, 3, 9, 40]


def test_part_writer_row_groups(tmp_path):
    """Batches are gathered into row groups of ``row_group_rows`` (the last smaller), rows counted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nbmq.spark.frames_writer import PartWriter

    schema = pa.schema([("x", pa.int64())])
    with PartWriter(tmp_path / "p.parquet", schema, 100) as w:
        for i in range(7):
            w.write(pa.RecordBatch.from_arrays([pa.array(np.arange(30) + 30 * i)], schema=schema))
        w.write(pa.RecordBatch.from_arrays([pa.array([], pa.int64())], schema=schema))
    f = pq.ParquetFile(tmp_path / "p.parquet")
    assert [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)] == [120, 90]
    assert w.rows == 210 and f.read().column("x").to_pylist() == list(range(210))
