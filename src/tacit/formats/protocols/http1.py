"""HTTP/1.1 (RFC 9112): requests and responses framed by their headers, pipelined or not.

The parsers are generators over one stream from offset ``pos``: requests yield
:class:`~.common.Message` (with the request target and header fields), responses (first byte,
end, status) per request that expects one, 1xx interim responses included. They raise
:class:`~.common.Stop` where they cannot go on; what they yielded before is kept.

Most messages are *plain*: a start line, field lines and a body framed by Content-Length (for a
request, or no body; RFC 9112 §6.3). Runs of them are read by compiled scanners over the whole
stream; every other message (chunked, 1xx, HEAD, 204, 304, delimited by the close, cut, too
long, in a gap, odd spacing, malformed) goes to the general parser, the reference, which reads
it or stops there. The scanners take only what the general parser reads the same way."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial

import numpy as np
from numba import njit

from tacit.formats.protocols.common import (
    CUT,
    GAP,
    ByteStream,
    Message,
    Requests,
    Run,
    Skipper,
    Stop,
    read_line,
    skip_block,
)

_METHOD = re.compile(rb"([A-Z][A-Z_-]*) (\S+) HTTP/1\.[01]$")
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})(?: .*)?$")
_TOKEN = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
"""The characters of a field name (RFC 9110 §5.6.2 tchar)."""
_FIELD = re.compile(rb"\r\n([" + re.escape(_TOKEN) + rb"]+):([^\r\n]*)")


def _head(s: ByteStream, pos: int, max_line: int) -> tuple[list[bytes], int]:
    end = s.data.find(b"\r\n\r\n", pos, pos + max_line)
    if end < 0:
        raise Stop(CUT if s.end - pos < max_line else "header block too long", pos)
    if s.hole(pos, end + 4):
        raise Stop(GAP, pos)
    return s.data[pos:end].split(b"\r\n"), end + 4


def _body(  # noqa: C901, PLR0912
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


def requests(s: ByteStream, max_line: int, pos: int) -> Iterator[Message | Run]:
    data = s.data
    while pos < s.end:
        heads, pos = _plain_requests(_array(s), pos, max_line, s.piece, s.holes, s.whole)
        if len(heads):
            start, end, method, target, line, head = heads.T.tolist()
            yield Run(
                start,
                end,
                [data[a:b].decode() for a, b in zip(start, method, strict=True)],
                [data[a + 1 : b].decode("latin-1") for a, b in zip(method, target, strict=True)],
                list(zip(line, [h - 4 for h in head], strict=True)),
                partial(_header_fields, data),
            )
        if pos < s.end:
            message = _request(s, max_line, pos)
            yield message
            pos = message.end


def _request(s: ByteStream, max_line: int, pos: int) -> Message:
    """The request at ``pos``, read by the general parser."""
    lines, body = _head(s, pos, max_line)
    m = _METHOD.match(lines[0])
    if not m:
        raise Stop("not an HTTP/1.x request line", pos)
    fields: dict[str, str] = {}
    end = _body(s, lines, body, max_line, fields)
    end = body if end is None else end  # a request without framing has no body
    return Message(
        pos, end, m.group(1).decode(), target=m.group(2).decode("latin-1"), headers=fields
    )


def responses(
    s: ByteStream, requests: Requests, max_line: int, conn: Skipper, pos: int
) -> Iterator[tuple[int, int, int]]:
    plain = np.array([c not in ("HEAD", "CONNECT") for c in requests.command], dtype=bool)
    k = 0
    while k < len(requests) and pos < s.end:
        found, pos = _plain_responses(
            _array(s), pos, max_line, s.piece, s.holes, s.whole, plain[k:]
        )
        yield from zip(*found.T.tolist(), strict=True)
        k += len(found)
        if k < len(requests):
            answered = False
            for answer in _responses(s, [requests.message(k)], max_line, pos):
                yield answer
                pos, answered = answer[1], True
            if not answered:
                return
            k += 1


def _responses(
    s: ByteStream, requests: list[Message], max_line: int, pos: int
) -> Iterator[tuple[int, int, int]]:
    """The responses to ``requests`` from ``pos``, read by the general parser."""
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


def _header_fields(data: bytes, start: int, stop: int) -> dict[str, str]:
    """The header fields of a plain head's field lines ``data[start:stop]`` (each after a CRLF),
    as the general parser reads them."""
    return {
        name.lower().decode("latin-1"): value.strip().decode("latin-1")
        for name, value in _FIELD.findall(data, start, stop)
    }


def _array(s: ByteStream) -> np.ndarray:
    return np.frombuffer(s.data, dtype=np.uint8)


_TCHAR = np.zeros(256, dtype=np.bool_)
_TCHAR[np.frombuffer(_TOKEN, dtype=np.uint8)] = True
_SPACE = np.zeros(256, dtype=np.bool_)
_SPACE[np.frombuffer(b" \t\n\r\x0b\x0c", np.uint8)] = True  # what bytes.strip() and \\s take
_CONTENT_LENGTH = np.frombuffer(b"content-length", dtype=np.uint8)
_TRANSFER_ENCODING = np.frombuffer(b"transfer-encoding", dtype=np.uint8)
_VERSION = np.frombuffer(b"HTTP/1.", dtype=np.uint8)
_CR, _LF, _SP, _TAB, _COLON = 13, 10, 32, 9, 58


@njit(cache=True)
def _is(data, i, j, name):
    """Whether ``data[i:j]`` is ``name`` (lower case), ASCII letters in any case."""
    if j - i != name.size:
        return False
    for k in range(name.size):
        b = data[i + k]
        if 65 <= b <= 90:
            b += 32
        if b != name[k]:
            return False
    return True


@njit(cache=True)
def _version(data, i, limit):
    """The offset after ``HTTP/1.0`` or ``HTTP/1.1`` at ``i``, -1 when not there."""
    if i + 8 > limit:
        return -1
    for k in range(7):
        if data[i + k] != _VERSION[k]:
            return -1
    return i + 8 if data[i + 7] == 48 or data[i + 7] == 49 else -1


@njit(cache=True)
def _digits(data, i, j):
    """The Content-Length value in ``data[i:j]``: digits between spaces or tabs (-1 else)."""
    while i < j and (data[i] == _SP or data[i] == _TAB):
        i += 1
    while j > i and (data[j - 1] == _SP or data[j - 1] == _TAB):
        j -= 1
    if j == i or j - i > 18:
        return -1
    n = 0
    for k in range(i, j):
        if not 48 <= data[k] <= 57:
            return -1
        n = n * 10 + data[k] - 48
    return n


@njit(cache=True)
def _fields(data, i, limit):
    """Field lines from ``i`` (after the start line's CRLF) up to the empty line, all before
    ``limit``: the offset after the head and its Content-Length (-1 without); (-1, -2) when the
    lines are not plain (a Transfer-Encoding, a Content-Length not plain digits or two
    differing, a line that is not ``token:value``, a CR or LF alone)."""
    length = -1
    while i + 2 <= limit:
        if data[i] == _CR and data[i + 1] == _LF:
            return i + 2, length
        j = i
        while j < limit and _TCHAR[data[j]]:
            j += 1
        if j == i or j >= limit or data[j] != _COLON:
            return -1, -2
        name, j = j, j + 1
        value = j
        while j < limit and data[j] != _CR and data[j] != _LF:
            j += 1
        if j + 2 > limit or data[j] != _CR or data[j + 1] != _LF:
            return -1, -2
        if _is(data, i, name, _TRANSFER_ENCODING):
            return -1, -2
        if _is(data, i, name, _CONTENT_LENGTH):
            n = _digits(data, value, j)
            if n < 0 or (length >= 0 and n != length):
                return -1, -2
            length = n
        i = j + 2
    return -1, -2


@njit(cache=True)
def _hole(piece, holes, start, stop):
    """:meth:`ByteStream.hole` of ``[start, stop)``."""
    k0 = np.searchsorted(piece, start, side="right") - 1
    k1 = np.searchsorted(piece, stop - 1, side="right") - 1
    return holes[k1 + 1] != holes[k0]


@njit(cache=True)
def _room(out, k):
    """``out`` with a row ``k`` to write (its rows doubled when full)."""
    if k < out.shape[0]:
        return out
    bigger = np.empty((2 * out.shape[0], out.shape[1]), dtype=out.dtype)
    bigger[:k] = out
    return bigger


@njit(cache=True)
def _plain_requests(data, pos, max_line, piece, holes, whole):
    """The run of plain requests from ``pos``: per request its start, end, the ends of its
    method and target, the offset of its request line's CRLF and its head's end; and the
    offset after the run."""
    n = data.size
    out = np.empty((64, 6), dtype=np.int64)
    k = 0
    while pos < n:
        limit = min(n, pos + max_line)
        i = pos
        if i >= limit or not 65 <= data[i] <= 90:
            break
        i += 1
        while i < limit and (65 <= data[i] <= 90 or data[i] == 95 or data[i] == 45):
            i += 1
        if i >= limit or data[i] != _SP:
            break
        method = i
        i += 1
        while i < limit and not _SPACE[data[i]]:
            i += 1
        target = i
        if target == method + 1 or i >= limit or data[i] != _SP:
            break
        i = _version(data, i + 1, limit)
        if i < 0 or i + 2 > limit or data[i] != _CR or data[i + 1] != _LF:
            break
        head, length = _fields(data, i + 2, limit)
        if length == -2 or (not whole and _hole(piece, holes, pos, head)):
            break
        end = head + max(length, 0)
        if end > n:
            break
        out = _room(out, k)
        out[k] = pos, end, method, target, i, head
        k += 1
        pos = end
    return out[:k], pos


@njit(cache=True)
def _plain_responses(data, pos, max_line, piece, holes, whole, plain):  # noqa: C901
    """The run of plain responses from ``pos`` to the requests that ``plain`` marks as neither
    HEAD nor CONNECT: per response (first byte, end, status) with a final status other than 204
    and 304 and a Content-Length; and the offset after the run."""
    n = data.size
    out = np.empty((64, 3), dtype=np.int64)
    k = 0
    while k < plain.size and pos < n and plain[k]:
        limit = min(n, pos + max_line)
        i = _version(data, pos, limit)
        if i < 0 or i + 4 > limit or data[i] != _SP:
            break
        status = 0
        for j in range(i + 1, i + 4):
            if not 48 <= data[j] <= 57:
                status = -1
                break
            status = status * 10 + data[j] - 48
        if status < 200 or status == 204 or status == 304:
            break
        i += 4
        if i < limit and data[i] == _SP:
            while i < limit and data[i] != _CR and data[i] != _LF:
                i += 1
        if i + 2 > limit or data[i] != _CR or data[i + 1] != _LF:
            break
        head, length = _fields(data, i + 2, limit)
        if length < 0 or (not whole and _hole(piece, holes, pos, head)):
            break
        end = head + length
        if end > n:
            break
        out = _room(out, k)
        out[k] = pos, end, status
        k += 1
        pos = end
    return out[:k], pos
