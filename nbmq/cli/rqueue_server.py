"""``nbmq rqueue-server``: the :mod:`nbmq.cli` subcommand running the rqueue broker.

The options and the server are :mod:`nbmq.transports.rqueue_server`'s (``build_parser``,
``run_args``); this module only binds them into the subcommand table, importing the server
when the command runs or its options are added (standard library only at the top level).
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run"]

HELP = "run the rqueue pub/sub broker (asyncio, uvloop when installed)"
DESCRIPTION = (
    "Run the rqueue pub/sub broker (seed 004). Prints 'listening on HOST:PORT' once bound; "
    "SIGINT or SIGTERM stops it (exit 0)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the server's options (``--host``, ``--port``, ...) to ``parser``."""
    from ..transports.rqueue_server import build_parser

    build_parser(parser)


def run(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM; returns 0, 1 when it cannot listen, 2 on bad options."""
    from ..transports.rqueue_server import run_args

    return run_args(args)
