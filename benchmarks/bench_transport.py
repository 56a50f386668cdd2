"""One-way throughput over 127.0.0.1, sender and receiver in separate processes.

    python benchmarks/bench_transport.py [--duration 1.5] [--repeat 3] [--sizes 100,1024,16384,65536]

Side by side, in one run, the cases interleaved (run 1 of every case, then run 2, ...):

- nbmq Dealer -> Dealer (UDP): default ``send()`` (auto-batched: a flush per ~64 datagrams),
  ``send(flush=True)`` (one syscall per message, the old default), and ``send(flush=False)``
  plus a ``flush()`` every ~64 datagrams (one sendmmsg, GSO-coalesced on Linux);
- the same default ``send()`` on the pure-Python twin (``NBMQ_NO_EXTENSIONS=1``: Python codec,
  recvfrom/sendto batch I/O) as the baseline;
- nbmq SafeDealer -> SafeDealer (acked, resent; must lose nothing), flushing every ~64
  datagrams, ``send_hwm`` sized to keep about 2 MiB unacked (it has no congestion control);
- the Python floor: a plain ``sendto``/``recvfrom`` loop of 500-byte datagrams;
- with ``--relay-loss``: SafeDealer 64 KiB through a relay process dropping that fraction of
  datagrams each way (seeded), with and without congestion control. The relay stands in for a
  lossy network, which would cost the two ends no CPU; here it shares the 2 cores with them, so
  it forwards in batches (GRO reads, GSO writes, views of its read buffer, drop draws as one
  numpy array per read: 6 ms of CPU per MB forwarded against 23 ms copying each datagram).
  Printed per run: the datagrams it dropped on purpose, the resends, and what the kernel dropped
  at the relay's own sockets (not part of the loss asked for).

pyzmq, in the same run and with the same user loops: ``bench_vs_pyzmq.py``.

Each case sends for ``--duration`` seconds; the receiver drains (``recv()`` until WouldBlock,
then waits) until it has been idle for 0.5 s. Reported: delivered messages/s and MB/s (10**6
bytes, payload only) measured at the receiver from its first to its last message,
delivered/sent, and per run the kernel's receive-buffer drops (``counters.kernel_drops``) and
our own queue's drops (``counters.dropped_total``). Medians of ``--repeat`` runs.
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


def _report(conn: Any, count: int, first: float, last: float, kernel: int = -1, ours: int = -1) -> None:
    conn.send((count, first, last, kernel, ours))
    conn.close()


# --- nbmq ------------------------------------------------------------------------------------
def _options(kind: str, size: int) -> dict[str, int]:
    options = dict(BIG)
    if kind == "SafeDealer":  # no congestion control: keep about WINDOW bytes unacked
        options["send_hwm"] = max(8, min(BIG["send_hwm"], WINDOW // max(size, 1)))
    return options


def _nbmq_receiver(kind: str, size: int, conn: Any, deadline: float, extra: Any = None, idle: float = IDLE) -> None:
    import nbmq.transports as nt
    from nbmq.errors import WouldBlock

    sock = getattr(nt, kind).bind("127.0.0.1:0", **FAST, **_options(kind, size), **(extra or {}))
    conn.send(sock.local_address)
    count, first, last = 0, 0.0, 0.0
    recv = sock.recv
    while time.monotonic() < deadline:
        try:
            recv(timeout=idle)
        except WouldBlock:
            if count:
                break
            continue
        last = time.monotonic()
        if not count:
            first = last
        count += 1
    counters = sock.counters
    _report(conn, count, first, last, counters.kernel_drops, counters.dropped_total)
    sock.close(linger=0)


def _nbmq_sender(
    kind: str, address: str, size: int, duration: float, batched: Any, conn: Any, extra: Any = None
) -> None:
    import nbmq.transports as nt
    from nbmq.errors import WouldBlock
    from nbmq.wire import MAX_CHUNK_SIZE

    sock = getattr(nt, kind).connect(address, **FAST, **_options(kind, size), **(extra or {}))
    if not sock.wait_connected(5.0):
        conn.send(0)
        return
    msg = [b"x" * size]
    sent = 0
    burst = max(1, 64 // max(1, -(-size // MAX_CHUNK_SIZE))) if batched is True else 64  # ~64 datagrams
    flush = False if batched is True else (True if batched == "each" else None)
    end = time.monotonic() + duration
    send = sock.send
    while time.monotonic() < end:
        for _ in range(burst):
            try:
                send(msg, 0.0, flush)
            except WouldBlock:
                sock.poll(0.001)
                break
            sent += 1
        if batched is True:
            sock.flush()
    sock.close(linger=10.0)  # a SafeDealer waits here for its last acks
    conn.send((sent, sock.engine.counters.resends) if extra else sent)


def nbmq_case(kind: str, size: int, duration: float, batched: Any = False, pure: bool = False) -> tuple:
    """``batched``: False = default send() (auto-batched), "each" = send(flush=True),
    True = send(flush=False) + flush() per ~64 datagrams. ``pure``: both processes on the
    pure-Python twin (started fresh with NBMQ_NO_EXTENSIONS=1)."""
    ctx: Any = mp
    if pure:
        ctx = mp.get_context("spawn")
    with _pure_env(pure):
        return _run(
            lambda c, deadline: ctx.Process(target=_nbmq_receiver, args=(kind, size, c, deadline)),
            lambda addr, c: ctx.Process(target=_nbmq_sender, args=(kind, addr, size, duration, batched, c)),
            duration,
        )


class _pure_env:
    """Sets NBMQ_NO_EXTENSIONS=1 while spawned children start."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __enter__(self) -> None:
        if self.on:
            self.saved = os.environ.get("NBMQ_NO_EXTENSIONS")
            os.environ["NBMQ_NO_EXTENSIONS"] = "1"

    def __exit__(self, *exc: Any) -> None:
        if self.on:
            if self.saved is None:
                del os.environ["NBMQ_NO_EXTENSIONS"]
            else:
                os.environ["NBMQ_NO_EXTENSIONS"] = self.saved


