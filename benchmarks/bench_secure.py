"""What secure mode costs: the secure Dealer against the plain one, in the same run, 100 B and 64 KiB.

    python benchmarks/bench_secure.py [--repeat 5] [--duration 1.5] [--sizes 100,65536]
    python -m pytest benchmarks/bench_secure.py      # pytest-benchmark table (engines alone)

Two measurements, each case interleaved with its plain twin (plain run 1, secure run 1, bundled
run 1, plain run 2, ...), medians reported with the ratio to plain. "secure" seals every frame
alone (``max_datagram_size=0``); "bundled" lets the frames of one flush to one peer share a seal
and a datagram as large as the path allows (the default, ``max_datagram_size=None``, docs/secure.md:
65,507 bytes over loopback, 1,472 for engines alone, which know no path; ``--bundle-size`` sets one
size for both):

- **UDP over 127.0.0.1**, sender and receiver in separate processes: ``bench_transport.py``'s
  Dealer case (default ``send()``), the secure one given keys (``secret_key``,
  ``server_public_key``, ``allowed_public_keys``). Delivered messages per second at the receiver.
- **Engines alone** (``bench_engine.py --direct``'s loop): each flush fed to the other engine as
  one ``receive_datagrams`` batch, both engines on one core, CPU time. Here nothing hides the
  sealing and opening behind a system call, so it is the harder ratio.
- **Each side alone** (``--sides``): the same engines, bundles as large as the loopback path
  allows (as over UDP), the CPU time of each side per message: the sender's ``send()`` and
  flush (``datagrams_to_send``), and the receiver's ``receive_datagrams`` of that flush (64
  datagrams a call, as ``recvmmsg`` reads them) and ``recv``. CPU time moves less with the
  machine's load than the loopback rates do, and it says which side the cost is on.

The engine path in use (compiled or ``NBMQ_NO_EXTENSIONS=1``'s Python twin) and whether the
compiled ``FrameCipher`` runs are printed. Importing this module runs nothing.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import random
import statistics
import time
from typing import Any

import bench_engine  # a sibling: the script's folder is on sys.path, and pytest puts it there
import bench_transport

SIZES = (100, 65536)
#: messages per engines-alone round
BATCH = {100: 5000, 65536: 60}


#: The secure variants and their ``max_datagram_size``: every frame sealed alone, or bundled.
SECURE_MODES: dict[str, int | None] = {"secure": 0, "bundled": None}
MODES = ("plain", *SECURE_MODES)


def keys(mode: str = "secure", max_datagram_size: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(bound side's options, connecting side's options) of a fresh pair: none for "plain",
    else new keys and ``max_datagram_size`` (bytes; None: the mode's)."""
    import nbmq

    if mode == "plain":
        return {}, {}
    server_public, server_secret = nbmq.generate_keypair()
    client_public, client_secret = nbmq.generate_keypair()
    size = SECURE_MODES[mode] if max_datagram_size is None else max_datagram_size
    return (
        {"secret_key": server_secret, "allowed_public_keys": [client_public], "max_datagram_size": size},
        {"secret_key": client_secret, "server_public_key": server_public, "max_datagram_size": size},
    )


class _SentOnly:
    """The sender's pipe end, passing on the sent count alone (``bench_transport``'s sender
    reports resends beside it when it is given extra options)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def send(self, value: Any) -> None:
        self.conn.send(value[0] if isinstance(value, tuple) else value)

    def close(self) -> None:
        self.conn.close()


def udp_case(size: int, duration: float, mode: str) -> tuple:
    """One run of Dealer -> Dealer over loopback UDP (separate processes), ``mode`` one of
    :data:`MODES`: bench_transport's row (seconds, delivered, sent, kernel drops, our drops)."""
    server_extra, client_extra = keys(mode) if mode != "plain" else (None, None)
    return bench_transport._run(
        lambda c, deadline: mp.Process(
            target=bench_transport._nbmq_receiver, args=("Dealer", size, c, deadline, server_extra)
        ),
        lambda addr, c: mp.Process(
            target=bench_transport._nbmq_sender,
            args=("Dealer", addr, size, duration, False, _SentOnly(c), client_extra),
        ),
        duration,
    )


def engine_pair(mode: str, max_datagram_size: int | None = None) -> tuple[Any, Any]:
    """(server, client) Dealer engines, connected on the simulator, options as bench_engine's;
    ``mode`` one of :data:`MODES`, ``max_datagram_size`` as :func:`keys`'."""
    from nbmq.engine import Dealer
    from nbmq.options import SocketOptions
    from nbmq.testing import Link, connected_pair

    server_extra, client_extra = keys(mode, max_datagram_size)
    big = dict(send_hwm=10_000, recv_hwm=100_000, max_tick_send=10_000)
    _, server, client = connected_pair(
        Dealer(SocketOptions(**big, **server_extra), random.Random(1)),
        Dealer(SocketOptions(**big, **client_extra)),
        link=Link(delay=0.0001),
    )
    return server.engine, client.engine


