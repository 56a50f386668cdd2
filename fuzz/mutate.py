"""The fallback driver when atheris is not installed: random mutations of the corpus, no
coverage feedback. ``python -m fuzz.mutate TARGET --seconds N [--seed S] CORPUS_DIR...``

Mutations are the classic byte-level ones (libFuzzer's set, simplified): bit flips, bytes and
big-endian u16 / u32 set to boundary values, inserted / erased / copied ranges, truncation and
splicing with another input. Stops at the first finding, writes the input to
``--artifacts``/crash-<sha1> and exits 1; prints ``stat::`` lines like libFuzzer otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
import traceback
from pathlib import Path

__all__ = ["mutate", "read_corpus", "fuzz"]

_INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x8000, 0x7FFFFFFF, 0xFFFFFFFF, 34, 466, 500, 65535)


def mutate(data: bytes, rng: random.Random, pool: list[bytes], max_len: int) -> bytes:
    """Return ``data`` with 1-4 random byte-level mutations, at most ``max_len`` bytes long."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(pos, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[min(pos, len(out) - 1)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2 and len(out) >= 4:
            width = rng.choice((2, 4))
            at = rng.randrange(len(out) - width + 1)
            out[at : at + width] = (rng.choice(_INTERESTING) & ((1 << 8 * width) - 1)).to_bytes(width, "big")
        elif op == 3:
            out[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and out:
            del out[pos : pos + rng.randint(1, 64)]
        elif op == 5 and out:
            a = rng.randrange(len(out))
            out[pos:pos] = out[a : a + rng.randint(1, 64)]
        elif op == 6:
            del out[rng.randrange(len(out) + 1) :]
        elif pool:
            other = rng.choice(pool)
            out = out[:pos] + other[rng.randrange(len(other) + 1) :]
    return bytes(out[:max_len])


def read_corpus(folders: list[Path]) -> list[bytes]:
    """Every file of the existing folders, sorted by name; ``[b""]`` when there is none."""
    files = sorted(p for d in folders if d.is_dir() for p in d.iterdir() if p.is_file())
    return [p.read_bytes() for p in files] or [b""]


def fuzz(target, corpus: list[bytes], seconds: float, rng: random.Random, max_len: int) -> tuple[int, bytes | None]:
    """Run the corpus once, then mutants of it until ``seconds`` have passed.

    Returns:
        (executions, the first input that raised, or None).
    """
    runs, deadline = 0, time.monotonic() + seconds
    queue = iter(corpus)
    while True:
        data = next(queue, None)
        if data is None:
            if time.monotonic() >= deadline:
                break
            data = mutate(rng.choice(corpus), rng, corpus, max_len)
        runs += 1
        try:
            target(data)
        except Exception:  # noqa: BLE001 - any escape is a finding
            traceback.print_exc()
            return runs, data
    return runs, None


def main() -> None:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("corpus", nargs="*", type=Path)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    parser.add_argument("--max-len", type=int, default=8192)
    parser.add_argument("--artifacts", type=Path, default=Path("."))
    args = parser.parse_args()
    from .targets import load

    target = load(args.target)
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    print(f"INFO: Seed: {seed}", file=sys.stderr)
    start = time.monotonic()
    runs, failed = fuzz(target, read_corpus(args.corpus), args.seconds, random.Random(seed), args.max_len)
    elapsed = max(time.monotonic() - start, 1e-9)
    print(f"stat::number_of_executed_units: {runs}", file=sys.stderr)
    print(f"stat::average_exec_per_sec:     {int(runs / elapsed)}", file=sys.stderr)
    if failed is not None:
        args.artifacts.mkdir(parents=True, exist_ok=True)
        path = args.artifacts / f"crash-{hashlib.sha1(failed).hexdigest()}"
        path.write_bytes(failed)
        print(f"Test unit written to {path}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
