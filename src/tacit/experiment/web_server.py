"""The web application of Pirate's live experiment: an HTTP/1.1 server whose service time varies
over time, serving a generated site whose pages embed objects that embed objects.

Pirate (Vannarth Shobhana et al., "Measuring Response Latencies Under Asymmetric Routing",
arXiv 2505.14358, §6, evaluation) measures a web application whose clients fetch pages and
the objects they depend on, while the server's response latency changes over time; its
estimates are scored against the latencies the clients see. This module is that server:

- the site (:func:`generate_site`) is a forest of dependency trees: each page embeds objects,
  which may embed objects in turn, named in the body (``<embed src="/o/17">``), so that a
  client only learns what to fetch next from a response — the causal pairs Pirate relies on;
- the service time (:class:`ServiceTime`) follows a time series: a base level that steps
  through a cycle of values, a slow sinusoidal swing on top, and seeded log-normal noise per
  request;
- persistent connections with pipelining (RFC 9112 §9.3.2): requests on one connection are
  served concurrently, and their responses are written in request order (:class:`WebServer`).

The parameter values are this experiment's, not the paper's: they make latencies of a few
milliseconds that change every few seconds, well above the scheduling noise of a shared
two-core machine.

Run as ``python -m tacit.experiment.web_server [--port P] [--seed S] [--config JSON]``: it
prints the port it listens on, one line on stdout, and serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import queue
import re
import signal
import socket
import socketserver
import sys
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

PAGE_PREFIX = "/p/"
OBJECT_PREFIX = "/o/"
EMBED = re.compile(rb'<embed src="([^"]+)">')
"""How a body names the objects it embeds (what :mod:`.web_clients` parses)."""


@dataclass(frozen=True)
class SiteParams:
    """The shape of the generated site: ``pages`` dependency trees, each node with
    ``fanout`` (min, max) children down to ``depth`` levels below the page (a node has children
    with probability ``branching``), and body sizes log-uniform in ``size_bytes``."""

    pages: int = 40
    depth: int = 3
    fanout: tuple[int, int] = (1, 4)
    branching: float = 0.6
    size_bytes: tuple[int, int] = (300, 20_000)


@dataclass(frozen=True)
class Site:
    """A forest of objects: ``sizes[i]`` body bytes and ``children[i]`` (object ids) of object
    ``i``; ``roots`` are the pages (object ids), in page order."""

    sizes: np.ndarray
    children: list[list[int]]
    roots: np.ndarray


def generate_site(params: SiteParams, seed: int) -> Site:
    """The seeded site of ``params``: ``params.pages`` trees, built breadth first."""
    rng = np.random.default_rng(seed)
    lo, hi = params.size_bytes
    sizes: list[int] = []
    children: list[list[int]] = []

    def new_object() -> int:
        sizes.append(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        children.append([])
        return len(sizes) - 1

    roots = []
    for _ in range(params.pages):
        root = new_object()
        roots.append(root)
        level = [root]
        for d in range(params.depth):
            below = []
            for node in level:
                # A page always embeds something; deeper objects do with probability branching.
                if d > 0 and rng.random() >= params.branching:
                    continue
                for _ in range(int(rng.integers(params.fanout[0], params.fanout[1] + 1))):
                    child = new_object()
                    children[node].append(child)
                    below.append(child)
            level = below
    return Site(np.array(sizes, dtype=np.int64), children, np.array(roots, dtype=np.int64))


def object_path(site: Site, obj: int) -> str:
    """The URL path of an object: pages are ``/p/<page number>``, the rest ``/o/<id>``."""
    page = np.flatnonzero(site.roots == obj)
    return f"{PAGE_PREFIX}{page[0]}" if len(page) else f"{OBJECT_PREFIX}{obj}"


def render(site: Site, obj: int) -> bytes:
    """The body of an object: one ``<embed>`` line per child, padded to its size."""
    head = b"".join(
        b'<embed src="%s">\n' % object_path(site, c).encode() for c in site.children[obj]
    )
    return head + b"." * max(0, int(site.sizes[obj]) - len(head))


@dataclass(frozen=True)
class ServiceTime:
    """The server's service time as a function of the wall-clock time ``t`` (Unix seconds).

    ``base(t) = levels_ms[⌊t / step_seconds⌋ mod len(levels_ms)]
    · (1 + wave · sin(2π t / wave_period_seconds))``, and each request takes ``base(t)`` times a
    log-normal factor of median 1 and shape ``noise``. The steps sit on the same grid of Unix
    time as Pirate's estimation epochs (whole seconds since the epoch), so with a whole number
    of seconds per step no epoch straddles a step.
    """

    levels_ms: tuple[float, ...] = (3.0, 8.0, 5.0, 12.0)
    step_seconds: float = 2.0
    wave: float = 0.1
    wave_period_seconds: float = 20.0
    noise: float = 0.05

    def base_ms(self, t: float) -> float:
        """The noiseless service time (ms) at Unix time ``t``."""
        level = self.levels_ms[int(t // self.step_seconds) % len(self.levels_ms)]
        return level * (1 + self.wave * math.sin(2 * math.pi * t / self.wave_period_seconds))

    def sample_ms(self, t: float, rng: np.random.Generator) -> float:
        """One request's service time (ms) at Unix time ``t``."""
        return self.base_ms(t) * math.exp(self.noise * rng.standard_normal())


