"""The two codec modules expose the same names with the same signatures (STYLE.md section 2).

Functions and methods of the Cython module are cyfunctions that ``inspect.signature`` reads; for
its extension types the constructor's signature is the text ``embedsignature`` puts first in
the class docstring, parsed here with ``ast`` and its defaults evaluated in the module.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os

import pytest

py = importlib.import_module("nbmq._codec_py")


@pytest.fixture(scope="module")
def c(request):
    if not request.config.getoption("c_extensions"):
        pytest.skip("the Cython case is off (--no-c-extensions / NBMQ_NO_EXTENSIONS)")
    try:
        return importlib.import_module("nbmq._codec")
    except ImportError:
        if os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            raise
        pytest.skip("the Cython codec is not built")


def params(sig: inspect.Signature) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def embedded_signature(module, cls: type) -> list[tuple]:
    """Parameters of the constructor signature embedded in an extension type's docstring."""
    first = cls.__doc__.splitlines()[0]
    assert first.startswith(cls.__name__ + "("), first
    tree = ast.parse(f"def f{first[len(cls.__name__) :]}: pass").body[0].args
    names = [a.arg for a in tree.args]
    defaults = [inspect.Parameter.empty] * (len(names) - len(tree.defaults)) + [
        eval(compile(ast.Expression(d), "<signature>", "eval"), vars(module)) for d in tree.defaults
    ]
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return [(n, kind, d) for n, d in zip(names, defaults)]


def test_same_names(c):
    assert c.__all__ == py.__all__
    for name in py.__all__:
        assert hasattr(c, name), name
    assert c.MESSAGE_OVERHEAD == py.MESSAGE_OVERHEAD
    assert c.ShardedMessage is py.ShardedMessage  # one result type for both


@pytest.mark.parametrize("name", [n for n in py.__all__ if inspect.isfunction(getattr(py, n))])
def test_function_signatures(c, name):
    assert params(inspect.signature(getattr(c, name))) == params(inspect.signature(getattr(py, name)))
    assert getattr(c, name).__doc__, name


@pytest.mark.parametrize("name", ["Reassembler", "BqspDecoder", "RqueueDecoder"])
def test_class_surfaces(c, name):
    pycls, ccls = getattr(py, name), getattr(c, name)
    assert embedded_signature(c, ccls) == params(inspect.signature(pycls))
    pyobj, cobj = pycls(), ccls()
    public = lambda obj: {n for n in dir(obj) if not n.startswith("_")}  # noqa: E731
    assert public(cobj) == public(pyobj)
    for attr in sorted(public(pyobj)):
        pv, cv = getattr(pyobj, attr), getattr(cobj, attr)
        if callable(pv):
            assert params(inspect.signature(getattr(ccls, attr))) == params(inspect.signature(getattr(pycls, attr))), (
                attr
            )
        else:
            assert cv == pv and type(cv) is type(pv), attr
    for dunder in ("__iter__", "__next__", "__len__"):
        assert hasattr(ccls, dunder) == hasattr(pycls, dunder), dunder


def test_selector_exports_one_of_them():
    from nbmq import codec

    module = importlib.import_module("nbmq._codec" if codec.COMPILED else "nbmq._codec_py")
    for name in py.__all__:
        assert getattr(codec, name) is getattr(module, name)
