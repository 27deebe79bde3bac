"""What the application protocol parsers share: stopping, messages, lines and data blocks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from tacit.formats.tcp_stream import ByteStream


class Skipper(Protocol):
    """Where a parser counts bytes it passes over without a message (by reason)."""

    def skip(self, reason: str, nbytes: int) -> None: ...


class Stop(Exception):
    """Parsing a stream cannot go on at ``at``, for ``reason``."""

    def __init__(self, reason: str, at: int) -> None:
        super().__init__(reason)
        self.reason, self.at = reason, at


CUT = "message cut by the end of the capture"
GAP = "message framing in bytes missing from the capture"


def read_line(s: ByteStream, pos: int, max_line: int) -> tuple[bytes, int]:
    """The line at ``pos`` without its CRLF, and the offset after it."""
    eol = s.data.find(b"\r\n", pos, pos + max_line)
    if eol < 0:
        raise Stop(CUT if s.end - pos < max_line else "line too long", pos)
    if s.hole(pos, eol + 2):
        raise Stop(GAP, pos)
    return s.data[pos:eol], eol + 2


def skip_block(s: ByteStream, pos: int, n: int, crlf: bool) -> int:
    """The offset after ``n`` bytes of data at ``pos`` (and their CRLF)."""
    end = pos + n + 2 * crlf
    if end > s.end:
        raise Stop(CUT, pos)
    if crlf and (s.hole(end - 2, end) or s.data[end - 2 : end] != b"\r\n"):
        raise Stop("data block not followed by CRLF", pos)
    return end


@dataclass(slots=True)
class Message:
    """A request at stream offsets ``[start, end)``: its method or command, whether it expects a
    response, what its protocol's response parser needs to know (``info``), and for HTTP its
    target and header fields (lower-case names)."""

    start: int
    end: int
    command: str = ""
    expects: bool = True
    info: object = None
    target: str | None = None
    headers: Mapping[str, str] | None = None


def find(pattern: re.Pattern, s: ByteStream, pos: int) -> int:
    """The first match of ``pattern`` at or after ``pos`` that lies in captured bytes."""
    for m in pattern.finditer(s.data, pos):
        if not s.hole(m.start(), m.end()):
            return m.start()
    return -1
