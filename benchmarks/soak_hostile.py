"""Hostile peers against live servers: does a well-behaved peer still get through, and
does the server's memory stay within its configured budgets?

Each scenario starts its server in a subprocess of its own (so its peak RSS, VmHWM, is its own),
runs the attackers and one well-behaved peer from this process for ``--seconds``, then prints the
good peer's delivered fraction and the server's peak RSS against the configured budget::

    .venv/bin/python benchmarks/soak_hostile.py                  # every scenario, ~1 minute
    .venv/bin/python benchmarks/soak_hostile.py --seconds 30 --only hog-bqsp

Scenarios:
    connect-flood-udp  Connect frames from 1,500 source ports (more than max_peers=1024); the
                       good peer connected first (-late: it connects during the flood)
    garbage-udp        random datagrams at the nbmq socket
    garbage-rqueue     clients that send random bytes, get closed and come back
    hog-bqsp           6 connections each sending 59 MiB of a 64 MiB packet, then cutting it
    hog-udp            a peer holding 8 claims of ~16 MiB messages, renewed all the time
    stalled-rqueue     500 clients claiming 2,048 bytes and going silent, 500 idle ones

Target: delivered >= 99% and peak RSS <= start RSS + budget + 50 MB. The budget is the memory
the configured options let attackers pin (printed per scenario). The nbmq/UDP budget scenario
measures whatever the engine's incomplete-message budget does today.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import signal
import socket
import sys
import time
from pathlib import Path

from nbmq.testing import ServerProcess, rqueue_server

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
SLACK = 50 * MIB  # the target's allowance over the budget
ATTACK_RATE = 20_000.0  # hostile datagrams/s (--attack-rate)
BQSP_BUDGET = 256 * MIB  # the BQSP server's max_buffered_total (--bqsp-budget), its default


# -- server subprocesses (started with nbmq.testing.ServerProcess) ---------------------------------


def serve_bqsp_main(max_buffered_total: int) -> None:
    """``--serve bqsp``: an echo BQSP server; prints its counters as JSON on SIGTERM."""
    from nbmq.transports.bqsp_aio import serve_bqsp

    async def main() -> None:
        server = await serve_bqsp(
            lambda packet: bytes(packet.data), "127.0.0.1", 0, max_buffered_total=max_buffered_total
        )
        print(f"listening on 127.0.0.1:{server.port}", flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        print(
            json.dumps({"protocol_errors": server.protocol_errors, "closed_over_budget": server.closed_over_budget}),
            flush=True,
        )
        server.close()

    asyncio.run(main())


def serve_udp_main() -> None:
    """``--serve udp``: a bound Dealer counting the good peer's messages; prints them and the
    engine's counters as JSON on SIGTERM."""
    import nbmq
    from nbmq.errors import WouldBlock

    server = nbmq.Dealer.bind("127.0.0.1:0")
    print(f"listening on {server.local_address}", flush=True)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    good = 0
    while not stopping:
        try:
            parts = server.recv(timeout=0.02)
        except WouldBlock:
            parts = None
        while parts is not None:
            if bytes(parts[0][:4]) == b"good":
                good += 1
            try:
                parts = server.recv()
            except WouldBlock:
                parts = None
        server.tick()
    counters = server.counters
    fields = {
        k: getattr(counters, k)
        for k in (
            "datagrams_in",
            "messages_in",
            "malformed",
            "unknown_session",
            "unexpected",
            "connects_refused",
            "peers_evicted",
            "half_open_expired",
            "cookies_sent",
            "cookies_accepted",
            "cookies_rejected",
            "events_dropped",
        )
    }
    fields.update({f"dropped_{reason.name.lower()}": n for reason, n in counters.dropped.items()})
    print(json.dumps({"good": good, "counters": fields}), flush=True)
    server.close(linger=0)


# -- well-behaved peers ---------------------------------------------------------------------------


