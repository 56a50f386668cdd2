"""One ring file's streaming offset, and how the source tells a file replaced under its name.

``tcpdump -C .. -W N`` (and ``dumpcap -b files:N`` with reused names, or any tool restarted on
the same file name) truncates or rewrites a ring file in place. A capture only ever grows, so
the file named ``name`` is still the one the offsets describe only while it is at least as long
as the offset's ``end`` and its first bytes (up to :data:`FINGERPRINT_BYTES`, which hold the
first records' timestamps) are unchanged. Otherwise it is a new file: the source reads it from
byte 0 and says in one error row how many bytes of the old file it saw but could not read.
"""

from __future__ import annotations

import zlib
from dataclasses import astuple, dataclass

__all__ = ["FileOffset", "FINGERPRINT_BYTES", "fingerprint", "replaced"]

#: bytes at the start of a file its fingerprint covers (CRC-32)
FINGERPRINT_BYTES = 4096


@dataclass(frozen=True)
class FileOffset:
    """One file's entry in the source's offsets (a JSON list in the checkpoint).

    Attributes:
        end: byte offset just past the last whole record read, bytes.
        records: records (pcapng: packet blocks) before ``end``.
        generation: times the file was found replaced under its name (0: the first file).
        fp_len: bytes covered by ``fp_crc`` (``min(end, FINGERPRINT_BYTES)``; 0: unknown).
        fp_crc: CRC-32 of the file's first ``fp_len`` bytes.
        seen: the file's size when this offset was planned, bytes.
        lost: bytes of the previous file of this name seen but never read (set in the offset
            that found the replacement only).
        defer_at, defer_to, defer_trailing: a pcapng damage read past whose error row waits
            for the file's size to decide its text
            (:class:`~nbmq.spark.streaming.boundaries.Deferred`; ``defer_at`` 0: none).
    """

    end: int
    records: int
    generation: int = 0
    fp_len: int = 0
    fp_crc: int = 0
    seen: int = 0
    lost: int = 0
    defer_at: int = 0
    defer_to: int = 0
    defer_trailing: int = 0

    @classmethod
    def parse(cls, value: list[int] | None) -> FileOffset:
        """From the checkpoint's list (older checkpoints hold ``[end, records]`` only)."""
        return cls(*[int(v) for v in (value or [0, 0])])

    def to_json(self) -> list[int]:
        """The checkpoint's list."""
        return list(astuple(self))


def fingerprint(buf: object, length: int) -> tuple[int, int]:
    """``(fp_len, fp_crc)`` of the first ``min(length, FINGERPRINT_BYTES)`` bytes of ``buf``
    (a path or a buffer)."""
    n = max(0, min(length, FINGERPRINT_BYTES))
    if isinstance(buf, str):
        with open(buf, "rb") as f:
            head = f.read(n)
    else:
        head = bytes(memoryview(buf)[:n])  # type: ignore[arg-type]
    if len(head) < n:
        return len(head), -1
    return n, zlib.crc32(head)


def replaced(path: str, size: int, known: FileOffset) -> bool:
    """True when the file at ``path`` (``size`` bytes now) is not the one ``known`` describes:
    shorter than what was read, or different first bytes.

    Raises:
        OSError: the file cannot be read.
    """
    if size < known.end:
        return True
    return known.fp_len > 0 and fingerprint(path, known.fp_len) != (known.fp_len, known.fp_crc)
