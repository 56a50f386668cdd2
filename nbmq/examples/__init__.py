"""Captures of the Rust reference's traffic, bundled so a fresh install can run the pipeline.

``captures/manifest.json`` lists every message each peer sent (part sizes and sha256, whether it
is complete in the capture). ``dealer.pcapng`` holds the same packets as ``dealer.pcap``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

CAPTURE_DIR = Path(str(files(__package__) / "captures"))


def bundled_captures(pcapng: bool = False) -> list[Path]:
    """The bundled capture files, sorted by name.

    Args:
        pcapng: also list ``dealer.pcapng`` (the same packets as ``dealer.pcap``).

    Returns:
        Paths of the classic pcap captures (dealer, radio_dish, safe_dealer), plus the pcapng
        one when asked.
    """
    suffixes = {".pcap", ".pcapng"} if pcapng else {".pcap"}
    return sorted(p for p in CAPTURE_DIR.iterdir() if p.suffix in suffixes)


def manifest_path() -> Path:
    """Path of ``manifest.json``."""
    return CAPTURE_DIR / "manifest.json"
