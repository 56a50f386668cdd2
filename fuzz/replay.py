"""Run inputs through targets once, no mutation: to reproduce a finding, or to run a whole
corpus under AddressSanitizer (``make asan``).

    python -m fuzz.replay TARGET FILE_OR_DIR...     # one target
    python -m fuzz.replay --all WORK_DIR            # every target over WORK_DIR/{corpus,seeds}/<target>
                                                    # and fuzz/corpus/<target>
    python -m fuzz.replay --all WORK_DIR --seconds 20   # the grown corpus newest first, 20 s a target

Exits 1 if any input fails, after running them all; each failure is printed with its
traceback and the input in hex.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from .corpus import REGRESSIONS
from .targets import DEFAULT, TARGETS, load

__all__ = ["replay", "corpus_folders"]


def corpus_folders(work: Path, target: str) -> list[Path]:
    """The corpus folders of ``target``: grown by fuzzing, generated seeds, committed cases."""
    return [work / "corpus" / target, work / "seeds" / target, REGRESSIONS / target]


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.is_file())
        elif p.is_file():
            out.append(p)
    return out


def _ordered(target: str, paths: list[Path], work: Path | None) -> list[Path]:
    """The files of ``paths``: with ``work`` (``--all``), the committed cases and the seeds
    first, then the grown corpus newest first (what a time budget leaves out is the oldest)."""
    files = _files(paths)
    if work is None:
        return files
    grown = work / "corpus" / target
    first = [f for f in files if f.parent != grown]
    rest = sorted((f for f in files if f.parent == grown), key=lambda f: f.stat().st_mtime, reverse=True)
    return first + rest


def replay(
    target: str, paths: list[Path], work: Path | None = None, seconds: float | None = None
) -> tuple[int, int, list[Path]]:
    """Run every file under ``paths`` through ``target``.

    Args:
        target: a name in ``TARGETS``.
        paths: files and folders of inputs.
        work: the fuzzing work folder when ``paths`` are its corpus folders (``--all``).
        seconds: stop after this long, once the committed cases and seeds have run (None:
            every input).

    Returns:
        (inputs run, inputs found, the files that raised).
    """
    fn = load(target)
    failed = []
    files = _ordered(target, paths, work)
    always = sum(1 for f in files if work is None or f.parent != work / "corpus" / target)
    started = time.monotonic()
    run = 0
    for f in files:
        if seconds is not None and run >= always and time.monotonic() - started > seconds:
            break
        data = f.read_bytes()
        run += 1
        try:
            fn(data)
        except Exception:  # noqa: BLE001 - every escape is reported
            failed.append(f)
            print(f"FAIL {target} {f} ({len(data)} bytes): {data[:4096].hex()}", file=sys.stderr)
            traceback.print_exc()
    return run, len(files), failed


def main() -> None:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", choices=sorted(TARGETS))
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--all", type=Path, metavar="WORK_DIR", help="every target over its corpus folders")
    parser.add_argument("--targets", nargs="+", default=list(DEFAULT), help="with --all (default: %(default)s)")
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="per target: stop after this long once committed cases and seeds ran (newest grown inputs first)",
    )
    args = parser.parse_args()
    jobs = [(t, corpus_folders(args.all, t)) for t in args.targets] if args.all else [(args.target, args.paths)]
    if not args.all and args.target is None:
        parser.error("name a target, or use --all")
    bad = 0
    for target, paths in jobs:
        n, found, failed = replay(target, paths, args.all, args.seconds)
        bad += len(failed)
        left = f"  ({found - n} oldest left out: --seconds {args.seconds:g})" if n < found else ""
        print(f"{target:16} {n:6} inputs  {len(failed)} failed{left}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
