"""The codec: the Cython module ``nbmq._codec``, or its pure-Python twin ``nbmq._codec_py``.

:func:`nbmq.extensions.load` chooses, as for every compiled module: the twin when
``NBMQ_NO_EXTENSIONS`` is set, on interpreters other than CPython, or when the extension is not
built (then with a warning, or an ImportError under ``NBMQ_REQUIRE_EXTENSIONS=1``). ``COMPILED``
says which one is loaded.

Every name of :mod:`nbmq.wire` is re-exported here, so ``from nbmq import codec`` is all a user
needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import extensions
from .wire import *  # noqa: F403
from .wire import __all__ as _wire_all

if TYPE_CHECKING:
    from ._codec_py import *  # noqa: F403
    from ._codec_py import __all__ as _codec_all

    COMPILED = False
else:
    _compiled = extensions.load("nbmq._codec")
    if _compiled is None:
        from . import _codec_py as _compiled
    _codec_all = list(_compiled.__all__)
    globals().update({name: getattr(_compiled, name) for name in _codec_all})
    #: True when the Cython codec is loaded, False for the pure-Python twin.
    COMPILED = _compiled.__name__ == "nbmq._codec"
    del _compiled

__all__ = ["COMPILED", *_wire_all, *_codec_all]
