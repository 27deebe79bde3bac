"""Clients of Pirate's live experiment, and their log of the true latency of every response.

Each client (Pirate, arXiv 2505.14358, §6) holds one persistent connection and walks dependency
trees: it requests a root, learns from each response what that response depends on, requests
those, and so on down the tree, with at most ``max_outstanding`` (4) requests outstanding
(pipelined) on the connection. A request named by a response is sent as soon as that response
has been read and a slot is free, so the gap between a request and the one it triggered is, up
to the client's own processing, the first request's response latency — the causal pairs Pirate
measures from the client-to-server packets alone. A client starts its next tree as soon as it
has read the last response of the previous one (a load generator, not a user who pauses to read),
so that request too is caused by a response.

The driver (:func:`run_clients`) is protocol-neutral: :class:`HttpProtocol` here speaks
HTTP/1.1 to :mod:`.web_server`; :mod:`.memcached` has the memcached text protocol. Every
response is logged in a :class:`ResponseLog` with the connection's local port, the time the
request's first byte was handed to the socket and the time the response's last byte was read
(``time.time_ns()``, the clock tcpdump stamps packets with), and the response that named it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.web_server import EMBED, PAGE_PREFIX, SiteParams
from tacit.model.columns import NONE, ColumnTable, StringPool
from tacit.outputs import atomic_output


@dataclass(frozen=True)
class ClientParams:
    """``connections`` concurrent clients, one persistent connection each, with at most
    ``max_outstanding`` pipelined requests (4 in Pirate's §5.1). With ``browser``, each client is
    instead a browser-like one: ``max_outstanding`` persistent connections, each with one
    request at a time (HTTP/1.1 without pipelining, as browsers do), fetching one tree's
    objects over them as they become known (:func:`_browser`)."""

    connections: int = 8
    max_outstanding: int = 4
    browser: bool = False


@dataclass
class ResponseLog(ColumnTable):
    """One row per response, in the order the responses were read on each connection.

    - ``conn``: the client (0-based); ``port``: its connection's local TCP port.
    - ``target``: what was requested (code into ``strings``: a URL path, a memcached command).
    - ``sent``: ``time.time_ns()`` just before the request was written to the socket.
    - ``received``: ``time.time_ns()`` just after the response's last byte was read.
    - ``parent``: the row of the response that named this request, -1 for a tree's root.
    - ``outstanding``: requests outstanding on the connection once this one was sent (≥ 1).
    - ``size``: response bytes (status line/headers included).
    """

    strings: StringPool
    conn: np.ndarray
    port: np.ndarray
    target: np.ndarray
    sent: np.ndarray
    received: np.ndarray
    parent: np.ndarray
    outstanding: np.ndarray
    size: np.ndarray
    COLUMNS: ClassVar[dict[str, type]] = {
        "conn": np.int32,
        "port": np.uint16,
        "target": np.int32,
        "sent": np.int64,
        "received": np.int64,
        "parent": np.int64,
        "outstanding": np.int16,
        "size": np.int64,
    }

    @property
    def latency(self) -> np.ndarray:
        """The client-visible response latency of every row, ns."""
        return self.received - self.sent

    def save(self, path: str) -> None:
        """Write the log to ``path`` (NumPy ``.npz``), for :meth:`load`."""
        cols = {name: getattr(self, name) for name in self.COLUMNS}
        with atomic_output(path) as f:
            np.savez(f, strings=np.array(self.strings.values, dtype=str), **cols)

    @classmethod
    def load(cls, path: str) -> ResponseLog:
        """A log written by :meth:`save`."""
        with np.load(path) as f:
            cols = {name: f[name].astype(t) for name, t in cls.COLUMNS.items()}
            return cls(StringPool(f["strings"].tolist()), **cols)


class ClientProtocol(Protocol):
    """What :func:`run_clients` needs of a request/response protocol."""

    def root(self, rng: np.random.Generator, now: float) -> str:
        """The target at the root of the next tree started at Unix time ``now`` (seconds)."""
        ...

    def request(self, target: str) -> bytes:
        """The bytes of the request for ``target``."""
        ...

    async def response(self, reader: asyncio.StreamReader, target: str) -> tuple[int, list[str]]:
        """Read the response to ``target``; its size in bytes and the targets it names."""
        ...


@dataclass(frozen=True)
class HttpProtocol:
    """HTTP/1.1 GETs of the pages of :mod:`.web_server` and the objects they embed."""

    pages: int
    host: str = "127.0.0.1"

    def root(self, rng: np.random.Generator, now: float) -> str:
        return f"{PAGE_PREFIX}{rng.integers(self.pages)}"

    def request(self, target: str) -> bytes:
        return f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()

    async def response(self, reader: asyncio.StreamReader, target: str) -> tuple[int, list[str]]:
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1]
        if status != b"200":
            raise ConfigError(f"web server answered {status.decode()} to GET {target}")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await reader.readexactly(length)
        return len(head) + length, [m.decode() for m in EMBED.findall(body)]


class ResponseRows:
    """The rows of a :class:`ResponseLog` as they are read, before they become columns."""

    def __init__(self) -> None:
        self.strings = StringPool()
        self.rows: list[tuple[int, int, int, int, int, int, int, int]] = []

    def add(self, conn, port, target, sent, received, parent, outstanding, size) -> int:
        self.rows.append(
            (conn, port, self.strings.code(target), sent, received, parent, outstanding, size)
        )
        return len(self.rows) - 1

    def table(self) -> ResponseLog:
        cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * 8
        return ResponseLog(self.strings, *(np.array(c) for c in cols))


@dataclass(frozen=True)
class _Run:
    """What every client of one run shares: the protocol and server, the load, when the run
    started (monotonic) and stops, and the log the responses go to."""

    protocol: ClientProtocol
    address: tuple[str, int]
    params: ClientParams
    start: float
    seconds: float
    rows: ResponseRows

    def going(self) -> bool:
        """Whether a client may start another tree."""
        return time.monotonic() - self.start < self.seconds


def _drawn_root(protocol: ClientProtocol, rng: np.random.Generator) -> tuple[str, bytes]:
    """The root of a client's next tree and the bytes of its request."""
    root = protocol.root(rng, time.time())
    return root, protocol.request(root)


async def _client(conn: int, run: _Run, rng: np.random.Generator) -> None:
    """One client: trees until the run's ``seconds`` have passed, then it finishes the tree it
    is in and closes. The next tree's root is drawn and encoded while the client waits for what
    may be the current tree's last response, so that the client's turnaround from that response
    to the next request (which Pirate measures with the response, §3.1) is as short as a
    compiled load generator's, not the interpreter's time to draw and encode a request."""
    protocol, params, rows = run.protocol, run.params, run.rows
    reader, writer = await asyncio.open_connection(*run.address)
    port = writer.get_extra_info("sockname")[1]
    upcoming: tuple[str, bytes] | None = None  # the next tree's root, drawn while waiting
    try:
        while run.going():
            root, encoded = upcoming or _drawn_root(protocol, rng)
            upcoming = None
            todo: deque[tuple[str, int, bytes | None]] = deque([(root, NONE, encoded)])
            inflight: deque[tuple[str, int, int, int]] = deque()
            while todo or inflight:
                while todo and len(inflight) < params.max_outstanding:
                    target, parent, data = todo.popleft()
                    request = data or protocol.request(target)
                    sent = time.time_ns()
                    writer.write(request)
                    inflight.append((target, parent, sent, len(inflight) + 1))
                await writer.drain()
                target, parent, sent, depth = inflight.popleft()
                if upcoming is None and not todo and not inflight:  # perhaps the tree's last
                    upcoming = _drawn_root(protocol, rng)
                size, named = await protocol.response(reader, target)
                row = rows.add(conn, port, target, sent, time.time_ns(), parent, depth, size)
                todo.extend((t, row, None) for t in named)
    finally:
        writer.close()
        await writer.wait_closed()


async def _browser(client: int, run: _Run, rng: np.random.Generator) -> None:
    """One browser-like client: ``params.max_outstanding`` connections, one request in flight
    on each; an object is requested on the first free connection once the response naming it
    has been read; the next tree starts when the last object of the previous one is read.
    Connection ``k`` of client ``c`` is logged as ``conn`` ``c · max_outstanding + k``."""
    protocol, rows = run.protocol, run.rows
    n = run.params.max_outstanding
    streams = [await asyncio.open_connection(*run.address) for _ in range(n)]
    todo: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue()
    left = [0]  # objects of the current tree queued or in flight
    tree_done = asyncio.Event()

    async def connection(k: int, reader: asyncio.StreamReader, writer) -> None:
        port = writer.get_extra_info("sockname")[1]
        while (item := await todo.get()) is not None:
            target, parent = item
            sent = time.time_ns()
            writer.write(protocol.request(target))
            await writer.drain()
            size, named = await protocol.response(reader, target)
            row = rows.add(client * n + k, port, target, sent, time.time_ns(), parent, 1, size)
            for t in named:
                todo.put_nowait((t, row))
            left[0] += len(named) - 1
            if left[0] == 0:
                tree_done.set()

    try:
        async with asyncio.TaskGroup() as group:
            for k, (reader, writer) in enumerate(streams):
                group.create_task(connection(k, reader, writer))
            while run.going():
                tree_done.clear()
                left[0] = 1
                todo.put_nowait((protocol.root(rng, time.time()), NONE))
                await tree_done.wait()
            for _ in streams:
                todo.put_nowait(None)
    finally:
        for _, writer in streams:
            writer.close()
            await writer.wait_closed()


async def _run(
    protocol: ClientProtocol, address: tuple[str, int], seconds: float, params: ClientParams, seed
) -> ResponseLog:
    rngs = [np.random.default_rng([seed, c]) for c in range(params.connections)]
    run = _Run(protocol, address, params, time.monotonic(), seconds, ResponseRows())
    client = _browser if params.browser else _client
    async with asyncio.TaskGroup() as group:
        for c in range(params.connections):
            group.create_task(client(c, run, rngs[c]))
    return run.rows.table()


def run_clients(
    protocol: ClientProtocol,
    address: tuple[str, int],
    seconds: float,
    params: ClientParams | None = None,
    seed: int = 0,
) -> ResponseLog:
    """Run ``params.connections`` clients of ``protocol`` against ``address`` for ``seconds``
    (each finishes its current tree) and return the log of every response."""
    return asyncio.run(_run(protocol, address, seconds, params or ClientParams(), seed))


def main(argv: list[str] | None = None) -> None:
    """Run clients against a :mod:`.web_server`, :mod:`.cpu_server` or memcached
    (``--protocol memtier``) in another process or network namespace and save their log:
    ``python -m tacit.experiment.web_clients --address HOST:PORT --seconds S --out LOG.npz
    [--connections N] [--outstanding K] [--browser] [--seed S]``."""
    parser = argparse.ArgumentParser(description="Pirate's web clients; saves their log.")
    parser.add_argument("--address", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--connections", type=int, default=ClientParams.connections)
    parser.add_argument("--outstanding", type=int, default=ClientParams.max_outstanding)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--browser", action="store_true", help="browser-like clients")
    parser.add_argument("--protocol", choices=("http", "memtier"), default="http")
    args = parser.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    params = ClientParams(args.connections, args.outstanding, args.browser)
    protocol: ClientProtocol = HttpProtocol(SiteParams().pages, host)
    if args.protocol == "memtier":
        from tacit.experiment.memcached import MemtierParams, MemtierProtocol

        protocol = MemtierProtocol(MemtierParams())
    run_clients(protocol, (host, int(port)), args.seconds, params, args.seed).save(args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
