"""The processes of the traced application (:mod:`.traced_app`): a small hotel-search service in
the shape of DeathStarBench's HotelReservation (Gan et al., ASPLOS '19, §3), and its load
generator, each logging the calls it makes as the ground truth of the request traces.

Roles, each run as ``python -m tacit.experiment.traced_app_services ROLE --listen HOST:PORT
--log PATH [--peer NAME=HOST:PORT ...] [--seed N]``:

- ``front``: an HTTP/1.1 server (persistent connections, RFC 9112 §9.3) with two endpoints.
  ``GET /hotels`` calls geo's ``/geo.Geo/Nearby``, then rate's ``/rate.Rate/GetRates`` with the
  hotels geo returned (sequential: the second call depends on the first);
  ``GET /recommend`` calls both at once from two threads (parallel: neither depends on the
  other). It holds one long-lived gRPC channel per back end, as real services do, so that
  HTTP/2 multiplexes all its concurrent calls to a back end on one TCP connection.
- ``geo`` and ``rate``: gRPC servers (grpcio; generic handlers on raw bytes, no generated
  code) that sleep a seeded exponential service time (mean :data:`SERVICE_MEAN_MS`) and reply
  with a small payload.
- ``client``: an open-loop load generator (``--seconds``, ``--per-second``, ``--concurrency``;
  ``--listen`` unused): Poisson arrivals at the given rate, half to each endpoint, sent over
  ``--concurrency`` persistent HTTP connections (an arrival waits for a free connection). It
  prints its counts as one JSON object on stdout when done.

Servers print ``listening on HOST:PORT`` on stderr once they accept connections, and stop on
SIGTERM or SIGINT.

Every call carries a fresh id, a random UUID: the HTTP header ``x-request-id`` of a root
request (set by the client) and the gRPC metadata ``x-request-id`` of each call front makes.
Every process appends one JSON line per call it **made** (caller side) to its ``--log``
(``geo`` and ``rate`` make none)::

    {"rpc": "<id of this call>",
     "parent_rpc": "<id of the request being served when it was made>" or null (a root),
     "caller": "client" | "front", "callee": "front" | "geo" | "rate",
     "endpoint": "GET /hotels" | "GET /recommend" | "/geo.Geo/Nearby" | "/rate.Rate/GetRates",
     "start_ns": int, "end_ns": int,   # time.time_ns() just before the call and after the reply
     "error": null or what failed (an HTTP status, a gRPC status code, an exception)}
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import queue
import signal
import sys
import threading
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

import grpc
import numpy as np

ROLES = ("client", "front", "geo", "rate")
SERVICES = ("front", "geo", "rate")
PORTS = {"front": 5000, "geo": 8083, "rate": 8084}
"""HotelReservation's ports for its frontend, geo and rate services."""
METHODS = {"geo": "/geo.Geo/Nearby", "rate": "/rate.Rate/GetRates"}
ROOT_ENDPOINTS = ("GET /hotels", "GET /recommend")
SERVICE_MEAN_MS = {"geo": 2.0, "rate": 4.0}
"""Mean service time of each back end (exponential), ms: rate is the slower one."""
REQUEST_ID = "x-request-id"
CALL_TIMEOUT_S = 10.0
GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]
"""The services talk to each other directly, whatever proxy the environment names."""


class CallLog:
    """The JSON lines of the calls one service made (module docstring), written as they end
    and flushed at once, so that a process stopped by a signal leaves complete lines; a
    context manager that closes the file."""

    def __init__(self, path: str | Path, caller: str) -> None:
        self.caller = caller
        self._file: TextIO = Path(path).open("a", encoding="utf-8")  # noqa: SIM115  # closed by __exit__
        self._lock = threading.Lock()

    def record(
        self,
        rpc: str,
        parent: str | None,
        callee: str,
        endpoint: str,
        start_ns: int,
        end_ns: int,
        error: str | None,
    ) -> None:
        line = json.dumps(
            {
                "rpc": rpc,
                "parent_rpc": parent,
                "caller": self.caller,
                "callee": callee,
                "endpoint": endpoint,
                "start_ns": start_ns,
                "end_ns": end_ns,
                "error": error,
            }
        )
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def __enter__(self) -> CallLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def new_id() -> str:
    """A fresh call id: a random UUID, as request ids usually are."""
    return str(uuid.uuid4())


