"""Engine-to-engine throughput on the simulator (perfect link): messages per second through
Dealer and SafeDealer for 100 B, 1 KiB and 16 KiB single-part messages, on one core.

    python -m pytest benchmarks/bench_engine.py            # pytest-benchmark table
    python benchmarks/bench_engine.py [--batch 5000] [--rounds 5]   # plain msgs/s table

One round sends a batch of messages from a connecting engine to a bound one over
:class:`nbmq.testing.Network` (no loss, 0.1 ms delay; the simulator copies every datagram, hands
the receiver a view of a reused buffer, and flushes after every batch, as a transport does) and
ends when every message was received (and, for SafeDealer, acked). The codec in use
(``nbmq.codec.IMPLEMENTATION``) is printed; set NBMQ_NO_EXTENSIONS=1 to measure the twin.
Importing this module has no side effects.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

SIZES = (100, 1024, 16 * 1024)
KINDS = ("Dealer", "SafeDealer")


def make_pair(kind: str):
    from nbmq.engine import Dealer, SafeDealer
    from nbmq.options import SocketOptions
    from nbmq.testing import Link, connected_pair

    cls = {"Dealer": Dealer, "SafeDealer": SafeDealer}[kind]
    opts = SocketOptions(send_hwm=10_000, recv_hwm=100_000, max_tick_send=10_000)
    return connected_pair(cls(opts, random.Random(1)), cls(opts), link=Link(delay=0.0001))


def run_batch(net, server, client, message, batch: int, chunk: int = 1000) -> int:
    """Send ``batch`` messages (``chunk`` per flush) and run until all are received (and
    acked). Returns the messages received."""
    sender = client.engine
    receiver = server.engine
    got = 0
    sent = 0
    for _ in range(batch * 10):  # bounded
        if sent < batch:
            for _ in range(min(chunk, batch - sent)):
                sender.send(message, net.now)
            sent = min(batch, sent + chunk)
            net.flush(client)
        net.step(0.0002)
        while receiver.recv_ready():
            receiver.recv()
            got += 1
        if got >= batch and sender.pending_messages == 0:
            return got
    raise RuntimeError("batch did not complete")


def _batch_for(size: int) -> int:
    return {100: 5000, 1024: 3000, 16 * 1024: 400}[size]


def measure(kind: str, size: int, batch: int | None = None, rounds: int = 5) -> float:
    """Median messages per second over ``rounds`` batches (CPU time of this process)."""
    net, server, client = make_pair(kind)
    message = [bytes(range(256)) * (size // 256) + bytes(size % 256)]
    batch = batch or _batch_for(size)
    run_batch(net, server, client, message, min(batch, 500))  # warm-up
    rates = []
    for _ in range(rounds):
        gc.collect()
        t0 = time.process_time()
        got = run_batch(net, server, client, message, batch)
        rates.append(got / (time.process_time() - t0))
    return statistics.median(rates)


try:
    import pytest
except ImportError:  # pragma: no cover - the script mode needs no pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s}B")
    @pytest.mark.parametrize("kind", KINDS)
    def test_engine_throughput(benchmark, kind, size):
        from nbmq import codec

        net, server, client = make_pair(kind)
        message = [bytes(size)]
        batch = _batch_for(size)
        run_batch(net, server, client, message, min(batch, 500))
        result = benchmark.pedantic(
            run_batch, args=(net, server, client, message, batch), rounds=5, iterations=1
        )
        assert result == batch
        median = benchmark.stats.stats.median
        benchmark.extra_info["codec"] = codec.IMPLEMENTATION
        benchmark.extra_info["messages_per_round"] = batch
        benchmark.extra_info["msgs_per_s"] = round(batch / median)
        benchmark.extra_info["MB_per_s"] = round(batch * size / median / 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=None, help="messages per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from nbmq import codec

    print(f"codec: {codec.IMPLEMENTATION}; median of {args.rounds} rounds, CPU time")
    print(f"{'socket':<11} {'size':>7} {'msgs/s':>10} {'MB/s':>8}")
    for kind in KINDS:
        for size in SIZES:
            rate = measure(kind, size, args.batch, args.rounds)
            print(f"{kind:<11} {size:>7} {rate:>10,.0f} {rate * size / 1e6:>8.1f}")


if __name__ == "__main__":
    main()
