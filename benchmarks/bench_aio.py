"""asyncio Dealer -> asyncio Dealer throughput over 127.0.0.1, sender and receiver in separate
processes, one source tree against another in the same run (issue 15, the asyncio leftover).

    python benchmarks/bench_aio.py [--size 100] [--duration 1.5] [--repeat 5]
                                   [--before /work/main] [--after .] [--pure]

Each run starts a receiver and a sender process with ``PYTHONPATH`` set to one tree, so the
code before a change (``--before``, e.g. main's worktree with its extensions built) and after
it (``--after``) run interleaved: before 1, after 1, (after on the pure-Python twin 1 with
``--pure``), before 2, ... The sender ``await sock.send(payload)`` for ``--duration`` seconds
then closes with a 2 s linger; the receiver drains (``recv_nowait()`` until WouldBlock, then
``await recv()``) until idle for 0.5 s. Reported per tree: medians of delivered messages/s
(receiver's first to last message), delivered/sent, the kernel's receive-buffer drops
(``counters.kernel_drops``) and our own queue's drops (``counters.dropped_total``), and the
ratio of the medians after/before. Importing this module runs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

IDLE = 0.5
FAST = dict(peer_heartbeat_ivl=0.2, peer_keepalive=5.0, reconnect_wait=0.1)
BIG = dict(send_hwm=10_000, recv_hwm=100_000, rcvbuf=4 << 20, sndbuf=4 << 20)


async def _receiver(deadline: float) -> dict[str, Any]:
    from nbmq import aio
    from nbmq.errors import WouldBlock

    sock = await aio.Dealer.bind("127.0.0.1:0", **FAST, **BIG)
    print(sock.local_address, flush=True)
    count, first, last = 0, 0.0, 0.0
    loop = asyncio.get_running_loop()
    recv_nowait = sock.recv_nowait
    while loop.time() < deadline:
        try:
            while True:
                recv_nowait()
                count += 1
        except WouldBlock:
            pass
        if count:
            last = loop.time()
        try:
            await sock.recv(timeout=IDLE if count else max(0.0, deadline - loop.time()))
        except WouldBlock:
            break
        count += 1
        last = loop.time()
        if count == 1:
            first = last
    counters = sock.counters
    out = dict(count=count, first=first, last=last, kernel=counters.kernel_drops, ours=counters.dropped_total)
    await sock.close(linger=0)
    return out


async def _sender(address: str, size: int, duration: float) -> dict[str, Any]:
    from nbmq import aio

    sock = await aio.Dealer.connect(address, **FAST, **BIG)
    assert await sock.wait_connected(5.0), "no handshake"
    payload = b"x" * size
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    sent = 0
    send = sock.send
    while True:
        for _ in range(64):
            await send([payload])
        sent += 64
        if loop.time() >= end:
            break
    await sock.close(linger=2.0)
    return dict(sent=sent)


def _role(args: argparse.Namespace) -> None:
    if args.role == "receiver":
        result = asyncio.run(_receiver(time.monotonic() + args.duration + 10.0))
    else:
        result = asyncio.run(_sender(args.address, args.size, args.duration))
    print(json.dumps(result), flush=True)


def run_case(tree: str, size: int, duration: float, pure: bool = False) -> dict[str, Any]:
    """One receiver and one sender process on ``tree``; the receiver's figures plus ``sent``."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    env.pop("NBMQ_NO_EXTENSIONS", None)
    if pure:
        env["NBMQ_NO_EXTENSIONS"] = "1"
    me = [sys.executable, os.path.abspath(__file__), "--duration", str(duration), "--size", str(size)]
    rx = subprocess.Popen(me + ["--role", "receiver"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        address = rx.stdout.readline().strip()
        tx = subprocess.run(me + ["--role", "sender", "--address", address], env=env, capture_output=True,
                            text=True, timeout=duration + 30)
        if tx.returncode:
            raise RuntimeError(f"sender failed: {tx.stderr[-2000:]}")
        out = json.loads(rx.stdout.readline())
        rx.wait(timeout=30)
    finally:
        if rx.poll() is None:
            rx.kill()
    out.update(json.loads(tx.stdout.strip().splitlines()[-1]))
    span = out["last"] - out["first"]
    out["rate"] = out["count"] / span if span > 0 else 0.0
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--duration", type=float, default=1.5, help="seconds of sending per run")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", default=None, help="source tree of the baseline (its extensions built)")
    parser.add_argument("--after", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--pure", action="store_true", help="also run --after on the pure-Python twin")
    parser.add_argument("--role", choices=("receiver", "sender"), help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        return _role(args)
    cases = ([("before", args.before, False)] if args.before else []) + [("after", args.after, False)]
    if args.pure:
        cases.append(("after, pure-Python", args.after, True))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in cases}
    for i in range(args.repeat):
        for name, tree, pure in cases:
            runs[name].append(run_case(tree, args.size, args.duration, pure))
            r = runs[name][-1]
            print(f"run {i + 1} {name:20s} {r['rate']:>10,.0f} msg/s  offered {r['sent'] / args.duration:>9,.0f}/s"
                  f"  delivered/sent {r['count'] / r['sent']:.3f}"
                  f"  kernel drops {r['kernel']}  our drops {r['ours']}", flush=True)
    print(f"\nasyncio Dealer {args.size} B, medians of {args.repeat} (load average {os.getloadavg()[0]:.1f}):")
    medians = {}
    for name, _, _ in cases:
        rs = runs[name]
        medians[name] = statistics.median(r["rate"] for r in rs)
        ratio = statistics.median(r["count"] / r["sent"] for r in rs)
        print(f"  {name:20s} {medians[name]:>10,.0f} msg/s  delivered/sent {ratio:.3f}"
              f"  kernel drops {sum(r['kernel'] for r in rs)}  our drops {sum(r['ours'] for r in rs)} (all runs)")
    if args.before:
        print(f"  after/before: {medians['after'] / medians['before']:.2f}x")


if __name__ == "__main__":
    main()
