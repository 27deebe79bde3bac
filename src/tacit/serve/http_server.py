"""The HTTP side of ``tacit serve``, on one address: uvicorn, over httptools and uvloop where
installed, serving HTTP/1.1, and HTTPS with a certificate (:mod:`.tls`); what is answered is
:mod:`.http_routes`' business, through :mod:`.asgi_routes`, within :mod:`.http_bounds`' bounds
(which :mod:`.http_protocol` adds to uvicorn's).

A connection costs a coroutine and its buffers, not a thread, until a request has come whole:
only then does one of :data:`~.http_bounds.WORKERS` threads answer it.
``bench/bench_http_server.py`` measures what the bounds add to uvicorn's own cost.
"""

from __future__ import annotations

import logging
import resource
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import uvicorn

from tacit.serve import http_bounds
from tacit.serve.asgi_routes import AsgiRoutes
from tacit.serve.http_bounds import Bounds
from tacit.serve.http_protocol import BoundedProtocol
from tacit.serve.http_routes import Routes
from tacit.serve.tls import ServerTLS

BACKLOG = 1024
"""Connections the kernel queues until the server accepts them."""
FILES_BESIDE = 1024
"""Open files the service needs beside its connections (the store, journals, captures)."""
GRACE_S = 5.0
"""How long a stop waits for answers under way before it cancels them."""


class ServeHTTPServer:
    """Listens on ``address`` from construction (so its port is known at once); serves from
    :meth:`serve_forever` until :meth:`shutdown`."""

    def __init__(
        self, address: tuple[str, int], routes: Routes, tls: ServerTLS | None = None
    ) -> None:
        bounds = Bounds()
        _open_files_for(bounds.max_connections + FILES_BESIDE)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.create_server(address, family=family, backlog=BACKLOG)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.routes = routes
        self._workers = ThreadPoolExecutor(http_bounds.WORKERS, thread_name_prefix="tacit-http")
        config = uvicorn.Config(
            AsgiRoutes(routes, bounds, self._workers),
            http=partial(BoundedProtocol, bounds=bounds),  # type: ignore[arg-type]
            interface="asgi3",
            lifespan="off",
            ws="none",
            proxy_headers=False,  # the bounds are per connection's address, not a header's
            server_header=False,
            headers=[("server", "tacit")],
            timeout_keep_alive=bounds.idle_s,
            timeout_graceful_shutdown=int(GRACE_S),
            backlog=BACKLOG,
            ssl_context_factory=None if tls is None else (lambda *_: tls.context),
            log_config=None,
            log_level=logging.ERROR,  # a client's bad request is its doing, not the service's
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._done = threading.Event()

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown`; returns once every worker has answered."""
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._workers.shutdown(wait=True)
            self._done.set()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop taking connections, close the idle ones and wait for answers under way."""
        self._server.should_exit = True
        self._done.wait(timeout_s)

    def server_close(self) -> None:
        self.socket.close()


def _open_files_for(n: int) -> None:
    """Raise the process's soft limit on open files towards ``n``, up to its hard limit (as Go's
    runtime does at start): the common default of 1,024 would refuse connections long before
    :data:`~.http_bounds.MAX_CONNECTIONS`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
