"""The ``nbmq`` command: a table of subcommands, one module each.

Each module named in :data:`COMMANDS` exposes

* ``HELP: str`` -- one line for ``nbmq --help``;
* ``add_arguments(parser: argparse.ArgumentParser) -> None`` -- its options;
* ``run(args: argparse.Namespace) -> int`` -- runs it, returns the exit status;

and imports only the standard library at its top level (its layer, and any optional extra,
inside ``run``), so ``nbmq --help`` and ``nbmq X --help`` work on a plain ``pip install nbmq``.
Adding a subcommand is one line in :data:`COMMANDS`. Nothing imports this module
(ARCHITECTURE.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "build_parser", "main"]

#: Subcommand name -> module path (the contract above). Order is the order of ``nbmq --help``.
COMMANDS: dict[str, str] = {
    "pipeline": "nbmq.cli.pipeline",
    "decode": "nbmq.cli.decode",
    "rqueue-server": "nbmq.cli.rqueue_server",
    "monitor": "nbmq.cli.monitor",
    "wireshark": "nbmq.cli.wireshark",
    "perf": "nbmq.cli.perf",
}

_DESCRIPTION = (
    "nbmq: fire-and-forget messaging (nbmq over UDP, BQSP, rqueue) and a Spark pipeline over "
    "captures of the traffic. `nbmq COMMAND --help` describes each command."
)


def build_parser() -> argparse.ArgumentParser:
    """The ``nbmq`` argument parser, one subparser per entry of :data:`COMMANDS`.

    Returns:
        The parser; a parsed namespace carries the chosen module's ``run`` as ``args.run``.

    Raises:
        ImportError: a command module in :data:`COMMANDS` cannot be imported (a packaging bug:
            their top level is standard library only).
    """
    from .. import __version__

    parser = argparse.ArgumentParser(prog="nbmq", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"nbmq {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
        )
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nbmq`` command line.

    Args:
        argv: the arguments after ``nbmq`` (default ``sys.argv[1:]``).

    Returns:
        The exit status: the subcommand's, or 2 for a usage error (argparse exits with it).
    """
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