class ServiceTime:
    """Seeded exponential service times, drawn under a lock (the server's threads share it)."""

    def __init__(self, mean_ms: float, seed: int) -> None:
        self.mean_s = mean_ms / 1e3
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def draw(self) -> float:
        with self._lock:
            return float(self._rng.exponential(self.mean_s))


def serve_backend(role: str, host: str, port: int, seed: int) -> None:
    """Run geo or rate until SIGTERM: each call sleeps its service time and replies with a few
    hotel ids (geo) or rates (rate) derived from the request."""
    service = ServiceTime(SERVICE_MEAN_MS[role], seed)

    def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
        time.sleep(service.draw())
        digest = zlib.crc32(request)
        if role == "geo":
            return ",".join(str((digest >> (4 * k)) % 80 + 1) for k in range(5)).encode()
        hotels = request.split(b",")
        return b";".join(b"%s=%d" % (h, 90 + (digest >> k) % 200) for k, h in enumerate(hotels))

    package_service, method = METHODS[role].strip("/").split("/")
    handler = grpc.method_handlers_generic_handler(
        package_service, {method: grpc.unary_unary_rpc_method_handler(handle)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=16), options=GRPC_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"{host}:{port}")
    server.start()
    _listening(host, port)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(grace=1).wait()


def _listening(host: str, port: int) -> None:
    print(f"listening on {host}:{port}", file=sys.stderr, flush=True)


