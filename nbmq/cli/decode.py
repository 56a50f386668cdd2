"""``nbmq decode``: a quick look at captures, without Spark (a :mod:`nbmq.cli` subcommand).

For each capture: the UDP datagrams, batch-decoded by the codec into counts per nbmq frame kind
(and how many are malformed); then, when the capture holds TCP traffic on an rqueue port
(default 6567, seed 004) or a ``--bqsp-port`` (BQSP names no port, seed 002), its rqueue
messages / BQSP packets by type, error rows and connections (the ``nbmq_rqueue`` /
``nbmq_bqsp`` tables' rules, :mod:`nbmq.capture.tcp.streams`). A path that cannot be read (missing,
not a capture, unreadable) is reported on stderr and the next one is read; a directory stands
for its ``*.pcap`` / ``*.pcapng`` files. Classic pcap of plain UDP reads without dpkt; pcapng,
TCP streams and packets the fast path leaves aside need it (``nbmq[capture]``).

Standard library only at the top level; the codec and ``nbmq.capture`` load in :func:`run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run", "CAPTURE_SUFFIXES", "DEFAULT_RQUEUE_PORT"]

HELP = "frame counts per capture, nbmq over UDP and BQSP / rqueue over TCP (quick look, no Spark)"
DESCRIPTION = (
    "Count the nbmq frames (UDP) and the rqueue messages / BQSP packets (TCP) in each capture. "
    "With no CAPTURE, the bundled ones. Unreadable paths are reported and skipped (exit status 1). "
    "pcapng and TCP streams need dpkt: pip install 'nbmq[capture]'."
)

#: Files a directory argument stands for.
CAPTURE_SUFFIXES = (".pcap", ".pcapng")
#: The rqueue server's default port (seed 004).
DEFAULT_RQUEUE_PORT = 6567


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``CAPTURE ...``, ``--rqueue-port`` and ``--bqsp-port`` to ``parser``."""
    parser.add_argument(
        "captures",
        nargs="*",
        metavar="CAPTURE",
        help="pcap/pcapng files or directories (default: the bundled captures)",
    )
    parser.add_argument(
        "--rqueue-port",
        dest="rqueue_ports",
        type=int,
        action="append",
        default=None,
        metavar="PORT",
        help="TCP port of rqueue servers (repeatable; default 6567)",
    )
    parser.add_argument(
        "--bqsp-port",
        dest="bqsp_ports",
        type=int,
        action="append",
        default=None,
        metavar="PORT",
        help="TCP port of BQSP servers (repeatable; none by default: BQSP names no port)",
    )


def _expand(paths: list[str]) -> list[tuple[str, str | None]]:
    """(path, None) for each capture to read, or (path, why not) for a path that cannot be."""
    out: list[tuple[str, str | None]] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            found = sorted(str(f) for f in p.iterdir() if f.suffix in CAPTURE_SUFFIXES and f.is_file())
            out.extend((f, None) for f in found)
            if not found:
                out.append((path, "a directory without .pcap / .pcapng files"))
        elif not p.exists():
            out.append((path, "no such file"))
        else:
            out.append((path, None))
    return out


def _udp_line(path: str, codec: Any) -> str:
    import numpy as np

    from ..capture import read_datagrams
    from ..wire import SECURE_VERSION

    batch = read_datagrams(path)
    # a row per frame: a sealed bundle's frames each their own (docs/secure.md)
    buffer, offsets, lengths, _ = codec.split_bundles(batch.payload, batch.offsets, batch.lengths)
    rows = codec.parse_frames(buffer, offsets, lengths)
    ok = rows["error"] == codec.FrameError.OK
    kinds = np.bincount(rows["kind"][ok], minlength=len(codec.FrameKind))
    counts = ", ".join(f"{k.name.lower()} {kinds[k]}" for k in codec.FrameKind if kinds[k])
    line = f"{len(batch)} datagrams, {int((~ok).sum())} malformed"
    secure = int((ok & (rows["version"] == SECURE_VERSION)).sum())
    if secure:  # secure mode's frames: headers decoded, content encrypted
        line += f", {secure} secure"
    if batch.errors:
        line += f", {batch.errors} damaged records"
    return line + (f"; {counts}" if counts else "")


