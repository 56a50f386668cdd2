"""Engine-to-engine throughput on the simulator (perfect link): messages per second through
Dealer and SafeDealer for 100 B, 1 KiB and 16 KiB single-part messages, on one core.

    python -m pytest benchmarks/bench_engine.py            # pytest-benchmark table
    python benchmarks/bench_engine.py [--batch 5000] [--rounds 5]   # plain msgs/s table

``--direct`` measures the engines alone, as a UDP socket drives them: each flush's datagrams
are copied into one receive buffer, as a ``recvmmsg`` read would lay them out, and fed to the
other engine with ``receive_datagrams`` (64 per call; the simulator's own cost, per datagram,
is left out). Both use one core.

One round sends a batch of messages from a connecting engine to a bound one over
:class:`nbmq.testing.Network` (no loss, 0.1 ms delay; the simulator copies every datagram, hands
the receiver a view of a reused buffer, and flushes after every batch, as a transport does) and
ends when every message was received (and, for SafeDealer, acked). The codec in use
(``nbmq.codec.COMPILED``) is printed; set NBMQ_NO_EXTENSIONS=1 to measure the twin.
Importing this module has no side effects.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import statistics
import time

SIZES = (100, 1024, 16 * 1024)
SERVER, CLIENT = ("10.0.0.1", 8000), ("10.0.0.2", 40000)  # connected_pair's addresses
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


def _feed(engine, out: list, src: tuple, now: float, batch: int = 64) -> None:
    """Lay ``out`` (``(datagram, addr)`` pairs, all from ``src``) back to back in one buffer,
    as a ``recvmmsg`` read hands them over, and feed ``engine.receive_datagrams``, ``batch``
    datagrams per call."""
    for start in range(0, len(out), batch):
        chunk = [data for data, _ in out[start : start + batch]]
        lengths = [len(data) for data in chunk]
        offsets = list(itertools.accumulate(lengths, initial=0))[:-1]
        engine.receive_datagrams(memoryview(b"".join(chunk)), offsets, lengths, [src] * len(chunk), now)


def run_direct(server, client, message, batch: int, chunk: int = 64) -> int:
    """Send ``batch`` messages, ``chunk`` per flush, each flush fed straight to the receiver
    (``receive_datagrams``), which drains with ``recv``; acks go back the same way. Returns
    the messages received."""
    now = 1.0
    got = sent = 0
    for _ in range(batch * 10):  # bounded
        now += 0.0001
        for _ in range(min(chunk, batch - sent)):
            client.send(message, now)
            sent += 1
        _feed(server, client.datagrams_to_send(now), CLIENT, now)
        while server.recv_ready():
            server.recv()
            got += 1
        _feed(client, server.datagrams_to_send(now), SERVER, now)
        if got >= batch and client.pending_messages == 0:
            return got
    raise RuntimeError("batch did not complete")


def measure_direct(kind: str, size: int, batch: int | None = None, rounds: int = 5) -> float:
    """Median messages per second over ``rounds`` batches of :func:`run_direct` (CPU time)."""
    _, server, client = make_pair(kind)
    message = [bytes(range(256)) * (size // 256) + bytes(size % 256)]
    batch = batch or _batch_for(size)
    run_direct(server.engine, client.engine, message, min(batch, 500))  # warm-up
    rates = []
    for _ in range(rounds):
        gc.collect()
        t0 = time.process_time()
        got = run_direct(server.engine, client.engine, message, batch)
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
        result = benchmark.pedantic(run_batch, args=(net, server, client, message, batch), rounds=5, iterations=1)
        assert result == batch
        median = benchmark.stats.stats.median
        benchmark.extra_info["codec"] = "cython" if codec.COMPILED else "python"
        benchmark.extra_info["messages_per_round"] = batch
        benchmark.extra_info["msgs_per_s"] = round(batch / median)
        benchmark.extra_info["MB_per_s"] = round(batch * size / median / 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=None, help="messages per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--direct", action="store_true", help="engines alone, fed receive_datagrams batches (no simulator)"
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="sockets, comma-separated")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bytes, comma-separated")
    args = parser.parse_args()
    from nbmq import codec

    how = "engines alone (receive_datagrams)" if args.direct else "simulator"
    print(f"codec: {'cython' if codec.COMPILED else 'python'}; {how}; median of {args.rounds} rounds, CPU time")
    print(f"{'socket':<11} {'size':>7} {'msgs/s':>10} {'MB/s':>8}")
    run = measure_direct if args.direct else measure
    for kind in args.kinds.split(","):
        for size in (int(x) for x in args.sizes.split(",")):
            rate = run(kind, size, args.batch, args.rounds)
            print(f"{kind:<11} {size:>7} {rate:>10,.0f} {rate * size / 1e6:>8.1f}")


if __name__ == "__main__":
    main()