class WebServer(socketserver.ThreadingTCPServer):
    """The server: pages and objects of ``site``, each after a service time drawn from
    ``service``; :meth:`serve_forever` to run.

    One thread per connection reads the requests, and one more sends the responses in request
    order, each once its service time since its request's arrival has passed (or right after
    the response before it, if later). Threads and ``time.sleep`` rather than asyncio: asyncio's
    timers fire on the millisecond grid of ``epoll_wait``, which would add up to a millisecond
    of jitter to every service time; a sleeping thread wakes within tens of microseconds.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, site: Site, service: ServiceTime, seed: int = 0, port: int = 0) -> None:
        self.site = site
        self.service = service
        self.rng = np.random.default_rng(seed)
        self.bodies = [render(site, i) for i in range(len(site.sizes))]
        self.paths = {object_path(site, i): i for i in range(len(site.sizes))}
        super().__init__(("127.0.0.1", port), _Connection)

    def response(self, target: bytes) -> tuple[bytes, float]:
        """The response to a GET of ``target`` and when it is due (``time.monotonic()``)."""
        obj = self.paths.get(target.decode("latin-1"))
        if obj is None:
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", time.monotonic()
        due = time.monotonic() + self.service.sample_ms(time.time(), self.rng) / 1000
        body = self.bodies[obj]
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
        return head % len(body) + body, due


class _Connection(socketserver.StreamRequestHandler):
    """One persistent connection: requests read here, responses sent by a second thread."""

    server: WebServer

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pending: queue.SimpleQueue[tuple[bytes, float] | None] = queue.SimpleQueue()
        sender = threading.Thread(target=self._send_in_order, args=(pending,), daemon=True)
        sender.start()
        try:
            while (line := self.rfile.readline()) and line.strip():
                while (header := self.rfile.readline()) and header.strip():
                    pass
                parts = line.split()
                if len(parts) != 3 or parts[0] != b"GET" or not header:
                    pending.put((BAD_REQUEST, time.monotonic()))
                    break
                pending.put(self.server.response(parts[1]))
        finally:
            pending.put(None)
            sender.join()

    def _send_in_order(self, pending: queue.SimpleQueue) -> None:
        with contextlib.suppress(OSError):
            while (item := pending.get()) is not None:
                data, due = item
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                self.request.sendall(data)


BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


def config_json(site: SiteParams, service: ServiceTime) -> str:
    """The ``--config`` argument that makes the server process use ``site`` and ``service``."""
    return json.dumps({"site": asdict(site), "service": asdict(service)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="{}", help="JSON: {site: {...}, service: {...}}")
    args = parser.parse_args(argv)
    config = json.loads(args.config)
    site = generate_site(SiteParams(**config.get("site", {})), args.seed)
    server = WebServer(site, ServiceTime(**config.get("service", {})), args.seed, args.port)
    print(server.server_address[1], flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with server, contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
