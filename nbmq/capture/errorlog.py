"""Counting damage in a capture without raising: an exact count plus the first few reasons."""

from __future__ import annotations

__all__ = ["ErrorLog", "MAX_ERROR_REASONS"]

MAX_ERROR_REASONS = 16  # a short sample is enough to diagnose; the count stays exact


class ErrorLog:
    """Exact error count plus the ``MAX_ERROR_REASONS`` errors nearest the start of the file.

    Errors may be added out of file order (framing first, then packet decoding); ``reasons``
    sorts them by byte position so both read engines report the same list.

    A byte-range reader starts its walk before its range (see ``RecordScanner.walk_range``);
    ``floor`` makes it ignore the errors an earlier range owns, so the ranges of a file
    together count each error once.

    Args:
        floor: byte offset; framing errors owned by a record before it are not recorded.
        ceiling: byte offset; framing errors owned at or after it are not recorded (None:
            no bound). A pcapng range reader walks the whole file and keeps its own part.

    Attributes:
        count: number of errors recorded (int).
    """

    __slots__ = ("count", "floor", "ceiling", "_entries")

    def __init__(self, floor: int = 0, ceiling: int | None = None) -> None:
        self.count = 0
        self.floor = floor
        self.ceiling = ceiling
        self._entries: list[tuple[int, str]] = []

    def at_offset(self, offset: int, reason: str, owner: int | None = None) -> None:
        """Record a framing error at byte ``offset`` of the capture (bad or cut record).

        Args:
            offset: where the damage was seen (the bad or cut header), shown in the reason.
            reason: short reason, e.g. ``"implausible record header"``.
            owner: byte offset of the record the error belongs to (the last good record,
                whose length led to the bad header); None: ``offset``. The range holding the
                owner counts the error; owners outside ``[floor, ceiling)`` are ignored.
        """
        at = offset if owner is None else owner
        if at < self.floor or (self.ceiling is not None and at >= self.ceiling):
            return
        self._add(offset, f"offset {offset}: {reason}")

    def at_frame(self, offset: int, frame: int, reason: str) -> None:
        """Record a packet that was framed (has a frame number) but could not be decoded.

        Args:
            offset: byte offset of the packet's record in the capture (orders the reasons).
            frame: the packet's 1-based frame number.
            reason: short reason, e.g. ``"bad UDP length"``.
        """
        self._add(offset, f"frame {frame}: {reason}")

    @property
    def reasons(self) -> list[str]:
        """The first ``MAX_ERROR_REASONS`` errors by byte position, as short strings."""
        self._entries.sort()
        return [text for _, text in self._entries[:MAX_ERROR_REASONS]]

    def _add(self, offset: int, text: str) -> None:
        self.count += 1
        self._entries.append((offset, text))
        if len(self._entries) > 4 * MAX_ERROR_REASONS:  # bound memory on very damaged files
            self._entries.sort()
            del self._entries[MAX_ERROR_REASONS:]
