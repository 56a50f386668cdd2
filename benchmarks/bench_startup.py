"""Where ``nbmq pipeline``'s Spark start-up goes, and what it costs in the whole run.

Two measurements, each a fresh Python process per repeat (a JVM starts once per process), the
trees and variants interleaved so that load changes hit them alike; medians are printed:

1. ``breakdown``: from process start to a usable SparkSession through ``build_session``:
   ``imports`` (process start -> ``nbmq.spark.pipeline`` and pyspark imported), ``jvm``
   (``launch_gateway``: spark-submit's scripts, the launcher JVM, the driver JVM up to its
   py4j port), ``context`` (the rest of ``SparkContext()``), ``session`` (``getOrCreate``'s
   SparkSession, the settings, the log level), ``register`` (the ``nbmq`` sources), then the
   ``first_job`` (``spark.range(10).count()``: the first job's class loading), and ``jvm_cpu``,
   the driver JVM's CPU seconds when the session is ready (less sensitive to load than wall).
2. ``pipeline``: ``python -m nbmq.cli pipeline CAPTURE --master local[2] -q --no-report`` (or the
   bundled captures): its ``summary.json`` ``steps.start`` and the process's wall seconds.

Each tree is a directory put first on ``PYTHONPATH`` (``--tree main=/work/main --tree
new=/work/wt/startup``); ``--variant NAME=ENV=VALUE`` adds environment variants (e.g.
``nocds=NBMQ_SPARK_CDS=0``). Run::

    python benchmarks/bench_startup.py --tree main=/work/main --tree new=. --repeat 3

Importing this module runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "child_breakdown"]

_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _java_cpu(parent: int) -> float:
    """CPU seconds (user + system) of the java processes among ``parent``'s children."""
    total = 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index(b"(") + 1 : stat.rindex(b")")]
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[1]) == parent and comm == b"java":
            total += (int(fields[11]) + int(fields[12])) / _CLK
    return total


def child_breakdown(t0: float, master: str) -> dict[str, float]:
    """Run in the measured process: time each part of the start (see the module docstring)."""
    marks: dict[str, float] = {}
    import pyspark.context as context
    import pyspark.sql  # noqa: F401

    import nbmq.spark.pipeline  # noqa: F401 -- what `nbmq pipeline` imports before run()

    marks["imports"] = time.time() - t0
    launch = context.launch_gateway
    init = context.SparkContext.__init__

    def timed_launch(*a, **k):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return launch(*a, **k)
        finally:
            marks["jvm"] = time.perf_counter() - started

    def timed_init(self, *a, **k):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return init(self, *a, **k)
        finally:
            marks["context"] = time.perf_counter() - started - marks.get("jvm", 0.0)

    context.launch_gateway = timed_launch
    context.SparkContext.__init__ = timed_init  # type: ignore[method-assign]
    from nbmq.spark import registration
    from nbmq.spark.spark_session import build_session

    started = time.perf_counter()
    spark = build_session(master, register=False)
    marks["session"] = time.perf_counter() - started - marks.get("jvm", 0.0) - marks.get("context", 0.0)
    started = time.perf_counter()
    registration.register(spark)
    marks["register"] = time.perf_counter() - started
    marks["jvm_cpu"] = _java_cpu(os.getpid())
    marks["ready"] = time.time() - t0
    started = time.perf_counter()
    spark.range(10).count()
    marks["first_job"] = time.perf_counter() - started
    return marks


def _run_child(tree: Path, env_extra: dict[str, str], master: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), **env_extra)
    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
        f"import bench_startup as b; print('RESULT', json.dumps(b.child_breakdown({time.time()!r}, {master!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"breakdown child failed ({out.returncode}): {out.stderr[-2000:]}")


def _run_pipeline(tree: Path, env_extra: dict[str, str], master: str, capture: str | None) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), **env_extra)
    with tempfile.TemporaryDirectory(prefix="nbmq-startup-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "nbmq.cli",
            "pipeline",
            *([capture] if capture else []),
            "--out",
            tmp,
            "--master",
            master,
            "-q",
            "--no-report",
        ]
        started = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"pipeline failed ({proc.returncode}): {proc.stderr[-2000:]}")
        steps = json.loads((Path(tmp) / "summary.json").read_text())["steps"]
    return {"start": steps["start"], "frames": steps.get("frames", 0.0), "wall": wall}


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the interleaved measurements, print medians; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a source tree put first on PYTHONPATH (repeatable; default: this one)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=ENV=VALUE",
        help="an environment variant run on every tree (repeatable)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--capture", help="capture for the pipeline runs (default: the bundled ones)")
    parser.add_argument("--what", choices=("breakdown", "pipeline", "both"), default="both")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in args.tree] or [
        ("this", Path(__file__).resolve().parent.parent)
    ]
    variants: list[tuple[str, dict[str, str]]] = [("", {})]
    for v in args.variant:
        name, key, value = v.split("=", 2)
        variants.append((name, {key: value}))
    kinds = ("breakdown", "pipeline") if args.what == "both" else (args.what,)
    results: dict[str, dict[str, list[dict[str, float]]]] = {k: {} for k in kinds}
    loads = []
    for rep in range(args.repeat):
        for kind in kinds:
            for tname, tree in trees:
                for vname, env in variants:
                    label = tname + (f"+{vname}" if vname else "")
                    loads.append(os.getloadavg()[0])
                    if kind == "breakdown":
                        r = _run_child(tree, env, args.master)
                    else:
                        r = _run_pipeline(tree, env, args.master, args.capture)
                    results[kind].setdefault(label, []).append(r)
                    print(
                        f"[{rep + 1}/{args.repeat}] {kind} {label}: " + " ".join(f"{k} {v:.2f}" for k, v in r.items()),
                        file=sys.stderr,
                    )
    medians = {
        kind: {label: {k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]} for label, rs in by.items()}
        for kind, by in results.items()
    }
    for kind, by in medians.items():
        print(f"{kind} (median of {args.repeat}, seconds; load {statistics.median(loads):.1f}):")
        for label, m in by.items():
            print(f"  {label:>16}: " + "  ".join(f"{k} {v:.2f}" for k, v in m.items()))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "load_median": statistics.median(loads),
                    "medians": medians,
                    "runs": results,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
