"""Code explains itself: no issue numbers or working-branch names in the package, its tests, its
benchmarks or its fuzz targets (what the code does and why belongs there; its history is git's)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("nbmq", "tests", "benchmarks", "fuzz", "examples")
SUFFIXES = {".py", ".pyx", ".pxi", ".pxd", ".lua", ".js"}
#: the word issue (or issues) followed by a number, with or without "#", also inside a name
#: (``test_..._issue_11``), and the working branches of past sessions (spelled apart, so this
#: file names none itself)
HISTORY = re.compile(
    r"(?<![a-z])issues?[\s_]+#?\d+|\b(?:big"
    r"take|safe"
    r"compiled|relay"
    r"50|report"
    r"fast|find"
    r"fast"
    r"|mem"
    r"safety|mem"
    r"flat|per"
    r"path|sec"
    r"pipe|loop"
    r"fast|per"
    r"msg)\b",
    re.I,
)


def _sources() -> list[Path]:
    return [
        p
        for folder in FOLDERS
        for p in (ROOT / folder).rglob("*")
        if p.suffix in SUFFIXES and p.is_file() and "corpus" not in p.parts and p.name != "uPlot.iife.min.js"
    ]


def test_no_history_in_code() -> None:
    sources = _sources()
    assert len(sources) > 200
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
        for p in sources
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if HISTORY.search(line) and p != Path(__file__)
    ]
    assert not found, "history belongs to git:\n  " + "\n  ".join(found)


def test_the_pattern_finds_history() -> None:
    word = "iss" + "ue"  # spelled apart, so this file does not name one itself
    assert HISTORY.search(f"({word} 14, item 5)") and HISTORY.search(f"see {word.title()} #3")
    assert HISTORY.search("big" + "take path")
    assert not HISTORY.search(f"an {word} with 14 frames") and not HISTORY.search(f"t{word} 3")
