"""What ``tacit serve`` bounds on HTTP, and what the connections of one server share to keep
within those bounds: the connections, body bytes held and workers answering, in all and per
client address.

One client address holds at most 1/:data:`PEER_SHARE` of each of these, so that no one sender,
however fast, keeps the others out. Its rate is bounded by that share of the workers, not by a
number of requests a second: a Collector gateway is one address that sends for a whole cluster.
Behind a proxy every client is the proxy's address, and the bounds are the proxy's.

The numbers are read when a server is made (:class:`Bounds`), so that a test may set them
lower.
"""

from __future__ import annotations

import asyncio

from tacit.serve.ingest import MAX_BODY

IDLE_TIMEOUT_S = 30
"""How long a connection may take to send a request's head (from its opening or the previous
answer), a body may pause between two reads and an answer may wait for the client to read it,
before the connection is closed. The OTLP exporters keep a connection between batches sent every
5 s; Go's servers close idle ones after a few minutes at most."""
MAX_HEAD = 64 * 1024
"""The largest request line and headers taken (bytes); beyond, 431."""
WORKERS = 8
"""Threads answering requests. Checking OTLP is bounded on its own
(:data:`~.ingest.MAX_DECODING`); the rest are queries of the store."""
BUFFERED_BODIES = 256 * 1024 * 1024
"""Bytes of request bodies read (or reserved by their ``Content-Length``) and not yet answered,
in all."""
MAX_CONNECTIONS = 4096
"""Connections served at once; one more is answered 503 with ``Retry-After`` (which the OTLP
exporters honour), never reset."""
PEER_SHARE = 2
"""One client address may hold 1/PEER_SHARE of the connections, the body bytes and the workers."""


class Bounds:
    """The bounds of one server, and what its connections hold of them."""

    def __init__(self) -> None:
        self.idle_s = IDLE_TIMEOUT_S
        self.max_head = MAX_HEAD
        self.max_body = MAX_BODY
        self.max_connections = MAX_CONNECTIONS
        self.connections = 0
        self.room = Room(BUFFERED_BODIES)
        self._peers: dict[str, Peer] = {}

    def connect(self, address: str) -> tuple[Peer, str | None]:
        """Count a connection from ``address``: its peer, and why it is over the bounds (to be
        told to retry) or None."""
        peer = self._peers.setdefault(address, Peer())
        peer.connections += 1
        self.connections += 1
        if self.connections > self.max_connections:
            return peer, "too many connections"
        if peer.connections > self.max_connections // PEER_SHARE:
            return peer, "too many connections from this address"
        return peer, None

    def disconnect(self, address: str, peer: Peer) -> None:
        self.connections -= 1
        peer.connections -= 1
        if peer.connections == 0 and self._peers.get(address) is peer:
            del self._peers[address]


class Peer:
    """What one client address holds: its connections, and its share of body bytes and
    workers."""

    def __init__(self) -> None:
        self.connections = 0
        self.room = Room(BUFFERED_BODIES // PEER_SHARE)
        self.workers = asyncio.Semaphore(WORKERS // PEER_SHARE)


class Room:
    """Bytes to be held by request bodies at once; :meth:`take` waits until they are free (a
    request without a body takes none, and waits for nothing)."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._freed = asyncio.Condition()

    async def take(self, n: int) -> None:
        if n == 0:
            return
        async with self._freed:
            await self._freed.wait_for(lambda: self.free >= n)
            self.free -= n

    def give(self, n: int) -> None:
        if n == 0:
            return
        self.free += n
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._freed:
            self._freed.notify_all()
