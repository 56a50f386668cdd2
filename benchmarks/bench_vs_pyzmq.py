"""nbmq against pyzmq, same machine, same run, the same user loops (two processes each).

    python benchmarks/bench_vs_pyzmq.py [--count 200000] [--rounds 20000] [--repeat 3] [--cases ...]

Throughput (``--count`` messages of ``--size`` bytes, default 100 B): the sender stamps a u64
index into the first and last 8 bytes of each message and sends it; the receiver polls, then
drains until empty, and measures from its first to its last message. Each side also reports
its process CPU time per message (µs, all threads: pyzmq's I/O thread included; the sender's
from its first send to its close, the receiver's from its first wait to its last message and
idle end), a figure the other jobs on a shared machine move far less than the rates. Cases:

- ``zmq-tcp``, ``zmq-ipc``: pyzmq PUSH/PULL over tcp / ipc (``send`` / ``poll`` + ``recv(NOBLOCK)``);
- ``dealer``, ``safedealer``: nbmq, one ``send()`` / ``recv()`` per message (``poll`` + drain);
- ``dealer-many``, ``safedealer-many``: ``send_many`` of 256 / ``recv_many(256)``;
- ``dealer-packed``, ``safedealer-packed``: the batch form of one buffer with offsets and
  lengths both ways: the sender stamps every index into one numpy buffer (vectorised) and calls
  ``send_packed`` on slices of 4096 messages; the receiver ``recv_packed(4096)``.

Round trips (``--rounds`` of them, one message in flight): ``zmq-lat`` (pyzmq DEALER to DEALER
over tcp), ``dealer-lat``, ``safedealer-lat`` (``send(flush=True)`` then ``recv(timeout)``), after
1000 not counted.

Cases run interleaved (run 1 of each, then run 2, ...) so load changes hit them alike; printed
are medians over ``--repeat`` runs: msg/s, MB/s (10**6 bytes of payload), delivered/sent and the
ratio to pyzmq tcp; p50/p99/p99.9 round trip (µs), ratio to pyzmq, and each side's CPU time per
round trip (µs; the echo's includes its idle end). ``--busy-poll 0,0.00005`` runs every nbmq case
once per ``busy_poll`` value (seconds), interleaved. The load average is printed:
on a shared machine the figures are under load. pyzmq is the ``bench`` extra
(``pip install -e '.[bench]'``); its cases are skipped without it. Importing this module runs
nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from typing import Any

IDLE = 1.0  # seconds without a message that end a receiver
TIMEOUT = 60.0  # seconds any one run may take
WARMUP = 1000  # round trips not counted
BATCH = 256
PACKED = 4096
THROUGHPUT = (
    "zmq-tcp",
    "zmq-ipc",
    "dealer",
    "safedealer",
    "dealer-many",
    "safedealer-many",
    "dealer-packed",
    "safedealer-packed",
)
LATENCY = ("zmq-lat", "dealer-lat", "safedealer-lat")
#: nbmq options of both ends: room for a burst, and a SafeDealer window of about 2 MiB.
NBMQ_OPTIONS = dict(send_hwm=10_000, recv_hwm=100_000, rcvbuf=8 << 20, sndbuf=4 << 20)


def _stamp(msg: bytearray, index: int) -> bytes:
    raw = index.to_bytes(8, "little")
    msg[:8] = raw
    msg[-8:] = raw
    return bytes(msg)


# --- pyzmq -------------------------------------------------------------------------------------
def _zmq_receiver(transport: str, conn: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    if transport == "ipc":
        path = os.path.join(tempfile.mkdtemp(), "bench.ipc")
        address = f"ipc://{path}"
        sock.bind(address)
    else:
        address = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
    conn.send(address)
    count = conn.recv()
    received, first, last = 0, 0.0, 0.0
    cpu = time.process_time()
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    end = time.monotonic() + TIMEOUT
    recv, again = sock.recv, zmq.Again
    while received < count and time.monotonic() < end:
        if not poller.poll(IDLE * 1000) and received:
            break
        woke = time.monotonic()  # (the first burst's start: a drain may last the whole run)
        while True:
            try:
                recv(zmq.NOBLOCK)
            except again:
                break
            received += 1
        now = time.monotonic()
        if received and not first:
            first = woke
        last = now
    conn.send((received, first, last, 0, time.process_time() - cpu))
    sock.close(0)
    ctx.term()


def _zmq_sender(address: str, size: int, count: int, conn: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(address)
    msg = bytearray(size)
    send = sock.send
    cpu = time.process_time()
    for i in range(count):
        send(_stamp(msg, i))
    sock.close(linger=10_000)
    ctx.term()
    conn.send((count, time.process_time() - cpu))


def _zmq_echo(conn: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    conn.send(f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}")
    rounds = conn.recv()
    sock.RCVTIMEO = int(IDLE * 1000)
    echoed = 0
    cpu = time.process_time()
    try:
        for echoed in range(1, rounds + 1):
            sock.send(sock.recv())
    except zmq.Again:
        pass
    cpu = time.process_time() - cpu
    sock.close(0)
    ctx.term()
    conn.send((echoed, cpu))


def _zmq_ping(address: str, size: int, rounds: int, conn: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(address)
    msg = bytearray(size)
    times = []
    clock = time.perf_counter_ns
    cpu = time.process_time()
    for i in range(rounds):
        data = _stamp(msg, i)
        start = clock()
        sock.send(data)
        sock.recv()
        times.append(clock() - start)
    cpu = time.process_time() - cpu
    sock.close(0)
    ctx.term()
    conn.send((times, cpu))


# --- nbmq --------------------------------------------------------------------------------------
def _nbmq_kind(case: str) -> str:
    return "SafeDealer" if case.startswith("safedealer") else "Dealer"


def _nbmq_receiver(case: str, options: dict, conn: Any) -> None:
    import nbmq
    from nbmq.errors import WouldBlock

    sock = getattr(nbmq, _nbmq_kind(case)).bind("127.0.0.1:0", **NBMQ_OPTIONS, **options)
    conn.send(sock.local_address)
    count = conn.recv()
    received, first, last = 0, 0.0, 0.0
    cpu = time.process_time()
    end = time.monotonic() + TIMEOUT
    poll, recv = sock.poll, sock.recv
    many, packed = case.endswith("-many"), case.endswith("-packed")
    while received < count and time.monotonic() < end:
        before = received
        poll(IDLE)
        woke = time.monotonic()  # (the first burst's start: a drain may last the whole run)
        while True:  # drain until empty
            try:
                if packed:
                    received += len(sock.recv_packed(PACKED, timeout=0)[1])
                elif many:
                    received += len(sock.recv_many(BATCH, timeout=0))
                else:
                    recv()
                    received += 1
            except WouldBlock:
                break
        now = time.monotonic()
        if received == before:  # (poll also returns for timers: idle means IDLE seconds)
            if received and now - last >= IDLE:
                break
            continue
        if not first:
            first = woke
        last = now
    cpu = time.process_time() - cpu
    counters = sock.counters
    conn.send((received, first, last, counters.kernel_drops + counters.dropped_total, cpu))
    sock.close(linger=0)


def _nbmq_sender(case: str, options: dict, address: str, size: int, count: int, conn: Any) -> None:
    import nbmq

    sock = getattr(nbmq, _nbmq_kind(case)).connect(address, **NBMQ_OPTIONS, **options)
    if not sock.wait_connected(5.0):
        conn.send(0)
        return
    msg = bytearray(size)
    cpu = time.process_time()
    if case.endswith("-packed"):  # the user stamps the indices into one buffer, sends it in slices
        import numpy as np

        data = np.zeros((count, size), dtype=np.uint8)
        index = np.arange(count, dtype="<u8").view(np.uint8).reshape(count, 8)
        data[:, :8] = index
        data[:, -8:] = index
        lengths = np.full(count, size, dtype=np.int64)
        offsets = np.arange(count, dtype=np.int64) * size
        flat = data.reshape(-1)
        taken = 0
        while taken < count:
            end = min(count, taken + PACKED)
            taken += sock.send_packed(flat, offsets[taken:end], lengths[taken:end], timeout=None)
    elif case.endswith("-many"):
        for start in range(0, count, BATCH):
            pending = iter([_stamp(msg, i) for i in range(start, min(count, start + BATCH))])
            taken, want = 0, min(BATCH, count - start)
            while taken < want:
                taken += sock.send_many(pending, timeout=None)
    else:
        send = sock.send
        for i in range(count):
            send(_stamp(msg, i), timeout=None)
    sock.close(linger=30.0)  # a SafeDealer waits here for its last acks
    conn.send((count, time.process_time() - cpu))


def _nbmq_echo(case: str, options: dict, conn: Any) -> None:
    import nbmq
    from nbmq.errors import WouldBlock

    sock = getattr(nbmq, _nbmq_kind(case)).bind("127.0.0.1:0", **options)
    conn.send(sock.local_address)
    rounds = conn.recv()
    echoed = 0
    cpu = time.process_time()
    try:
        for echoed in range(1, rounds + 1):
            sock.send(sock.recv(timeout=IDLE), flush=True)
    except WouldBlock:
        pass
    cpu = time.process_time() - cpu  # (the idle end included: IDLE seconds asleep, after any spin)
    sock.close(linger=0.5)
    conn.send((echoed, cpu))


def _nbmq_ping(case: str, options: dict, address: str, size: int, rounds: int, conn: Any) -> None:
    import nbmq
    from nbmq.errors import WouldBlock

    sock = getattr(nbmq, _nbmq_kind(case)).connect(address, **options)
    sock.wait_connected(5.0)
    msg = bytearray(size)
    times = []
    clock = time.perf_counter_ns
    send, recv = sock.send, sock.recv
    cpu = time.process_time()
    for i in range(rounds):
        data = _stamp(msg, i)
        start = clock()
        send(data, flush=True)
        try:
            recv(timeout=IDLE)
        except WouldBlock:  # lost: counted as a round trip of IDLE
            pass
        times.append(clock() - start)
    cpu = time.process_time() - cpu
    sock.close(linger=0.5)
    conn.send((times, cpu))


# --- harness -----------------------------------------------------------------------------------
def _pair(receiver: Any, receiver_args: tuple, sender: Any, sender_args: Any, amount: int) -> tuple[Any, Any]:
    """Start ``receiver`` (it sends its address, then reads ``amount``), then ``sender`` with
    ``sender_args(address)``; returns (sender's result, receiver's result), None where one
    timed out."""
    rx_parent, rx_child = mp.Pipe()
    tx_parent, tx_child = mp.Pipe()
    rx = mp.Process(target=receiver, args=(*receiver_args, rx_child))
    rx.start()
    address = rx_parent.recv() if rx_parent.poll(10.0) else None
    rx_parent.send(amount)
    tx = mp.Process(target=sender, args=(*sender_args(address), tx_child))
    tx.start()
    sent = tx_parent.recv() if tx_parent.poll(TIMEOUT + 30) else None
    got = rx_parent.recv() if rx_parent.poll(TIMEOUT + 30) else None
    for proc in (tx, rx):
        proc.join(5.0)
        if proc.is_alive():
            proc.kill()
    return sent, got


def throughput(case: str, size: int, count: int, options: dict | None = None) -> dict[str, float]:
    """One run of throughput case ``case``: msg/s and MB/s at the receiver, delivered/sent,
    drops counted by nbmq (0 for pyzmq). ``options``: more nbmq socket options of both ends."""
    options = options or {}
    if case.startswith("zmq-"):
        transport = case.split("-")[1]
        sent, got = _pair(_zmq_receiver, (transport,), _zmq_sender, lambda a: (a, size, count), count)
    else:
        sent, got = _pair(
            _nbmq_receiver, (case, options), _nbmq_sender, lambda a: (case, options, a, size, count), count
        )
    if not sent or not got or got[0] < 2:
        return {"msgs": 0.0, "mbs": 0.0, "ratio": 0.0, "counted": 0, "tx_cpu": 0.0, "rx_cpu": 0.0}
    (sent, tx_cpu), (received, first, last, counted, rx_cpu) = sent, got
    rate = (received - 1) / max(last - first, 1e-9)
    return {
        "msgs": rate,
        "mbs": rate * size / 1e6,
        "ratio": received / sent,
        "counted": counted,
        "tx_cpu": tx_cpu / sent * 1e6,
        "rx_cpu": rx_cpu / received * 1e6,
    }


def latency(case: str, size: int, rounds: int, options: dict | None = None) -> dict[str, float]:
    """One run of round-trip case ``case``: p50, p99, p99.9 in µs (the first WARMUP not counted),
    and each side's CPU time per round trip in µs. ``options``: more nbmq socket options of both ends."""
    import numpy as np

    options = options or {}
    total = rounds + WARMUP
    if case == "zmq-lat":
        pinged, echoed = _pair(_zmq_echo, (), _zmq_ping, lambda a: (a, size, total), total)
    else:
        pinged, echoed = _pair(
            _nbmq_echo, (case, options), _nbmq_ping, lambda a: (case, options, a, size, total), total
        )
    if not pinged or not echoed:
        return {"p50": 0.0, "p99": 0.0, "p999": 0.0, "ping_cpu": 0.0, "echo_cpu": 0.0}
    (times, ping_cpu), (_, echo_cpu) = pinged, echoed
    us = np.asarray(times[WARMUP:], dtype=np.float64) / 1e3
    p50, p99, p999 = np.percentile(us, [50, 99, 99.9])
    return {
        "p50": float(p50),
        "p99": float(p99),
        "p999": float(p999),
        "ping_cpu": ping_cpu / total * 1e6,
        "echo_cpu": echo_cpu / total * 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100, help="message size, bytes (>= 16)")
    parser.add_argument("--count", type=int, default=200_000, help="messages per throughput run")
    parser.add_argument("--rounds", type=int, default=20_000, help="round trips per latency run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (medians shown)")
    parser.add_argument("--cases", default=",".join(THROUGHPUT + LATENCY), help="comma-separated case names")
    parser.add_argument(
        "--busy-poll",
        default="",
        help="comma-separated busy_poll values (seconds): every nbmq case runs once per value "
        "(default: the option's default only)",
    )
    args = parser.parse_args(argv)
    if args.size < 16:
        parser.error("--size must be >= 16 (the index is stamped at both ends)")
    try:
        import zmq

        zmq_version = f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()})"
    except ImportError:
        zmq_version = "pyzmq not installed: its cases are skipped"
    cases = [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(THROUGHPUT + LATENCY)
    if unknown:
        parser.error(f"unknown cases: {sorted(unknown)}")
    if zmq_version.endswith("skipped"):
        cases = [c for c in cases if not c.startswith("zmq")]
    from nbmq import codec

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{zmq_version}; nbmq codec={'cython' if codec.COMPILED else 'python'} cpus={os.cpu_count()} load={load}")
    spins = [float(v) for v in args.busy_poll.split(",") if v]
    plan: list[tuple[str, str, dict]] = []  # (label, case, nbmq options)
    for case in cases:
        if case.startswith("zmq") or not spins:
            plan.append((case, case, {}))
        else:
            plan += [(f"{case} bp={v * 1e6:g}µs", case, {"busy_poll": v}) for v in spins]
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in plan}
    for _ in range(args.repeat):
        for label, case, options in plan:
            if case in LATENCY:
                runs[label].append(latency(case, args.size, args.rounds, options))
            else:
                runs[label].append(throughput(case, args.size, args.count, options))
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    zmq_rate = med.get("zmq-tcp", {}).get("msgs")
    print(f"throughput, {args.size} B, {args.count} messages, medians of {args.repeat}")
    print(
        f"{'case':28} {'msg/s':>10} {'MB/s':>8} {'deliv/sent':>10} {'x zmq-tcp':>9} "
        f"{'tx µs/msg':>9} {'rx µs/msg':>9}  counted drops per run"
    )
    for case in (label for label, c, _ in plan if c in THROUGHPUT):
        m = med[case]
        vs = f"{m['msgs'] / zmq_rate:>9.2f}" if zmq_rate else f"{'-':>9}"
        drops = "/".join(str(int(r["counted"])) for r in runs[case])
        print(
            f"{case:28} {m['msgs']:>10,.0f} {m['mbs']:>8.1f} {m['ratio']:>10.4f} {vs} "
            f"{m['tx_cpu']:>9.2f} {m['rx_cpu']:>9.2f}  {drops}"
        )
    zmq_lat = med.get("zmq-lat")
    print(f"round trips, {args.size} B, {args.rounds} (+{WARMUP} warm-up), medians of {args.repeat}, µs")
    print(
        f"{'case':28} {'p50':>8} {'p99':>8} {'p99.9':>8} {'p50 x zmq':>10} {'p99 x zmq':>10} "
        f"{'ping cpu':>9} {'echo cpu':>9}"
    )
    for case in (label for label, c, _ in plan if c in LATENCY):
        m = med[case]
        r50 = f"{m['p50'] / zmq_lat['p50']:>10.2f}" if zmq_lat and zmq_lat["p50"] else f"{'-':>10}"
        r99 = f"{m['p99'] / zmq_lat['p99']:>10.2f}" if zmq_lat and zmq_lat["p99"] else f"{'-':>10}"
        print(
            f"{case:28} {m['p50']:>8.1f} {m['p99']:>8.1f} {m['p999']:>8.1f} {r50} {r99} "
            f"{m['ping_cpu']:>9.1f} {m['echo_cpu']:>9.1f}"
        )


if __name__ == "__main__":
    main()