def engine_rate(size: int, mode: str, batch: int) -> float:
    """Messages per second (CPU time) of one round of bench_engine's direct loop."""
    server, client = engine_pair(mode)
    message = [bytes(range(256)) * (size // 256) + bytes(size % 256)]
    bench_engine.run_direct(server, client, message, min(batch, 200))  # warm-up
    gc.collect()
    t0 = time.process_time()
    got = bench_engine.run_direct(server, client, message, batch)
    return got / (time.process_time() - t0)


def side_costs(size: int, mode: str, rounds: int = 40) -> tuple[float, float]:
    """Median CPU microseconds per message of the sender and of the receiver, each timed alone,
    over ``rounds`` flushes of messages of ``size`` bytes (64 a flush, as the transport's
    auto-batching sends them, fewer where that passes 512 KiB: 8 of 64 KiB); ``mode`` one of
    :data:`MODES`, bundles as large as the loopback path allows."""
    messages = max(1, min(64, (512 << 10) // max(size, 1)))
    import socket

    from nbmq.transports.udp import path_datagram_size

    bundle = None
    if mode == "bundled" and SECURE_MODES["bundled"] is None:  # (--bundle-size sets one)
        bundle = path_datagram_size(socket.AF_INET, ("127.0.0.1", 9), False)
    server, client = engine_pair(mode, bundle)
    message = [bytes(range(256)) * (size // 256) + bytes(size % 256)]
    sends, receives = [], []
    now = 1.0
    for _ in range(rounds + 2):  # the first two warm up
        now += 0.0001
        t0 = time.process_time()
        for _ in range(messages):
            client.send(message, now)
        out = client.datagrams_to_send(now)
        t1 = time.process_time()
        bench_engine._feed(server, out, bench_engine.CLIENT, now)
        del out  # as a transport drops what it sent
        got = 0
        while server.recv_ready():
            server.recv()
            got += 1
        t2 = time.process_time()
        if got != messages:
            raise RuntimeError(f"{got} of {messages} messages arrived")
        bench_engine._feed(client, server.datagrams_to_send(now), bench_engine.SERVER, now)
        sends.append((t1 - t0) / messages * 1e6)
        receives.append((t2 - t1) / messages * 1e6)
    return statistics.median(sends[2:]), statistics.median(receives[2:])


def _row(name: str, size: int, rates: dict[str, list[float]], unit: str) -> str:
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    base = medians["plain"]
    cells = " ".join(f"{medians[m]:>12,.0f} {medians[m] / base:>6.2f}x" for m in SECURE_MODES)
    return f"{name:<14} {size:>7} {unit:<7} {base:>12,.0f} {cells}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each case (medians)")
    parser.add_argument("--duration", type=float, default=1.5, help="seconds a UDP run sends")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bytes, comma-separated")
    parser.add_argument("--no-udp", action="store_true", help="engines alone only")
    parser.add_argument("--sides", action="store_true", help="also each side alone (CPU per message)")
    parser.add_argument(
        "--bundle-size",
        type=int,
        default=SECURE_MODES["bundled"],
        help="max_datagram_size of the bundled case, bytes (default: from the path)",
    )
    args = parser.parse_args(argv)
    SECURE_MODES["bundled"] = args.bundle_size
    from nbmq import codec
    from nbmq.engine import secure

    print(
        f"engine: {'compiled' if codec.COMPILED else 'python'}; FrameCipher: "
        f"{'compiled (OpenSSL)' if secure.COMPILED else 'python (cryptography)'}; medians of {args.repeat}, interleaved"
    )
    heads = " ".join(f"{m:>12} {'ratio':>7}" for m in SECURE_MODES)
    print(f"{'case':<14} {'size':>7} {'unit':<7} {'plain':>12} {heads}")
    for size in (int(x) for x in args.sizes.split(",")):
        batch = BATCH.get(size, max(20, 500_000 // max(size, 1)))
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.repeat):
            for mode in MODES:
                rates[mode].append(engine_rate(size, mode, batch))
        print(_row("engines alone", size, rates, "msg/s"))
        if args.sides:
            costs: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
            for _ in range(args.repeat):
                for mode in MODES:
                    costs[mode].append(side_costs(size, mode))
            for side, name in enumerate(("sender alone", "receiver alone")):  # as rates: 1e6 / us
                print(_row(name, size, {m: [1e6 / c[side] for c in costs[m]] for m in MODES}, "msg/s"))
        if args.no_udp:
            continue
        runs: dict[str, list[tuple]] = {mode: [] for mode in MODES}
        for _ in range(args.repeat):
            for mode in MODES:
                runs[mode].append(udp_case(size, args.duration, mode))
        summaries = {mode: bench_transport._summary(runs[mode], size) for mode in MODES}
        print(_row("UDP loopback", size, {m: [d / span for span, d, *_ in runs[m]] for m in MODES}, "msg/s"))
        print(
            f"{'':<14} {'':>7} delivered/sent "
            + ", ".join(f"{m} {summaries[m]['ratio']:.3f}" for m in MODES)
            + "; kernel drops "
            + " / ".join(str(summaries[m]["kernel"]) for m in MODES)
        )


try:
    import pytest
except ImportError:  # pragma: no cover - the script mode needs no pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s}B")
    @pytest.mark.parametrize("mode", MODES)
    def test_secure_dealer_engines(benchmark, size, mode):
        pytest.importorskip("cryptography")
        server, client = engine_pair(mode)
        message = [bytes(size)]
        batch = BATCH[size]
        bench_engine.run_direct(server, client, message, min(batch, 200))
        result = benchmark.pedantic(bench_engine.run_direct, args=(server, client, message, batch), rounds=5)
        assert result == batch
        benchmark.extra_info["msgs_per_s"] = round(batch / benchmark.stats.stats.median)


if __name__ == "__main__":
    main()
