"""``nbmq pipeline``: the argparse front of :func:`nbmq.spark.pipeline.run`.

Wired into the ``nbmq`` command by ``add_pipeline_parser(subparsers)``, whose parser sets
``func=run_pipeline``; standalone as ``python -m nbmq.spark.cli ...`` or through
``spark-submit .../nbmq/spark/submit.py ...`` (see :mod:`nbmq.spark.submit`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["add_pipeline_parser", "run_pipeline", "main"]

_DESCRIPTION = (
    "Decode nbmq captures (pcap/pcapng) on Spark into Parquet tables frames/, messages/ and "
    "sessions/ under --out, with report.html and summary.json. With no CAPTURE, the bundled "
    "captures (classic pcap only; --pcapng adds dealer.pcapng, which repeats dealer.pcap). "
    "Malformed datagrams become error rows, never a failed run. Captures with TCP traffic on the "
    "rqueue port (6567, --rqueue-port) or a --bqsp-port also get rqueue/ and bqsp/ tables."
)


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("captures", nargs="*", metavar="CAPTURE", help="pcap/pcapng files or directories")
    parser.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default: spark-submit's, else local[*]); e.g. local[2], spark://host:7077",
    )
    parser.add_argument("--pcapng", action="store_true", help="with no CAPTURE, also the bundled dealer.pcapng")
    parser.add_argument("--no-payload", dest="payload", action="store_false", help="leave payload out of frames/")
    parser.add_argument("--parts", action="store_true", help="keep each message's parts (bytes) in messages/")
    parser.add_argument(
        "--split-mb", type=float, default=64.0, metavar="MB",
        help="split classic pcap files larger than this into byte ranges (default 64; 0: never)",
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)"
    )
    parser.add_argument(
        "--bqsp-port", dest="bqsp_ports", type=int, action="append", default=None, metavar="PORT",
        help="TCP port of BQSP servers: its connections are decoded into bqsp/ (repeatable; BQSP "
        "has no default port, so no bqsp/ without it)",
    )
    parser.add_argument(
        "--rqueue-port", dest="rqueue_ports", type=int, action="append", default=None, metavar="PORT",
        help="TCP port of rqueue servers, decoded into rqueue/ (repeatable; default 6567)",
    )
    parser.add_argument("--no-report", dest="report", action="store_false", help="skip report.html")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress and no summary table")
    parser.set_defaults(func=run_pipeline)
    return parser


def add_pipeline_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``pipeline`` subcommand to an ``argparse`` subparsers object.

    The parser's default ``func`` is :func:`run_pipeline`, so ``args.func(args)`` runs it and
    returns the exit code.
    """
    parser = subparsers.add_parser(
        "pipeline", help="captures -> Parquet tables + report on Spark", description=_DESCRIPTION
    )
    return _configure(parser)


def run_pipeline(args: argparse.Namespace) -> int:
    """Run the pipeline for parsed arguments; returns the exit code (0 on success)."""
    from .pipeline import DEFAULT_RQUEUE_PORTS, run

    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"nbmq pipeline: --conf needs KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        conf[key.strip()] = value.strip()
    try:
        run(
            args.captures or None,
            args.out,
            master=args.master,
            payload=args.payload,
            parts=args.parts,
            pcapng=args.pcapng,
            split_bytes=int(args.split_mb * 1024 * 1024),
            conf=conf,
            report=args.report,
            progress=not args.quiet,
            print_summary=not args.quiet,
            bqsp_ports=getattr(args, "bqsp_ports", None),
            rqueue_ports=getattr(args, "rqueue_ports", None) or list(DEFAULT_RQUEUE_PORTS),
        )
    except FileNotFoundError as exc:
        print(f"nbmq pipeline: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m nbmq.spark.cli [CAPTURE ...] --out DIR``."""
    parser = _configure(argparse.ArgumentParser(prog="nbmq pipeline", description=_DESCRIPTION))
    args = parser.parse_args(argv)
    return run_pipeline(args)


if __name__ == "__main__":
    sys.exit(main())