def _tcp_line(path: str, protocol: str, ports: list[int]) -> str | None:
    """Counts of one stream protocol in a capture, or None when it has no traffic on ``ports``."""
    from collections import Counter

    from ..capture.tcp.segments import has_tcp_traffic
    from ..capture.tcp.streams import decode_tcp_streams
    from ..wire import RqueueType

    if not has_tcp_traffic(path, ports):
        return None
    kinds: Counter[str] = Counter()
    errors = 0
    connections = set()
    for row in decode_tcp_streams(path, protocol, ports, payload=False):
        if row.client is not None:  # None on rows about the capture file itself
            connections.add((row.client, row.server))
        if row.error is not None:
            errors += 1
            continue
        if protocol == "rqueue":
            try:
                kinds[RqueueType(row.kind).name.lower()] += 1
            except ValueError:
                kinds[f"type {row.kind}"] += 1
        else:
            kinds[f"data_type {row.kind}"] += 1
    what = "messages" if protocol == "rqueue" else "packets"
    detail = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    port_list = ",".join(str(p) for p in ports)
    return (
        f"{protocol} (TCP port {port_list}): {sum(kinds.values())} {what}, {errors} error rows, "
        f"{len(connections)} connections" + (f"; {detail}" if detail else "")
    )


def _has_other_tcp(path: str) -> bool:
    from ..capture.tcp.segments import has_tcp_traffic

    return has_tcp_traffic(path, None)


def run(args: argparse.Namespace) -> int:
    """Print one line per capture (and per stream protocol found in it).

    Args:
        args: ``captures`` (list of str), ``rqueue_ports`` and ``bqsp_ports`` (lists of int or None).

    Returns:
        0 when every capture was read; 1 when some path was reported as unreadable; 2 when some
        capture needed dpkt (the ``capture`` extra) and it is missing (that capture is reported
        on stderr, the others are read).
    """
    from .. import codec
    from ..capture import DpktMissing
    from ..errors import NbmqError
    from ..examples import bundled_captures
    from ..examples.streams import stream_captures, streams_manifest_path

    paths, bqsp_ports = args.captures, args.bqsp_ports or []
    if not paths:  # the bundled captures, with the BQSP port their manifest names
        paths = [str(p) for p in bundled_captures() + stream_captures()]
        bqsp_ports = bqsp_ports or json.loads(streams_manifest_path().read_text())["bqsp_ports"]
    streams = [("rqueue", args.rqueue_ports or [DEFAULT_RQUEUE_PORT]), ("bqsp", bqsp_ports)]
    print(f"codec: {'cython' if codec.COMPILED else 'python'}")
    failed = 0
    missing_dpkt = False
    for path, problem in _expand(paths):
        if problem is None:
            try:
                lines = [_udp_line(path, codec)]
                found = [
                    line
                    for protocol, ports in streams
                    if ports
                    if (line := _tcp_line(path, protocol, ports)) is not None
                ]
                if not found and _has_other_tcp(path):
                    found = ["TCP traffic on other ports (decode it with --rqueue-port / --bqsp-port)"]
                lines += found
            except (NbmqError, OSError, ValueError) as exc:  # CaptureError (not a capture), unreadable
                problem = str(exc) or type(exc).__name__
            except DpktMissing as exc:  # pcapng, TCP or a fallback packet without the capture extra
                problem, missing_dpkt = str(exc), True
        if problem is not None:
            failed += 1
            print(f"{path}: error: {problem}", file=sys.stderr)
            continue
        print(f"{path}: " + "; ".join(lines))
    return 2 if missing_dpkt else 1 if failed else 0
