"""SafeDealer and Dealer on a real bottleneck: two hosts' network namespaces and a router's,
its ends shaped by tbf (``benchmarks/bottleneck_link.py``), a few seconds per case. Skipped, with the reason,
without root, ``ip`` or ``tc``. The floors here are looser than the benchmark's targets
(``benchmarks/bench_bottleneck.py``): the machine is shared while the suite runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from nbmq.engine import sockets

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module
    finally:
        sys.path.remove(str(BENCH))


link_module = _load("bottleneck_link")
bench = _load("bench_bottleneck")

REASON = link_module.unavailable()
#: Mbit/s: the pure-Python twin (NBMQ_NO_EXTENSIONS=1, inherited by the flows) runs out of CPU
#: near 10 Mbit/s, so its links are slower.
RATE = 50 if sockets._fast is not None else 5
#: The window's cases measure the congestion controller, the same Python code in both builds;
#: under the twin its ack processing (milliseconds, with the suite's load) is most of the RTT the
#: controller reads, so there they would measure the CPU.
compiled_only = pytest.mark.skipif(
    sockets._fast is None, reason="the pure-Python twin's ack processing swamps the queueing delay measured"
)
pytestmark = [pytest.mark.network, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def _in_one_of_two_runs(measure, holds):  # type: ignore[no-untyped-def]
    """Measure again once when a sharing floor is missed: two flows' split swings by +-0.2 between
    runs on a shared machine, while a controller that lost the property misses it in both."""
    rows = []
    for _ in range(2):
        rows.append(measure())
        if holds(rows[-1]):
            return
    raise AssertionError(f"missed in two runs: {rows}")


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_the_link_is_removed_also_when_the_run_fails():
    with pytest.raises(RuntimeError, match="boom"):
        with link_module.Bottleneck(rate_mbit=5, queue_ms=10) as link:
            names = list(link.ns.values())
            assert all(name in _namespaces() for name in names)
            assert link.qdisc("a")["packets"] >= 0
            raise RuntimeError("boom")
    assert not any(name in _namespaces() for name in names)


@compiled_only
def test_safe_dealer_fills_the_link_without_filling_the_queue():
    row = bench.single(rate=RATE, queue=10, seconds=3.0, size=16384)
    assert row["lost"] == 0
    assert row["wire"] >= 0.8  # of the link, headers included (the benchmark's target: 0.93)
    assert row["resends"] <= 0.02  # of the frames sent (target: 0.01; a window blind to delay: 4-12%)
    assert row["qdelay"] <= 0.75  # of the queue's 10 ms (target: 0.5)


@compiled_only
def test_safe_dealer_shares_a_small_queue_with_tcp():
    _in_one_of_two_runs(
        lambda: bench.share(rate=RATE, queue=10, seconds=4.0, size=16384),
        lambda row: row["safe"] >= 0.25 and row["tcp"] >= 0.25,  # target: 0.35 each
    )


def test_every_message_a_dealer_loses_is_counted_somewhere():
    row = bench.dealer(rate=RATE, queue=10, seconds=2.0, offered=2.0)
    assert row["tbf_drops"] > 0  # the queue overflowed
    # offered - delivered = the sender's, the receiver's, the kernel's and tbf's drops; tbf's
    # may include a control frame (a heartbeat or Connect) besides the messages
    assert -row["control_frames"] <= row["unaccounted"] <= 0
    paced = bench.dealer(rate=RATE, queue=10, seconds=2.0, offered=1.0)
    assert paced["ratio"] >= 0.95 and -paced["control_frames"] <= paced["unaccounted"] <= 0


@compiled_only
def test_a_second_safe_dealer_gets_its_share_within_seconds():
    _in_one_of_two_runs(
        lambda: bench.fair(rate=RATE, queue=100, seconds=4.0, size=16384),  # the second starts 2 s later
        lambda row: (
            row["time_to_fair"] is not None
            and row["time_to_fair"] <= 4.0  # Jain >= 0.95 (target: 5 s)
            and row["jain_end"] >= 0.8  # over the second's 3-4 s (target: 0.95)
        ),
    )
