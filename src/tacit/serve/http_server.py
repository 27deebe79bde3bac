"""The HTTP side of ``tacit serve``, on one address: HTTP/1.1 (parsed by h11) over asyncio,
HTTPS with a certificate (:mod:`.tls`); what is answered is :mod:`.http_routes`' business.

A connection costs a coroutine and its buffers, not a thread, until a request has come whole:
only then does one of :data:`WORKERS` threads answer it. With a thread per connection (the
standard library's server), a client that kept its connection idle, or sent its headers a byte
at a time, held a thread for as long as it liked, and 2,000 of them made 2,000 threads. The
bounds, all fixed here:

- a request's head must be whole within :data:`IDLE_TIMEOUT_S` of the connection's opening or
  of the previous answer, and within :data:`MAX_HEAD` bytes;
- a body may pause at most :data:`IDLE_TIMEOUT_S` between two reads, and may not exceed
  :data:`~.ingest.MAX_BODY`; the bodies read and not yet answered hold at most
  :data:`BUFFERED_BODIES` bytes in all (a request that waits longer for room is told to retry);
- at most :data:`MAX_CONNECTIONS` connections are served at once; one more is answered 503 with
  ``Retry-After`` (which the OTLP exporters honour), never reset;
- one client address holds at most 1/:data:`PEER_SHARE` of each of these (connections, bodies
  held, workers answering), so that no one sender, however fast, keeps the others out. Its rate
  is bounded by that share of the workers, not by a number of requests a second: a Collector
  gateway is one address that sends for a whole cluster. Behind a proxy every client is the
  proxy's address, and the bounds are the proxy's.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from http import HTTPStatus
from typing import Any

import h11

from tacit.serve.http_routes import Request, Response, Routes, text
from tacit.serve.ingest import MAX_BODY
from tacit.serve.tls import ServerTLS

log = logging.getLogger("tacit.serve")

HANDSHAKE_TIMEOUT_S = 10
"""How long a connection may take over its TLS handshake."""
IDLE_TIMEOUT_S = 30
"""How long a connection may take to send a request's head (from its opening or the previous
answer), and a body may pause between two reads, before the connection is closed. The OTLP
exporters keep a connection between batches sent every 5 s; Go's servers close idle ones after a
few minutes at most."""
MAX_HEAD = 64 * 1024
"""The largest request line and headers taken (bytes); beyond, 431."""
WORKERS = 8
"""Threads answering requests. Checking OTLP is bounded on its own
(:data:`~.ingest.MAX_DECODING`); the rest are queries of the store."""
BUFFERED_BODIES = 256 * 1024 * 1024
"""Bytes of request bodies read (or reserved by their ``Content-Length``) and not yet answered,
in all."""
MAX_CONNECTIONS = 4096
"""Connections served at once."""
PEER_SHARE = 2
"""One client address may hold 1/PEER_SHARE of the connections, the body bytes and the workers."""
BACKLOG = 1024
"""Connections the kernel queues until the server accepts them."""
READ_SIZE = 64 * 1024
FILES_BESIDE = 1024
"""Open files the service needs beside its connections (the store, journals, captures)."""
_RETRY = {"Retry-After": "1"}


class ServeHTTPServer:
    """Listens on ``address`` from construction (so its port is known at once); serves from
    :meth:`serve_forever` until :meth:`shutdown`."""

    def __init__(
        self, address: tuple[str, int], routes: Routes, tls: ServerTLS | None = None
    ) -> None:
        _open_files_for(MAX_CONNECTIONS + FILES_BESIDE)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.create_server(address, family=family, backlog=BACKLOG)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.routes = routes
        self._tls = None if tls is None else tls.context
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="tacit-http")
        self._connections: set[asyncio.Task[None]] = set()
        self._room = _Room(BUFFERED_BODIES)
        self._peers: dict[str, _Peer] = {}

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown`; returns once every worker has answered."""
        try:
            asyncio.run(self._serve())
        finally:
            self._done.set()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop taking connections, close the open ones and wait for answers under way."""
        if self._started.wait(timeout_s) and self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._done.wait(timeout_s)

    def server_close(self) -> None:
        self.socket.close()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_quiet)
        server = await asyncio.start_server(
            self._connection,
            sock=self.socket,
            ssl=self._tls,
            ssl_handshake_timeout=None if self._tls is None else HANDSHAKE_TIMEOUT_S,
            limit=READ_SIZE,
            backlog=BACKLOG,  # asyncio listens again, by default with 100
        )
        self._started.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in self._connections:
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
        self._workers.shutdown(wait=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        address = _peer_address(writer)
        peer = self._peers.setdefault(address, _Peer())
        peer.connections += 1
        try:
            if len(self._connections) > MAX_CONNECTIONS:
                await _busy(reader, writer, "too many connections")
                return
            if peer.connections > MAX_CONNECTIONS // PEER_SHARE:
                await _busy(reader, writer, "too many connections from this address")
                return
            await self._serve_connection(
                _Exchange(h11.Connection(h11.SERVER, MAX_HEAD), reader, writer), peer
            )
        except (ConnectionError, TimeoutError, ssl.SSLError, h11.ProtocolError) as e:
            log.debug("connection ended: %s", e)
        except asyncio.CancelledError:  # the server stops: the connection ends here, quietly
            pass
        finally:
            self._connections.discard(task)
            peer.connections -= 1
            if peer.connections == 0:
                del self._peers[address]
            writer.close()

    async def _serve_connection(self, exchange: _Exchange, peer: _Peer) -> None:
        """Answer the requests of one connection, one after the other, until it closes."""
        while True:
            try:
                async with asyncio.timeout(IDLE_TIMEOUT_S):
                    event = await exchange.next_event()
            except h11.RemoteProtocolError as e:
                if not exchange.reader.at_eof():  # else the client left halfway: no one to tell
                    await exchange.send(text(HTTPStatus(e.error_status_hint), f"bad request: {e}"))
                return
            if not isinstance(event, h11.Request):
                return  # closed, or the head came too slowly (TimeoutError ends it above)
            request = Request(
                event.method.decode("ascii"),
                event.target.decode("latin-1"),
                [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers],
            )
            length = _content_length(request)
            early = self.routes.before_body(request, length)
            if early is not None:
                await exchange.send(replace(early, close=True))
                return
            room = MAX_BODY if length is None else length
            answer = await self._answer(exchange, request, room, peer)
            await exchange.send(answer)
            if answer.close or not exchange.next_cycle():
                return

    async def _answer(
        self, exchange: _Exchange, request: Request, room: int, peer: _Peer
    ) -> Response:
        """Read the request's body in ``room`` bytes reserved, of the peer's share and of all,
        and answer it on a worker, of the peer's share."""
        try:
            async with asyncio.timeout(IDLE_TIMEOUT_S):
                await peer.room.take(room)
        except TimeoutError:
            return _too_many("too many requests at once from this address")
        try:
            try:
                async with asyncio.timeout(IDLE_TIMEOUT_S):
                    await self._room.take(room)
            except TimeoutError:
                return _too_many("too many requests at once")
            try:
                if exchange.conn.they_are_waiting_for_100_continue:
                    await exchange.send_informational()
                body = await exchange.body()
                if body is None:
                    return replace(self.routes.too_large(request), close=True)
                async with peer.workers:
                    return await asyncio.get_running_loop().run_in_executor(
                        self._workers, self.routes.answer, replace(request, body=body)
                    )
            finally:
                self._room.give(room)
        finally:
            peer.room.give(room)


