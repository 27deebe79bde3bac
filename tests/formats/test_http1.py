"""HTTP/1.1 parsing: the compiled scanners of plain messages against the general parser, the
reference, on the same streams (crafted edge cases and random mixtures with gaps and cuts)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tacit.formats.protocols import http1
from tacit.formats.protocols.common import CUT, GAP, Message, Requests, Stop
from tacit.formats.tcp_stream import ByteStream
from tacit.model.messages import MISSING

MAX_LINE = 1 << 16


def stream(data: bytes, holes: tuple[tuple[int, int], ...] = (), closed: bool = True) -> ByteStream:
    """``data`` as a stream whose bytes ``[a, b)`` of each of ``holes`` were never captured."""
    cuts = sorted({0, *(x for h in holes for x in h if 0 < x < len(data))})
    piece = np.array(cuts, dtype=np.int64)
    held = np.array([not any(a <= p < b for a, b in holes) for p in cuts], dtype=bool)
    times = np.where(held, np.arange(len(cuts), dtype=np.int64) * 1000, MISSING)
    blanked = bytearray(data)
    for a, b in holes:
        blanked[a:b] = bytes(len(blanked[a:b]))
    return ByteStream(bytes(blanked), piece, times, held, closed, True)


def run(parser) -> tuple[list, tuple[str, int] | None]:
    """What a parser yields, and where and why it stopped (None: at the end)."""
    out: list = []
    try:
        for item in parser:
            out.append(item)
    except Stop as e:
        return out, (e.reason, e.at)
    return out, None


def general_requests(s: ByteStream, max_line: int = MAX_LINE):
    pos = 0
    while pos < s.end:
        message = http1._request(s, max_line, pos)
        yield message
        pos = message.end


def requests_agree(s: ByteStream, max_line: int = MAX_LINE) -> tuple[list[Message], int]:
    """The requests of ``s`` (checked equal to the general parser's, stop included), and how
    many the plain scanner read."""
    items, stop = run(http1.requests(s, max_line, 0))
    reqs = Requests.of(items)
    got = [reqs.message(i) for i in range(len(reqs))], stop
    assert got == run(general_requests(s, max_line))
    plain, _ = http1._plain_requests(http1._array(s), 0, max_line, s.piece, s.holes, s.whole)
    return got[0], len(plain)


def responses_agree(s: ByteStream, commands: list[str], max_line: int = MAX_LINE) -> int:
    """Checks the responses of ``s`` to requests of ``commands`` equal the general parser's;
    returns how many the plain scanner read from the start."""
    reqs = [Message(0, 1, c) for c in commands]
    got = run(http1.responses(s, Requests.of(reqs), max_line, None, 0))
    assert got == run(http1._responses(s, reqs, max_line, 0))
    plain = np.array([c not in ("HEAD", "CONNECT") for c in commands], dtype=bool)
    found, _ = http1._plain_responses(
        http1._array(s), 0, max_line, s.piece, s.holes, s.whole, plain
    )
    return len(found)


GET = b"GET /a?q=1 HTTP/1.1\r\nHost: x\r\nX-Request-Id: 7\r\n\r\n"
POST = b"POST /b HTTP/1.0\r\ncontent-LENGTH: 9\r\n\r\nGET / HTT"
CHUNKED = b"PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


def test_plain_requests_are_read_by_the_scanner_with_the_same_fields():
    s = stream(GET + POST + GET)
    got, plain = requests_agree(s)
    assert plain == 3 and [m.command for m in got] == ["GET", "POST", "GET"]
    assert got[0].target == "/a?q=1" and got[1].end - got[1].start == len(POST)
    assert got[0].headers == {"host": "x", "x-request-id": "7"}
    assert dict(got[1].headers or {}) == {"content-length": "9"}
    assert (got[0].headers or {}).get("x-request-id") == "7"
    # More requests than the scanner's first allocation holds.
    assert requests_agree(stream((GET + POST) * 100))[1] == 200


@pytest.mark.parametrize(
    "odd, plain",
    [
        (CHUNKED, 1),  # chunked: the general parser
        (b"GET / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", 3),
        (b"GET / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", 1),
        (b"GET / HTTP/1.1\r\nContent-Length: \t2 \r\n\r\nab", 3),
        (b"GET / HTTP/1.1\r\nContent-Length: 2\x0b\r\n\r\nab", 1),  # strip() takes \v
        (b"GET / HTTP/1.1\r\nContent-Length:\x0c2\r\n\r\nab", 1),
        (b"GET / HTTP/1.1\r\nContent-Length: +2\r\n\r\nab", 1),
        (b"GET / HTTP/1.1\r\nContent-Length: 18446744073709551618\r\n\r\nab", 1),  # 2**64 + 2
        (b"GET / HTTP/1.1\r\n: v\r\n\r\n", 1),  # an empty field name
        (b"GET / HTTP/1.1\rX\r\n\r\n", 1),
        (b"GET  HTTP/1.1\r\n\r\n", 1),  # no target
        (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 1),  # space before the colon
        (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 1),
        (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 1),  # a CR alone
        (b"GET / HTTP/1.1\n\r\n\r\n", 1),
        (b"get / HTTP/1.1\r\n\r\n", 1),
        (b"GET /\xe9 HTTP/1.1\r\nX-\xe9: \xff\r\n\r\n", 1),  # latin-1 target, odd field name
        (b"GET /x\xe9 HTTP/1.1\r\nX: \xff \r\n\r\n", 3),
        (b"GET  / HTTP/1.1\r\n\r\n", 1),
        (b"GET / HTTP/1.2\r\n\r\n", 1),
        (b"M-_ * HTTP/1.0\r\n\r\n", 3),
    ],
)
def test_odd_requests_go_to_the_general_parser(odd: bytes, plain: int):
    """``plain``: how many of the three requests the scanner reads before the general parser."""
    got, scanned = requests_agree(stream(GET + odd + GET))
    assert scanned == plain
    assert len(got) in (1, 3)  # stopped at the odd request, or read all three


def test_requests_cut_gapped_and_too_long():
    s = stream(GET + POST[:-3], closed=False)
    assert requests_agree(s)[1] == 1
    body = len(GET) + POST.index(b"\r\n\r\n") + 4
    assert run(http1.requests(s, MAX_LINE, 0))[1] == (CUT, body)  # the body cut
    value = len(GET) + GET.index(b"Host: x") + 6  # a hole in a field value reads as b"\0"
    gap = stream(GET + GET + POST, holes=((value, value + 1),))
    assert requests_agree(gap)[1] == 1
    assert run(http1.requests(gap, MAX_LINE, 0))[1] == (GAP, len(GET))
    body_gap = stream(GET + POST + GET, holes=((len(GET + POST) - 2, len(GET + POST)),))
    assert requests_agree(body_gap)[1] == 3  # the body's bytes are not read
    assert requests_agree(stream(GET * 3), max_line=len(GET))[1] == 3
    assert requests_agree(stream(GET * 3), max_line=len(GET) - 1)[1] == 0


def test_responses_plain_and_odd():
    assert responses_agree(stream(OK * 3), ["GET"] * 3) == 3
    assert responses_agree(stream(OK * 150), ["GET"] * 150) == 150
    assert responses_agree(stream(OK * 2), ["GET"] * 3) == 2  # more requests than answers
    odd = [
        (b"HTTP/1.1 100 Continue\r\n\r\n" + OK, "PUT"),
        (OK[: -len(b"hello")], "HEAD"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", "DELETE"),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "GET"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", "GET"),
        (b"HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx", "GET"),
        (b"HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx", "GET"),
        (b"HTTP/1.1 200 O\rK\r\nContent-Length: 1\r\n\r\nx", "GET"),
        (b"HTTP/1.1 404 \r\ncontent-length:1\r\n\r\nx", "GET"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", "GET"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nx", "GET"),  # cut
        (b"HTTP/1.1 200 OK\r\n\r\nclose-delimited", "GET"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "GET"),
        (b"HTTP/1.1 200 Connection established\r\n\r\n", "CONNECT"),
    ]
    for response, command in odd:
        for closed in (True, False):
            responses_agree(stream(OK + response + OK, closed=closed), ["GET", command, "GET"])
    assert responses_agree(stream(OK + OK, holes=((len(OK) + 2, len(OK) + 3),)), ["GET"] * 2) == 1
    assert responses_agree(stream(OK * 2), ["GET"] * 2, max_line=len(OK) - 5) == 2
    assert responses_agree(stream(OK * 2), ["GET"] * 2, max_line=len(OK) - 6) == 0


PIECES = [GET, POST, CHUNKED, b"GET / HTTP/1.1\r\nContent-Length: 1\r\n\r\nz", b"BAD\r\n\r\n"]
ANSWERS = [
    OK,
    b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
    b"HTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: y\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
]


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_with_gaps_and_cuts(seed: int):
    rng = random.Random(seed)
    picks = [rng.randrange(len(PIECES)) for _ in range(rng.randrange(1, 12))]
    data = b"".join(PIECES[k] for k in picks)
    answers = b"".join(ANSWERS[rng.randrange(len(ANSWERS))] for _ in picks)
    for blob, commands in ((data, None), (answers, [rng.choice(["GET", "HEAD"]) for _ in picks])):
        cut = rng.randrange(len(blob) // 2, len(blob) + 1)
        holes = tuple((a, a + rng.randrange(1, 6)) for a in rng.sample(range(cut), min(cut, 2)))
        for s in (stream(blob), stream(blob[:cut], holes[: rng.randrange(3)], closed=False)):
            if commands is None:
                requests_agree(s)
            else:
                responses_agree(s, commands)
