"""asyncio receive throughput against the blocking socket and ``zmq.asyncio``, same run.

    python benchmarks/bench_aio.py [--size 100] [--duration 3] [--repeat 3] [--cases ...]
                                   [--before TREE]

The program a new user writes first: one process runs an ``await sock.send(payload)`` loop,
another an ``await sock.recv()`` loop, at default options, ``--size`` byte messages for
``--duration`` seconds over 127.0.0.1. Cases, interleaved (run 1 of each, run 2 of each in
the reverse order, ...):

- ``blocking``: ``nbmq.Dealer`` both sides (``send(timeout=None)`` / ``recv(timeout=...)``);
- ``aio``: ``nbmq.aio.Dealer`` both sides;
- ``aio-many``: ``nbmq.aio.Dealer`` with ``send_many`` / ``recv_many`` (batches of 64);
- ``aio-safe``: ``nbmq.aio.SafeDealer`` both sides (acked, nothing lost);
- ``zmq``: ``zmq.asyncio`` PUSH/PULL over tcp (pyzmq, the ``bench`` extra; skipped without it);
- ``aio@before``, ``aio-safe@before`` with ``--before TREE``: the same on another source tree
  (its extensions built), e.g. the code before a change.

Reported per case, medians over ``--repeat`` runs: messages/s received (receiver's first to
last message), the receiver's CPU time per message (µs: the cost of its receive path, whether
or not the sender kept it busy), delivered/offered, and for nbmq the drops counted (receiver's
``kernel_drops`` + ``dropped``, sender's ``dropped`` + transport errors) over the messages
lost (1.00 = every loss counted); then the ratios the asyncio targets are stated in. Importing
this module runs nothing.
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
import warnings
from typing import Any

IDLE = 1.0  # seconds without a message that end a receiver
CASES = ("blocking", "aio", "aio-many", "aio-safe", "zmq")


def _nbmq_counted(counters: Any, errors: int = 0) -> int:
    return counters.kernel_drops + counters.dropped_total + errors


async def _aio_receiver(case: str, deadline: float) -> dict[str, Any]:
    from nbmq import aio
    from nbmq.errors import WouldBlock

    kind = aio.SafeDealer if case == "aio-safe" else aio.Dealer
    sock = await kind.bind("127.0.0.1:0")
    print(sock.local_address, flush=True)
    loop = asyncio.get_running_loop()
    count, first, last, cpu_first, cpu_last = 0, 0.0, 0.0, 0.0, 0.0
    recv = sock.recv
    while True:
        timeout = IDLE if count else max(0.0, deadline - loop.time())
        try:
            if case == "aio-many":
                count += len(await sock.recv_many(64, timeout=timeout))
            else:
                await recv(timeout=timeout)
                count += 1
        except WouldBlock:
            break
        last = loop.time()
        cpu_last = time.process_time()
        if not first:
            first, cpu_first = last, cpu_last
    out = dict(count=count, first=first, last=last, cpu=cpu_last - cpu_first, counted=_nbmq_counted(sock.counters))
    await sock.close(linger=0)
    return out


async def _aio_sender(case: str, address: str, size: int, duration: float) -> dict[str, Any]:
    from nbmq import aio

    kind = aio.SafeDealer if case == "aio-safe" else aio.Dealer
    sock = await kind.connect(address)
    assert await sock.wait_connected(5.0), "no handshake"
    payload = [b"x" * size]
    batch = [payload] * 64
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    sent = 0
    send = sock.send
    while loop.time() < end:
        if case == "aio-many":
            sent += await sock.send_many(batch)
        else:
            for _ in range(64):
                await send(payload)
            sent += 64
    counted = _nbmq_counted(sock.counters, sock.transport_errors)
    await sock.close(linger=2.0)
    return dict(sent=sent, counted=counted)


def _blocking_receiver(deadline: float) -> dict[str, Any]:
    import nbmq
    from nbmq.errors import WouldBlock

    sock = nbmq.Dealer.bind("127.0.0.1:0")
    print(sock.local_address, flush=True)
    count, first, last, cpu_first, cpu_last = 0, 0.0, 0.0, 0.0, 0.0
    recv = sock.recv
    while True:
        try:
            recv(timeout=IDLE if count else max(0.0, deadline - time.monotonic()))
        except WouldBlock:
            break
        count += 1
        last = time.monotonic()
        cpu_last = time.process_time()
        if count == 1:
            first, cpu_first = last, cpu_last
    out = dict(count=count, first=first, last=last, cpu=cpu_last - cpu_first, counted=_nbmq_counted(sock.counters))
    sock.close(linger=0)
    return out


def _blocking_sender(address: str, size: int, duration: float) -> dict[str, Any]:
    import nbmq

    sock = nbmq.Dealer.connect(address)
    assert sock.wait_connected(5.0), "no handshake"
    payload = [b"x" * size]
    end = time.monotonic() + duration
    sent = 0
    send = sock.send
    while time.monotonic() < end:
        for _ in range(64):
            send(payload, timeout=None)
        sent += 64
    counted = _nbmq_counted(sock.counters, sock.transport_send_errors)
    sock.close(linger=2.0)
    return dict(sent=sent, counted=counted)


async def _zmq_receiver(deadline: float) -> dict[str, Any]:
    import zmq
    import zmq.asyncio

    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.PULL)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(f"tcp://127.0.0.1:{port}", flush=True)
    loop = asyncio.get_running_loop()
    count, first, last, cpu_first, cpu_last = 0, 0.0, 0.0, 0.0, 0.0
    recv = sock.recv_multipart
    while True:  # the plain loop; tcp loses nothing, so the sender's last, empty message ends it
        message = await asyncio.wait_for(recv(), max(0.0, deadline - loop.time())) if not count else await recv()
        if message == [b""]:
            break
        count += 1
        last = loop.time()
        cpu_last = time.process_time()
        if count == 1:
            first, cpu_first = last, cpu_last
    sock.close(linger=0)
    ctx.term()
    return dict(count=count, first=first, last=last, cpu=cpu_last - cpu_first, counted=0)


async def _zmq_sender(address: str, size: int, duration: float) -> dict[str, Any]:
    import zmq
    import zmq.asyncio

    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(address)
    payload = [b"x" * size]
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    sent = 0
    send = sock.send_multipart
    while loop.time() < end:
        for _ in range(64):
            await send(payload)
        sent += 64
    await send([b""])
    sock.close(linger=10_000)
    ctx.term()
    return dict(sent=sent, counted=0)


def _role(args: argparse.Namespace) -> None:
    warnings.simplefilter("ignore")  # the loss warning: the figures report the loss
    deadline = time.monotonic() + 20.0
    case = args.case
    if args.role == "receiver":
        if case == "blocking":
            result = _blocking_receiver(deadline)
        elif case == "zmq":
            result = asyncio.run(_zmq_receiver(deadline))
        else:
            result = asyncio.run(_aio_receiver(case, deadline))
    elif case == "blocking":
        result = _blocking_sender(args.address, args.size, args.duration)
    elif case == "zmq":
        result = asyncio.run(_zmq_sender(args.address, args.size, args.duration))
    else:
        result = asyncio.run(_aio_sender(case, args.address, args.size, args.duration))
    print(json.dumps(result), flush=True)


def run_case(case: str, size: int, duration: float, tree: str | None = None) -> dict[str, Any]:
    """One receiver and one sender process for ``case`` (on source ``tree``, default this
    one): the receiver's figures plus the sender's ``sent``; ``rate`` in messages/s and
    ``lost`` in messages."""
    me = [sys.executable, os.path.abspath(__file__), "--case", case, "--duration", str(duration), "--size", str(size)]
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree or os.path.dirname(os.path.dirname(__file__))))
    rx = subprocess.Popen(me + ["--role", "receiver"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert rx.stdout is not None
        address = rx.stdout.readline().strip()
        tx = subprocess.run(
            me + ["--role", "sender", "--address", address],
            capture_output=True,
            text=True,
            timeout=duration + 30,
            env=env,
        )
        if tx.returncode:
            raise RuntimeError(f"{case} sender failed: {tx.stderr[-2000:]}")
        out = json.loads(rx.stdout.readline())
        rx.wait(timeout=30)
    finally:
        if rx.poll() is None:
            rx.kill()
    sender = json.loads(tx.stdout.strip().splitlines()[-1])
    span = out["last"] - out["first"]
    out["rate"] = out["count"] / span if span > 0 else 0.0
    out["cpu_us"] = out["cpu"] / out["count"] * 1e6 if out["count"] else 0.0
    out["sent"] = sender["sent"]
    out["lost"] = sender["sent"] - out["count"]
    out["counted"] += sender["counted"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds of sending per run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--before", help="source tree to run aio and aio-safe on as well (its extensions built)")
    parser.add_argument("--role", choices=("receiver", "sender"), help=argparse.SUPPRESS)
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        return _role(args)
    cases = list(args.cases)
    if "zmq" in cases:
        try:
            import zmq  # noqa: F401
        except ImportError:
            print("pyzmq is not installed (pip install 'nbmq[bench]'): zmq.asyncio skipped")
            cases.remove("zmq")
    plan = [(case, case, None) for case in cases]
    if args.before:
        plan += [(f"{case}@before", case, args.before) for case in ("aio", "aio-safe") if case in cases]
    cases = [label for label, _, _ in plan]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in cases}
    for i in range(args.repeat):
        for case, kind, tree in plan if i % 2 == 0 else reversed(plan):  # (a case run second runs faster)
            r = run_case(kind, args.size, args.duration, tree)
            runs[case].append(r)
            counted = f"  counted/lost {r['counted'] / r['lost']:.3f}" if r["lost"] > 0 else ""
            print(
                f"run {i + 1} {case:15s} {r['rate']:>10,.0f} msg/s  receiver CPU {r['cpu_us']:5.2f} us/msg"
                f"  offered {r['sent'] / args.duration:>9,.0f}/s"
                f"  delivered/offered {r['count'] / r['sent']:.3f}{counted}",
                flush=True,
            )
    print(f"\n{args.size} B messages, medians of {args.repeat} (load average {os.getloadavg()[0]:.1f}):")
    medians = {}
    for case in cases:
        rs = runs[case]
        medians[case] = statistics.median(r["rate"] for r in rs)
        cpu = statistics.median(r["cpu_us"] for r in rs)
        delivered = statistics.median(r["count"] / r["sent"] for r in rs)
        lost, counted = sum(r["lost"] for r in rs), sum(r["counted"] for r in rs)
        accounting = f"  counted/lost {counted / lost:.3f} (all runs)" if lost > 0 else ""
        print(
            f"  {case:15s} {medians[case]:>10,.0f} msg/s  receiver CPU {cpu:5.2f} us/msg  delivered/offered {delivered:.3f}{accounting}"
        )
    for num, den in (
        ("aio", "blocking"),
        ("aio", "zmq"),
        ("aio-many", "zmq"),
        ("aio-safe", "zmq"),
        ("aio", "aio@before"),
        ("aio-safe", "aio-safe@before"),
    ):
        if num in medians and den in medians and medians[den]:
            print(f"  {num}/{den}: {medians[num] / medians[den]:.2f}x")


if __name__ == "__main__":
    main()
