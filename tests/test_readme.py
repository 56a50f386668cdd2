"""Every code block in README.md and docs/*.md runs as written.

Blocks are found anew on every run, so blocks added later are checked too; failures name the
block's file and line.

* ``python`` blocks: each runs in a fresh interpreter, in an empty temporary directory. A block
  that uses Spark (``nbmq.spark`` / ``pyspark``) carries the ``spark`` marker.
* ``sh`` / ``bash`` / ``console`` blocks: every line must be an ``nbmq`` command. The cheap ones
  (``decode``, ``--help``, ``--version``) run, in a temporary directory; the others
  (``pipeline``, which starts Spark; ``rqueue-server``, which runs until stopped) must parse with
  the ``nbmq`` argument parser, and their ``--out`` is pointed at a temporary directory.
* A block that cannot run here is preceded by ``<!-- not-run: REASON -->`` (blank lines
  allowed in between). The test honours it, counts these blocks, and fails on a marker without
  a reason or without a block after it.
* Blocks with no language (or ``text``) are illustrations, not code.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGS = {"python", "py", "sh", "bash", "console", "shell"}
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->\s*$")
#: ``nbmq`` subcommands cheap enough to run from a sh block.
CHEAP = {"decode"}


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence in its document
    lang: str
    code: str
    not_run: str | None  # the marker's reason, when the block is marked not-run
    document: str = "README.md"  # path relative to the repository

    def __str__(self) -> str:
        return f"{self.document}:{self.line} ({self.lang} block)"


def parse_blocks(text: str, document: str = "README.md") -> tuple[list[Block], list[int]]:
    """The fenced blocks of ``text`` and the lines of markers not followed by a block."""
    lines = text.splitlines()
    blocks: list[Block] = []
    stray: list[int] = []
    marker: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        not_run = _NOT_RUN.match(line.strip())
        if not_run:
            if marker is not None:
                stray.append(marker[0])
            marker = (i + 1, not_run.group(1))
        elif fence:
            close = fence.group(1)
            j = i + 1
            while j < len(lines) and not lines[j].startswith(close):
                j += 1
            reason = marker[1] if marker else None
            blocks.append(Block(i + 1, fence.group(2).lower(), "\n".join(lines[i + 1 : j]) + "\n", reason, document))
            marker = None
            i = j
        elif line.strip() and marker is not None:  # prose between a marker and its block
            stray.append(marker[0])
            marker = None
        i += 1
    if marker is not None:
        stray.append(marker[0])
    return blocks, stray


def _parse_documents() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    stray: list[str] = []
    for path in DOCUMENTS:
        name = str(path.relative_to(ROOT))
        found, lost = parse_blocks(path.read_text(), name)
        blocks += found
        stray += [f"{name}:{line}" for line in lost]
    return blocks, stray


BLOCKS, STRAY = _parse_documents()
RUNNABLE = [b for b in BLOCKS if b.lang in RUN_LANGS]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _params(lang: set[str]) -> list:
    out = []
    for block in RUNNABLE:
        if block.lang not in lang or block.not_run is not None:
            continue
        marks = [pytest.mark.spark] if re.search(r"nbmq\.spark|pyspark", block.code) else []
        out.append(pytest.param(block, id=f"{Path(block.document).stem}-line{block.line}", marks=marks))
    return out


def test_readme_blocks_found_and_markers_valid() -> None:
    """The parser sees the documents' blocks; every not-run marker has a reason and a block."""
    assert sum(b.lang == "python" for b in BLOCKS) >= 3 and any(b.lang == "sh" for b in BLOCKS)
    assert {b.document for b in BLOCKS} > {"README.md"}, "docs/*.md blocks are found too"
    assert not STRAY, f"{STRAY}: a not-run marker must come right before a code block"
    for block in BLOCKS:
        if block.not_run is not None:
            assert block.not_run, f"{block}: a not-run marker needs a reason"
    skipped = [f"{b}: {b.not_run}" for b in BLOCKS if b.not_run is not None]
    print(
        f"README.md and docs/: {len(RUNNABLE) - len(skipped)} blocks run, {len(skipped)} not run:", *skipped, sep="\n  "
    )
    assert len(skipped) <= len(RUNNABLE) // 2, "most README blocks must run"


def test_marker_parser_honours_markers() -> None:
    blocks, stray = parse_blocks(
        "<!-- not-run: needs a cluster -->\n\n```sh\nspark-submit x\n```\n"
        "<!-- not-run: lost -->\nprose\n```python\nprint(1)\n```\n"
    )
    assert [(b.line, b.lang, b.not_run) for b in blocks] == [(3, "sh", "needs a cluster"), (8, "python", None)]
    assert stray == [6]


@pytest.mark.parametrize("block", _params({"python", "py"}))
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / f"readme_line{block.line}.py"
    script.write_text(block.code)
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, f"{block} failed:\n{block.code}\n--- stderr ---\n{result.stderr[-3000:]}"


def _commands(block: Block) -> list[tuple[int, list[str]]]:
    """(document line, argv) of each command line of a sh block; comments and blank lines dropped."""
    out = []
    for offset, line in enumerate(block.code.splitlines(), start=1):
        argv = shlex.split(line, comments=True)
        if argv:
            out.append((block.line + offset, argv))
    return out


@pytest.mark.parametrize("block", _params({"sh", "bash", "console", "shell"}))
def test_sh_block_runs_or_parses(block: Block, tmp_path: Path) -> None:
    from nbmq import cli

    commands = _commands(block)
    assert commands, f"{block}: no command in it"
    for line, argv in commands:
        where = f"{block.document}:{line}: {shlex.join(argv)}"
        assert argv[0] == "nbmq", (
            f"{where}: only `nbmq ...` lines run from the documents; mark the block "
            "<!-- not-run: REASON --> if it cannot run in the test suite"
        )
        rest = argv[1:]
        if "--out" in rest:  # never write into the checkout
            rest[rest.index("--out") + 1] = str(tmp_path / "out")
        if rest and rest[0] in CHEAP or {"--help", "-h", "--version"} & set(rest):
            result = subprocess.run(
                [sys.executable, "-m", "nbmq.cli", *rest],
                cwd=tmp_path,
                env=_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert result.returncode == 0, f"{where} exited {result.returncode}:\n{result.stderr[-3000:]}"
            continue
        try:
            args = cli.build_parser().parse_args(rest)
        except SystemExit as exc:
            pytest.fail(f"{where}: the nbmq parser refuses it (exit {exc.code})")
        assert args.command == rest[0], where


def test_readme_is_a_newcomers_guide() -> None:
    """README.md stays short (at most 350 lines) and links the documents that hold the rest."""
    text = README.read_text()
    assert len(text.splitlines()) <= 350, "details belong in docs/*.md"
    for path in DOCUMENTS[1:]:
        assert f"docs/{path.name}" in text, f"README.md does not link docs/{path.name}"