def _too_many(reason: str) -> Response:
    return text(HTTPStatus.SERVICE_UNAVAILABLE, reason, _RETRY, close=True)


async def _busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: str) -> None:
    """Answer a connection beyond the bounds 503 with ``Retry-After`` once its head has come."""
    await _Exchange(h11.Connection(h11.SERVER), reader, writer).send_busy(
        text(HTTPStatus.SERVICE_UNAVAILABLE, reason)
    )


def _peer_address(writer: asyncio.StreamWriter) -> str:
    """The client's address without its port (its host, for IPv4 and IPv6 alike)."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)


def _content_length(request: Request) -> int | None:
    """The body's length as its head says (h11 has checked the header), or None if chunked."""
    value = request.header("content-length")
    if value is not None:
        return int(value)
    return None if request.header("transfer-encoding") else 0


class _Exchange:
    """One connection's bytes, through h11."""

    def __init__(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.conn = conn
        self.reader = reader
        self.writer = writer

    async def next_event(self) -> Any:
        while (event := self.conn.next_event()) is h11.NEED_DATA:
            self.conn.receive_data(await self.reader.read(READ_SIZE))
        return event

    async def body(self) -> bytes | None:
        """The request's body, each read within :data:`IDLE_TIMEOUT_S`; None beyond
        :data:`~.ingest.MAX_BODY` bytes."""
        parts: list[bytes] = []
        size = 0
        while True:
            async with asyncio.timeout(IDLE_TIMEOUT_S):
                event = await self.next_event()
            if isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            if not isinstance(event, h11.Data):
                raise ConnectionResetError("the connection closed within a request's body")
            size += len(event.data)
            if size > MAX_BODY:
                return None
            parts.append(event.data)

    async def send(self, response: Response) -> None:
        headers = [
            ("Server", "tacit"),
            ("Content-Type", response.ctype),
            ("Content-Length", str(len(response.body))),
            *response.headers.items(),
        ]
        if response.close:
            headers.append(("Connection", "close"))
        head = h11.Response(
            status_code=response.status, headers=headers, reason=response.status.phrase
        )
        try:
            data = [self.conn.send(head)]
        except h11.LocalProtocolError:  # the connection is past answering: it is closed
            return
        data += [self.conn.send(h11.Data(data=response.body)), self.conn.send(h11.EndOfMessage())]
        self.writer.write(b"".join(d for d in data if d))
        async with asyncio.timeout(IDLE_TIMEOUT_S):
            await self.writer.drain()

    async def send_informational(self) -> None:
        self.writer.write(
            self.conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
        )
        await self.writer.drain()

    async def send_busy(self, response: Response) -> None:
        """Answer the first request with ``response`` without reading more than its head."""
        async with asyncio.timeout(IDLE_TIMEOUT_S):
            await self.next_event()
        await self.send(replace(response, headers=_RETRY, close=True))

    def next_cycle(self) -> bool:
        """Ready the connection for its next request; False if it is to close."""
        if self.conn.our_state is not h11.DONE or self.conn.their_state is not h11.DONE:
            return False
        self.conn.start_next_cycle()
        return True


class _Peer:
    """What one client address holds: its connections, and its share of body bytes and
    workers."""

    def __init__(self) -> None:
        self.connections = 0
        self.room = _Room(BUFFERED_BODIES // PEER_SHARE)
        self.workers = asyncio.Semaphore(WORKERS // PEER_SHARE)


class _Room:
    """Bytes to be held by request bodies at once; :meth:`take` waits until they are free."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._freed = asyncio.Condition()

    async def take(self, n: int) -> None:
        async with self._freed:
            await self._freed.wait_for(lambda: self.free >= n)
            self.free -= n

    def give(self, n: int) -> None:
        self.free += n
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._freed:
            self._freed.notify_all()


def _open_files_for(n: int) -> None:
    """Raise the process's soft limit on open files towards ``n``, up to its hard limit (as Go's
    runtime does at start): the common default of 1,024 would refuse connections long before
    :data:`MAX_CONNECTIONS`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A connection that broke or timed out is the client's doing, logged at debug level;
    anything else is a fault, logged with its traceback."""
    error = context.get("exception")
    if isinstance(error, (ConnectionError, TimeoutError, ssl.SSLError)):
        log.debug("%s: %s", context.get("message"), error)
    else:
        loop.default_exception_handler(context)
