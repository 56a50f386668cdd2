"""Capture reading throughput: vectorised fast path vs dpkt, on one generated pcap.

Run with ``python -m pytest benchmarks/bench_capture.py`` (add ``-s`` to see the summary
line with datagrams/s and the fast/dpkt ratio; the numbers are also in ``extra_info`` of
``--benchmark-json``).

The capture: 200,000 Ethernet/IPv4/UDP datagrams between three client ports and one server
port on 127.0.0.1, payload sizes spread over 16..490 bytes like nbmq frames.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbmq.capture import read_datagrams, write_pcap

N_DATAGRAMS = 200_000
_RATES: dict[str, float] = {}


def _rows(n: int) -> list[tuple[float, str, int, str, int, bytes]]:
    rng = np.random.default_rng(0)
    sizes = rng.integers(16, 491, n).tolist()
    blob = rng.bytes(600)
    t0 = 1_795_312_315.0
    rows = []
    for i, size in enumerate(sizes):
        client = 50000 + i % 3
        if i % 2:
            rows.append((t0 + i * 1e-5, "127.0.0.1", 47101, "127.0.0.1", client, b"\x01\x00" + blob[: size - 2]))
        else:
            rows.append((t0 + i * 1e-5, "127.0.0.1", client, "127.0.0.1", 47101, b"\x01\x00" + blob[: size - 2]))
    return rows


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "bench.pcap"
    write_pcap(path, _rows(N_DATAGRAMS))
    return path


def _record(benchmark, name: str) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable
        return
    rate = N_DATAGRAMS / stats.stats.mean
    _RATES[name] = rate
    benchmark.extra_info["datagrams_per_s"] = round(rate)
    if "fast" in _RATES and "dpkt" in _RATES:
        ratio = _RATES["fast"] / _RATES["dpkt"]
        benchmark.extra_info["fast_over_dpkt"] = round(ratio, 1)
        print(
            f"\ncapture read, {N_DATAGRAMS} datagrams: fast {_RATES['fast']:,.0f}/s, "
            f"dpkt {_RATES['dpkt']:,.0f}/s, fast/dpkt = {ratio:.1f}x"
        )


@pytest.mark.benchmark(group="capture-read")
def test_read_fast(benchmark, capture: Path) -> None:
    batch = benchmark.pedantic(read_datagrams, args=(capture,), kwargs={"engine": "fast"}, rounds=5, warmup_rounds=1)
    assert len(batch) == N_DATAGRAMS and batch.errors == 0 and batch.fallback_rows == 0
    _record(benchmark, "fast")


@pytest.mark.benchmark(group="capture-read")
def test_read_dpkt(benchmark, capture: Path) -> None:
    batch = benchmark.pedantic(read_datagrams, args=(capture,), kwargs={"engine": "dpkt"}, rounds=1)
    assert len(batch) == N_DATAGRAMS and batch.errors == 0
    _record(benchmark, "dpkt")


@pytest.mark.benchmark(group="capture-write")
def test_write_pcap(benchmark, tmp_path: Path) -> None:
    rows = _rows(N_DATAGRAMS)
    written = benchmark.pedantic(write_pcap, args=(tmp_path / "w.pcap", rows), rounds=3)
    assert written == N_DATAGRAMS
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["datagrams_per_s"] = round(N_DATAGRAMS / stats.stats.mean)
