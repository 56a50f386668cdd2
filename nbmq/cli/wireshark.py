"""``nbmq wireshark install``: copy the Lua dissectors to the personal Wireshark plugin folder.

A subcommand module of the ``nbmq`` command (``HELP``, ``add_arguments``, ``run``; stdlib imports
only at top level).
"""

from __future__ import annotations

import argparse
import sys

HELP = "install the nbmq / BQSP / rqueue dissectors for Wireshark and tshark"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``install [--dest DIR]`` and ``path`` (print where the shipped .lua files are)."""
    sub = parser.add_subparsers(dest="wireshark_action", metavar="ACTION")
    inst = sub.add_parser("install", help="copy the .lua files to the personal Lua plugin folder")
    inst.add_argument(
        "--dest", default=None, help="folder to copy to (default: Wireshark's personal Lua plugin folder)"
    )
    sub.add_parser("path", help="print the folder of the shipped .lua files (for tshark -X lua_script:...)")


def run(args: argparse.Namespace) -> int:
    """Run the action; returns the exit code (0 done, 1 the files could not be written, 2 usage)."""
    from ..wireshark import LUA_DIR, install

    action = getattr(args, "wireshark_action", None)
    if action == "path":
        print(LUA_DIR)
        return 0
    if action != "install":
        print("usage: nbmq wireshark {install [--dest DIR] | path}", file=sys.stderr)
        return 2
    try:
        written = install(getattr(args, "dest", None))
    except OSError as exc:
        print(f"nbmq wireshark install: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    print(
        f"installed {len(written)} dissectors in {written[0].parent}; restart Wireshark or use "
        "Analyze > Reload Lua Plugins. BQSP names no port: set Protocols > BQSP > TCP port "
        "(tshark: -o bqsp.tcp_port:PORT); captures with reordered segments need "
        "-o tcp.reassemble_out_of_order:TRUE."
    )
    return 0
