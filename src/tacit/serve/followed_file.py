"""A file followed as it grows (``tail -f``): its complete lines, each once, from where an
earlier run stopped.

Each read takes the lines completed since the last one, at most :data:`MAX_READ` bytes; a line
longer than that (no agent writes one) is given as an :class:`~tacit.errors.InputError` once its
end is written, searched for from where the last search stopped, so that a line still growing
costs each poll only its new bytes. A file that becomes shorter than what was read (a writer
that restarted and truncated it, a log rotated by copying and truncating) is read again from its
start.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

from tacit.errors import InputError

log = logging.getLogger("tacit.serve")

MAX_READ = 4 << 20
"""Bytes read at once, and the longest line taken."""
Line = tuple[int, int, str | InputError]
"""A line's number, the byte offset of its start, and its text (or why it is refused)."""


class Read(NamedTuple):
    """The lines one read gave, and the offset and line number after them."""

    lines: list[Line]
    offset: int
    line: int


class FollowedFile:
    """``path`` from byte ``offset``, line ``line`` (the number of the last line read)."""

    def __init__(self, path: Path, offset: int = 0, line: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.line = line
        self._scanned = 0  # how far a line longer than MAX_READ was searched for its end

    def read(self) -> Read | None:
        """The lines completed since the last read (None: nothing new), which :meth:`took`
        moves past once they are taken: until then, the file is read there again. Raises
        :class:`OSError` (a missing file: :class:`FileNotFoundError`)."""
        size = os.stat(self.path).st_size
        if size < self.offset:
            log.warning(
                "%s: shorter (%d bytes) than what was read (%d): reading it again from the start",
                self.path,
                size,
                self.offset,
            )
            self.offset = self.line = self._scanned = 0
        if size == self.offset:
            return None
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(min(size - self.offset, MAX_READ))
        end = data.rfind(b"\n") + 1
        if not end:
            return self._long_line() if len(data) == MAX_READ else None
        out: list[Line] = []
        at, line = self.offset, self.line
        for text in data[:end].split(b"\n")[:-1]:
            line += 1
            out.append((line, at, text.decode(errors="replace")))
            at += len(text) + 1
        return Read(out, at, line)

    def took(self, read: Read) -> None:
        """Move past what ``read`` gave."""
        self.offset, self.line = read.offset, read.line

    def _long_line(self) -> Read | None:
        """The next line is longer than :data:`MAX_READ`: once its end is written, it is
        refused as one line."""
        with open(self.path, "rb") as f:
            f.seek(max(self._scanned, self.offset + MAX_READ))
            while block := f.read(MAX_READ):
                at = block.find(b"\n")
                if at >= 0:
                    size = f.tell() - len(block) + at + 1 - self.offset
                    break
            else:
                self._scanned = f.tell()
                return None
        self._scanned = 0
        why = InputError(f"a line of {size - 1} bytes, longer than any record ({MAX_READ} at most)")
        return Read([(self.line + 1, self.offset, why)], self.offset + size, self.line + 1)
