"""Benchmark: what tacit's bounds on HTTP cost. ``tacit serve``'s server (uvicorn with the
bounds of :mod:`tacit.serve.http_bounds`, through :mod:`tacit.serve.asgi_routes`) against uvicorn
at its fastest (httptools, uvloop) serving the very same routes
(:class:`tacit.serve.http_routes.Routes`) through a plain ASGI adapter without bounds, in one
``tacit serve`` process.

The service runs in its own process pinned to core 0, serving its routes on two ports, tacit's
server on one and the plain one on the other; the clients run here, on core 1. Per workload and
server, in turn: the requests answered a second and the service's CPU time per request
(steadier on a shared machine). Workloads:

* ``healthz``: ``GET /healthz`` over 8 keep-alive connections, the HTTP layer alone;
* ``services``: ``GET /api/services``, a query of the store;
* ``otlp``: the SDK exporter's own requests of 512 spans (``encoded_requests``) posted over two
  keep-alive connections as exporters post them (``post_requests``), each server its own
  spans, which the service checks, journals and reconstructs: the ingest path.

``python bench/bench_http_server.py`` prints one JSON object. ``--serve`` is the service
process's side.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from tacit.experiment.otlp_load import encoded_requests, post_requests
from tacit.experiment.process_cpu import tree_cpu_s
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.simulate import load_app, simulate

CONNECTIONS = 8
GETS = {"healthz": 4000, "services": 1000}
SECONDS_OF_SPANS = 6.0


class PlainAsgiRoutes:
    """tacit's routes as an ASGI application without bounds: the head is read as tacit's server
    reads it and checked before the body is read (``before_body``), and the answer is made in a
    pool of threads as tacit's server makes it."""

    def __init__(self, routes: Any, workers: int = 8) -> None:
        self.routes = routes
        self.pool = ThreadPoolExecutor(workers)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from tacit.serve.asgi_routes import content_length, request_of

        if scope["type"] != "http":
            return
        head = request_of(scope)
        answer = self.routes.before_body(head, content_length(head))
        if answer is None:
            body, more = bytearray(), True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(
                self.pool, self.routes.answer, replace(head, body=bytes(body))
            )
        extra = [(k.lower().encode(), v.encode()) for k, v in answer.headers.items()]
        await send(
            {
                "type": "http.response.start",
                "status": int(answer.status),
                "headers": [(b"content-type", answer.ctype.encode()), *extra],
            }
        )
        await send({"type": "http.response.body", "body": answer.body})


def serve(database: str, callgraph: str, ports_file: str) -> None:
    """The service process: ``tacit serve`` with a plain uvicorn beside its own server."""
    import uvicorn

    from tacit.reconstruct.callgraph import CallGraph
    from tacit.serve import Service
    from tacit.serve.config import ServeConfig

    config = ServeConfig(http="127.0.0.1:0", grpc="", database=Path(database))
    svc = Service(config, CallGraph.load(callgraph)).start()
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(PlainAsgiRoutes(svc.http.routes), log_level="warning", lifespan="off")
    )
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    ports = {"tacit": svc.http_port, "plain": sock.getsockname()[1]}
    Path(ports_file).write_text(json.dumps(ports))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.should_exit = True
    svc.stop()


def _gets(port: int, path: str, n: int) -> list[int]:
    """``n`` GETs of ``path`` over :data:`CONNECTIONS` keep-alive connections; the statuses."""

    def one_connection(k: int) -> list[int]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        out = []
        for _ in range(k):
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            out.append(response.status)
        conn.close()
        return out

    share = [n // CONNECTIONS + (i < n % CONNECTIONS) for i in range(CONNECTIONS)]
    with ThreadPoolExecutor(CONNECTIONS) as pool:
        return [s for part in pool.map(one_connection, share) for s in part]


def _posts(bodies: list[tuple[int, bytes]], endpoint: str) -> list[int]:
    """The statuses of posting ``bodies`` as two exporters would."""
    return [status for _, _, status in post_requests(bodies, endpoint, connections=2).answers]


def _measure(pid: int, run: Any) -> dict[str, Any]:
    cpu0, t0 = sum(tree_cpu_s(pid)), time.perf_counter()
    statuses = run()
    seconds, cpu = time.perf_counter() - t0, sum(tree_cpu_s(pid)) - cpu0
    return {
        "requests": len(statuses),
        "ok": sum(s == 200 for s in statuses),
        "per_second": round(len(statuses) / seconds),
        "service_cpu_us_per_request": round(1e6 * cpu / len(statuses)),
    }


def _wait_idle(port: int) -> None:
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tacit/status") as r:
            if not json.loads(r.read())["pending"]:
                return
        time.sleep(0.2)


def main() -> None:
    os.sched_setaffinity(0, {1})
    app = load_app(None)
    callgraph = learn_callgraph(infer_roles(simulate(app, 10, n_requests=100, seed=1)).spans)
    bodies = {
        name: encoded_requests(simulate(app, 300, duration_s=SECONDS_OF_SPANS, seed=seed))
        for name, seed in (("tacit", 11), ("plain", 12))
    }
    with tempfile.TemporaryDirectory() as tmp:
        callgraph.save(Path(tmp) / "callgraph.yaml")
        ports_file = Path(tmp) / "ports.json"
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(Path(tmp) / "tacit.duckdb"),
             str(Path(tmp) / "callgraph.yaml"), str(ports_file)],
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, {0}),
        )  # fmt: skip
        try:
            while not ports_file.exists():
                time.sleep(0.1)
            ports = json.loads(ports_file.read_text())
            out: dict[str, Any] = {}
            for workload, n in GETS.items():
                path = "/healthz" if workload == "healthz" else "/api/services"
                out[workload] = {
                    server: _measure(proc.pid, partial(_gets, port, path, n))
                    for server, port in ports.items()
                }
            out["otlp"] = {}
            for server, port in ports.items():
                endpoint = f"http://127.0.0.1:{port}/v1/traces"
                out["otlp"][server] = _measure(proc.pid, partial(_posts, bodies[server], endpoint))
                out["otlp"][server]["spans"] = sum(n for n, _ in bodies[server])
                _wait_idle(port)
            print(json.dumps(out, indent=1))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(*sys.argv[2:5])
    else:
        main()
