"""rqueue server fan-out throughput: 2 KB notifications, 1 publisher to N subscribers.

    python benchmarks/bench_rqueue.py [--duration 2] [--repeats 3] [--subscribers 1,4] [--no-redis]

The server runs in its own process (``python -m nbmq.transports.rqueue_server``, uvloop when
installed), and so do the publisher and every subscriber (plain blocking sockets, so the clients
cost little CPU). The publisher sends 64 KiB blocks of notifications and keeps at most
``--window`` messages ahead of the slowest subscriber, so nothing is dropped and no buffer grows:
the figure is lossless delivered messages per second (the seed's "clients receive ~130,000 2Kb
messages per second"). When ``redis-server`` is on PATH the same test runs against Redis pub/sub
(PUBLISH / SUBSCRIBE, same channel and content size), started on a loopback port and stopped after.

Importing this module has no side effects.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

from nbmq.testing import rqueue_server

TOPIC = b"bench"
PAYLOAD = 2048  # the seed's cap: topic_len + topic + content
CONTENT_SIZE = PAYLOAD - 1 - len(TOPIC)
BLOCK = 32  # notifications per publisher write (about 64 KiB)


# -- wire formats --------------------------------------------------------------------------------


def _rq(kind: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(2, "big") + bytes([kind]) + payload


def rq_notification(topic: bytes, content: bytes) -> bytes:
    return _rq(7, bytes([len(topic)]) + topic + content)


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def redis_message_size(channel: bytes, content_size: int) -> int:
    """Bytes of one pub/sub message as a subscriber receives it (RESP2 push)."""
    return (
        len(b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n" % (len(channel), channel, content_size)) + content_size + 2
    )


# -- processes -----------------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _subscriber(system: str, port: int, counter, ready, stop) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if system == "redis":
        sock.sendall(_resp(b"SUBSCRIBE", TOPIC))
        _recv_exact(sock, len(b"*3\r\n$9\r\nsubscribe\r\n$5\r\nbench\r\n:1\r\n"))
    else:
        sync = b"sync-%d" % os.getpid()
        sock.sendall(_rq(1, TOPIC) + _rq(1, sync) + rq_notification(sync, b"") + _rq(2, sync))
        echo = rq_notification(sync, b"")
        _recv_exact(sock, len(echo))  # the echo proves both subscriptions are in place
    ready.set()
    buf = bytearray(1 << 20)
    sock.settimeout(0.1)
    while not stop.value:
        try:
            n = sock.recv_into(buf)
        except TimeoutError:
            continue
        if not n:
            break
        counter.value += n
    sock.close()


def _publisher(system: str, port: int, counters, sub_msg_size: int, window: int, stop, sent) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    content = bytes(range(256)) * (CONTENT_SIZE // 256) + b"x" * (CONTENT_SIZE % 256)
    if system == "redis":
        block = _resp(b"PUBLISH", TOPIC, content) * BLOCK

        def drain() -> None:  # PUBLISH replies (":N\r\n"), discarded
            try:
                while sock.recv(1 << 16):
                    pass
            except OSError:
                pass

        threading.Thread(target=drain, daemon=True).start()
    else:
        block = rq_notification(TOPIC, content) * BLOCK
    count = 0
    while not stop.value:
        slowest = min(c.value for c in counters) // sub_msg_size
        if count - slowest > window:
            time.sleep(0.0002)
            continue
        sock.sendall(block)
        count += BLOCK
        sent.value = count
    sock.close()


def run_case(system: str, port: int, subscribers: int, duration: float, window: int) -> dict:
    """One timed run; returns delivered messages/s per subscriber (list) and in total."""
    ctx = mp.get_context("fork")
    stop = ctx.RawValue("b", 0)
    counters = [ctx.RawValue("Q", 0) for _ in range(subscribers)]
    readies = [ctx.Event() for _ in range(subscribers)]
    sent = ctx.RawValue("Q", 0)
    size = redis_message_size(TOPIC, CONTENT_SIZE) if system == "redis" else 3 + PAYLOAD
    procs = [
        ctx.Process(target=_subscriber, args=(system, port, c, r, stop), daemon=True) for c, r in zip(counters, readies)
    ]
    for p in procs:
        p.start()
    for r in readies:
        if not r.wait(10):
            raise RuntimeError("a subscriber did not get ready")
    pub = ctx.Process(target=_publisher, args=(system, port, counters, size, window, stop, sent), daemon=True)
    pub.start()
    procs.append(pub)
    try:
        time.sleep(min(0.5, duration / 4))  # warm-up
        t0, c0 = time.monotonic(), [c.value for c in counters]
        time.sleep(duration)
        t1, c1 = time.monotonic(), [c.value for c in counters]
    finally:
        stop.value = 1
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
    per_sub = [(b - a) / size / (t1 - t0) for a, b in zip(c0, c1)]
    return {"per_sub": per_sub, "total": sum(per_sub)}


# -- servers -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--client-output-buffer-limit",
            "pubsub 256mb 128mb 60",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(_resp(b"PING"))
                if s.recv(64).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=2.0, help="seconds measured per run (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the median is shown (default 3)")
    parser.add_argument("--subscribers", default="1,4", help="comma-separated subscriber counts (default 1,4)")
    parser.add_argument(
        "--window",
        type=int,
        default=1500,
        help="most messages the publisher runs ahead of the slowest subscriber (default 1500)",
    )
    parser.add_argument("--no-redis", action="store_true", help="skip Redis even when redis-server is on PATH")
    parser.add_argument("--no-uvloop", action="store_true", help="run the nbmq server on the default asyncio loop")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.subscribers.split(",")]
    systems = ["nbmq"]
    if not args.no_redis and shutil.which("redis-server"):
        systems.append("redis")
    from nbmq import codec

    try:
        import uvloop  # noqa: F401

        loop = "asyncio" if args.no_uvloop else "uvloop"
    except ImportError:
        loop = "asyncio"
    print(
        f"rqueue fan-out: {PAYLOAD} B notification payloads, 1 publisher, median of {args.repeats} x "
        f"{args.duration:g} s, nbmq codec={'cython' if codec.COMPILED else 'python'}, server loop={loop}, cpus={os.cpu_count()}"
    )
    if "redis" not in systems:
        print("(redis-server not on PATH or --no-redis: Redis skipped)")
    results: dict[tuple[str, int], dict] = {}
    for system in systems:
        if system == "redis":
            proc, port = start_redis()
            stop = functools.partial(stop_server, proc)
        else:
            server = rqueue_server(*(["--no-uvloop"] if args.no_uvloop else []))
            port, stop = server.port, server.stop
        try:
            for n in counts:
                runs = [run_case(system, port, n, args.duration, args.window) for _ in range(args.repeats)]
                totals = [r["total"] for r in runs]
                results[(system, n)] = {"total": statistics.median(totals), "runs": totals}
        finally:
            stop()
    header = f"{'server':<7}{'subs':>5}{'msg/s per sub':>16}{'msg/s total':>14}{'MB/s total':>12}{'runs (total msg/s)':>34}{'vs redis':>10}"
    print(header)
    print("-" * len(header))
    for (system, n), r in results.items():
        redis = results.get(("redis", n))
        ratio = f"{r['total'] / redis['total']:.2f}x" if redis and system != "redis" else ""
        runs = ", ".join(f"{x:,.0f}" for x in r["runs"])
        print(
            f"{system:<7}{n:>5}{r['total'] / n:>16,.0f}{r['total']:>14,.0f}"
            f"{r['total'] * PAYLOAD / 1e6:>12,.1f}{runs:>34}{ratio:>10}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
