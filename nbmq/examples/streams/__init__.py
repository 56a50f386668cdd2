"""Captures of BQSP and rqueue traffic over TCP, bundled for the ``nbmq_bqsp`` / ``nbmq_rqueue``
data sources and ``nbmq pipeline``.

``bqsp.pcap`` (server port 7701) and ``rqueue.pcap`` (port 6567) are written deterministically
by ``make_captures.py`` from the project's own engines; ``streams_manifest.json`` lists every
packet / message sent per connection and direction (stream offset, fields, length, sha256).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["STREAMS_DIR", "stream_captures", "streams_manifest_path"]

STREAMS_DIR = Path(str(files(__package__)))


def stream_captures() -> list[Path]:
    """Paths of the bundled stream captures (``bqsp.pcap``, ``rqueue.pcap``), sorted."""
    return sorted(p for p in STREAMS_DIR.iterdir() if p.suffix in (".pcap", ".pcapng"))


def streams_manifest_path() -> Path:
    """Path of ``streams_manifest.json``."""
    return STREAMS_DIR / "streams_manifest.json"