class _Backend:
    """One back end as front calls it: a long-lived channel and the method's callable."""

    def __init__(self, name: str, address: str) -> None:
        self.name = name
        self.endpoint = METHODS[name]
        self.channel = grpc.insecure_channel(address, options=GRPC_OPTIONS)
        self.call = self.channel.unary_unary(self.endpoint)  # bytes in, bytes out

    def __call__(self, log: CallLog, parent: str | None, request: bytes) -> bytes | None:
        rpc = new_id()
        error = None
        reply = None
        start = time.time_ns()
        try:
            reply = self.call(request, metadata=((REQUEST_ID, rpc),), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            error = f"gRPC {e.code().name}"  # type: ignore[attr-defined]  # a grpc.Call too
        end = time.time_ns()
        log.record(rpc, parent, self.name, self.endpoint, start, end, error)
        return reply


class FrontServer(ThreadingHTTPServer):
    """front: one thread per client connection, one pool for the parallel calls."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, backends: dict[str, str], log: CallLog) -> None:
        self.log = log
        self.geo = _Backend("geo", backends["geo"])
        self.rate = _Backend("rate", backends["rate"])
        self.pool = ThreadPoolExecutor(max_workers=32)
        super().__init__((host, port), _FrontHandler)

    def hotels(self, parent: str | None, query: bytes) -> list[bytes | None]:
        """Sequential: geo first, rate on what geo found."""
        near = self.geo(self.log, parent, query)
        return [near, None if near is None else self.rate(self.log, parent, near)]

    def recommend(self, parent: str | None, query: bytes) -> list[bytes | None]:
        """Parallel: geo and rate at once, each from its own thread."""
        calls = [self.pool.submit(b, self.log, parent, query) for b in (self.geo, self.rate)]
        return [c.result() for c in calls]


class _FrontHandler(BaseHTTPRequestHandler):
    """One client connection. A response leaves in one write (buffered, flushed once the
    request is handled) with Nagle's algorithm off: written as head and body with Nagle on, the
    body would wait for the client's delayed ACK of the head (tens of ms, RFC 9293 §3.8.6.2)."""

    protocol_version = "HTTP/1.1"
    wbufsize = -1
    disable_nagle_algorithm = True
    server: FrontServer

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        routes = {"/hotels": self.server.hotels, "/recommend": self.server.recommend}
        route = routes.get(url.path)
        if route is None:
            self._reply(404, {"error": "no such endpoint"})
            return
        query = parse_qs(url.query)
        ask = f"{query.get('lat', ['0'])[0]},{query.get('lon', ['0'])[0]}".encode()
        replies = route(self.headers.get(REQUEST_ID), ask)
        if any(r is None for r in replies):
            self._reply(502, {"error": "a back end failed"})
            return
        self._reply(200, {"results": [r.decode() for r in replies if r is not None]})

    def _reply(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the call log is the record."""


def serve_front(host: str, port: int, backends: dict[str, str], log: CallLog) -> None:
    """Run front until SIGTERM."""
    with FrontServer(host, port, backends, log) as server:
        _listening(host, port)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
        server.pool.shutdown(wait=False)


def generate_load(
    front: str, seconds: float, per_second: float, concurrency: int, seed: int, log: CallLog
) -> dict[str, Any]:
    """Send Poisson arrivals at ``per_second`` for ``seconds`` to ``front`` (HOST:PORT), half
    to each endpoint, over ``concurrency`` persistent connections, and return the counts:
    requests scheduled, sent, answered 200 (``completed``), failed (``errors``), the seconds
    from the first arrival to the last answer, and the 99th percentile of how late requests
    started after their arrival (ms): above a few ms, the app did not keep up."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / per_second, int(seconds * per_second * 1.5) + 16))
    arrivals = arrivals[arrivals < seconds]
    kinds = rng.integers(0, 2, len(arrivals))
    coords = rng.uniform((37.7, -122.5), (37.8, -122.4), (len(arrivals), 2))
    jobs: queue.SimpleQueue[tuple[float, str, str] | None] = queue.SimpleQueue()
    host, port = front.rsplit(":", 1)
    lags: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def work() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=CALL_TIMEOUT_S)
        while (job := jobs.get()) is not None:
            due, endpoint, target = job
            rpc = new_id()
            error = None
            start = time.time_ns()
            try:
                conn.request("GET", target, headers={REQUEST_ID: rpc})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    error = f"HTTP {response.status}"
            except (OSError, http.client.HTTPException) as e:
                error = f"{type(e).__name__}: {e}"
                conn.close()  # reconnects on the next request
            end = time.time_ns()
            log.record(rpc, None, "front", endpoint, start, end, error)
            with lock:
                lags.append(start / 1e9 - due)
                errors[0] += error is not None
        conn.close()

    workers = [threading.Thread(target=work) for _ in range(concurrency)]
    for w in workers:
        w.start()
    t0 = time.time()
    for at, kind, (lat, lon) in zip(
        arrivals.tolist(), kinds.tolist(), coords.tolist(), strict=True
    ):
        time.sleep(max(0.0, t0 + at - time.time()))
        endpoint = ROOT_ENDPOINTS[kind]
        target = f"{endpoint.split()[1]}?lat={lat:.4f}&lon={lon:.4f}"
        jobs.put((t0 + at, endpoint, target))
    for _ in workers:
        jobs.put(None)
    for w in workers:
        w.join()
    return {
        "scheduled": len(arrivals),
        "sent": len(lags),
        "completed": len(lags) - errors[0],
        "errors": errors[0],
        "elapsed_s": round(time.time() - t0, 3),
        "lag_p99_ms": round(float(np.percentile(lags, 99)) * 1e3, 3) if lags else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--listen", default="", help="HOST:PORT to serve on (servers)")
    parser.add_argument("--log", required=True, help="JSON lines of the calls made")
    parser.add_argument("--peer", action="append", default=[], help="NAME=HOST:PORT")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--per-second", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    peers = dict(p.split("=", 1) for p in args.peer)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with CallLog(args.log, args.role) as log:
        if args.role == "client":
            counts = generate_load(
                peers["front"], args.seconds, args.per_second, args.concurrency, args.seed, log
            )
            print(json.dumps(counts), flush=True)
            return
        host, port = args.listen.rsplit(":", 1)
        if args.role == "front":
            serve_front(host, int(port), peers, log)
        else:
            serve_backend(args.role, host, int(port), args.seed)


if __name__ == "__main__":
    main(sys.argv[1:])
