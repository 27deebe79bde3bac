"""``tacit serve``'s routes (:mod:`.http_routes`) as an ASGI application, within the bounds of
:mod:`.http_bounds`.

A request is answered in two steps, as the routes are: from its head alone (a POST that is
refused is refused before its body is read, and the connection closes after the answer), then
with its body on one of the workers. Before its body is read, a request reserves its bytes
(its ``Content-Length``, or the largest body when chunked) of its address's share and of all
the bodies held, waiting at most the idle timeout for them (beyond, 503 with ``Retry-After``);
a chunked body that grows beyond the largest is 413. A body that pauses, or an answer the client
does not read, for longer than the idle timeout closes the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from contextlib import suppress
from dataclasses import replace
from http import HTTPStatus
from typing import Any

from tacit.serve.http_bounds import Bounds
from tacit.serve.http_protocol import LINK, Link
from tacit.serve.http_routes import Request, Response, Routes, text

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
_RETRY = {"Retry-After": "1"}


class _Gone(Exception):
    """The client closed its connection, or was closed for stalling, before its answer."""


class AsgiRoutes:
    """The ASGI application of ``routes``, answering on ``workers``."""

    def __init__(self, routes: Routes, bounds: Bounds, workers: Executor) -> None:
        self.routes = routes
        self.bounds = bounds
        self.workers = workers

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        link: Link = scope["extensions"][LINK]["link"]
        with suppress(_Gone):  # nobody to answer
            await self._send(send, await self._answer(scope, receive, link), link)

    async def _answer(self, scope: dict[str, Any], receive: Receive, link: Link) -> Response:
        if link.busy is not None:
            return _busy(link.busy)
        request = request_of(scope)
        length = content_length(request)
        early = self.routes.before_body(request, length)
        if early is not None:
            return replace(early, close=True)
        room = self.bounds.max_body if length is None else length
        peer = link.peer
        try:
            async with asyncio.timeout(self.bounds.idle_s):
                await peer.room.take(room)
        except TimeoutError:
            return _busy("too many requests at once from this address")
        try:
            try:
                async with asyncio.timeout(self.bounds.idle_s):
                    await self.bounds.room.take(room)
            except TimeoutError:
                return _busy("too many requests at once")
            try:
                body = await self._body(receive, link)
                if body is None:
                    return replace(self.routes.too_large(request), close=True)
                async with peer.workers:
                    return await asyncio.get_running_loop().run_in_executor(
                        self.workers, self.routes.answer, replace(request, body=body)
                    )
            finally:
                self.bounds.room.give(room)
        finally:
            peer.room.give(room)

    async def _body(self, receive: Receive, link: Link) -> bytes | None:
        """The request's body, each part within the idle timeout; None beyond the largest
        body."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await self._within(receive(), link)
            if message["type"] == "http.disconnect":
                raise _Gone
            part = message.get("body", b"")
            size += len(part)
            if size > self.bounds.max_body:
                return None
            parts.append(part)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _send(self, send: Send, response: Response, link: Link) -> None:
        headers = [
            (b"content-type", response.ctype.encode("latin-1")),
            (b"content-length", b"%d" % len(response.body)),
            *(_header(k, v) for k, v in response.headers.items()),
        ]
        if response.close:
            headers.append((b"connection", b"close"))
        start = {"type": "http.response.start", "status": int(response.status), "headers": headers}
        await self._within(send(start), link)
        await self._within(send({"type": "http.response.body", "body": response.body}), link)

    async def _within(self, step: Awaitable[Any], link: Link) -> Any:
        """``step`` within the idle timeout; beyond, the connection is closed."""
        try:
            async with asyncio.timeout(self.bounds.idle_s):
                return await step
        except TimeoutError:
            link.close()
            await asyncio.sleep(0)  # the connection is lost before the application returns
            raise _Gone from None


def _header(name: str, value: str) -> tuple[bytes, bytes]:
    return name.lower().encode("latin-1"), value.encode("latin-1")


def _busy(reason: str) -> Response:
    return text(HTTPStatus.SERVICE_UNAVAILABLE, reason, _RETRY, close=True)


def request_of(scope: dict[str, Any]) -> Request:
    """The request an ASGI scope is the head of (its body not yet read)."""
    target = scope["raw_path"].decode("latin-1")
    if scope["query_string"]:
        target += "?" + scope["query_string"].decode("latin-1")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
    return Request(scope["method"], target, headers)


def content_length(request: Request) -> int | None:
    """The body's length as its head says (the parser has checked the header), or None if
    chunked."""
    value = request.header("content-length")
    if value is not None:
        return int(value)
    return None if request.header("transfer-encoding") else 0
