"""Application protocols over TCP byte streams (:mod:`tacit.formats.tcp_stream`), one module
each: HTTP/1.1 (:mod:`.http1`), Redis RESP (:mod:`.resp`), memcached text (:mod:`.memcached`),
HTTP/2 and gRPC over it (:mod:`.http2`, its header blocks decoded by :mod:`.hpack_decoder`).

Each module has ``requests(stream, max_line, pos)``, a generator of the client's messages (each
a :class:`~.common.Message`, or a :class:`~.common.Run` of them read at once), and
``responses(stream, requests, max_line, skipper, pos)``, one (first byte, end, status; -1 when
the protocol has none) per request of ``requests`` (the :class:`~.common.Requests` that expect
an answer), in order; both raise :class:`~.common.Stop` where the stream cannot be parsed on.
:data:`PARSERS` dispatches by name, :data:`SNIFF` tells a protocol from a client's first bytes
(:data:`CERTAIN` beyond doubt), :data:`RESYNC` says where a response may be found again after a
gap.

HTTP/2 multiplexes requests on one connection, so its responses do not come in request order:
:data:`EXCHANGES` holds, for such protocols, ``exchanges(client, server, skipper)``, one
:class:`~.http2.Exchange` per stream from both directions at once.

HTTP/1.1, RESP and memcached have hand-written parsers rather than h11/hiredis: the callers need
the stream offset of each message's first and last byte under pipelining, which those libraries
do not expose, and the parsers must survive captures with gaps and cut messages without raising.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tacit.formats.protocols import http1, http2, memcached, resp
from tacit.formats.protocols.common import CUT, GAP, Message, Requests, Run, Skipper, Stop, find

HTTP, REDIS, MEMCACHED, HTTP2 = "http", "redis", "memcached", "http2"
PROTOCOLS = (HTTP, HTTP2, REDIS, MEMCACHED)
"""Every protocol: those of :data:`PARSERS` and of :data:`EXCHANGES`."""

PARSERS: dict[str, tuple[Callable, Callable]] = {
    HTTP: (http1.requests, http1.responses),
    REDIS: (resp.requests, resp.responses),
    MEMCACHED: (memcached.requests, memcached.responses),
}
"""Per protocol, its request and response parsers."""

CERTAIN: tuple[tuple[str, re.Pattern], ...] = ((HTTP2, http2.SNIFF),)
"""Client first bytes no other protocol starts with (the HTTP/2 preface, RFC 9113 §3.4): they
name the protocol whatever the server port (h2c on port 80)."""

SNIFF: tuple[tuple[str, re.Pattern], ...] = (
    *CERTAIN,  # first: Redis's inline pattern matches the preface's first line
    (HTTP, http1.SNIFF),
    (REDIS, resp.SNIFF),
    (MEMCACHED, memcached.SNIFF),
    (REDIS, resp.SNIFF_INLINE),
)
"""Patterns of a client stream's first bytes, tried in order."""

RESYNC: dict[str, re.Pattern] = {HTTP: http1.RESYNC}
"""Where a response may start, for protocols whose responses can be found again after a gap."""

EXCHANGES: dict[str, Callable[..., list[http2.Exchange]]] = {HTTP2: http2.exchanges}
"""Per multiplexing protocol, its parser of a connection's two streams into exchanges."""

__all__ = [
    "CERTAIN",
    "CUT",
    "EXCHANGES",
    "GAP",
    "HTTP",
    "HTTP2",
    "MEMCACHED",
    "PARSERS",
    "PROTOCOLS",
    "REDIS",
    "RESYNC",
    "SNIFF",
    "Message",
    "Requests",
    "Run",
    "Skipper",
    "Stop",
    "find",
]
