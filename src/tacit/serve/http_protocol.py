"""One HTTP/1.1 connection of ``tacit serve``: uvicorn's protocol over httptools, with the
bounds uvicorn leaves to the application (:mod:`.http_bounds`).

uvicorn closes a connection that stays idle after an answer, but lets one that has sent part of
a request's head, or nothing at all, wait for ever, and takes a head of any size: a client that
sends its headers a byte at a time, or without end, would hold its connection, and its memory,
as long as it liked. Here:

- a request's head must be whole within the idle timeout of the connection's opening or of the
  previous answer, and within :data:`~.http_bounds.MAX_HEAD` bytes (beyond, 431);
- a connection beyond the bounds on connections, in all or from its address, is answered 503
  with ``Retry-After`` once its head has come, never reset;
- each request's scope carries the connection's :class:`Link` under ``extensions``, through
  which the application (:mod:`.asgi_routes`) takes its address's share and closes a connection
  whose body or reader stalls.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tacit.serve.http_bounds import Bounds, Peer

LINK = "tacit.connection"
"""The extension, in a request's scope, whose ``link`` is its :class:`Link`."""


@dataclass(frozen=True)
class Link:
    """What a request's application may do with its connection: take its address's share
    (``peer``), answer it busy (``busy``: why, or None) and close it."""

    peer: Peer
    busy: str | None
    close: Any


class BoundedProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with a head timeout, a head size limit and connection
    bounds."""

    def __init__(self, *args: Any, bounds: Bounds, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bounds = bounds
        self._address = ""
        self._link: Link | None = None
        self._head_clock: asyncio.TimerHandle | None = None
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = "" if self.client is None else self.client[0]
        peer, busy = self.bounds.connect(self._address)
        self._link = Link(peer, busy, transport.close)
        self._wait_for_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_clock()
        if self._link is not None:
            self.bounds.disconnect(self._address, self._link.peer)
            self._link = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, but that a bad request is told the parser's reason."""
        waiting = self._head_clock is not None
        if waiting:
            self._head_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self.send_400_response(f"bad request: {e}")
            return
        except httptools.HttpParserUpgrade:
            pass  # no protocol is upgraded to: the request is answered in HTTP/1.1
        if waiting and self._head_clock is not None and self._head_bytes > self.bounds.max_head:
            self._refuse_head()

    def on_headers_complete(self) -> None:
        self._stop_head_clock()
        self.scope["extensions"] = {LINK: {"link": self._link}}
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.cycle.response_complete and not self.transport.is_closing():
            self._wait_for_head()  # no request came whole meanwhile: the next is awaited

    def _wait_for_head(self) -> None:
        self._stop_head_clock()
        self._head_bytes = 0
        self._head_clock = self.loop.call_later(self.bounds.idle_s, self.transport.close)

    def _stop_head_clock(self) -> None:
        if self._head_clock is not None:
            self._head_clock.cancel()
            self._head_clock = None

    def _refuse_head(self) -> None:
        body = b"request line and headers exceed %d bytes\n" % self.bounds.max_head
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: text/plain\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (len(body), body)
        )
        self.transport.close()
        self._stop_head_clock()
