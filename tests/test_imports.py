"""The import graph of ``nbmq/`` and the layout it lives in (the layer rules of ARCHITECTURE.md).

Every module is parsed with ``ast`` (Cython ``.pyx`` / ``.pxi`` files by their import lines), and
every import counts, function-level ones included: a lazy import still couples the layers. The
test fails on an import circle between nbmq modules and on any import the layers forbid:

* the engines (``nbmq.engine``, ``nbmq.streams``) import no ``socket``, ``asyncio``, ``selectors``,
  ``time`` or ``pyspark``, and no transport, capture or Spark module;
* the codec (``nbmq.codec``, ``nbmq._codec*``, ``nbmq.wire``, ``nbmq.errors``) imports no engine,
  transport, capture or Spark module, and no ``socket`` / ``time``;
* ``nbmq.spark`` imports no engine or transport;
* nothing imports a command-line module (``nbmq.cli`` and every module in ``nbmq.cli.COMMANDS``)
  except another command-line entry point (``nbmq.spark.submit``);
* the package's top level holds at most 10 modules: everything else lives in its layer's folder.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nbmq"
_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+c?import\s+([\w., ()*]+)|c?import\s+([\w.]+))", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in (".py", ".pyx") and "__pycache__" not in path.parts:
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """Absolute name of ``from <level dots><target> import ...`` written in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(absolute imported module, line) for every import in the file, at any depth."""
    is_package = path.name.startswith("__init__.")
    if path.suffix == ".pyx":
        texts = [path.read_text()]
        texts += (
            [p.read_text() for p in sorted((path.parent / "_cython").glob("*.pxi"))] if name == "nbmq._codec" else []
        )
        for text in texts:
            for m in _CYTHON_IMPORT.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                if m.group(3):
                    yield m.group(3), line
                    continue
                dots = len(m.group(1)) - len(m.group(1).lstrip("."))
                base = _resolve(name, is_package, dots, m.group(1).lstrip(".") or None)
                names = [a for a in re.split(r"[\s,()]+", m.group(2)) if a and a != "as"]
                submodules = [f"{base}.{a}" for a in names if f"{base}.{a}" in MODULES]
                if len(submodules) < len(names):
                    yield base, line
                yield from ((sub, line) for sub in submodules)
        return
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.level, node.module)
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            # ``from . import engines`` needs the submodule only (its package is loading already);
            # a name defined in a package's __init__ needs that __init__
            if len(submodules) < len(node.names):
                yield base, node.lineno
            for sub in submodules:
                yield sub, node.lineno


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


GRAPH = {
    name: sorted({m for m, _ in _imports(name, path) if _under(m, ("nbmq",)) and m != name and m in MODULES})
    for name, path in MODULES.items()
}
IMPORTS = {name: list(_imports(name, path)) for name, path in MODULES.items()}


def _cli_modules() -> set[str]:
    """``nbmq.cli`` and the modules of its COMMANDS table (read with ast)."""
    modules = {"nbmq.cli"}
    tree = ast.parse(MODULES["nbmq.cli"].read_text())
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(getattr(t, "id", None) == "COMMANDS" for t in targets):
            modules |= {v.value for v in node.value.values}  # type: ignore[union-attr]
    return modules


CLI_MODULES = _cli_modules()
ENTRY_POINTS = CLI_MODULES | {"nbmq.spark.submit", "nbmq.cli.__main__"}  # spark-submit's script runs nbmq.cli.pipeline

ENGINE = ("nbmq.engine", "nbmq.streams")
CODEC = ("nbmq.codec", "nbmq._codec", "nbmq._codec_py", "nbmq.wire", "nbmq.errors", "nbmq.extensions")
TRANSPORTS = ("nbmq.transports", "nbmq.aio")
CAPTURE_SPARK = ("nbmq.capture", "nbmq.spark")

# (who, what they may not import, why)
RULES = [
    (ENGINE, ("socket", "asyncio", "selectors", "time", "pyspark"), "the engine never touches the OS or a clock"),
    (ENGINE, TRANSPORTS + CAPTURE_SPARK, "the engine sits below transports, capture and spark"),
    (CODEC, ENGINE + TRANSPORTS + CAPTURE_SPARK, "the codec knows bytes only"),
    (CODEC, ("socket", "time", "asyncio", "selectors"), "the codec knows no sockets and no clocks"),
    (("nbmq.spark",), ENGINE + TRANSPORTS, "spark/ uses the codec and capture/, not the engine or transports"),
]


def test_modules_found() -> None:
    """The walk sees the package (a test that parses nothing would pass on anything)."""
    assert {"nbmq", "nbmq.cli", "nbmq.codec", "nbmq.engine.connection", "nbmq.spark.pipeline", "nbmq._codec"} <= set(
        MODULES
    )
    assert "nbmq.codec" in GRAPH["nbmq"]
    assert "nbmq.spark.pipeline" in GRAPH["nbmq.cli.pipeline"]  # a function-level import is seen
    assert {"nbmq.cli.decode", "nbmq.cli.pipeline", "nbmq.cli.monitor"} <= CLI_MODULES
    assert "nbmq.streams.rqueue_broker" in MODULES


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as one cycle path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return components


def _path(component: list[str]) -> str:
    """One concrete circle through a component, for the failure message."""
    members = set(component)
    start = component[0]
    trail, seen = [start], {start}
    while True:
        nxt = next(w for w in GRAPH[trail[-1]] if w in members)
        if nxt in seen:
            return " -> ".join(trail[trail.index(nxt) :] + [nxt])
        trail.append(nxt)
        seen.add(nxt)


def test_no_import_circles() -> None:
    circles = [_path(c) for c in _cycles()]
    assert not circles, "import circles in nbmq/:\n  " + "\n  ".join(circles)


def test_the_cycle_finder_finds_a_circle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(GRAPH, "nbmq.errors", [*GRAPH["nbmq.errors"], "nbmq.codec"])
    assert any("nbmq.errors" in c for c in _cycles())


@pytest.mark.parametrize("who,forbidden,why", RULES, ids=[r[2] for r in RULES])
def test_layer_rules(who: tuple[str, ...], forbidden: tuple[str, ...], why: str) -> None:
    bad = [
        f"{name} imports {target} (line {line})"
        for name, imports in IMPORTS.items()
        if _under(name, who)
        for target, line in imports
        if _under(target, forbidden)
    ]
    assert not bad, f"{why}:\n  " + "\n  ".join(bad)


def test_nothing_imports_a_command_line_module() -> None:
    bad = [
        f"{name} imports {target} (line {line})"
        for name, imports in IMPORTS.items()
        if name not in ENTRY_POINTS
        for target, line in imports
        if target in CLI_MODULES
    ]
    assert not bad, "only entry points may import a CLI module (ARCHITECTURE.md):\n  " + "\n  ".join(bad)


def test_top_level_holds_at_most_ten_modules() -> None:
    top = sorted(name for name in MODULES if name.count(".") == 1 and not (PACKAGE / name.split(".")[1]).is_dir())
    assert "nbmq.codec" in top
    assert len(top) <= 10, f"{len(top)} modules at nbmq/'s top level: {top}"
