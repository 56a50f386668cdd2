"""One-way throughput over 127.0.0.1, sender and receiver in separate processes.

    python benchmarks/bench_transport.py [--duration 1.5] [--repeat 3] [--sizes 100,1024,16384,65536]

Side by side, in one run:

- nbmq Dealer -> Dealer (UDP), ``send()`` flushing every message, and with ``send(flush=False)``
  plus a ``flush()`` every ~64 datagrams (one sendmmsg, GSO-coalesced on Linux);
- nbmq SafeDealer -> SafeDealer (acked, resent; must lose nothing), flushing every ~64
  datagrams, ``send_hwm`` sized to keep about 2 MiB unacked (it has no congestion control);
- the Python floor: a plain ``sendto``/``recvfrom`` loop of 500-byte datagrams;
- pyzmq PUSH/PULL over TCP (if pyzmq is installed).

Each case sends for ``--duration`` seconds; the receiver counts until it has been idle for
0.5 s. Reported: delivered messages/s and MB/s (10**6 bytes, payload only) measured at the
receiver from its first to its last message, and delivered/sent. Medians of ``--repeat`` runs.
Importing this module runs nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import time
from typing import Any

IDLE = 0.5
FAST = dict(peer_heartbeat_ivl=0.2, peer_keepalive=5.0, reconnect_wait=0.1)
BIG = dict(send_hwm=10_000, recv_hwm=100_000, rcvbuf=4 << 20, sndbuf=4 << 20)
WINDOW = 2 << 20


def _report(conn: Any, count: int, first: float, last: float) -> None:
    conn.send((count, first, last))
    conn.close()


# --- nbmq ------------------------------------------------------------------------------------
def _options(kind: str, size: int) -> dict[str, int]:
    options = dict(BIG)
    if kind == "SafeDealer":  # no congestion control: keep about WINDOW bytes unacked
        options["send_hwm"] = max(8, min(BIG["send_hwm"], WINDOW // max(size, 1)))
    return options


def _nbmq_receiver(kind: str, size: int, conn: Any, deadline: float) -> None:
    import nbmq.transports as nt
    from nbmq.errors import WouldBlock

    sock = getattr(nt, kind).bind("127.0.0.1:0", **FAST, **_options(kind, size))
    conn.send(sock.local_address)
    count, first, last = 0, 0.0, 0.0
    recv = sock.recv
    while time.monotonic() < deadline:
        try:
            recv(timeout=IDLE)
        except WouldBlock:
            if count:
                break
            continue
        last = time.monotonic()
        if not count:
            first = last
        count += 1
    _report(conn, count, first, last)
    sock.close(linger=0)


def _nbmq_sender(kind: str, address: str, size: int, duration: float, batched: bool, conn: Any) -> None:
    import nbmq.transports as nt
    from nbmq.errors import WouldBlock

    from nbmq.wire import MAX_CHUNK_SIZE

    sock = getattr(nt, kind).connect(address, **FAST, **_options(kind, size))
    if not sock.wait_connected(5.0):
        conn.send(0)
        return
    msg = [b"x" * size]
    sent = 0
    burst = max(1, 64 // max(1, -(-size // MAX_CHUNK_SIZE))) if batched else 64  # ~64 datagrams
    end = time.monotonic() + duration
    send = sock.send
    while time.monotonic() < end:
        for _ in range(burst):
            try:
                send(msg, 0.0, not batched)
            except WouldBlock:
                sock.poll(0.001)
                break
            sent += 1
        if batched:
            sock.flush()
    sock.close(linger=10.0)  # a SafeDealer waits here for its last acks
    conn.send(sent)


def nbmq_case(kind: str, size: int, duration: float, batched: bool = False) -> tuple[float, int, int]:
    return _run(
        lambda c, deadline: mp.Process(target=_nbmq_receiver, args=(kind, size, c, deadline)),
        lambda addr, c: mp.Process(target=_nbmq_sender, args=(kind, addr, size, duration, batched, c)),
        duration,
    )


# --- the Python floor -------------------------------------------------------------------------
def _py_receiver(conn: Any, deadline: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(IDLE)
    conn.send("%s:%d" % sock.getsockname())
    count, first, last = 0, 0.0, 0.0
    while time.monotonic() < deadline:
        try:
            sock.recvfrom(2048)
        except socket.timeout:
            if count:
                break
            continue
        last = time.monotonic()
        if not count:
            first = last
        count += 1
    _report(conn, count, first, last)


def _py_sender(address: str, size: int, duration: float, conn: Any) -> None:
    host, port = address.rsplit(":", 1)
    dest = (host, int(port))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    data = b"x" * size
    sent = 0
    end = time.monotonic() + duration
    while time.monotonic() < end:
        for _ in range(64):
            sock.sendto(data, dest)
        sent += 64
    conn.send(sent)


def python_floor(size: int, duration: float) -> tuple[float, int, int]:
    return _run(
        lambda c, deadline: mp.Process(target=_py_receiver, args=(c, deadline)),
        lambda addr, c: mp.Process(target=_py_sender, args=(addr, size, duration, c)),
        duration,
    )


# --- pyzmq ------------------------------------------------------------------------------------
def _zmq_receiver(conn: Any, deadline: float) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    conn.send(f"tcp://127.0.0.1:{port}")
    count, first, last = 0, 0.0, 0.0
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while time.monotonic() < deadline:
        try:
            sock.recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            if not poller.poll(IDLE * 1000):
                if count:
                    break
            continue
        last = time.monotonic()
        if not count:
            first = last
        count += 1
    _report(conn, count, first, last)
    sock.close(0)
    ctx.term()


def _zmq_sender(address: str, size: int, duration: float, conn: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(address)
    data = b"x" * size
    sent = 0
    end = time.monotonic() + duration
    while time.monotonic() < end:
        for _ in range(64):
            sock.send(data, copy=size > 4096)
        sent += 64
    sock.close(linger=10_000)
    ctx.term()
    conn.send(sent)


def zmq_case(size: int, duration: float) -> tuple[float, int, int]:
    return _run(
        lambda c, deadline: mp.Process(target=_zmq_receiver, args=(c, deadline)),
        lambda addr, c: mp.Process(target=_zmq_sender, args=(addr, size, duration, c)),
        duration,
    )


# --- harness ----------------------------------------------------------------------------------
def _run(make_receiver: Any, make_sender: Any, duration: float) -> tuple[float, int, int]:
    """Returns (seconds from first to last delivered message, delivered, sent)."""
    rx_parent, rx_child = mp.Pipe()
    tx_parent, tx_child = mp.Pipe()
    deadline = time.monotonic() + duration + 15.0
    receiver = make_receiver(rx_child, deadline)
    receiver.start()
    address = rx_parent.recv()
    sender = make_sender(address, tx_child)
    sender.start()
    sent = tx_parent.recv() if tx_parent.poll(duration + 15.0) else 0
    delivered, first, last = rx_parent.recv() if rx_parent.poll(duration + 15.0) else (0, 0.0, 0.0)
    for proc in (sender, receiver):
        proc.join(5.0)
        if proc.is_alive():
            proc.kill()
    return max(last - first, 1e-9), delivered, sent


def _median_case(fn: Any, size: int, repeat: int) -> dict[str, float]:
    rows = []
    for _ in range(repeat):
        span, delivered, sent = fn()
        rows.append((delivered / span, delivered * size / span / 1e6, delivered / sent if sent else 0.0, delivered, sent))
    rate = statistics.median(r[0] for r in rows)
    return {
        "msgs": rate,
        "mbs": statistics.median(r[1] for r in rows),
        "ratio": statistics.median(r[2] for r in rows),
        "lost": sum(r[4] - r[3] for r in rows),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1.5, help="seconds each sender sends")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (the median is shown)")
    parser.add_argument("--sizes", default="100,1024,16384,65536", help="message sizes, bytes")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    d, r = args.duration, args.repeat
    from nbmq import codec
    from nbmq.transports import batch
    from nbmq.wire import MAX_CHUNK_SIZE

    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"codec={codec.IMPLEMENTATION} batch_io={'recvmmsg' if batch.NATIVE else 'recvfrom'} "
          f"cpus={os.cpu_count()} load={load} duration={d}s repeat={r}")
    floor = _median_case(lambda: python_floor(500, d), 500, r)
    try:
        import zmq  # noqa: F401

        have_zmq = True
    except ImportError:
        have_zmq = False
    head = f"{'case':30} {'size':>6} {'msgs/s':>10} {'MB/s':>8} {'deliv/sent':>10} {'dgram/s x floor':>15} {'msgs/s x zmq':>12}"
    print(head)
    print("-" * len(head))
    print(f"{'python sendto/recvfrom':30} {500:>6} {floor['msgs']:>10,.0f} {floor['mbs']:>8.1f} {floor['ratio']:>10.3f} {1:>15.2f}")
    for size in sizes:
        frames = max(1, -(-size // MAX_CHUNK_SIZE))  # nbmq datagrams per message
        zmq_row = _median_case(lambda: zmq_case(size, d), size, r) if have_zmq else None
        cases = [
            ("nbmq Dealer (flush each)", lambda: nbmq_case("Dealer", size, d)),
            ("nbmq Dealer (flush ~64 dgrams)", lambda: nbmq_case("Dealer", size, d, batched=True)),
            ("nbmq SafeDealer", lambda: nbmq_case("SafeDealer", size, d, batched=True)),
        ]
        for name, fn in cases:
            row = _median_case(fn, size, r)
            vs_zmq = f"{row['msgs'] / zmq_row['msgs']:>12.2f}" if zmq_row else f"{'-':>12}"
            extra = f"  lost={row['lost']}" if name.endswith("SafeDealer") else ""
            print(f"{name:30} {size:>6} {row['msgs']:>10,.0f} {row['mbs']:>8.1f} {row['ratio']:>10.3f} "
                  f"{row['msgs'] * frames / floor['msgs']:>15.2f} {vs_zmq}{extra}")
        if zmq_row:
            print(f"{'pyzmq PUSH/PULL tcp':30} {size:>6} {zmq_row['msgs']:>10,.0f} {zmq_row['mbs']:>8.1f} "
                  f"{zmq_row['ratio']:>10.3f} {'':>15} {1:>12.2f}")


if __name__ == "__main__":
    main()