# --- SafeDealer through a lossy relay ---------------------------------------------------------
def _relay(server: str, loss: float, conn: Any, deadline: float) -> None:
    """Forward datagrams both ways between one client and ``server``, dropping ``loss`` of
    them (seeded), counted and sent back through ``conn`` at the end.

    The relay stands in for a lossy network, which costs the sender and receiver no CPU; here
    it shares 2 cores with them, so it is kept cheap: GRO reads and GSO
    writes (one syscall carries many datagrams), the drop decisions drawn as one numpy array
    per read, and the kept datagrams forwarded as views of the read buffer, not copies."""
    import selectors

    import numpy as np

    from nbmq.transports.batch import batch_io

    host, port = server.rsplit(":", 1)
    upstream_addr = (host, int(port))
    front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for s in (front, back):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
    fio, bio = batch_io(front), batch_io(back)  # GSO / GRO where the OS has them
    conn.send("%s:%d" % front.getsockname())
    rng = np.random.default_rng(1)
    client = None
    dropped = 0
    sel = selectors.DefaultSelector()
    sel.register(front, selectors.EVENT_READ, (fio, bio, True))
    sel.register(back, selectors.EVENT_READ, (bio, fio, False))
    while time.monotonic() < deadline:
        for key, _ in sel.select(0.2):
            rx, tx, from_client = key.data
            view = rx.view
            for _ in range(16):
                n, offsets, lengths, addrs = rx.recv()
                if not n:
                    break
                if from_client:
                    client = addrs[0]
                dest = upstream_addr if from_client else client
                keep = rng.random(n) >= loss
                kept = int(np.count_nonzero(keep))
                dropped += n - kept
                out = [
                    (view[off : off + length], dest)
                    for off, length in zip(offsets[:n][keep].tolist(), lengths[:n][keep].tolist())
                ]
                start = 0
                for _ in range(1000):  # wait out a full send buffer, briefly (out views rx's buffer)
                    start = tx.send(out, start)
                    if start >= len(out):
                        break
                    time.sleep(0.0001)
        if conn.poll():
            break
    conn.send((dropped, fio.kernel_drops + bio.kernel_drops))


