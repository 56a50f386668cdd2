"""A plain ``pip install nbmq`` (no extras) the way a user meets it.

The wheel is built (pure Python, ``NBMQ_NO_EXTENSIONS=1``, from a copy of the checkout) and
installed with ``--no-deps`` into a fresh venv that sees numpy (the one required dependency,
linked in from this interpreter so no download is needed) and nothing else: no dpkt, pyarrow,
pyspark. Then ``nbmq --help`` and every ``nbmq X --help`` work, and ``nbmq decode`` /
``nbmq pipeline`` name the extra to install instead of a ``ModuleNotFoundError`` traceback.
Skipped, with the reason, when the wheel cannot be built here (no pip, no build backend).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[1]
_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "out", "*.egg-info", "__pycache__", "*.so", "*.c", ".hypothesis", ".benchmarks"
)


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the nbmq wheel and numpy only; returns its ``bin`` directory."""
    tmp = tmp_path_factory.mktemp("install")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NBMQ_REQUIRE_EXTENSIONS")}
    env.update(NBMQ_NO_EXTENSIONS="1", PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_IGNORE, symlinks=True)
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)],
        env,
        tmp,
        timeout=600,
    )
    wheels = sorted((tmp / "dist").glob("nbmq-*.whl"))
    if built.returncode != 0 or not wheels:
        pytest.skip(f"cannot build the nbmq wheel here: {built.stderr.strip()[-500:]}")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env, tmp)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheels[0]),
        ],
        env,
        tmp,
    )
    if installed.returncode != 0:
        pytest.skip(f"cannot install the wheel into a fresh venv: {installed.stderr.strip()[-500:]}")
    # numpy (nbmq's one dependency) from this interpreter, alone in a directory on the venv's path
    import numpy

    deps = tmp / "deps"
    deps.mkdir()
    numpy_dir = Path(numpy.__file__).parent
    for item in (numpy_dir, numpy_dir.parent / "numpy.libs"):
        if item.exists():
            (deps / item.name).symlink_to(item)
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env, tmp)
    Path(purelib.stdout.strip(), "numpy_only.pth").write_text(str(deps) + "\n")
    (venv / "bin" / "nbmq-wheel").symlink_to(wheels[0])  # the wheel, for the contents test
    return venv / "bin"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NBMQ_REQUIRE_EXTENSIONS")}
    env.update(PYTHONNOUSERSITE="1")
    return env


def test_the_venv_has_no_extras(plain_venv: Path, tmp_path: Path) -> None:
    probe = _run(
        [
            str(plain_venv / "python"),
            "-c",
            "import importlib.util as u, nbmq; "
            "print(nbmq.__file__); print([m for m in ('dpkt','pyarrow','pyspark','pandas','rich') "
            "if u.find_spec(m)])",
        ],
        _env(),
        tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    where, extras = probe.stdout.splitlines()
    assert str(ROOT) not in where and "site-packages" in where
    assert extras == "[]"


def test_help_without_extras(plain_venv: Path, tmp_path: Path) -> None:
    nbmq = str(plain_venv / "nbmq")
    top = _run([nbmq, "--help"], _env(), tmp_path)
    assert top.returncode == 0, top.stderr
    for name in ("pipeline", "decode", "rqueue-server"):
        assert name in top.stdout
        sub = _run([nbmq, name, "--help"], _env(), tmp_path)
        assert sub.returncode == 0 and sub.stdout.startswith(f"usage: nbmq {name}"), sub.stderr


def test_decode_without_dpkt_names_the_extra(plain_venv: Path, tmp_path: Path) -> None:
    result = _run([str(plain_venv / "nbmq"), "decode"], _env(), tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "pip install 'nbmq[capture]'" in result.stderr


def test_pipeline_without_spark_names_the_extra(plain_venv: Path, tmp_path: Path) -> None:
    result = _run([str(plain_venv / "nbmq"), "pipeline"], _env(), tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "pip install 'nbmq[spark]'" in result.stderr and "pyspark" in result.stderr
    assert not (tmp_path / "out").exists()  # refused before writing anything


def test_wheel_carries_its_licences_and_no_c_sources(plain_venv: Path) -> None:
    """The wheel names its licence (SPDX) and ships the licence files (ours and the report's
    bundled uPlot's) in its dist-info, and no generated C source."""
    import zipfile

    import nbmq

    names = zipfile.ZipFile((plain_venv / "nbmq-wheel").resolve()).namelist()
    info = f"nbmq-{nbmq.__version__}.dist-info"
    assert not [n for n in names if n.endswith(".c")]
    assert f"{info}/licenses/LICENSE" in names
    assert f"{info}/licenses/nbmq/spark/report/static/uPlot.LICENSE" in names
    assert "nbmq/spark/report/static/uPlot.iife.min.js" in names
    metadata = zipfile.ZipFile((plain_venv / "nbmq-wheel").resolve()).read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata and f"Version: {nbmq.__version__}" in metadata


def _has_symbol_table(path: Path) -> bool:
    """True when the ELF file at ``path`` has a ``.symtab`` section (not stripped)."""
    import struct

    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, f"{path} is not a 64-bit ELF file"
    fmt = "<" if data[5] == 1 else ">"
    (shoff,) = struct.unpack_from(fmt + "Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from(fmt + "HHH", data, 0x3A)
    sections = [struct.unpack_from(fmt + "IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]
    for name_off, *_ in sections:
        end = data.index(b"\0", names_at + name_off)
        if data[names_at + name_off : end] == b".symtab":
            return True
    return False


def test_compiled_modules_are_stripped() -> None:
    """The extensions setup.py builds (the wheel's, and these in-place ones alike) carry no symbol
    table: a few hundred kB less each."""
    built = sorted((ROOT / "nbmq").rglob("*.so"))
    if not built:
        pytest.skip("no compiled module in this checkout (a pure-Python install)")
    assert [p.name for p in built if _has_symbol_table(p)] == []
