"""The codec: picks the Cython module ``nbmq._codec`` or its pure-Python twin ``nbmq._codec_py``.

The twin is used when ``NBMQ_NO_EXTENSIONS`` is set to a non-empty value other than ``0``, on
interpreters other than CPython, or when the extension is missing (then a warning says so,
unless the twin was asked for). ``NBMQ_REQUIRE_EXTENSIONS=1`` turns a missing extension into an
ImportError, so a silent fallback cannot pass CI (msgpack #481, yarl). ``IMPLEMENTATION`` says
which one is loaded: ``"cython"`` or ``"python"``.

Every name of :mod:`nbmq.wire` is re-exported here, so ``from nbmq import codec`` is all a user
needs.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING

from .wire import *  # noqa: F403
from .wire import __all__ as _wire_all


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


NO_EXTENSIONS = _flag("NBMQ_NO_EXTENSIONS") or sys.implementation.name != "cpython"

if TYPE_CHECKING or NO_EXTENSIONS:
    from ._codec_py import *  # noqa: F403
    from ._codec_py import __all__ as _codec_all

    IMPLEMENTATION = "python"
else:
    try:
        from ._codec import *  # type: ignore[import-not-found]  # noqa: F403
        from ._codec import __all__ as _codec_all  # type: ignore[import-not-found]

        IMPLEMENTATION = "cython"
    except ImportError:
        if _flag("NBMQ_REQUIRE_EXTENSIONS"):
            raise
        warnings.warn(
            "nbmq's Cython codec is not built; using the pure-Python twin (much slower). "
            "Set NBMQ_NO_EXTENSIONS=1 to choose it on purpose.",
            RuntimeWarning,
            stacklevel=2,
        )
        from ._codec_py import *  # noqa: F403
        from ._codec_py import __all__ as _codec_all

        IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", *_wire_all, *_codec_all]
