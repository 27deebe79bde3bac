"""What the application protocol parsers share: stopping, messages, lines and data blocks."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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


@dataclass
class Run:
    """Consecutive requests read at once by a scanner, as columns of what :class:`Message` holds
    (each expects a response, has no ``info``); their header fields are ``fields(*head[k])``,
    parsed only when asked for."""

    start: list[int]
    end: list[int]
    command: list[str]
    target: list[str | None]
    head: list[tuple[int, int]]
    fields: Callable[[int, int], Mapping[str, str]]


@dataclass
class Requests:
    """The requests of one stream in order, as columns of what :class:`Message` holds, so that
    a :class:`Run` costs no object per request. ``head`` locates the header fields of a request
    from a run (``fields(*head[i])``); other requests have them in ``headers``."""

    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    expects: list[bool] = field(default_factory=list)
    info: list[object] = field(default_factory=list)
    target: list[str | None] = field(default_factory=list)
    headers: list[Mapping[str, str] | None] = field(default_factory=list)
    head: list[tuple[int, int] | None] = field(default_factory=list)
    fields: Callable[[int, int], Mapping[str, str]] | None = None

    @classmethod
    def of(cls, items: Iterable[Message | Run]) -> Requests:
        out = cls()
        for item in items:
            out.add(item)
        return out

    def add(self, item: Message | Run) -> None:
        if isinstance(item, Run):
            n = len(item.start)
            for column in ("start", "end", "command", "target", "head"):
                getattr(self, column).extend(getattr(item, column))
            self.expects.extend([True] * n)
            self.info.extend([None] * n)
            self.headers.extend([None] * n)
            self.fields = item.fields
            return
        for column in ("start", "end", "command", "expects", "info", "target", "headers"):
            getattr(self, column).append(getattr(item, column))
        self.head.append(None)

    def __len__(self) -> int:
        return len(self.start)

    def take(self, rows: Iterable[int]) -> Requests:
        """The requests at ``rows``, in that order."""
        rows = list(rows)
        out = Requests(fields=self.fields)
        for column in ("start", "end", "command", "expects", "info", "target", "headers", "head"):
            values = getattr(self, column)
            setattr(out, column, [values[i] for i in rows])
        return out

    def fields_of(self, i: int) -> Mapping[str, str] | None:
        """The header fields of request ``i`` (None for a protocol without)."""
        head = self.head[i]
        return self.headers[i] if head is None or self.fields is None else self.fields(*head)

    def message(self, i: int) -> Message:
        return Message(
            self.start[i],
            self.end[i],
            self.command[i],
            self.expects[i],
            self.info[i],
            self.target[i],
            self.fields_of(i),
        )


def find(pattern: re.Pattern, s: ByteStream, pos: int) -> int:
    """The first match of ``pattern`` at or after ``pos`` that lies in captured bytes."""
    for m in pattern.finditer(s.data, pos):
        if not s.hole(m.start(), m.end()):
            return m.start()
    return -1
