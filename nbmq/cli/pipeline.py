"""``nbmq pipeline``: the argparse front of :func:`nbmq.spark.pipeline.run`.

A subcommand module of :mod:`nbmq.cli` (``HELP``, ``add_arguments``, ``run``); standalone as
``python -m nbmq.cli.pipeline ...`` or through ``spark-submit .../nbmq/spark/submit.py ...`` (see
:mod:`nbmq.spark.submit`). Its top level imports the standard library only: Spark, pyarrow and
the rest of the ``spark`` extra load inside :func:`run`, which names what is missing instead of
failing with a traceback. Nothing but entry points imports this module (ARCHITECTURE.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence

__all__ = ["HELP", "DESCRIPTION", "SPARK_EXTRA", "add_arguments", "run", "missing_extra", "main"]

HELP = "captures -> Parquet tables + report on Spark (needs nbmq[spark])"

#: Modules of the ``spark`` extra that the pipeline imports (pyproject.toml's extras).
SPARK_EXTRA = ("pyspark", "pyarrow", "pandas", "dpkt", "rich")

DESCRIPTION = (
    "Decode nbmq captures (pcap/pcapng) on Spark into Parquet tables frames/, messages/ and "
    "sessions/ under --out, with report.html and summary.json. With no CAPTURE, the bundled "
    "captures (classic pcap only; --pcapng adds dealer.pcapng, which repeats dealer.pcap). "
    "Malformed datagrams become error rows, never a failed run. Captures with TCP traffic on the "
    "rqueue port (6567, --rqueue-port) or a --bqsp-port also get rqueue/ and bqsp/ tables. "
    "Needs the spark extra: pip install 'nbmq[spark]'."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``nbmq pipeline`` options to ``parser`` (the :mod:`nbmq.cli` contract)."""
    parser.add_argument("captures", nargs="*", metavar="CAPTURE", help="pcap/pcapng files or directories")
    parser.add_argument(
        "--out",
        "-o",
        default="out",
        metavar="DIR",
        help="output directory, replaced whole when the run succeeds (default: out); a local "
        "path or a Hadoop-compatible URI (hdfs://, s3a://, file://)",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default: spark-submit's, else local[*]); e.g. local[2], spark://host:7077",
    )
    parser.add_argument("--pcapng", action="store_true", help="with no CAPTURE, also the bundled dealer.pcapng")
    parser.add_argument("--no-payload", dest="payload", action="store_false", help="leave payload out of frames/")
    parser.add_argument("--parts", action="store_true", help="keep each message's parts (bytes) in messages/")
    parser.add_argument(
        "--split-mb",
        type=float,
        default=None,
        metavar="MB",
        help="split classic pcap files larger than this into byte ranges (default: one range per core for the "
        "largest file, between 64 and 128; 0: never)",
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)"
    )
    parser.add_argument(
        "--bqsp-port",
        dest="bqsp_ports",
        type=int,
        action="append",
        default=None,
        metavar="PORT",
        help="TCP port of BQSP servers: its connections are decoded into bqsp/ (repeatable; BQSP "
        "has no default port, so no bqsp/ without it)",
    )
    parser.add_argument(
        "--rqueue-port",
        dest="rqueue_ports",
        type=int,
        action="append",
        default=None,
        metavar="PORT",
        help="TCP port of rqueue servers, decoded into rqueue/ (repeatable; default 6567)",
    )
    parser.add_argument("--no-report", dest="report", action="store_false", help="skip report.html")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress and no summary table")


def missing_extra() -> list[str]:
    """Modules of the ``spark`` extra that are not installed (empty when all are)."""
    return [name for name in SPARK_EXTRA if importlib.util.find_spec(name) is None]


def run(args: argparse.Namespace) -> int:
    """Run the pipeline for parsed arguments (the :mod:`nbmq.cli` contract).

    Args:
        args: the namespace of :func:`add_arguments`' options.

    Returns:
        0 on success; 1 when the tables were written but the report failed (the reason on
        stderr and in ``summary.json``); 2 when the ``spark`` extra is missing, a capture path
        matches nothing, ``--out`` is a file, a directory that is no pipeline output or cannot
        be written, or ``--conf`` is malformed (one line on stderr naming the path or item;
        all of these before Spark starts).
    """
    missing = missing_extra()
    if missing:
        print(
            f"nbmq pipeline needs the Spark extra: pip install 'nbmq[spark]' (missing: {', '.join(missing)})",
            file=sys.stderr,
        )
        return 2
    from ..spark.output import OutputError
    from ..spark.pipeline import DEFAULT_RQUEUE_PORTS
    from ..spark.pipeline import run as run_job

    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"nbmq pipeline: --conf needs KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        conf[key.strip()] = value.strip()
    try:
        summary = run_job(
            args.captures or None,
            args.out,
            master=args.master,
            payload=args.payload,
            parts=args.parts,
            pcapng=args.pcapng,
            split_bytes=None if args.split_mb is None else int(args.split_mb * 1024 * 1024),
            conf=conf,
            report=args.report,
            progress=not args.quiet,
            print_summary=not args.quiet,
            bqsp_ports=getattr(args, "bqsp_ports", None),
            rqueue_ports=getattr(args, "rqueue_ports", None) or list(DEFAULT_RQUEUE_PORTS),
        )
    except (FileNotFoundError, OutputError) as exc:
        # a capture path matching nothing, or an --out that cannot take the output: say which
        print(f"nbmq pipeline: {exc}", file=sys.stderr)
        return 2
    return 1 if "report_error" in summary else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m nbmq.cli.pipeline [CAPTURE ...] --out DIR``."""
    parser = argparse.ArgumentParser(prog="nbmq pipeline", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
