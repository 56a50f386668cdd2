"""dpkt, the ``capture`` extra: loaded only by the code that needs it, with a clear error.

The classic pcap fast path (record walk, numpy / compiled decoding) needs no dpkt; dpkt decodes
the packets that path leaves aside, runs the ``dpkt`` engine, parses pcapng interface blocks,
writes pcapng headers and decodes TCP segments. Those call ``load_dpkt`` when they run.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["DpktMissing", "load_dpkt", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'nbmq[capture]'"


class DpktMissing(ModuleNotFoundError):
    """dpkt is not installed, and the capture being read or written needs it (the ``capture`` extra)."""


def load_dpkt(purpose: str) -> ModuleType:
    """Return the ``dpkt`` module.

    Args:
        purpose: what needs it, for the message (e.g. ``"reading pcapng"``).

    Raises:
        DpktMissing: dpkt is not installed (``name`` is ``"dpkt"``, as ModuleNotFoundError's).
    """
    try:
        import dpkt
    except ModuleNotFoundError as exc:
        raise DpktMissing(f"{purpose} needs dpkt: {INSTALL_HINT}", name="dpkt") from exc
    return dpkt
