"""Capture files: opening a capture and walking its records (pcap, pcapng, byte ranges).

Knows containers only, not what the packets carry (the datagrams and tcp rooms build on it).
Entry: ``OpenedCapture(source)`` (``source.py``: a path memory-mapped, bytes as they are, gzip
decompressed), recognised by ``formats.detect_format``, then walked: classic pcap by
``records.RecordScanner`` (compiled hot loop ``_records.pyx``), pcapng by ``pcapng.walk_pcapng``.
``splits.plan_splits`` spreads one file over byte ranges that independent readers walk
(resynchronising where a range starts); ``errorlog.ErrorLog`` counts damage without raising.
"""

from __future__ import annotations

from .errorlog import ErrorLog
from .formats import detect_format
from .pcapng import walk_pcapng
from .records import RecordScanner
from .source import CaptureSource, OpenedCapture
from .splits import first_frames, plan_splits, range_starts

__all__ = [
    "CaptureSource",
    "ErrorLog",
    "OpenedCapture",
    "RecordScanner",
    "detect_format",
    "first_frames",
    "plan_splits",
    "range_starts",
    "walk_pcapng",
]
