"""The sans-IO surface: import rules, signatures, docstrings (flush rule), the public names."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import nbmq.engine
from nbmq.engine import Dealer, Dish, Radio, SafeDealer

ENGINE_DIR = Path(nbmq.engine.__file__).parent
FORBIDDEN_MODULES = {"socket", "asyncio", "selectors", "time", "pyspark", "os", "threading"}
RANDOM_FUNCTIONS = {
    "random",
    "randint",
    "randrange",
    "getrandbits",
    "choice",
    "choices",
    "shuffle",
    "sample",
    "uniform",
    "seed",
    "randbytes",
}


@pytest.mark.parametrize("path", sorted(ENGINE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_engine_imports_no_io_clock_or_global_random(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names = {(node.module or "").split(".")[0]}
            if node.module == "random":
                assert not {a.name for a in node.names} & RANDOM_FUNCTIONS
        else:
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "random":
                assert node.attr not in RANDOM_FUNCTIONS, f"random.{node.attr} in {path.name}"
            continue
        assert not names & FORBIDDEN_MODULES, (path.name, names)
        assert "_codec_py" not in ast.unparse(node), "import the codec as `from .. import codec`"


SURFACE = {
    "receive_datagram": ["data", "addr", "now"],
    "receive_datagrams": ["buffer", "offsets", "lengths", "addrs", "now"],
    "datagrams_to_send": ["now"],
    "send": ["parts", "now"],
    "recv": [],
    "tick": ["now"],
    "next_deadline": [],
    "next_event": [],
    "bind": ["local_addr"],
    "connect": ["remote_addr", "now"],
    "close": ["now"],
}


@pytest.mark.parametrize("cls", [Dealer, SafeDealer, Radio, Dish])
def test_surface_signatures(cls):
    for name, params in SURFACE.items():
        sig = inspect.signature(getattr(cls, name))
        assert list(sig.parameters)[1:] == params, (cls.__name__, name)
    engine = cls()
    assert engine.peers == {} and engine.counters.datagrams_in == 0
    with pytest.raises(TypeError):
        engine.peers[1] = None  # read-only view
    assert list(inspect.signature(cls).parameters) == ["options", "rng"]


@pytest.mark.parametrize("name", ["receive_datagram", "receive_datagrams", "send", "tick", "connect", "close"])
def test_methods_that_queue_output_say_so(name):
    doc = inspect.getdoc(getattr(Dealer, name)) or ""
    assert "datagrams_to_send" in doc, name


def test_public_names():
    for name in nbmq.engine.__all__:
        assert getattr(nbmq.engine, name).__doc__, name
