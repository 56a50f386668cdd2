"""Reassembly benchmarks: the Cython Reassembler against a plain numpy copy of the same bytes,
and the shard + reassemble round trip, each measured in the same run.

    python -m pytest benchmarks/bench_reassembly.py

Groups (the last test prints every figure, its baseline and target; nothing is asserted):

* ``reassembly-64KiB`` / ``reassembly-1MiB``: one message of that size arriving as 466-byte
  chunks (the frames of ``shard_message``, back to back in one buffer, as a receive batch
  lays them out). Baseline: ``payload.copy()`` of the message bytes (GB/s). Target:
  ``Reassembler.add_datagrams`` at least half the baseline's speed. ``add_datagram`` (one call
  per datagram) and the twin are in the group for reference.
* ``shard-roundtrip-1KiB``: ``shard_message`` then ``add_datagrams`` of 1 KiB messages.
  Baseline: the pure-Python twin. Target: at least 500,000 messages/s.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

py = importlib.import_module("nbmq._codec_py")
c = importlib.import_module("nbmq._codec")

MEDIANS: dict[str, float] = {}
SIZES = {"64KiB": 64 * 1024, "1MiB": 1024 * 1024}
ROUND_TRIPS = 10_000


def keep(benchmark, name: str) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is not None:  # None under --benchmark-disable
        MEDIANS[name] = stats.stats.median


@pytest.fixture(scope="module", params=list(SIZES))
def message(request):
    size = SIZES[request.param]
    payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    return request.param, payload, c.shard_message([payload], 1, 2)


def _group(benchmark, label):
    benchmark.group = f"reassembly-{label}"


def test_copy_baseline(benchmark, message):
    """Baseline: a plain numpy copy of the message's bytes."""
    label, payload, _ = message
    _group(benchmark, label)
    benchmark(payload.copy)
    keep(benchmark, f"copy {label}")


def test_add_datagrams_cython(benchmark, message):
    """Reassembler.add_datagrams (Cython), the whole message per call. Target: >= 0.5x copy."""
    label, payload, sharded = message
    _group(benchmark, label)
    r = c.Reassembler()
    done = benchmark(r.add_datagrams, sharded.buffer, sharded.offsets, sharded.lengths)
    assert done[0][1][0].tobytes() == payload.tobytes() and len(r) == 0
    keep(benchmark, f"add_datagrams cython {label}")


def test_add_datagram_loop_cython(benchmark, message):
    """Reassembler.add_datagram (Cython), one call per datagram."""
    label, payload, sharded = message
    _group(benchmark, label)
    r = c.Reassembler()
    frames = [bytes(f) for f in sharded.frames()]
    add = r.add_datagram

    def run():
        for f in frames:
            done = add(f)
        return done

    assert benchmark(run)[0].tobytes() == payload.tobytes()
    keep(benchmark, f"add_datagram cython {label}")


def test_add_datagrams_twin(benchmark, message):
    """Reassembler.add_datagrams (pure-Python twin)."""
    label, payload, sharded = message
    _group(benchmark, label)
    r = py.Reassembler()
    benchmark.pedantic(r.add_datagrams, args=(sharded.buffer, sharded.offsets, sharded.lengths), rounds=3)
    keep(benchmark, f"add_datagrams twin {label}")


def _round_trip(module, n):
    message = [bytes(1024)]
    r = module.Reassembler()
    shard, add = module.shard_message, r.add_datagrams

    def run():
        for i in range(n):
            sharded = shard(message, 1, i)
            add(sharded.buffer, sharded.offsets, sharded.lengths)
        return r.completed

    return run


@pytest.mark.benchmark(group="shard-roundtrip-1KiB")
def test_round_trip_twin_baseline(benchmark):
    """Baseline: shard + reassemble 1 KiB messages with the pure-Python twin."""
    benchmark.pedantic(_round_trip(py, ROUND_TRIPS // 10), rounds=3)
    if getattr(benchmark, "stats", None) is not None:
        MEDIANS["round trip twin"] = benchmark.stats.stats.median * 10


@pytest.mark.benchmark(group="shard-roundtrip-1KiB")
def test_round_trip_cython(benchmark):
    """shard_message + add_datagrams (Cython), 1 KiB messages. Target: >= 500,000 messages/s."""
    benchmark.pedantic(_round_trip(c, ROUND_TRIPS), rounds=7, warmup_rounds=1)
    keep(benchmark, "round trip cython")


def test_report(capsys):
    """Every figure against its same-run baseline and target; reports, asserts nothing."""
    lines = []
    for label, size in SIZES.items():
        base = MEDIANS.get(f"copy {label}")
        for name in (f"add_datagrams cython {label}", f"add_datagram cython {label}", f"add_datagrams twin {label}"):
            if base is None or name not in MEDIANS:
                continue
            t = MEDIANS[name]
            target = "  (target >= 0.50x)" if name.startswith("add_datagrams cython") else ""
            lines.append(
                f"{name:<30} {size / t / 1e9:>7.2f} GB/s  {base / t:>5.2f}x numpy copy "
                f"({size / base / 1e9:.2f} GB/s){target}"
            )
    for name, target in (("round trip cython", "  (target >= 500,000)"), ("round trip twin", "")):
        if name in MEDIANS:
            rate = ROUND_TRIPS / MEDIANS[name]
            extra = ""
            if name == "round trip cython" and "round trip twin" in MEDIANS:
                extra = f"  {MEDIANS['round trip twin'] / MEDIANS[name]:.1f}x twin"
            lines.append(f"{name:<30} {rate:>11,.0f} messages/s{extra}{target}")
    with capsys.disabled():  # the report shows without -s
        print("\nreassembly benchmarks, medians:")
        for line in lines:
            print("  " + line)
