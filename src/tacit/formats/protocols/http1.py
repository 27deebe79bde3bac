"""HTTP/1.1 (RFC 9112): requests and responses framed by their headers, pipelined or not.

The parsers are generators over one stream from offset ``pos``: requests yield
:class:`~.common.Message` (with the request target and header fields), responses (first byte,
end, status) per request that expects one, 1xx interim responses included. They raise
:class:`~.common.Stop` where they cannot go on; what they yielded before is kept."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tacit.formats.protocols.common import (
    CUT,
    GAP,
    ByteStream,
    Message,
    Skipper,
    Stop,
    read_line,
    skip_block,
)

_METHOD = re.compile(rb"([A-Z][A-Z_-]*) (\S+) HTTP/1\.[01]$")
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})(?: .*)?$")


def _head(s: ByteStream, pos: int, max_line: int) -> tuple[list[bytes], int]:
    end = s.data.find(b"\r\n\r\n", pos, pos + max_line)
    if end < 0:
        raise Stop(CUT if s.end - pos < max_line else "header block too long", pos)
    if s.hole(pos, end + 4):
        raise Stop(GAP, pos)
    return s.data[pos:end].split(b"\r\n"), end + 4


def _body(
    s: ByteStream, lines: list[bytes], pos: int, max_line: int, fields: dict | None = None
) -> int | None:
    """The end of a body framed by its headers (RFC 9112 §6.3), None when it has no framing;
    the header fields go into ``fields`` (lower-case names, the last value of a repeated one)."""
    length: int | None = None
    chunked = False
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        name = name.strip().lower()
        if not sep:
            raise Stop("malformed header line", pos)
        if fields is not None:
            fields[name.decode("latin-1")] = value.strip().decode("latin-1")
        if name == b"transfer-encoding":
            chunked = value.strip().lower().split(b",")[-1].strip() == b"chunked"
        elif name == b"content-length":
            v = value.strip()
            if not v.isdigit() or (length is not None and int(v) != length):
                raise Stop("bad Content-Length", pos)
            length = int(v)
    if chunked:
        while True:
            line, pos = read_line(s, pos, max_line)
            size = line.split(b";")[0].strip()
            if not size or any(c not in b"0123456789abcdefABCDEF" for c in size):
                raise Stop("bad chunk size", pos)
            if int(size, 16) == 0:
                break
            pos = skip_block(s, pos, int(size, 16), True)
        while True:  # trailer fields, up to the empty line
            line, pos = read_line(s, pos, max_line)
            if not line:
                return pos
    if length is not None:
        return skip_block(s, pos, length, False)
    return None


def requests(s: ByteStream, max_line: int, pos: int) -> Iterator[Message]:
    while pos < s.end:
        lines, body = _head(s, pos, max_line)
        m = _METHOD.match(lines[0])
        if not m:
            raise Stop("not an HTTP/1.x request line", pos)
        fields: dict[str, str] = {}
        end = _body(s, lines, body, max_line, fields)
        end = body if end is None else end  # a request without framing has no body
        yield Message(
            pos, end, m.group(1).decode(), target=m.group(2).decode("latin-1"), headers=fields
        )
        pos = end


def responses(
    s: ByteStream, requests: list[Message], max_line: int, conn: Skipper, pos: int
) -> Iterator[tuple[int, int, int]]:
    for req in requests:
        first = pos
        while True:
            if pos >= s.end:
                return
            lines, body = _head(s, pos, max_line)
            m = _STATUS.match(lines[0])
            if not m:
                raise Stop("not an HTTP/1.x status line", pos)
            status = int(m.group(1))
            if status == 101 or (req.command == "CONNECT" and 200 <= status < 300):
                yield first, body, status
                raise Stop("connection switched to another protocol", body)
            if 100 <= status < 200:
                pos = body
                continue
            if req.command == "HEAD" or status in (204, 304):
                pos = body
            else:
                end = _body(s, lines, body, max_line)
                pos = s.end if end is None else end  # delimited by the connection's close
                if end is None and not s.closed:
                    raise Stop(CUT, first)
            yield first, pos, status
            break


SNIFF = re.compile(rb"[A-Z][A-Z_-]* \S+ HTTP/1\.[01]\r\n")
"""The first bytes of a client stream that speaks HTTP/1.x."""
RESYNC = re.compile(rb"HTTP/1\.[01] \d{3}[ \r]")
"""Where a response may start: parsing can resume there after a gap."""
