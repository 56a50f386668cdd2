"""The ``nbmq`` command.

::

    nbmq pipeline [CAPTURE ...] --out DIR [--master local[*]]   captures -> Parquet tables + report
    nbmq rqueue-server [--host 127.0.0.1] [--port 6567]          the rqueue pub/sub broker
    nbmq decode [CAPTURE ...]                                    frame counts per capture (quick look)

Each subcommand imports its layer lazily, so ``nbmq rqueue-server`` never loads Spark. Nothing
imports this module (ARCHITECTURE.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _decode(args: argparse.Namespace) -> int:
    """Read captures, batch-decode every datagram with the codec, print counts per frame kind."""
    import numpy as np

    from . import codec
    from .capture import read_datagrams
    from .examples import bundled_captures

    paths = args.captures or bundled_captures()
    print(f"codec: {codec.IMPLEMENTATION}")
    for path in paths:
        batch = read_datagrams(path)
        rows = codec.parse_frames(batch.payload, batch.offsets, batch.lengths)
        ok = rows["error"] == codec.FrameError.OK
        kinds = np.bincount(rows["kind"][ok], minlength=len(codec.FrameKind))
        counts = ", ".join(f"{k.name.lower()} {kinds[k]}" for k in codec.FrameKind if kinds[k])
        print(f"{path}: {len(rows)} datagrams, {int((~ok).sum())} malformed; {counts}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nbmq`` command line; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="nbmq", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    decode = sub.add_parser("decode", help="frame counts per capture (codec quick look)")
    decode.add_argument("captures", nargs="*", help="pcap/pcapng files (default: the bundled ones)")
    decode.set_defaults(func=_decode)

    try:
        from .spark.cli import add_pipeline_parser
    except ImportError as exc:  # pyspark missing: say how to get it instead of failing obscurely
        missing = str(exc)

        def _no_spark(args: argparse.Namespace) -> int:
            print(f"nbmq pipeline needs the Spark extra: pip install 'nbmq[spark]' ({missing})",
                  file=sys.stderr)
            return 2

        pipe = sub.add_parser("pipeline", help="captures -> Parquet tables (needs nbmq[spark])")
        pipe.add_argument("rest", nargs=argparse.REMAINDER)
        pipe.set_defaults(func=_no_spark)
    else:
        add_pipeline_parser(sub)

    server = sub.add_parser("rqueue-server", help="run the rqueue pub/sub broker", add_help=False)
    server.add_argument("rest", nargs=argparse.REMAINDER)
    server.set_defaults(func=lambda args: _rqueue_server(args.rest))

    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def _rqueue_server(argv: list[str]) -> int:
    from .transports.rqueue_server import main as server_main

    return int(server_main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
