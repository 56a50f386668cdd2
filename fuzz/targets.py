"""The registry of fuzz targets: name -> callable taking one input (bytes).

``DEFAULT`` is what ``make fuzz`` and the short run in ``make test`` run. ``PENDING`` targets
check a property known to fail on main today; they run only when named explicitly
(``python -m fuzz.run --targets capture_split`` or ``make fuzz FUZZ_TARGETS=...``). Move a
target from ``PENDING`` to ``DEFAULT`` when its fix is merged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["TARGETS", "DEFAULT", "PENDING", "load"]

#: target name -> "module:function" (modules imported lazily: a capture target needs no codec)
TARGETS: dict[str, str] = {
    "parse_frame": "fuzz.codec_targets:parse_frame",
    "parse_frames": "fuzz.codec_targets:parse_frames",
    "reassembler": "fuzz.codec_targets:reassembler",
    "bqsp_decoder": "fuzz.codec_targets:bqsp_decoder",
    "rqueue_decoder": "fuzz.codec_targets:rqueue_decoder",
    "capture_twins": "fuzz.capture_targets:capture_twins",
    "capture_split": "fuzz.capture_targets:capture_split",
    "ack_hashes": "fuzz.capture_targets:ack_hashes",
    "reassemble_groups": "fuzz.spark_targets:reassemble_groups",
    "engine_twins": "fuzz.engine_targets:engine_twins",
    "secure_frames": "fuzz.secure_targets:secure_frames",
}

#: targets whose property fails on main today, with the reason (kept out of DEFAULT)
PENDING: dict[str, str] = {}

DEFAULT: tuple[str, ...] = tuple(t for t in TARGETS if t not in PENDING)


def load(name: str) -> Callable[[bytes], None]:
    """Import and return the target called ``name``.

    Raises:
        KeyError: unknown target name.
        ImportError: the compiled extensions are not built (the targets compare against them).
    """
    module, func = TARGETS[name].split(":")
    return getattr(importlib.import_module(module), func)  # type: ignore[no-any-return]
