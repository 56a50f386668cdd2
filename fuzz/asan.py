"""``make asan`` (and the last step of ``make test``): every compiled module built with
AddressSanitizer + UBSan, then every corpus input (and a short random-mutation run) through
every target on that build.

    python -m fuzz.asan [--work build/fuzz] [--seconds 20] [--replay-seconds S] [--targets ...]

The sanitized build goes to ``build/asan/lib`` (``setup.py build_ext -b``, its own temp
folder), next to a copy of the Python sources, so the normal in-place extensions are never
replaced. It runs with gcc's ASan runtime in ``LD_PRELOAD`` (CPython itself is not
instrumented), ``PYTHONMALLOC=malloc`` (so ASan sees the buffers of small ``bytes`` objects
too, which pymalloc would otherwise hide in its arenas) and ``detect_leaks=0`` (CPython keeps
objects alive until exit by design). Any ASan / UBSan report aborts the run: exit status
non-zero. Corpus: ``WORK/corpus`` (grown by ``make fuzz`` / ``make test``), the seeds and
``fuzz/corpus``; see ``fuzz.replay``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .corpus import write_seeds
from .replay import corpus_folders
from .targets import DEFAULT, TARGETS

__all__ = ["build", "modules", "sanitizer_env", "main"]

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "asan"
# -fno-wrapv undoes CPython's -fwrapv, so UBSan reports signed overflow (a wrapped bounds check)
FLAGS = "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -fno-wrapv -g"


def modules() -> list[str]:
    """Every compiled module (``nbmq/**/*.pyx`` by dotted name): the sanitized build must hold each."""
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "nbmq").rglob("*.pyx"))


def _runtime(name: str) -> str:
    path = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        raise FileNotFoundError(f"gcc has no {name} (Debian: apt-get install gcc, which brings libasan8)")
    return os.path.realpath(path)


def build() -> Path:
    """Build the sanitized extensions into ``build/asan/lib`` beside a copy of ``nbmq/``.

    Returns:
        The folder to put first on ``PYTHONPATH``.

    Raises:
        subprocess.CalledProcessError: the build failed.
    """
    lib = BUILD / "lib"
    shutil.copytree(
        ROOT / "nbmq", lib / "nbmq", dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__")
    )
    # -O1: ASan's recommended level, and half the compile time of -O3 (setup.py's NBMQ_OPTIMIZE)
    env = dict(os.environ, CFLAGS=FLAGS, LDFLAGS="-fsanitize=address,undefined", NBMQ_OPTIMIZE="-O1")
    env.pop("NBMQ_NO_EXTENSIONS", None)
    jobs = str(max(1, len(os.sched_getaffinity(0))))  # a module per core: the build is most of the time
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "-j", jobs, "-b", str(lib), "-t", str(BUILD / "tmp")],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return lib


def sanitizer_env(lib: Path) -> dict[str, str]:
    """The environment that runs Python on the sanitized build."""
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(lib), str(ROOT)]),
        LD_PRELOAD=_runtime("libasan.so"),
        PYTHONMALLOC="malloc",
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        NBMQ_REQUIRE_EXTENSIONS="1",
    )


def main() -> None:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "fuzz")
    parser.add_argument("--seconds", type=float, default=20.0, help="random-mutation seconds per target (0: none)")
    parser.add_argument(
        "--replay-seconds",
        type=float,
        default=None,
        help="per target, for the grown corpus (newest first; committed cases and seeds always run)",
    )
    parser.add_argument("--targets", nargs="+", default=list(DEFAULT), choices=sorted(TARGETS))
    args = parser.parse_args()
    started = time.monotonic()
    lib = build()
    built = time.monotonic() - started
    write_seeds(args.work / "seeds")
    env = sanitizer_env(lib)
    check = f"import importlib; print(*(importlib.import_module(m).__file__ for m in {modules()!r}))"
    where = subprocess.run([sys.executable, "-c", check], env=env, cwd=lib, capture_output=True, text=True, check=True)
    outside = [f for f in where.stdout.split() if not f.startswith(str(lib))]
    if outside or len(where.stdout.split()) != len(modules()):
        sys.exit(f"the sanitized extensions did not all load: {where.stdout}")
    print(f"sanitized build ({built:.0f} s): {', '.join(modules())}", flush=True)
    budget = [] if args.replay_seconds is None else ["--seconds", str(args.replay_seconds)]
    steps = [[sys.executable, "-m", "fuzz.replay", "--all", str(args.work), "--targets", *args.targets, *budget]]
    if args.seconds > 0:
        steps += [
            [
                sys.executable,
                "-m",
                "fuzz.mutate",
                t,
                *map(str, corpus_folders(args.work, t)),
                f"--seconds={args.seconds}",
                f"--artifacts={args.work / 'artifacts' / 'asan'}",
            ]
            for t in args.targets
        ]
    for cmd in steps:
        print("$", " ".join(cmd[1:]), flush=True)
        code = subprocess.run(cmd, env=env, cwd=lib).returncode  # cwd first on sys.path: the sanitized copy
        if code:
            sys.exit(f"failed under ASan/UBSan (exit status {code})")
    print(f"ASan/UBSan: no reports ({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
