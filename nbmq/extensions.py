"""Which code runs: a compiled extension or its pure-Python twin, under one policy for all.

Every compiled module of nbmq has a Python twin that gives the same results (the tests run
both): the codec ``nbmq._codec`` (twin ``nbmq._codec_py``), ``nbmq.engine._fast`` (the engine's
own Python methods), ``nbmq.transports._batch`` (``recvfrom``/``sendto``), ``nbmq.transports._socket`` (the
blocking socket's ``send``/``recv`` methods), the capture walkers
``nbmq.capture.files._records`` and ``nbmq.capture.datagrams._decode`` (numpy), and
``nbmq.spark._reassemble`` (``nbmq.spark._reassemble_py``), ``nbmq.engine._seal`` (secure mode's
``FrameCipher``, twin in ``nbmq.engine.secure``), ``nbmq.engine._queue_state`` (the send queue's
fields, twin ``queues.SendQueueStatePy``). :func:`load` is the one place that
chooses, for each of them:

- ``NBMQ_NO_EXTENSIONS`` set (to anything but ``""`` or ``"0"``), an interpreter other than
  CPython, or a module built for one platform only (``_batch``: Linux) elsewhere: the twin,
  silently (it was asked for, or there is nothing to build);
- the module is built: the compiled one;
- it is not built: with ``NBMQ_REQUIRE_EXTENSIONS`` set, ImportError (a silent fallback cannot
  pass CI; msgpack #481); else the twin, and one ``RuntimeWarning`` naming the module.

Each module that uses one says which runs in a ``COMPILED`` bool.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from types import ModuleType

__all__ = ["flag", "load"]


def flag(name: str) -> bool:
    """True when the environment variable ``name`` is set to anything but ``""`` or ``"0"``."""
    return os.environ.get(name, "") not in ("", "0")


_warned: set[str] = set()


def load(name: str, *, linux_only: bool = False, needs: str | None = None) -> ModuleType | None:
    """The compiled module ``name``, or None where its Python twin must run (see above).

    Args:
        name: the extension's absolute module name, e.g. ``"nbmq.spark._reassemble"``.
        linux_only: the module is built on Linux only; elsewhere the twin runs silently.
        needs: another extension this one works with (``nbmq.engine._fast`` does what the
            compiled codec's Reassembler does): when that one does not load, neither does this.

    Returns:
        The imported module, or None.

    Raises:
        ImportError: the module (or ``needs``) is not built and ``NBMQ_REQUIRE_EXTENSIONS`` is set.
    """
    no_extensions = flag("NBMQ_NO_EXTENSIONS") or sys.implementation.name != "cpython"
    if no_extensions or (linux_only and not sys.platform.startswith("linux")):
        return None
    if needs is not None and load(needs) is None:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        if flag("NBMQ_REQUIRE_EXTENSIONS"):
            raise
        if name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"{name} is not built: its pure-Python twin runs instead (same results, slower). "
                "Build the extensions (pip install -e . or setup.py build_ext --inplace), or set "
                "NBMQ_NO_EXTENSIONS=1 to choose the twins on purpose.",
                RuntimeWarning,
                stacklevel=2,
            )
        return None