async def good_rqueue(host: str, port: int, seconds: float, rate: float = 2000.0) -> tuple[int, int]:
    """A publisher and a subscriber: ``(sent, received)`` after a drain of up to 2 s."""
    from nbmq.transports.rqueue_aio import RqueueClient

    sub = await RqueueClient.connect(host, port)
    pub = await RqueueClient.connect(host, port)
    await sub.subscribe("good")
    await pub.subscribe("sync")
    await pub.notify("sync", b"")
    await asyncio.wait_for(pub.recv(), 5)  # subscriptions are in place
    sent = received = 0
    loop = asyncio.get_running_loop()

    async def reader() -> None:
        nonlocal received
        while True:
            await sub.recv()
            received += 1

    task = asyncio.ensure_future(reader())
    start = loop.time()
    while loop.time() - start < seconds:
        await pub.notify("good", sent.to_bytes(8, "big") + bytes(92))
        sent += 1
        await asyncio.sleep(max(0.0, start + sent / rate - loop.time()))
    drain_end = loop.time() + 2.0
    while received < sent and loop.time() < drain_end:
        await asyncio.sleep(0.01)
    task.cancel()
    await pub.close()
    await sub.close()
    return sent, received


def good_udp(address: str, seconds: float, on_connected, rate: float = 2000.0) -> int:
    """A Dealer sending 100-byte messages at ``rate``; returns how many it sent. Calls
    ``on_connected()`` once connected (or at once when it cannot connect within 5 s)."""
    import nbmq
    from nbmq.errors import WouldBlock

    client = nbmq.Dealer.connect(address)
    client.wait_connected(5.0)
    on_connected()
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            client.send([b"good" + sent.to_bytes(8, "big") + bytes(88)])
            sent += 1
        except WouldBlock:
            pass
        client.tick()
        delay = start + sent / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    client.close(linger=1.0)
    return sent


# -- attackers ------------------------------------------------------------------------------------


def _udp_target(address: str) -> tuple[str, int]:
    host, port = address.replace("udp://", "").rsplit(":", 1)
    return host.strip("[]"), int(port)


def udp_attack(address: str, seconds: float, make, sockets: int = 1, share: float = 1.0, setup=None) -> str:
    """Send ``make(i, state)`` datagrams from ``sockets`` source ports, round robin, at about
    ``share`` times ATTACK_RATE datagrams/s (bursts of 64); returns a description of what was
    sent."""
    rate = ATTACK_RATE * share
    target = _udp_target(address)
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(sockets)]
    for s in socks:
        s.setblocking(False)
    state = setup(socks, target) if setup else None
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for _ in range(64):
            s = socks[sent % len(socks)]
            try:
                s.sendto(make(sent, state), target)
            except (BlockingIOError, OSError):
                pass
            sent += 1
        delay = start + sent / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.monotonic() - start
    for s in socks:
        s.close()
    return f"{sent} datagrams from {sockets} ports, {sent / elapsed:,.0f}/s"


def kernel_drops(port: int) -> int:
    """The kernel's receive-buffer drops for the UDP socket bound to ``port`` (/proc/net/udp)."""
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            return int(fields[-1])
    return -1


def run_udp(seconds: float, attack, good_first: bool = True) -> dict:
    """The good peer connects before the attack starts (``good_first``) or 0.2 s into it."""
    import threading

    server = ServerProcess([__file__, "--serve", "udp"], cwd=ROOT)
    start_rss = server.rss()
    address = f"{server.host}:{server.port}"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("attack", attack(address, seconds)))
    if not good_first:
        thread.start()
        time.sleep(0.2)
    sent = good_udp(address, seconds - 0.4, thread.start if good_first else lambda: None)
    thread.join()
    time.sleep(0.3)
    peak = server.status("VmHWM")
    drops = kernel_drops(server.port)
    out = json.loads(server.stop()[1].strip().splitlines()[-1])
    out["counters"]["kernel_rcvbuf_drops"] = drops
    return {
        "sent": sent,
        "delivered": out["good"],
        "peak": peak,
        "start": start_rss,
        "attack": result.get("attack"),
        "counters": out["counters"],
    }


def connect_flood_udp(seconds: float) -> dict:
    from nbmq import codec
    from nbmq.wire import FrameKind

    connect = codec.encode_control_frame(FrameKind.CONNECT, 0)
    out = run_udp(seconds, lambda addr, s: udp_attack(addr, s, lambda i, _: connect, sockets=1500))
    out["budget"] = 0  # a peer table of 1,024 small entries
    return out


def connect_flood_udp_late(seconds: float) -> dict:
    """As connect-flood-udp, but the good peer connects while the flood is under way."""
    from nbmq import codec
    from nbmq.wire import FrameKind

    connect = codec.encode_control_frame(FrameKind.CONNECT, 0)
    out = run_udp(seconds, lambda addr, s: udp_attack(addr, s, lambda i, _: connect, sockets=1500), good_first=False)
    out["budget"] = 0
    return out


