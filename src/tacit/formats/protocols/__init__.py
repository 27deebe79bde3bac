"""Application protocols over TCP byte streams (:mod:`tacit.formats.tcp_stream`), one module
each: HTTP/1.1 (:mod:`.http1`), Redis RESP (:mod:`.resp`), memcached text (:mod:`.memcached`).

Each module has ``requests(stream, max_line, pos)``, a generator of the client's messages, and
``responses(stream, requests, max_line, skipper, pos)``, one (first byte, end, status; -1 when
the protocol has none) per request that expects an answer, in order; both raise
:class:`~.common.Stop` where the stream cannot be parsed on. :data:`PARSERS` dispatches by
name, :data:`SNIFF` tells a protocol from a client's first bytes, :data:`RESYNC` says where a
response may be found again after a gap.

Hand-written parsers rather than h11/hiredis: the callers need the stream offset of each
message's first and last byte under pipelining, which those libraries do not expose, and the
parsers must survive captures with gaps and cut messages without raising.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tacit.formats.protocols import http1, memcached, resp
from tacit.formats.protocols.common import CUT, GAP, Message, Skipper, Stop, find

HTTP, REDIS, MEMCACHED = "http", "redis", "memcached"
PROTOCOLS = (HTTP, REDIS, MEMCACHED)

PARSERS: dict[str, tuple[Callable, Callable]] = {
    HTTP: (http1.requests, http1.responses),
    REDIS: (resp.requests, resp.responses),
    MEMCACHED: (memcached.requests, memcached.responses),
}
"""Per protocol, its request and response parsers."""

SNIFF: tuple[tuple[str, re.Pattern], ...] = (
    (HTTP, http1.SNIFF),
    (REDIS, resp.SNIFF),
    (MEMCACHED, memcached.SNIFF),
    (REDIS, resp.SNIFF_INLINE),
)
"""Patterns of a client stream's first bytes, tried in order."""

RESYNC: dict[str, re.Pattern] = {HTTP: http1.RESYNC}
"""Where a response may start, for protocols whose responses can be found again after a gap."""

EXCHANGES: dict[str, Callable] = {}
"""Per multiplexing protocol, ``exchanges(client, server, skipper)``: every exchange of a
connection from both streams at once."""

__all__ = [
    "CUT",
    "EXCHANGES",
    "GAP",
    "HTTP",
    "MEMCACHED",
    "PARSERS",
    "PROTOCOLS",
    "REDIS",
    "RESYNC",
    "SNIFF",
    "Message",
    "Skipper",
    "Stop",
    "find",
]
