"""SafeDealer, Dealer and TCP on a real bottleneck (veth + tbf between two namespaces; root).

    sudo .venv/bin/python benchmarks/bench_bottleneck.py [--rates 5,50,200] [--queues 10,100]
        [--seconds 6] [--cases single,tcp,fair,share,tcpshare,dealer] [--size 16384] [--baseline DIR] [--pin]
        [--repeat 1]

Every case builds its own link (:mod:`bottleneck_link`) at each rate (Mbit/s) and queue
(tbf ``latency``, ms) and prints one row. TCP alone on the same link is the baseline, measured
in the same run:

- ``single``: one SafeDealer flow of ``--size`` messages. ``goodput``: payload delivered in the
  steady part (after 1 s) over the link rate; ``wire``: what tbf sent in that part over the link
  rate (headers and resends included); ``resends``: of the frames sent; ``lost``: messages sent
  and never delivered; ``qdelay``: the median of srtt - min_rtt over the steady samples of the
  sender's path state, as a fraction of the queue's capacity (``queue`` ms); ``CPU``: what
  the sender and the receiver used, in cores (near 1.0: the process, not the link, is the
  limit), and how long they waited, runnable, for a core (the machine's other load).
  With ``--baseline DIR`` (another nbmq source tree, extensions built in place) the same case
  runs first with that tree's engine (``base``).
- ``tcp``: one TCP flow (CUBIC, ``send`` of 64 KiB blocks), ``goodput`` and ``wire`` as above.
- ``fair``: two SafeDealer flows, the second started 2 s after the first; Jain's index of their
  goodputs over 1 s windows: the first time after the second start that it reaches 0.95, and
  its value 4-5 s after the second start.
- ``share``: a SafeDealer flow and a TCP flow together (CUBIC, Linux's default, then BBR);
  each one's goodput over the link rate. A run of 16 s or more also prints them after 12 s: BBR
  sizes its window from the smallest RTT of its first 10 s, and a 6 s run sees only that phase.
- ``tcpshare``: the baseline for ``share``: a TCP CUBIC flow in the SafeDealer's place.
- ``--repeat N`` runs ``fair`` and ``share`` N times per link and prints the medians too (the
  shares swing from run to run, more so on a loaded machine).
- ``dealer``: a Dealer offering 2x the link rate (``pace_rate``) in one-datagram messages, then
  one paced at the link rate: offered, delivered, and the losses by where they happened (the
  sender's drop counters, the receiver's kernel drops, tbf's drops); ``unaccounted`` must be 0.

The payload ceiling of a full nbmq datagram on Ethernet is 466 / (500 + 42) = 0.86 of the link
(16 KiB messages: 16384 / 19120 = 0.857); TCP's is about 0.96. ``wire`` compares like with like.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bottleneck_link import BIN, Bottleneck, unavailable  # noqa: E402

WARMUP = 1.0  #: seconds before the steady part of a run
#: seconds before the late part of a long ``share`` run: BBR keeps the smallest RTT of its first
#: 10 s (its min-RTT filter), taken on the empty path at its start, so until its first ProbeRTT
#: its window is its floor (about 20 segments) whatever queue stands; after it, it is 2x its rate
#: times an RTT that includes the standing queue.
LATE = 12.0
LEAD = 2.0  #: seconds the flows' processes get to start and connect (more under load) before the run
PORT = 7000
TCP_PORT = 7100


def _steady(bins: list[int], epoch: float, start: float, end: float) -> float:
    """Bytes per second delivered in bins from wall-clock ``start`` to ``end``."""
    i0 = max(0, int((start - epoch) / BIN))
    i1 = max(i0 + 1, int((end - epoch) / BIN))
    return sum(bins[i0:i1]) / ((i1 - i0) * BIN)


def _sample_qdisc(link: Bottleneck, at: float) -> dict[str, int]:
    time.sleep(max(0.0, at - time.time()))
    return link.qdisc("a")


def single(
    rate: float, queue: float, seconds: float, size: int, baseline: str | None = None, pin: bool = False
) -> dict[str, Any]:
    """One SafeDealer flow (see the module docstring); returns the row's figures.
    ``baseline``: a source tree whose nbmq both ends import instead (built in place);
    ``pin``: the sender runs on core 0 and the receiver on core 1."""
    with Bottleneck(rate, queue) as link:
        start = time.time() + LEAD
        recv = link.start(
            "b",
            "safe_recv",
            pythonpath=baseline,
            cpu=1 if pin else None,
            port=PORT,
            seconds=seconds + 10,
            epoch=start,
        )
        send = link.start(
            "a",
            "safe_send",
            pythonpath=baseline,
            cpu=0 if pin else None,
            dest=f"{link.addr_b}:{PORT}",
            seconds=seconds,
            size=size,
            start_at=start,
        )
        q0 = _sample_qdisc(link, start + WARMUP)
        q1 = _sample_qdisc(link, start + seconds)
        s, r = send.result(), recv.result()
    span = seconds - WARMUP
    c = s["counters"]
    delays = [p["srtt"] - p["min_rtt"] for p in s["paths"] if p["t"] >= WARMUP and p.get("srtt")]
    frames = max(1, c["data_frames_out"])
    return {
        "goodput": _steady(r["bins"], r["epoch"], start + WARMUP, start + seconds) / link.rate_bytes,
        "wire": (q1["bytes"] - q0["bytes"]) / span / link.rate_bytes,
        "resends": c["resends"] / frames,
        "resend_count": c["resends"],
        "lost": s["sent"] - r["delivered"],
        "qdelay": statistics.median(delays) / (queue / 1000) if delays else float("nan"),
        "tbf_drops": q1["dropped"],
        "busy": (s["busy"], r["busy"]),
        "waiting": (s["waiting"], r["waiting"]),
    }


def tcp(rate: float, queue: float, seconds: float) -> dict[str, Any]:
    """One TCP flow on the same link: the baseline."""
    with Bottleneck(rate, queue) as link:
        start = time.time() + LEAD
        recv = link.start("b", "tcp_recv", port=TCP_PORT, seconds=seconds + 10, epoch=start)
        time.sleep(0.3)
        send = link.start("a", "tcp_send", dest=f"{link.addr_b}:{TCP_PORT}", seconds=seconds, start_at=start)
        q0 = _sample_qdisc(link, start + WARMUP)
        q1 = _sample_qdisc(link, start + seconds)
        send.result()
        r = recv.result()
    span = seconds - WARMUP
    return {
        "goodput": _steady(r["bins"], r["epoch"], start + WARMUP, start + seconds) / link.rate_bytes,
        "wire": (q1["bytes"] - q0["bytes"]) / span / link.rate_bytes,
    }


def _jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def fair(rate: float, queue: float, seconds: float, size: int, gap: float = 2.0) -> dict[str, Any]:
    """Two SafeDealer flows, the second ``gap`` seconds after the first; ``seconds`` is how
    long the second runs (the first runs ``gap`` longer)."""
    with Bottleneck(rate, queue) as link:
        start = time.time() + LEAD
        flows = []
        for i in range(2):
            recv = link.start("b", "safe_recv", port=PORT + i, seconds=seconds + gap + 10, epoch=start)
            send = link.start(
                "a",
                "safe_send",
                dest=f"{link.addr_b}:{PORT + i}",
                size=size,
                seconds=seconds + gap * (1 - i),
                start_at=start + gap * i,
            )
            flows.append((send, recv))
        results = [(s.result(), r.result()) for s, r in flows]
    second = start + gap
    reached = None
    jain_end = float("nan")
    shares_end: list[float] = []
    for k in range(int(seconds) - 1 + 1):
        t = second + k
        rates = [_steady(r["bins"], r["epoch"], t, t + 1.0) for _, r in results]
        j = _jain(rates)
        if reached is None and j >= 0.95:
            reached = k + 1.0
        if k + 1 == min(5, int(seconds)):
            jain_end = j
            shares_end = [x * 8 / (rate * 1e6) for x in rates]
    return {
        "time_to_fair": reached,
        "jain_end": jain_end,  # over the second before min(5, seconds) after the second start
        "shares_end": shares_end,  # each flow's goodput over the link rate in that second
        "resends": sum(s["counters"]["resends"] for s, _ in results),
        "waiting": max(p.get("waiting", 0.0) for flow in results for p in flow),
        "busy": sum(p.get("busy", 0.0) for flow in results for p in flow),
    }


def share(
    rate: float, queue: float, seconds: float, size: int, cc: str = "cubic", ours: str = "safe"
) -> dict[str, Any]:
    """A SafeDealer flow (``ours="safe"``; or a TCP flow with that congestion control, the
    baseline: how TCP itself fares there) and a TCP flow (congestion control ``cc``) at once:
    each one's share of the link (``safe``: the first, ``tcp``: the second) after ``WARMUP``, and
    (``safe_late``, ``tcp_late``; runs longer than ``LATE`` + 4 s) after ``LATE``."""
    with Bottleneck(rate, queue) as link:
        start = time.time() + LEAD
        if ours == "safe":
            srecv = link.start("b", "safe_recv", port=PORT, seconds=seconds + 10, epoch=start)
        else:
            srecv = link.start("b", "tcp_recv", port=TCP_PORT + 1, seconds=seconds + 10, epoch=start)
        trecv = link.start("b", "tcp_recv", port=TCP_PORT, seconds=seconds + 10, epoch=start)
        time.sleep(0.3)
        if ours == "safe":
            ssend = link.start(
                "a", "safe_send", dest=f"{link.addr_b}:{PORT}", seconds=seconds, size=size, start_at=start
            )
        else:
            ssend = link.start(
                "a", "tcp_send", dest=f"{link.addr_b}:{TCP_PORT + 1}", seconds=seconds, start_at=start, cc=ours
            )
        tsend = link.start("a", "tcp_send", dest=f"{link.addr_b}:{TCP_PORT}", seconds=seconds, start_at=start, cc=cc)
        s, sr, _, tr = ssend.result(), srecv.result(), tsend.result(), trecv.result()
    a, b = start + WARMUP, start + seconds
    counters = s.get("counters", {})
    row = {
        "safe": _steady(sr["bins"], sr["epoch"], a, b) / link.rate_bytes,
        "tcp": _steady(tr["bins"], tr["epoch"], a, b) / link.rate_bytes,
        "resends": counters.get("resends", 0) / max(1, counters.get("data_frames_out", 0)),
    }
    if seconds >= LATE + 4:
        row["safe_late"] = _steady(sr["bins"], sr["epoch"], start + LATE, b) / link.rate_bytes
        row["tcp_late"] = _steady(tr["bins"], tr["epoch"], start + LATE, b) / link.rate_bytes
    return row


SHARE_TARGET = 0.35  #: the share each side of a ``share`` run should get at least


def _both_at_least(rows: list[dict[str, Any]], suffix: str) -> int:
    """How many ``share`` rows gave each side at least ``SHARE_TARGET`` of the link (``suffix``
    ``"_late"``: after ``LATE``): the target is per run, and medians hide a run one side lost."""
    return sum(1 for r in rows if r["safe" + suffix] >= SHARE_TARGET and r["tcp" + suffix] >= SHARE_TARGET)


DEALER_SIZE = 400  #: one datagram per message: losses count the same in messages and packets


def dealer(rate: float, queue: float, seconds: float, offered: float, wire: bool = True) -> dict[str, Any]:
    """A Dealer paced at ``offered`` times the link rate: where each lost message went.
    ``wire``: ``pace_rate`` counts datagram bytes, so the link rate is converted to them (a
    datagram plus the 42 bytes of Ethernet, IP and UDP headers tbf counts); False: ``pace_rate``
    is the link rate in bytes/s as it stands."""
    per_wire = (DEALER_SIZE + 34) / (DEALER_SIZE + 34 + 42) if wire else 1.0
    with Bottleneck(rate, queue) as link:
        pace = int(offered * link.rate_bytes * per_wire)
        start = time.time() + LEAD
        recv = link.start(
            "b", "dealer_recv", port=PORT, seconds=seconds + 10, epoch=start, idle=1.0, options={"rcvbuf": 1 << 20}
        )
        send = link.start(
            "a",
            "dealer_send",
            dest=f"{link.addr_b}:{PORT}",
            seconds=seconds,
            size=DEALER_SIZE,
            start_at=start,
            # one datagram per packet (no GSO): tbf then counts its drops in datagrams
            options={"pace_rate": pace, "pace_burst": 16 * 1024, "gso": False},
        )
        s, r = send.result(), recv.result()
        tbf = link.qdisc("a")["dropped"]
    offered_n = s["counters"]["messages_out"]
    sender = sum(v for k, v in s["counters"].items() if k.startswith("dropped_")) + s["send_errors"]
    kernel = r["counters"]["kernel_drops"]
    receiver = sum(v for k, v in r["counters"].items() if k.startswith("dropped_"))
    lost = offered_n - r["delivered"]
    return {
        "offered": offered_n,
        "delivered": r["delivered"],
        "ratio": r["delivered"] / max(1, offered_n),
        "sender_drops": sender,
        "kernel_drops": kernel,
        "receiver_drops": receiver,
        "tbf_drops": tbf,
        "unaccounted": lost - sender - kernel - receiver - tbf,
        # tbf also drops control frames: unaccounted may be down to minus these
        "control_frames": s["counters"]["heartbeats_out"] + s["counters"]["connects_out"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="5,50,200")
    parser.add_argument("--queues", default="10,100")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--cases", default="single,tcp,fair,share,tcpshare,dealer")
    parser.add_argument("--repeat", type=int, default=1, help="fair, share: runs per link (medians printed)")
    parser.add_argument(
        "--pin", action="store_true", help="single: pin the sender to core 0 and the receiver to core 1"
    )
    parser.add_argument(
        "--baseline", help="a source tree of nbmq (extensions built in place) to run the single case with too"
    )
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(f"cannot build a bottleneck: {reason}")
    cases = args.cases.split(",")
    for queue in (float(q) for q in args.queues.split(",")):
        for rate in (float(r) for r in args.rates.split(",")):
            tag = f"{rate:g} Mbit/s, queue {queue:g} ms"
            if "tcp" in cases:
                row = tcp(rate, queue, args.seconds)
                print(f"{tag}  tcp     goodput {row['goodput']:.3f}  wire {row['wire']:.3f}", flush=True)
            if "single" in cases and args.baseline:
                row = single(rate, queue, args.seconds, args.size, args.baseline)
                print(
                    f"{tag}  base    goodput {row['goodput']:.3f}  wire {row['wire']:.3f}  resends "
                    f"{row['resends']:.2%} ({row['resend_count']})  lost {row['lost']}  tbf drops {row['tbf_drops']}",
                    flush=True,
                )
            if "single" in cases:
                row = single(rate, queue, args.seconds, args.size, pin=args.pin)
                print(
                    f"{tag}  safe    goodput {row['goodput']:.3f}  wire {row['wire']:.3f}  resends "
                    f"{row['resends']:.2%} ({row['resend_count']})  lost {row['lost']}  qdelay "
                    f"{row['qdelay']:.2f} of the queue  tbf drops {row['tbf_drops']}  CPU: sender "
                    f"{row['busy'][0]:.2f}, receiver {row['busy'][1]:.2f} of a core (waiting for one "
                    f"{row['waiting'][0]:.2f}, {row['waiting'][1]:.2f})",
                    flush=True,
                )
            if "fair" in cases:
                rows = [fair(rate, queue, args.seconds, args.size) for _ in range(args.repeat)]
                for row in rows:
                    print(
                        f"{tag}  fair    Jain >= 0.95 after {row['time_to_fair']} s  Jain 4-5 s "
                        f"{row['jain_end']:.3f} (shares {' / '.join(f'{x:.3f}' for x in row['shares_end'])})  "
                        f"resends {row['resends']}  CPU: the four processes {row['busy']:.2f} cores, "
                        f"waited for, most: {row['waiting']:.2f}",
                        flush=True,
                    )
                if len(rows) > 1:
                    times = [r["time_to_fair"] if r["time_to_fair"] is not None else math.inf for r in rows]
                    print(
                        f"{tag}  fair    median of {len(rows)}: Jain >= 0.95 after {statistics.median(times)} s  "
                        f"Jain 4-5 s {statistics.median(r['jain_end'] for r in rows):.3f}",
                        flush=True,
                    )
            for case, ours in (("share", "safe"), ("tcpshare", "cubic")):
                if case not in cases:
                    continue
                for cc in ("cubic", "bbr"):
                    rows = [share(rate, queue, args.seconds, args.size, cc, ours) for _ in range(args.repeat)]
                    for row in rows:
                        print(
                            f"{tag}  {case}  {ours} {row['safe']:.3f}  tcp ({cc}) {row['tcp']:.3f}"
                            + (f"  safe resends {row['resends']:.2%}" if ours == "safe" else "")
                            + (
                                f"  after {LATE:g} s: {ours} {row['safe_late']:.3f}  tcp ({cc}) {row['tcp_late']:.3f}"
                                if "safe_late" in row
                                else ""
                            ),
                            flush=True,
                        )
                    if len(rows) > 1:
                        print(
                            f"{tag}  {case}  median of {len(rows)}: {ours} "
                            f"{statistics.median(r['safe'] for r in rows):.3f}  tcp ({cc}) "
                            f"{statistics.median(r['tcp'] for r in rows):.3f}  both >= {SHARE_TARGET}: "
                            f"{_both_at_least(rows, '')} of {len(rows)}"
                            + (
                                f" (after {LATE:g} s: {_both_at_least(rows, '_late')})"
                                if "safe_late" in rows[0]
                                else ""
                            ),
                            flush=True,
                        )
            if "dealer" in cases:
                for offered, wire in ((2.0, True), (1.0, True), (1.0, False)):
                    row = dealer(rate, queue, args.seconds, offered, wire)
                    print(
                        f"{tag}  dealer x{offered:g}{'' if wire else ' (pace_rate = link rate, headers not counted)'}  "
                        f"offered {row['offered']} delivered {row['delivered']} ({row['ratio']:.3f})  sender "
                        f"{row['sender_drops']} kernel {row['kernel_drops']} receiver {row['receiver_drops']} tbf "
                        f"{row['tbf_drops']} unaccounted {row['unaccounted']} (control frames {row['control_frames']})",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
