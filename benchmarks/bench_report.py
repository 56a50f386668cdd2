"""What the HTML report adds to ``nbmq pipeline``: the whole pipeline with and without it.

Generates the capture of ``bench_pipeline.py`` (N nbmq data-frame datagrams, default 1,000,000,
64 sessions), starts one local[2] session, warms it up on a bundled capture, then alternates
``pipeline.run(report=False)`` and ``pipeline.run(report=True)`` ``--repeat`` times and reports
the medians and their ratio (target: the report adds at most 10%, ratio <= 1.10), plus the report
step alone (``collect`` + ``write_report`` on the written tables).

Run: ``python benchmarks/bench_report.py [--datagrams N] [--repeat 3] [--capture PATH]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 1.10


def _generate(path: Path, datagrams: int) -> tuple[int, int]:
    spec = importlib.util.spec_from_file_location("bench_pipeline", Path(__file__).with_name("bench_pipeline.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.generate(path, datagrams)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datagrams", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--capture", type=Path, help="reuse (or create) this capture file")
    args = parser.parse_args(argv)

    from nbmq.examples import CAPTURE_DIR
    from nbmq.spark.pipeline import run
    from nbmq.spark.report import collect, write_report
    from nbmq.spark.spark_session import build_session

    tmp = Path(tempfile.mkdtemp(prefix="nbmq-bench-report-"))
    capture = args.capture or tmp / "bench.pcap"
    if not capture.exists():
        n, messages = _generate(capture, args.datagrams)
        print(
            f"capture: {n:,} datagrams, {messages:,} messages, {capture.stat().st_size / 1e6:.0f} MB", file=sys.stderr
        )
    spark = build_session(args.master, app_name="nbmq-bench-report")
    quiet = {"spark": spark, "progress": False, "print_summary": False}
    run([str(CAPTURE_DIR / "dealer.pcap")], tmp / "warm", report=True, **quiet)  # JIT, Python workers

    times: dict[bool, list[float]] = {False: [], True: []}
    report_only: list[float] = []
    for i in range(args.repeat):
        for report in (False, True):
            out = tmp / f"out-{i}-{int(report)}"
            t = time.perf_counter()
            summary = run([str(capture)], out, report=report, **quiet)
            times[report].append(time.perf_counter() - t)
        t = time.perf_counter()
        write_report(out / "again.html", summary, collect(spark, summary["tables"]))
        report_only.append(time.perf_counter() - t)
    base, with_report = statistics.median(times[False]), statistics.median(times[True])
    ratio = with_report / base
    result = {
        "datagrams": summary["totals"]["datagrams"],
        "repeat": args.repeat,
        "pipeline_s": round(base, 2),
        "pipeline_with_report_s": round(with_report, 2),
        "report_step_s": round(statistics.median(report_only), 2),
        "ratio": round(ratio, 3),
        "target": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
        "runs": {"without": [round(x, 2) for x in times[False]], "with": [round(x, 2) for x in times[True]]},
    }
    print(json.dumps(result, indent=1))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
