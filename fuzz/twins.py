"""Both implementations of every decoder in one process, and an exact comparison of outcomes.

The rule (STYLE.md section 7, h11 #191): for the same bytes both twins return the
same values, or raise the same ``NbmqError`` class with the same ``offset`` and ``reason``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import numpy as np

from nbmq.errors import DecodeError, NbmqError

__all__ = ["Finding", "load_twins", "norm", "outcome", "check_same"]


class Finding(AssertionError):
    """A target's property failed on one input: the twins disagreed, or an invariant they
    should both keep did not hold (reported like a crash)."""


def load_twins() -> tuple[Any, Any]:
    """Return ``(python_twin, cython_twin)``: the modules ``nbmq._codec_py`` and ``nbmq._codec``.

    Raises:
        ImportError: the Cython codec is not built (build it: ``setup.py build_ext --inplace``);
            fuzzing one twin against itself would prove nothing, so there is no fallback.
    """
    return importlib.import_module("nbmq._codec_py"), importlib.import_module("nbmq._codec")


def norm(obj: object) -> object:
    """A comparable, type-aware picture of a codec result (views and arrays by their bytes).

    Raises:
        TypeError: a result type the twins should never return.
    """
    if isinstance(obj, memoryview):
        return ("memoryview", obj.format, obj.tobytes())
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.dtype.names, obj.shape, obj.tobytes())
    if isinstance(obj, IntEnum):
        return (type(obj).__name__, int(obj))
    if isinstance(obj, tuple):
        return (type(obj).__name__, tuple(norm(x) for x in obj))
    if isinstance(obj, list):
        return [norm(x) for x in obj]
    if isinstance(obj, (bool, int, bytes, str, float, type(None))):
        return (type(obj).__name__, obj)
    raise TypeError(f"unexpected result type {type(obj).__name__}")


def outcome(fn: Callable[..., object], *args: object) -> tuple:
    """``("ok", norm(result))`` or ``("raise", class name, offset, reason)`` for NbmqError.

    Any other exception propagates: it is a finding whatever the other twin does.
    """
    try:
        return ("ok", norm(fn(*args)))
    except DecodeError as e:
        return ("raise", type(e).__name__, e.offset, e.reason)
    except NbmqError as e:
        return ("raise", type(e).__name__, str(e))


def check_same(what: str, python_result: object, cython_result: object) -> None:
    """Raise ``Finding`` naming ``what`` unless both results are equal."""
    if python_result != cython_result:
        raise Finding(
            f"{what}: the twins disagree\n  python: {_short(python_result)}\n  cython: {_short(cython_result)}"
        )


def _short(value: object, limit: int = 2000) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
