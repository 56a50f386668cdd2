"""How the report writes numbers: hex u64 ids, scaled units, durations."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["hex_id", "rate", "size", "duration", "count", "nice_bin_width", "pick_scale"]

_RATE_STEPS = [(1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")]
_SIZE_STEPS = [(1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")]
_NICE_WIDTHS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]


def hex_id(value: Any) -> str:
    """A u64 id (int, Decimal or numeric str) as ``0x`` and 16 hex digits; "" for None/NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"0x{int(value):016x}"


def id_cell(value: Any) -> str:
    """A u64 id as the report's id markup (``<span class=id>0x...</span>``; see :func:`hex_id`)."""
    return f"<span class=id>{hex_id(value)}</span>"


def _scaled(value: float, steps: list[tuple[float, str]], digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    for factor, unit in steps:
        if abs(value) >= factor:
            return f"{value / factor:,.{digits if factor > 1 else 0}f} {unit}"
    return f"{value:,.0f} {steps[-1][1]}"


def rate(bytes_per_s: float) -> str:
    """Bytes per second scaled to B/s, kB/s, MB/s or GB/s (decimal prefixes, as Wireshark)."""
    return _scaled(bytes_per_s, _RATE_STEPS, 1)


def size(n_bytes: float) -> str:
    """Bytes scaled to B, kB, MB or GB."""
    return _scaled(n_bytes, _SIZE_STEPS, 1)


def duration(seconds: float) -> str:
    """Seconds as µs, ms, s, min or h, three significant digits."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return ""
    for limit, factor, unit in ((1e-3, 1e6, "µs"), (1.0, 1e3, "ms"), (120.0, 1.0, "s"), (7200.0, 1 / 60, "min")):
        text = f"{seconds * factor:.3g}"
        if abs(float(text)) < limit * factor:  # compare after rounding: 999.9 µs reads 1 ms
            return f"{text} {unit}"
    return f"{seconds / 3600:.3g} h"


def count(n: Any) -> str:
    """An integer count with thousands separators."""
    return "" if n is None or (isinstance(n, float) and math.isnan(n)) else f"{int(n):,}"


def nice_bin_width(span: float, bins: int = 120) -> float:
    """A round time bin (seconds, always a float) giving at most ``bins`` bins over ``span`` s.

    A float always: it goes into a ``double`` Spark column, whose verifier rejects an int
    (every capture over 40 s failed the pipeline).
    """
    want = max(span, 0.0) / bins
    return float(next((w for w in _NICE_WIDTHS if w >= want), math.ceil(want / 3600) * 3600))


def pick_scale(peak: float, steps: list[tuple[float, str]] | None = None) -> tuple[float, str]:
    """(divisor, unit) for a chart axis of bytes/s whose largest value is ``peak``."""
    for factor, unit in steps or _RATE_STEPS:
        if peak >= factor:
            return factor, unit
    return 1.0, (steps or _RATE_STEPS)[-1][1]
