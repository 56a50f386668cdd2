"""BQSP request/response over loopback: requests per second with 1 and 64 requests in flight,
100 B and 64 KiB payloads.

    python benchmarks/bench_bqsp.py [--duration 1.5] [--repeats 3] [--no-uvloop]

The server (:func:`nbmq.transports.bqsp_aio.serve_bqsp` with an async echo handler, one task per
request) runs in its own process; the client (:class:`~nbmq.transports.bqsp_aio.BqspClient`)
keeps N requests in flight from N coroutines on one connection. Importing this module has no
side effects.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time


def _use_uvloop(enabled: bool) -> str:
    if enabled:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            return "uvloop"
        except ImportError:
            pass
    return "asyncio"


def _server(conn, uvloop_enabled: bool) -> None:
    from nbmq.transports.bqsp_aio import serve_bqsp

    _use_uvloop(uvloop_enabled)

    async def echo(packet):
        return packet.data

    async def main() -> None:
        server = await serve_bqsp(echo, "127.0.0.1", 0)
        conn.send(server.port)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, conn.recv)  # any message: stop
        server.close()

    asyncio.run(main())


async def measure(port: int, in_flight: int, size: int, duration: float) -> float:
    """Requests per second, completed within ``duration`` after a short warm-up."""
    from nbmq.transports.bqsp_aio import BqspClient

    client = await BqspClient.connect("127.0.0.1", port)
    payload = os.urandom(size)
    done = 0
    counting = False
    stop = False

    async def worker() -> None:
        nonlocal done
        while not stop:
            reply = await client.request(payload, 1)
            if counting:
                done += 1
            assert len(reply.data) == size

    tasks = [asyncio.ensure_future(worker()) for _ in range(in_flight)]
    await asyncio.sleep(min(0.3, duration / 4))
    counting = True
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    counting = False
    elapsed = time.perf_counter() - t0
    stop = True
    await asyncio.wait(tasks, timeout=10)
    await client.close()
    return done / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1.5, help="seconds measured per run (default 1.5)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the median is shown (default 3)")
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop on both sides")
    args = parser.parse_args(argv)
    from nbmq import codec

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_server, args=(child, not args.no_uvloop), daemon=True)
    proc.start()
    try:
        if not parent.poll(20):
            raise RuntimeError("BQSP server did not start")
        port = parent.recv()
        loop_name = _use_uvloop(not args.no_uvloop)
        print(
            f"BQSP request/response over loopback, echo server in its own process, median of "
            f"{args.repeats} x {args.duration:g} s, codec={'cython' if codec.COMPILED else 'python'}, loop={loop_name}, "
            f"cpus={os.cpu_count()}"
        )
        header = f"{'payload':>9}{'in flight':>11}{'requests/s':>13}{'MB/s each way':>15}{'runs':>30}"
        print(header)
        print("-" * len(header))
        for size in (100, 64 * 1024):
            for in_flight in (1, 64):
                runs = [asyncio.run(measure(port, in_flight, size, args.duration)) for _ in range(args.repeats)]
                med = statistics.median(runs)
                label = f"{size} B" if size < 1024 else f"{size // 1024} KiB"
                print(
                    f"{label:>9}{in_flight:>11}{med:>13,.0f}{med * size / 1e6:>15,.1f}"
                    f"{', '.join(f'{r:,.0f}' for r in runs):>30}"
                )
    finally:
        parent.send("stop")
        proc.join(5)
        if proc.is_alive():
            proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
