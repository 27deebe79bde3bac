"""Redis RESP2/RESP3: commands as arrays of bulk strings or inline, replies in order."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tacit.formats.protocols.common import (
    ByteStream,
    Message,
    Requests,
    Skipper,
    Stop,
    read_line,
    skip_block,
)


def _value(s: ByteStream, pos: int, max_line: int) -> tuple[int, bytes]:
    """The end of the RESP2/RESP3 value at ``pos`` and its type byte."""
    kind = s.data[pos : pos + 1]
    pending = 1
    while pending:
        line, after = read_line(s, pos, max_line)
        if not line:
            raise Stop("empty RESP line", pos)
        t, body = line[:1], line[1:]
        pending -= 1
        if t in (b"+", b"-", b":", b"_", b"#", b",", b"("):
            pos = after
            continue
        try:
            n = int(body)
        except ValueError:
            raise Stop("not a RESP value", pos) from None
        if t in (b"$", b"!", b"="):
            pos = skip_block(s, after, n, True) if n >= 0 else after
        elif t in (b"*", b"~", b">", b"%", b"|"):
            pending += max(n, 0) * (2 if t in (b"%", b"|") else 1) + (t == b"|")
            pos = after
        else:
            raise Stop("not a RESP value", pos)
    return pos, kind


def requests(s: ByteStream, max_line: int, pos: int) -> Iterator[Message]:
    while pos < s.end:
        if s.data[pos : pos + 1] == b"*":  # an array of bulk strings, the command first
            end, _ = _value(s, pos, max_line)
            _, after = read_line(s, pos, max_line)
            size, after = read_line(s, after, max_line) if after < end else (b"", after)
            n = int(size[1:]) if size[:1] == b"$" and size[1:].isdigit() else 0
            command = s.data[after : after + n]
        else:  # an inline command: words on one line
            line, end = read_line(s, pos, max_line)
            command = (line.split() or [b""])[0]
            if not command:  # an empty line: no command, no reply
                pos = end
                continue
        yield Message(pos, end, command.decode("latin-1").upper())
        pos = end


def responses(
    s: ByteStream, requests: Requests, max_line: int, conn: Skipper, pos: int
) -> Iterator[tuple[int, int, int]]:
    for _ in range(len(requests)):
        while pos < s.end:
            end, kind = _value(s, pos, max_line)
            if kind == b">":  # RESP3 push: out of band, answers no request
                conn.skip("RESP3 push message", end - pos)
                pos = end
                continue
            yield pos, end, -1
            pos = end
            break


SNIFF = re.compile(rb"\*\d+\r\n\$\d+\r\n")
"""The first bytes of a client stream that sends RESP arrays."""
SNIFF_INLINE = re.compile(rb"[A-Za-z]+(?: [^\r\n]*)?\r\n")
"""An inline command: tried last, as it matches many text protocols."""