def relay_case(size: int, duration: float, loss: float, congestion: bool) -> tuple:
    """SafeDealer -> relay (``loss`` each way) -> SafeDealer; returns _run's tuple plus
    (datagrams the relay dropped on purpose, resends, datagrams the kernel dropped at the
    relay's sockets for want of buffer; -1 where not known) at the end."""
    opts = {"safe_congestion": congestion}
    rx_parent, rx_child = mp.Pipe()
    tx_parent, tx_child = mp.Pipe()
    relay_parent, relay_child = mp.Pipe()
    deadline = time.monotonic() + duration + 30.0
    # a lost frame stalls its message for a resend timeout or more: wait longer before "done"
    receiver = mp.Process(target=_nbmq_receiver, args=("SafeDealer", size, rx_child, deadline, opts, 3.0))
    receiver.start()
    address = rx_parent.recv()
    relay = mp.Process(target=_relay, args=(address, loss, relay_child, deadline))
    relay.start()
    front = relay_parent.recv()
    sender = mp.Process(target=_nbmq_sender, args=("SafeDealer", front, size, duration, False, tx_child, opts))
    sender.start()
    sent, resends = tx_parent.recv() if tx_parent.poll(duration + 30.0) else (0, 0)
    delivered, first, last, kernel, ours = (
        rx_parent.recv() if rx_parent.poll(duration + 30.0) else (0, 0.0, 0.0, -1, -1)
    )
    relay_parent.send("stop")
    dropped, relay_kernel = relay_parent.recv() if relay_parent.poll(5.0) else (-1, -1)
    for proc in (sender, receiver, relay):
        proc.join(5.0)
        if proc.is_alive():
            proc.kill()
    return (max(last - first, 1e-9), delivered, sent, kernel, ours), dropped, resends, relay_kernel


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
        except TimeoutError:
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


# --- harness ----------------------------------------------------------------------------------
def _run(make_receiver: Any, make_sender: Any, duration: float) -> tuple:
    """Returns (seconds from first to last delivered message, delivered, sent, kernel drops,
    our drops); the drops are -1 where not known."""
    rx_parent, rx_child = mp.Pipe()
    tx_parent, tx_child = mp.Pipe()
    deadline = time.monotonic() + duration + 15.0
    receiver = make_receiver(rx_child, deadline)
    receiver.start()
    address = rx_parent.recv()
    sender = make_sender(address, tx_child)
    sender.start()
    sent = tx_parent.recv() if tx_parent.poll(duration + 30.0) else 0
    delivered, first, last, kernel, ours = (
        rx_parent.recv() if rx_parent.poll(duration + 30.0) else (0, 0.0, 0.0, -1, -1)
    )
    for proc in (sender, receiver):
        proc.join(5.0)
        if proc.is_alive():
            proc.kill()
    return max(last - first, 1e-9), delivered, sent, kernel, ours


def _summary(runs: list[tuple], size: int) -> dict[str, Any]:
    rows = [(d / span, d * size / span / 1e6, d / s if s else 0.0, d, s, k, o) for span, d, s, k, o in runs]
    return {
        "msgs": statistics.median(r[0] for r in rows),
        "mbs": statistics.median(r[1] for r in rows),
        "ratio": statistics.median(r[2] for r in rows),
        "lost": sum(r[4] - r[3] for r in rows),
        "kernel": "/".join("-" if r[5] < 0 else str(r[5]) for r in rows),
        "ours": "/".join("-" if r[6] < 0 else str(r[6]) for r in rows),
    }


