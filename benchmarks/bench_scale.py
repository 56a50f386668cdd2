"""The batch benchmark: the whole ``nbmq pipeline`` on up to 5,000,000 datagrams beside tshark.

For each size (default: the bundled captures, 300k and 1M datagrams of heartbeat-heavy
traffic, 5M) a capture is generated once and cached in ``WORKDIR``: ``N`` is
``scale_capture.generate`` (64 sessions: handshakes, heartbeats, multi-chunk messages,
SafeDealer acks, loss and resends; ~430 bytes a record), ``Nhb`` is
``scale_capture.generate_heartbeat_heavy`` (one Dealer pair, ~60% heartbeats, as a real
capture of 271k datagrams), ``bundled`` is the bundled captures (no generation). Then, in the
same run and interleaved per repeat:

- a bare Spark session (start, ``spark.range(1000).count()``, stop) on the same master: the
  fixed cost a run cannot avoid, reported as the pipeline's ratio to it;

- ``nbmq pipeline CAPTURE --out DIR --master local[2] -q`` (the console script, a subprocess);
- ``tshark -r CAPTURE -T fields -e frame.time_epoch -e ip.src ...`` (the frames table's fields
  tshark gives without help) to /dev/null;
- with ``--lua`` (default on), the same with the project's dissector (``-X lua_script:
  nbmq/wireshark/nbmq.lua``) and its nbmq header fields, the closer match to the frames table.

Each command's process tree (the Python driver, the JVM it spawns, the Python workers) is
sampled every 0.2 s from ``/proc`` (RSS, Linux only); peaks are reported for the whole tree and
per role. The pipeline's own per-step seconds come from its ``summary.json`` (``steps``).

Run (prints a table; ``--json`` also writes the figures)::

    python benchmarks/bench_scale.py --datagrams 500000,1000000 --workdir /tmp
    python benchmarks/bench_scale.py                      # every size with a target, ~15 min at low load

Importing this module runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Measured", "measure", "pipeline_command", "tshark_command", "main"]

SIZES = ("bundled", "300000hb", "1000000hb", "5000000")
#: times faster than tshark the pipeline must be, by capture size (datagrams); the largest size at
#: or under a capture's size applies
TARGET_RATIOS = {300_000: 1.2, 1_000_000: 2.0, 5_000_000: 3.0}
#: at most this many times a bare Spark session's time on the bundled captures
TARGET_BARE_RATIO = 2.0
#: the driver's peak RSS at most this multiple of its peak on a capture half the size: the
#: driver's passes hold a split's rows (a frames file, a hash bucket), not the capture's
TARGET_DRIVER_GROWTH = 1.1
#: the report step at most this share of the run at every size
TARGET_REPORT_SHARE = 0.10
#: tshark fields of the frames table that tshark knows without the nbmq dissector.
TSHARK_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "ip.src",
    "udp.srcport",
    "ip.dst",
    "udp.dstport",
    "udp.length",
    "data.data",
)
#: ... and with it (nbmq/wireshark/nbmq.lua): the decoded header and the chunk.
LUA_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "ip.src",
    "udp.srcport",
    "ip.dst",
    "udp.dstport",
    "udp.length",
    "nbmq.kind",
    "nbmq.session_id",
    "nbmq.message_id",
    "nbmq.part_count",
    "nbmq.part_index",
    "nbmq.message_size",
    "nbmq.part_size",
    "nbmq.chunk_size",
    "nbmq.chunk_offset",
    "nbmq.ack_hash",
    "nbmq.chunk",
)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class Measured:
    """One command's run: ``seconds`` wall, ``returncode``, and peak RSS in bytes: ``peak`` of
    the whole process tree (sum at one sample), ``roles`` the peak of each role's sum
    (``driver`` = the command's own process, ``jvm`` = java processes, ``workers`` = every other
    descendant; ``anon`` = the tree's RSS less its file-backed pages, e.g. a memory-mapped capture;
    ``pss`` = the tree's proportional set size, shared pages counted once), ``samples`` taken,
    ``load`` the 1-minute load average at the start."""

    seconds: float
    returncode: int
    peak: int = 0
    roles: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    load: float = 0.0


def _children() -> dict[int, list[int]]:
    """ppid -> child pids, from one scan of /proc."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])  # comm may hold spaces: split after ')'
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _pss(pid: int) -> int:
    """Proportional set size in bytes (``/proc/PID/smaps_rollup``): a page shared by k processes
    counts 1/k in each, so a sum over forked Python workers is not inflated by the pages they
    share copy-on-write with their daemon, nor by a capture mapped in several of them."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree_rss(root: int) -> dict[str, int]:
    """RSS in bytes of ``root`` and its descendants, summed per role; ``pss`` is the tree's
    proportional set size (see :func:`_pss`), the memory it really holds."""
    kids = _children()
    roles = {"driver": 0, "jvm": 0, "workers": 0, "anon": 0, "pss": 0}
    stack = [(root, True)]
    while stack:
        pid, is_root = stack.pop()
        stack += [(c, False) for c in kids.get(pid, ())]
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                statm = f.read().split()
            rss, shared = int(statm[1]) * _PAGE, int(statm[2]) * _PAGE
            with open(f"/proc/{pid}/comm", "rb") as f:
                comm = f.read().strip()
        except (OSError, IndexError, ValueError):
            continue  # gone between the scan and the read
        role = "driver" if is_root else ("jvm" if comm == b"java" else "workers")
        roles[role] += rss
        roles["anon"] += rss - shared  # not file-backed: a mapped capture's pages are page cache
        roles["pss"] += _pss(pid)
    return roles


def measure(
    cmd: list[str],
    *,
    interval: float = 0.2,
    timeout: float = 7200.0,
    stdout: object = None,
    env: dict[str, str] | None = None,
) -> Measured:
    """Run ``cmd`` and sample its process tree's RSS every ``interval`` seconds.

    Args:
        cmd: the command (argv list).
        interval: seconds between samples (the first is taken at once).
        timeout: seconds before the command is killed (its tree's group) and
            ``subprocess.TimeoutExpired`` raised.
        stdout: where its stdout goes (default /dev/null); stderr is inherited.
        env: its environment (default: ours).

    Returns:
        A :class:`Measured`. Peaks come from ``/proc`` (Linux); elsewhere they stay 0.
    """
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL if stdout is None else stdout,  # type: ignore[arg-type]
        env=env,
        start_new_session=True,
    )
    result = Measured(0.0, 0, load=load)
    stop = threading.Event()

    def sample() -> None:
        while True:
            if os.path.isdir("/proc"):
                roles = _tree_rss(proc.pid)
                result.samples += 1
                result.peak = max(result.peak, sum(v for k, v in roles.items() if k not in ("anon", "pss")))
                for k, v in roles.items():
                    result.roles[k] = max(result.roles.get(k, 0), v)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    thread.start()
    try:
        result.returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        raise
    finally:
        result.seconds = time.perf_counter() - started
        stop.set()
        thread.join()
    return result


def pipeline_command(captures: list[Path], out: Path, master: str, extra: list[str] = ()) -> list[str]:  # type: ignore[assignment]
    """The ``nbmq pipeline`` console command (as ``python -m nbmq.cli``: the same entry point);
    no ``captures``: the bundled ones."""
    return [
        sys.executable,
        "-m",
        "nbmq.cli",
        "pipeline",
        *map(str, captures),
        "--out",
        str(out),
        "--master",
        master,
        "-q",
        *extra,
    ]


def bare_spark_command(master: str) -> list[str]:
    """A fresh process that starts a Spark session as the pipeline does, counts 1000 rows, stops."""
    code = (
        "from nbmq.spark.spark_session import build_session\n"
        f"s = build_session({master!r})\ns.range(1000).count()\ns.stop()\n"
    )
    return [sys.executable, "-c", code]


def _capture_for(size: str, workdir: Path) -> tuple[list[Path], int]:
    """The captures of one ``--datagrams`` entry (generated once, cached) and their datagrams."""
    from scale_capture import generate, generate_heartbeat_heavy

    if size == "bundled":
        from nbmq.examples import bundled_captures

        paths = list(bundled_captures())
        manifest = json.loads((paths[0].parent / "manifest.json").read_text())
        names = {p.name for p in paths}
        return paths, sum(c["datagrams"]["total"] for c in manifest["captures"] if c["file"] in names)
    heavy = size.endswith("hb")
    n = int(size[:-2] if heavy else size)
    capture = workdir / f"scale-{size}.pcap"
    if not capture.exists():
        info = (generate_heartbeat_heavy if heavy else generate)(capture, n)
        print(
            f"generated {capture}: {info.datagrams:,} datagrams, {info.messages:,} messages, "
            f"{info.bytes / 1e9:.2f} GB in {info.seconds:.1f} s",
            file=sys.stderr,
        )
    return [capture], n


def tshark_command(tshark: str, capture: Path, lua: Path | None = None) -> list[str]:
    """``tshark -r CAPTURE -T fields -e ...``: plain, or with the nbmq Lua dissector and its fields."""
    fields = LUA_FIELDS if lua else TSHARK_FIELDS
    cmd = [tshark, "-r", str(capture), "-T", "fields"]
    if lua:
        cmd += ["-X", f"lua_script:{lua}"]
    return cmd + [a for f in fields for a in ("-e", f)]


def _sequence(cmds: list[list[str]]) -> Measured:
    """Run ``cmds`` one after the other (tshark per bundled capture); seconds summed, peaks the largest."""
    done = [measure(c) for c in cmds]
    return Measured(
        seconds=sum(d.seconds for d in done),
        returncode=max(d.returncode for d in done),
        peak=max(d.peak for d in done),
        roles=max(done, key=lambda d: d.peak).roles,
        samples=sum(d.samples for d in done),
        load=done[0].load,
    )


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, generate the captures, run and print the table; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--datagrams",
        default=",".join(map(str, SIZES)),
        help="comma-separated sizes: N datagrams, Nhb (heartbeat-heavy), bundled (default: %(default)s)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the captures are cached and the pipeline writes (default: %(default)s)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command per size (median)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-lua", dest="lua", action="store_false", help="skip tshark with the Lua dissector")
    parser.add_argument("--no-tshark", dest="tshark", action="store_false", help="skip tshark entirely")
    parser.add_argument(
        "--pipeline-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for nbmq pipeline (repeatable), e.g. --pipeline-arg=--no-report",
    )
    parser.add_argument("--keep", action="store_true", help="keep the pipeline's output directories")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent))

    import nbmq

    sizes = [s.strip().replace("_", "") for s in args.datagrams.split(",") if s.strip()]
    tshark = shutil.which("tshark") if args.tshark else None
    lua = Path(nbmq.__file__).parent / "wireshark" / "nbmq.lua"
    args.workdir.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(nbmq.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    )
    rows = []
    for size in sizes:
        captures, n = _capture_for(size, args.workdir)
        out = args.workdir / f"scale-{size}-out"
        runs: dict[str, list[Measured]] = {"nbmq": [], "bare spark": [], "tshark": [], "tshark+lua": []}
        steps: list[dict[str, float]] = []
        for _ in range(args.repeat):
            runs["bare spark"].append(measure(bare_spark_command(args.master), env=env))
            m = measure(
                pipeline_command([] if size == "bundled" else captures, out, args.master, args.pipeline_arg), env=env
            )
            if m.returncode != 0:
                print(f"nbmq pipeline exited {m.returncode} on {size}", file=sys.stderr)
            runs["nbmq"].append(m)
            try:
                steps.append(json.loads((out / "summary.json").read_text()).get("steps", {}))
            except (OSError, ValueError):
                pass
            if tshark:
                runs["tshark"].append(_sequence([tshark_command(tshark, c) for c in captures]))
                if args.lua:
                    runs["tshark+lua"].append(_sequence([tshark_command(tshark, c, lua) for c in captures]))
            print(
                f"{size}: "
                + ", ".join(f"{k} {v[-1].seconds:.1f} s peak {_mb(v[-1].peak)} MiB" for k, v in runs.items() if v),
                file=sys.stderr,
            )
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
        row: dict[str, object] = {"datagrams": n, "size": size, "bytes": sum(c.stat().st_size for c in captures)}
        for k, v in runs.items():
            if v:
                row[k] = {
                    "seconds": statistics.median(r.seconds for r in v),
                    "peak": statistics.median(r.peak for r in v),
                    "roles": {role: statistics.median(r.roles.get(role, 0) for r in v) for role in v[0].roles},
                    "load": statistics.median(r.load for r in v),
                    "returncodes": [r.returncode for r in v],
                }
        if steps:
            row["steps"] = {k: statistics.median(s.get(k, 0.0) for s in steps) for k in steps[0]}
        rows.append(row)
    _print(rows, args)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "master": args.master,
                    "repeat": args.repeat,
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0


def _print(rows: list[dict[str, object]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"nbmq pipeline ({args.master}) vs tshark -T fields, median of {args.repeat}")
    for col in (
        "size",
        "datagrams",
        "capture MB",
        "nbmq s",
        "bare spark s",
        "nbmq/bare",
        "report share",
        "tshark s",
        "ratio",
        "tshark+lua s",
        "ratio lua",
        "nbmq peak MiB (py/jvm/workers; anon; pss)",
        "tshark peak MiB",
        "lua peak MiB",
        "nbmq steps s",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        nb: dict = r["nbmq"]  # type: ignore[assignment]
        ts: dict = r.get("tshark", {})  # type: ignore[assignment]
        tl: dict = r.get("tshark+lua", {})  # type: ignore[assignment]
        roles = nb["roles"]
        bare: dict = r.get("bare spark", {})  # type: ignore[assignment]
        report = r.get("steps", {}).get("report", 0.0)  # type: ignore[union-attr]
        table.add_row(
            str(r["size"]),
            f"{r['datagrams']:,}",
            f"{r['bytes'] / 1e6:,.0f}",
            f"{nb['seconds']:.1f}",
            f"{bare['seconds']:.1f}" if bare else "-",
            f"{nb['seconds'] / bare['seconds']:.2f}" if bare else "-",
            f"{report / nb['seconds']:.0%}",
            f"{ts['seconds']:.1f}" if ts else "-",
            f"{ts['seconds'] / nb['seconds']:.2f}x" if ts else "-",
            f"{tl['seconds']:.1f}" if tl else "-",
            f"{tl['seconds'] / nb['seconds']:.2f}x" if tl else "-",
            f"{_mb(nb['peak'])} ({_mb(roles['driver'])}/{_mb(roles['jvm'])}/{_mb(roles['workers'])}; "
            f"{_mb(roles['anon'])}; {_mb(roles.get('pss', 0))})",
            _mb(ts["peak"]) if ts else "-",
            _mb(tl["peak"]) if tl else "-",
            " ".join(f"{k} {v:.1f}" for k, v in r.get("steps", {}).items()),  # type: ignore[union-attr]
        )
    console = Console() if Console().is_terminal else Console(width=200)
    console.print(table)
    for r in rows:
        if r["size"] == "bundled" and "bare spark" in r:
            ratio = r["nbmq"]["seconds"] / r["bare spark"]["seconds"]  # type: ignore[index]
            console.print(
                f"bundled captures: {ratio:.2f}x a bare Spark session (target at most "
                f"{TARGET_BARE_RATIO:g}x): {'met' if ratio <= TARGET_BARE_RATIO else 'NOT met'}"
            )
        share = r.get("steps", {}).get("report", 0.0) / r["nbmq"]["seconds"]  # type: ignore[union-attr,index]
        if share > TARGET_REPORT_SHARE:
            console.print(
                f"{r['size']}: the report step is {share:.0%} of the run (target at most {TARGET_REPORT_SHARE:.0%})"
            )
    first, last = rows[0], rows[-1]
    if len(rows) > 1:
        growth = last["nbmq"]["peak"] / max(1, first["nbmq"]["peak"])  # type: ignore[index]
        console.print(
            f"nbmq peak at {last['datagrams']:,} / at {first['datagrams']:,} datagrams: {growth:.2f} "
            f"(flat means ~1; the capture grew {last['bytes'] / first['bytes']:.1f}x)"
        )  # type: ignore[operator]
        before = rows[-2]
        driver = last["nbmq"]["roles"]["driver"] / max(1, before["nbmq"]["roles"]["driver"])  # type: ignore[index]
        console.print(
            f"driver peak at {last['datagrams']:,} / at {before['datagrams']:,} datagrams: {driver:.2f} "
            f"(the capture grew {last['bytes'] / before['bytes']:.1f}x; target at most "
            f"{TARGET_DRIVER_GROWTH:g} when it doubles)"
        )
    for r in rows:
        target = target_ratio(int(r["datagrams"]))  # type: ignore[arg-type]
        if "tshark" in r and target is not None:
            ratio = r["tshark"]["seconds"] / r["nbmq"]["seconds"]  # type: ignore[index]
            console.print(
                f"target {target:g}x faster than tshark at {r['datagrams']:,}: "
                f"{'met' if ratio >= target else 'NOT met'} ({ratio:.2f}x); load at start "
                f"{r['nbmq']['load']:.1f}"  # type: ignore[index]
            )


def target_ratio(datagrams: int) -> float | None:
    """The speed target against tshark for a capture of ``datagrams`` (None below 300,000)."""
    sizes = [size for size in TARGET_RATIOS if size <= datagrams]
    return TARGET_RATIOS[max(sizes)] if sizes else None


if __name__ == "__main__":
    sys.exit(main())
