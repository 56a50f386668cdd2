"""The fuzz harness (fuzz/) imports, its seeds run clean, and it reports what it should.

The targets compare both twins in one process, so tests that run them need the compiled
extensions and are skipped on the pure-Python run (``NBMQ_NO_EXTENSIONS=1``).
"""

from __future__ import annotations

import os
import random

import pytest

from fuzz import corpus, framing, mutate, targets
from fuzz.twins import Finding, check_same, outcome

compiled = [
    pytest.mark.c_extension,
    pytest.mark.skipif(
        os.environ.get("NBMQ_NO_EXTENSIONS", "") not in ("", "0"),
        reason="the fuzz targets compare against the compiled extensions",
    ),
]


def needs_compiled(test):
    for mark in compiled:
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def seeds() -> dict[str, list[bytes]]:
    return corpus.seeds()


def test_every_target_has_seeds_and_they_fit(seeds):
    assert set(seeds) == set(targets.TARGETS)
    for name, inputs in seeds.items():
        assert len(inputs) >= 5, name
        assert all(len(s) <= corpus.SEED_BYTES for s in inputs), name
    assert sum(len(s) for v in seeds.values() for s in v) < 2 << 20


@needs_compiled
@pytest.mark.parametrize("name", targets.DEFAULT)
def test_default_targets_pass_their_seeds_and_mutants(seeds, name):
    target = targets.load(name)
    rng = random.Random(7)
    inputs = seeds[name][:12]
    for data in inputs + [mutate.mutate(rng.choice(inputs), rng, inputs, 8192) for _ in range(40)]:
        target(data)


def test_pending_targets_are_not_default():
    assert set(targets.PENDING) <= set(targets.TARGETS)
    assert not set(targets.PENDING) & set(targets.DEFAULT)


def test_framing_round_trips():
    pieces = [b"", b"a", bytes(300)]
    assert framing.split_pieces(framing.join_pieces(pieces)) == pieces
    ops = [(0, b"x"), (255, b""), (7, bytes(4464))]
    assert framing.split_operations(framing.join_operations(ops)) == ops
    assert framing.split_pieces(b"\x00\x09abc") == [b"abc"]  # a length past the end takes the rest
    with pytest.raises(ValueError):
        framing.join_pieces([bytes(65536)])


def test_disagreement_and_foreign_exceptions_are_findings():
    with pytest.raises(Finding):
        check_same("x", ("ok", 1), ("ok", 2))

    def broken(_data):
        raise IndexError("a bug, not a DecodeError")

    with pytest.raises(IndexError):
        outcome(broken, b"")
    from nbmq import _codec_py

    raised = outcome(_codec_py.parse_frame, b"\x01")
    assert raised[:2] == ("raise", "DecodeError") and raised[3] == "truncated header"


@needs_compiled
def test_capture_twins_switches_the_compiled_paths_off_and_back():
    from fuzz.capture_targets import python_paths
    from nbmq.capture.datagrams import decode_fast
    from nbmq.capture.files import records

    walk = records._walk_chain
    with python_paths():
        assert records._walk_chain is None and decode_fast._decode is None
    assert records._walk_chain is walk is not None


@needs_compiled
def test_split_target_compares_counters_not_only_rows(seeds, monkeypatch):
    """A split read that loses an error count is a finding (a split read once lost damage counts)."""
    from fuzz import capture_targets

    data = seeds["capture_split"][0]  # the head of dealer.pcap: several ranges, no damage
    capture_targets.capture_split(b"not a capture")  # CaptureError: nothing to compare
    capture_targets.capture_split(data)
    real = capture_targets.DatagramBatch.concat

    def lossy(batches):
        union = real(batches)
        union.errors += 1
        return union

    monkeypatch.setattr(capture_targets.DatagramBatch, "concat", staticmethod(lossy))
    with pytest.raises(Finding, match="split read"):
        capture_targets.capture_split(data)


def test_mutation_driver_stops_at_a_finding():
    def target(data: bytes) -> None:
        if b"\xff\xff" in data:
            raise Finding("found")

    runs, failed = mutate.fuzz(target, [bytes(8)], 5.0, random.Random(1), 64)
    assert failed is not None and b"\xff\xff" in failed and runs >= 1
    runs, failed = mutate.fuzz(lambda d: None, [b"ab"], 0.05, random.Random(1), 64)
    assert failed is None and runs > 1


@needs_compiled
@pytest.mark.parametrize(
    "path", sorted(p for p in corpus.REGRESSIONS.glob("*/*") if p.is_file()), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_committed_regressions_pass_their_target(path):
    """Every input once found failing, kept in fuzz/corpus/<target>/, passes since its fix."""
    targets.load(path.parent.name)(path.read_bytes())
