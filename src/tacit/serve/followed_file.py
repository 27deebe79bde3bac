"""A file followed as it grows (``tail -f``): its complete lines, each once, from where an
earlier run stopped.

Each read takes the lines completed since the last one, at most :data:`MAX_READ` bytes; a line
longer than that (no agent writes one) is given as an :class:`~tacit.errors.InputError` once its
end is written, searched for from where the last search stopped, so that a line still growing
costs each poll only its new bytes. A file that becomes shorter than what was read (a writer
that restarted and truncated it, a log rotated by copying and truncating) is read again from its
start. A :class:`Follower` polls its files in a thread of its own.
"""

from __future__ import annotations

import logging
import os
import threading
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


class Follower:
    """Polls (:meth:`poll`, every ``poll_s``) in a thread of its own until stopped, ``what`` it
    follows named in the log. A file that does not exist yet is waited for (logged once); any
    other error reading (:class:`OSError`) is kept in ``error``, logged once, and polling goes
    on; anything else ends the thread, logged. With ``last_poll``, one more poll after the stop
    was asked reads what came up to then."""

    def __init__(self, name: str, what: str, poll_s: float, last_poll: bool) -> None:
        self.what = what
        self.error: str | None = None
        self._poll_s = poll_s
        self._last_poll = last_poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tacit-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def poll(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        missing_logged = False
        while True:
            stopping = self._stop.is_set()
            if stopping and not self._last_poll:
                return
            try:
                self.poll()
                self.error = None
            except FileNotFoundError:
                if not missing_logged:
                    log.info("%s: no such file yet; waiting for it", self.what)
                    missing_logged = True
            except OSError as e:
                if self.error is None:
                    log.error("%s: %s", self.what, e)
                self.error = str(e)
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
                log.exception("following %s failed", self.what)
                return
            if stopping:
                return
            self._stop.wait(self._poll_s)