def _median_case(fn: Any, size: int, repeat: int) -> dict[str, Any]:
    return _summary([fn() for _ in range(repeat)], size)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1.5, help="seconds each sender sends")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (the median is shown)")
    parser.add_argument("--sizes", default="100,1024,16384,65536", help="message sizes, bytes")
    parser.add_argument(
        "--relay-loss", type=float, default=0.05, help="loss of the SafeDealer relay case, each way (0 skips it)"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    d, r = args.duration, args.repeat
    from nbmq import codec
    from nbmq.transports import batch

    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(
        f"codec={'cython' if codec.COMPILED else 'python'} batch_io={'recvmmsg' if batch.COMPILED else 'recvfrom'} "
        f"cpus={os.cpu_count()} load={load} duration={d}s repeat={r}"
    )
    floor = _median_case(lambda: python_floor(500, d), 500, r)
    head = (
        f"{'case':34} {'size':>6} {'msgs/s':>10} {'MB/s':>8} {'deliv/sent':>10} {'x baseline':>10} "
        f"kernel drops / our drops (per run)"
    )
    print(head)
    print("-" * len(head))
    print(
        f"{'python sendto/recvfrom':34} {500:>6} {floor['msgs']:>10,.0f} {floor['mbs']:>8.1f} {floor['ratio']:>10.3f}"
    )
    for size in sizes:
        cases = [
            ("nbmq Dealer send() [pure-Python]", lambda: nbmq_case("Dealer", size, d, pure=True)),
            ("nbmq Dealer send()", lambda: nbmq_case("Dealer", size, d)),
            ("nbmq Dealer send(flush=True)", lambda: nbmq_case("Dealer", size, d, batched="each")),
            ("nbmq Dealer flush() per ~64 dgrams", lambda: nbmq_case("Dealer", size, d, batched=True)),
            ("nbmq SafeDealer send()", lambda: nbmq_case("SafeDealer", size, d)),
        ]
        runs: dict[str, list[tuple]] = {name: [] for name, _ in cases}
        for _ in range(r):  # interleaved: load changes hit every case alike
            for name, fn in cases:
                runs[name].append(fn())
        rows = {name: _summary(runs[name], size) for name in runs}
        base = rows["nbmq Dealer send() [pure-Python]"]["msgs"] or 1e-9
        for name, row in rows.items():
            lost = f" lost={row['lost']}" if "Safe" in name else ""
            print(
                f"{name:34} {size:>6} {row['msgs']:>10,.0f} {row['mbs']:>8.1f} {row['ratio']:>10.3f} "
                f"{row['msgs'] / base:>10.2f}  {row['kernel']} / {row['ours']}{lost}"
            )
    if args.relay_loss > 0:
        size = 65536
        print(
            f"SafeDealer {size} B through a relay dropping {args.relay_loss:.0%} each way "
            "(x baseline: against the run without congestion control)"
        )
        runs: dict[bool, list] = {False: [], True: []}
        for _ in range(r):
            for cc in (False, True):
                runs[cc].append(relay_case(size, d, args.relay_loss, cc))
        base_rate = None
        for cc in (False, True):
            row = _summary([x[0] for x in runs[cc]], size)
            base_rate = base_rate or row["msgs"] or 1e-9
            detail = " ".join(f"relay_dropped={x[1]},resends={x[2]},relay_kernel_drops={x[3]}" for x in runs[cc])
            name = f"SafeDealer relay cc={'on' if cc else 'off'}"
            print(
                f"{name:34} {size:>6} {row['msgs']:>10,.0f} {row['mbs']:>8.1f} {row['ratio']:>10.3f} "
                f"{row['msgs'] / base_rate:>10.2f}  {row['kernel']} / {row['ours']} lost={row['lost']} {detail}"
            )


if __name__ == "__main__":
    main()