def garbage_udp(seconds: float) -> dict:
    rng = random.Random(1)
    junk = [rng.randbytes(rng.randrange(1, 1400)) for _ in range(512)]
    out = run_udp(seconds, lambda addr, s: udp_attack(addr, s, lambda i, _: junk[i % 512], sockets=8))
    out["budget"] = 0
    return out


def hog_udp(seconds: float) -> dict:
    """One peer that connects properly, then keeps 8 claims of 16 MiB messages alive."""
    from nbmq import codec
    from nbmq.wire import FrameKind

    def setup(socks, target):
        s = socks[0]
        s.setblocking(True)
        s.settimeout(2.0)
        s.sendto(codec.encode_control_frame(FrameKind.CONNECT, 0), target)
        frame = codec.parse_frame(s.recv(2048))
        s.setblocking(False)
        return frame.session_id

    def make(i: int, sid: int) -> bytes:
        # message ids cycle over 8 claims of 16 MiB - 256 bytes: with the engine charging a claim
        # its size + 256, four of them fill the default 64 MiB budget exactly
        size = 16 * MIB - 256
        return codec.encode_data_frame(sid, 1 + i % 8, 1, 0, size, size, (i // 8) % 30000 * 466, bytes(466))

    out = run_udp(seconds, lambda addr, s: udp_attack(addr, s, make, share=0.25, setup=setup))
    out["budget"] = 64 * MIB  # max_incomplete_bytes, the engine's default
    return out


async def _garbage_clients(host: str, port: int, seconds: float, clients: int = 20) -> int:
    rng = random.Random(2)
    closed = 0

    async def one() -> None:
        nonlocal closed
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            try:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(rng.randbytes(rng.randrange(3, 4000)))
                await asyncio.wait_for(reader.read(), 2)
            except (ConnectionError, asyncio.TimeoutError, OSError):
                pass
            else:
                writer.close()
            closed += 1

    await asyncio.gather(*(one() for _ in range(clients)))
    return closed


def garbage_rqueue(seconds: float) -> dict:
    server = rqueue_server(log_level="ERROR")
    start_rss = server.rss()

    async def main() -> tuple[tuple[int, int], int]:
        attack = asyncio.ensure_future(_garbage_clients(server.host, server.port, seconds))
        good = await good_rqueue(server.host, server.port, seconds)
        return good, await attack

    (sent, received), attack = asyncio.run(main())
    peak = server.status("VmHWM")
    server.stop()
    return {"sent": sent, "delivered": received, "peak": peak, "start": start_rss, "attack": attack, "budget": 0}


def stalled_rqueue(seconds: float) -> dict:
    read_timeout = max(1.0, seconds / 4)
    server = rqueue_server("--read-timeout", str(read_timeout), "--max-connections", "2000", log_level="ERROR")
    start_rss = server.rss()

    async def main() -> tuple[tuple[int, int], int, int]:
        conns = []
        for i in range(1000):
            reader, writer = await asyncio.open_connection(server.host, server.port)
            if i % 2 == 0:
                writer.write(b"\x08\x00\x07\x01t")  # claims 2,048 bytes, sends 2
            conns.append((reader, writer))
        good = await good_rqueue(server.host, server.port, seconds)
        stalled_closed = sum(1 for r, _ in conns[0::2] if r.at_eof() or r.exception() is not None)
        idle_open = sum(1 for r, _ in conns[1::2] if not r.at_eof())
        for _, w in conns:
            w.close()
        return good, stalled_closed, idle_open

    (sent, received), stalled_closed, idle_open = asyncio.run(main())
    peak = server.status("VmHWM")
    server.stop()
    return {
        "sent": sent,
        "delivered": received,
        "peak": peak,
        "start": start_rss,
        "attack": f"stalled closed {stalled_closed}/500 (read timeout {read_timeout:g} s), idle open {idle_open}/500",
        "budget": 1000 * 2048,
    }


def hog_bqsp(seconds: float) -> dict:
    budget = BQSP_BUDGET
    server = ServerProcess([__file__, "--serve", "bqsp", "--max-buffered-total", str(budget)], cwd=ROOT)
    start_rss = server.rss()

    async def hog(header: bytes, body: int) -> None:
        try:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(header)
            chunk = bytes(MIB)
            for _ in range(body // MIB):
                writer.write(chunk)
                await writer.drain()
            writer.write_eof()  # cut inside the packet: a protocol error
            await asyncio.wait_for(reader.read(), 5)
            writer.close()
        except (ConnectionError, asyncio.TimeoutError, OSError):
            pass

    async def good(end: float) -> tuple[int, int]:
        from nbmq.transports.bqsp_aio import BqspClient

        client = await BqspClient.connect(server.host, server.port)
        sent = ok = 0
        loop = asyncio.get_running_loop()
        while loop.time() < end:
            sent += 1
            try:
                reply = await client.request(sent.to_bytes(8, "big") * 128, timeout=2.0)
                ok += bytes(reply.data[:8]) == sent.to_bytes(8, "big")
            except (TimeoutError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.001)
        await client.close()
        return sent, ok

    async def main() -> tuple[tuple[int, int], int]:
        from nbmq import codec

        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        good_task = asyncio.ensure_future(good(end))
        rounds = 0
        header = codec.encode_bqsp_header(64 * MIB, 1, 1)
        while loop.time() < end - 1.0:
            await asyncio.gather(*(hog(header, 59 * MIB) for _ in range(6)))
            rounds += 1
        return await good_task, rounds

    (sent, received), rounds = asyncio.run(main())
    peak = server.status("VmHWM")
    counters = json.loads(server.stop()[1].strip().splitlines()[-1])
    return {
        "sent": sent,
        "delivered": received,
        "peak": peak,
        "start": start_rss,
        "attack": f"{rounds} rounds of 6 x 59 MiB, {counters}",
        "budget": budget,
    }


SCENARIOS = {
    "connect-flood-udp": connect_flood_udp,
    "connect-flood-udp-late": connect_flood_udp_late,
    "garbage-udp": garbage_udp,
    "garbage-rqueue": garbage_rqueue,
    "hog-bqsp": hog_bqsp,
    "hog-udp": hog_udp,
    "stalled-rqueue": stalled_rqueue,
}


def report(name: str, out: dict) -> bool:
    fraction = out["delivered"] / out["sent"] if out["sent"] else 0.0
    growth = out["peak"] - out["start"]
    ok_delivery = fraction >= 0.99
    ok_memory = growth <= out["budget"] + SLACK
    print(
        f"{name:22} delivered {out['delivered']:>6}/{out['sent']:<6} = {fraction:7.2%} "
        f"{'ok' if ok_delivery else 'BELOW 99%':9} peak RSS {out['peak'] / MIB:6.1f} MiB "
        f"(start {out['start'] / MIB:5.1f}, budget {out['budget'] / MIB:5.1f} + 50) "
        f"{'ok' if ok_memory else 'OVER'}"
    )
    print(f"{'':22} attack: {out['attack']}")
    counters = out.get("counters")
    if counters:
        shown = {k: v for k, v in counters.items() if v}
        print(f"{'':22} server counters: {shown}")
    return ok_delivery and ok_memory


def main(argv: list[str] | None = None) -> int:
    global ATTACK_RATE, BQSP_BUDGET
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per scenario (default 8)")
    parser.add_argument(
        "--only", choices=sorted(SCENARIOS), action="append", help="run only these scenarios (repeatable)"
    )
    parser.add_argument(
        "--attack-rate",
        type=float,
        default=ATTACK_RATE,
        help="hostile datagrams/s in the UDP scenarios (default 20000)",
    )
    parser.add_argument(
        "--bqsp-budget",
        type=int,
        default=BQSP_BUDGET,
        help="the BQSP server's max_buffered_total, bytes (default 256 MiB)",
    )
    parser.add_argument("--serve", choices=("bqsp", "udp"), help=argparse.SUPPRESS)
    parser.add_argument("--max-buffered-total", type=int, default=256 * MIB, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve == "bqsp":
        serve_bqsp_main(args.max_buffered_total)
        return 0
    if args.serve == "udp":
        serve_udp_main()
        return 0
    ATTACK_RATE = args.attack_rate
    BQSP_BUDGET = args.bqsp_budget
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))
    all_ok = True
    for name in args.only or SCENARIOS:
        try:
            all_ok &= report(name, SCENARIOS[name](args.seconds))
        except Exception as exc:  # one broken scenario must not hide the others' figures
            print(f"{name:22} FAILED: {type(exc).__name__}: {exc}")
            all_ok = False
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
