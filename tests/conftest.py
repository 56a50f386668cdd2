"""One suite, both codec implementations (the multidict / yarl pattern, STYLE.md section 7).

The ``codec`` fixture runs a test once with the pure-Python twin and once with the Cython
module. ``--no-c-extensions`` (or NBMQ_NO_EXTENSIONS=1) drops the Cython case; when the
extension is expected (NBMQ_REQUIRE_EXTENSIONS=1, as `make test` sets) and missing, the Cython
case fails instead of being skipped.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--c-extensions",
        action="store_true",
        default=not _flag("NBMQ_NO_EXTENSIONS"),
        help="run the Cython codec case of the codec fixture (default unless NBMQ_NO_EXTENSIONS)",
    )
    parser.addoption("--no-c-extensions", dest="c_extensions", action="store_false")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "codec" in metafunc.fixturenames:
        names = ["python"]
        if metafunc.config.getoption("c_extensions"):
            names.append("cython")
        metafunc.parametrize(
            "codec",
            [pytest.param(n, marks=[pytest.mark.c_extension] if n == "cython" else []) for n in names],
            indirect=True,
        )


@pytest.fixture
def codec(request: pytest.FixtureRequest):
    """The codec module under test: ``nbmq._codec_py`` or ``nbmq._codec``."""
    if request.param == "python":
        return importlib.import_module("nbmq._codec_py")
    try:
        return importlib.import_module("nbmq._codec")
    except ImportError:
        if _flag("NBMQ_REQUIRE_EXTENSIONS"):
            raise
        pytest.skip("the Cython codec is not built")


@pytest.fixture(scope="session")
def vectors() -> dict:
    """The Rust reference's golden vectors (tests/data/nbmq_v0_2_0.json)."""
    import json

    return json.loads((DATA / "nbmq_v0_2_0.json").read_text())


@pytest.fixture(scope="session")
def manifest() -> dict:
    """The manifest of every message in the bundled captures."""
    import json

    from nbmq.examples import manifest_path

    return json.loads(manifest_path().read_text())
