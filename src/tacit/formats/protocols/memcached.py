"""The memcached text protocol (classic and meta commands): replies in order; a ``noreply``
command is answered by none."""

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

_STORAGE = {"set", "add", "replace", "append", "prepend", "cas"}
_RETRIEVAL = {"get", "gets", "gat", "gats"}
_ONE_LINE = {"delete", "incr", "decr", "touch", "flush_all", "verbosity", "version", "mn"}
_META = {"mg", "ms", "md", "ma", "me"}


def requests(s: ByteStream, max_line: int, pos: int) -> Iterator[Message]:  # noqa: C901, PLR0912
    while pos < s.end:
        line, end = read_line(s, pos, max_line)
        words = line.decode("latin-1").split()
        if not words:
            raise Stop("empty memcached command line", pos)
        cmd = words[0]
        expects, kind = True, "line"
        if cmd in _STORAGE:
            need = 6 if cmd == "cas" else 5
            if len(words) < need or not words[4].isdigit():
                raise Stop(f"bad memcached {cmd} command", pos)
            end = skip_block(s, end, int(words[4]), True)
            expects = words[need : need + 1] != ["noreply"]
        elif cmd in _RETRIEVAL:
            kind = "values"
        elif cmd == "stats":
            kind = "stats"
        elif cmd in _META:
            if "q" in words[2:]:
                raise Stop("meta command with the q flag (reply may be suppressed)", pos)
            if cmd == "ms":
                if len(words) < 3 or not words[2].isdigit():
                    raise Stop("bad memcached ms command", pos)
                end = skip_block(s, end, int(words[2]), True)
            kind = "meta"
        elif cmd == "quit":
            expects = False
        elif cmd in _ONE_LINE:
            expects = words[-1] != "noreply"
        else:
            raise Stop("unknown memcached command", pos)
        yield Message(pos, end, cmd, expects, kind)
        pos = end


_MC_ERRORS = (b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")


def responses(  # noqa: C901
    s: ByteStream, requests: Requests, max_line: int, conn: Skipper, pos: int
) -> Iterator[tuple[int, int, int]]:
    for info in requests.info:
        if pos >= s.end:
            return
        first = pos
        line, pos = read_line(s, pos, max_line)
        if not line.startswith(_MC_ERRORS):
            if info == "values":
                while line != b"END":
                    words = line.split()
                    if len(words) < 4 or words[0] != b"VALUE" or not words[3].isdigit():
                        raise Stop("bad memcached VALUE line", first)
                    pos = skip_block(s, pos, int(words[3]), True)
                    line, pos = read_line(s, pos, max_line)
            elif info == "stats":
                while line != b"END":
                    line, pos = read_line(s, pos, max_line)
            elif info == "meta" and line.startswith(b"VA "):
                words = line.split()
                if len(words) < 2 or not words[1].isdigit():
                    raise Stop("bad memcached VA line", first)
                pos = skip_block(s, pos, int(words[1]), True)
        yield first, pos, -1


SNIFF = re.compile(
    rb"(?:(?:get|gets|gat|gats|delete|incr|decr|touch|set|add|replace"
    rb"|append|prepend|cas|stats|version|flush_all|verbosity|m[gsdane])"
    rb"(?: [^\r\n]*)?)\r\n"
)
"""The first bytes of a client stream that sends memcached commands."""
