"""What a Connect flood costs a bound engine: seconds of engine time per inbound
datagram, against a baseline of 100-byte data frames from a connected peer measured in the same
run. Engine only (no sockets): the transport and the kernel add their own cost per datagram.

    python -m pytest benchmarks/bench_handshake.py      # pytest-benchmark table
    python benchmarks/bench_handshake.py [--count 100000] [--rounds 5]

Workloads (a bound Dealer, max_peers=1024, replies flushed every 64 datagrams as a transport's
batch would):
    data          100-byte data frames from one connected peer (the baseline)
    flood-mix     Connects from 1,500 ports round robin, as benchmarks/soak_hostile.py sends:
                  1,023 hold half-open entries (answered with their session), 476 get cookies
    flood-cookie  Connects from ports never seen before: every one answered with a cookie
Importing this module has no side effects.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

WORKLOADS = ("data", "flood-mix", "flood-cookie")
SERVER = ("127.0.0.1", 8000)
CLIENT = ("127.0.0.1", 9000)


def make_run(workload: str, count: int):
    """A zero-argument callable feeding ``count`` datagrams of ``workload`` to a fresh engine."""
    from nbmq import FrameKind, codec
    from nbmq.engine import Dealer
    from nbmq.options import SocketOptions

    server = Dealer.bound(SERVER, SocketOptions(recv_hwm=10 * count), random.Random(1))
    connect = memoryview(codec.encode_control_frame(FrameKind.CONNECT, 0))
    server.receive_datagram(connect, CLIENT, 0.0)
    [(reply, _)] = server.datagrams_to_send(0.0)
    sid = codec.parse_frame(reply).session_id
    server.receive_datagram(codec.encode_control_frame(FrameKind.HEARTBEAT, sid), CLIENT, 0.0)
    if workload == "data":
        frames = [memoryview(codec.encode_data_frame(sid, i + 1, 1, 0, 100, 100, 0, bytes(100))) for i in range(count)]
        items = [(f, CLIENT) for f in frames]
    else:
        ports = range(20_000, 21_500) if workload == "flood-mix" else range(20_000, 20_000 + count)
        addrs = [("127.0.0.1", p) for p in ports]
        items = [(connect, addrs[i % len(addrs)]) for i in range(count)]

    def run() -> None:
        feed = server.receive_datagram
        flush = server.datagrams_to_send
        for i, (data, addr) in enumerate(items):
            feed(data, addr, 1.0)
            if i & 63 == 63:
                flush(1.0)
        flush(1.0)
        if workload == "data":
            while server.recv_ready():
                server.recv()

    return run


def measure(workload: str, count: int = 100_000, rounds: int = 5) -> float:
    """Median CPU seconds (process time: the machine may be shared) per datagram over ``rounds``
    fresh engines."""
    times = []
    for _ in range(rounds):
        run = make_run(workload, count)
        start = time.process_time()
        run()
        times.append((time.process_time() - start) / count)
    return statistics.median(times)


try:
    import pytest
except ImportError:  # pragma: no cover
    pytest = None

if pytest is not None:

    @pytest.mark.parametrize("workload", WORKLOADS)
    def test_handshake_cost(benchmark, workload):
        from nbmq import codec

        count = 20_000
        benchmark.pedantic(lambda run: run(), setup=lambda: ((make_run(workload, count),), {}), rounds=5)
        benchmark.extra_info["codec"] = "cython" if codec.COMPILED else "python"
        benchmark.extra_info["us_per_datagram"] = round(benchmark.stats.stats.median / count * 1e6, 2)


def main() -> None:
    from nbmq import codec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"codec: {'cython' if codec.COMPILED else 'python'}; {args.count} datagrams, median of {args.rounds}")
    base = measure("data", args.count, args.rounds)
    for workload in WORKLOADS:
        t = base if workload == "data" else measure(workload, args.count, args.rounds)
        print(f"{workload:13} {t * 1e6:6.2f} us/datagram  {t / base:5.2f}x data")


if __name__ == "__main__":
    main()
