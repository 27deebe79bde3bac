"""Benchmark: ``tacit serve`` under many senders and many connections held open.

A ``tacit serve`` in its own process (on one core) first gets ``IDLE`` connections that send
nothing and ``SLOW`` that send a request's head a byte a second; then ``SENDERS`` clients post
one OTLP request each, all at once, while ``QUERIERS`` clients ask ``/api/services``. Each
group comes from an address of its own on the loopback network (:data:`FROM`), as hosts
would: one address may hold only its share of the connections. Per
phase: the answers by status, the connections reset or refused, the service's threads and its
resident memory above what it held idle (its high-water mark reset through
``/proc/PID/clear_refs``). Targets (the issue on bounded inputs): no reset, threads and memory
bounded.

Then, on their own, ``HALF_OPEN`` connections that each send part of a request's head and
nothing more: how long after its opening the service closed each (its idle timeout is
:data:`~tacit.serve.http_bounds.IDLE_TIMEOUT_S`), and how long ``/api/services`` takes to
answer meanwhile (target: the issue on shipping it, closed within the timeout, answers under
100 ms).

``python bench/bench_many_senders.py`` prints one JSON object.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import selectors
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_serve import Server, proc_status
from tacit.experiment.otlp_load import encoded_requests
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.serve.http_bounds import IDLE_TIMEOUT_S
from tacit.simulate import load_app, simulate

IDLE = 2000
SLOW = 200
SENDERS = 500
QUERIERS = 100
HALF_OPEN = 300
QUERIES = 20
FROM = {"idle": "127.0.0.2", "slow": "127.0.0.3", "POST": "127.0.0.1", "GET": "127.0.0.4"}
"""The address each group of connections comes from."""


def _ask(port: int, method: str, path: str, body: bytes | None) -> str:
    """The answer's status, or the name of the error that came instead."""
    try:
        connection = http.client.HTTPConnection(
            "127.0.0.1", port, timeout=120, source_address=(FROM[method], 0)
        )
        headers = {"Content-Type": "application/x-protobuf"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        status = connection.getresponse().status
        connection.close()
        return str(status)
    except OSError as e:
        return type(e).__name__


def _held(port: int, n: int, source: str) -> list[socket.socket]:
    server = ("127.0.0.1", port)
    return [socket.create_connection(server, 120, (source, 0)) for _ in range(n)]


def _drip(sockets: list[socket.socket], stop: threading.Event) -> None:
    """A request head a byte a second on each socket, until ``stop``."""
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    for i in range(len(head)):
        if stop.wait(1.0):
            return
        for s in sockets:
            with contextlib.suppress(OSError):  # closed by the service: as it may
                s.send(head[i : i + 1])


def main() -> None:
    app = load_app(None)
    spans = infer_roles(simulate(app, 300, duration_s=3, seed=1)).spans
    graph = learn_callgraph(spans)
    requests = [body for _, body in encoded_requests(spans)]
    with tempfile.TemporaryDirectory() as d:
        server = Server(Path(d), graph, defaults=True).start()
        pid = server.proc.pid
        try:
            idle_threads = proc_status(pid, "Threads")
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            idle_mib = proc_status(pid, "VmRSS") / 1024
            began = time.perf_counter()
            idle = _held(server.port, IDLE, FROM["idle"])
            slow = _held(server.port, SLOW, FROM["slow"])
            stop = threading.Event()
            dripping = threading.Thread(target=_drip, args=(slow, stop))
            dripping.start()
            held_threads = proc_status(pid, "Threads")
            calls = [("POST", "/v1/traces", requests[i % len(requests)]) for i in range(SENDERS)]
            calls += [("GET", "/api/services", None)] * QUERIERS
            with ThreadPoolExecutor(len(calls)) as pool:
                peak = [0]

                def watch() -> None:
                    while not stop.is_set():
                        peak[0] = max(peak[0], proc_status(pid, "Threads"))
                        time.sleep(0.05)

                watcher = threading.Thread(target=watch)
                watcher.start()
                answers = list(pool.map(lambda c: (c[0], _ask(server.port, *c)), calls))
                stop.set()
                watcher.join()
            seconds = time.perf_counter() - began
            dripping.join()
            idle_open = sum(1 for s in idle if _open(s))
            for s in idle + slow:
                s.close()
            received = server.status()["received"]
            peak_mib = proc_status(pid, "VmHWM") / 1024 - idle_mib
            half_open = _half_open(server.port)
        finally:
            server.stop()
    by_method = {
        method: dict(Counter(status for m, status in answers if m == method))
        for method in ("POST", "GET")
    }
    print(
        json.dumps(
            {
                "idle_connections": IDLE,
                "slow_head_connections": SLOW,
                "senders": SENDERS,
                "queriers": QUERIERS,
                "answers": by_method,
                "not_answered": sum(1 for _, s in answers if not s.isdigit()),
                "idle_still_open_after": idle_open,
                "spans_received": received,
                "threads": {
                    "idle": idle_threads,
                    "connections_held": held_threads,
                    "peak_under_load": peak[0],
                },
                "peak_above_idle_mib": round(peak_mib, 1),
                "seconds": round(seconds, 1),
                "half_open": half_open,
                "cpus": len(os.sched_getaffinity(0)),
            }
        )
    )


def _half_open(port: int) -> dict:
    """:data:`HALF_OPEN` connections each with part of a head: when the service closed them,
    and the query API's answer times meanwhile."""
    opened = time.monotonic()
    held = _held(port, HALF_OPEN, FROM["slow"])
    for s in held:
        s.sendall(b"GET /api/services HTTP/1.1\r\nHost: x\r\n")
    answer_ms = []
    for _ in range(QUERIES):
        began = time.perf_counter()
        status = _ask(port, "GET", "/api/services", None)
        answer_ms.append(1000 * (time.perf_counter() - began))
        assert status == "200", status
    limit = IDLE_TIMEOUT_S + 10
    closed_after = []
    with selectors.DefaultSelector() as watch:
        for s in held:
            watch.register(s, selectors.EVENT_READ)
        while len(closed_after) < len(held) and time.monotonic() - opened < limit:
            for key, _ in watch.select(timeout=1.0):
                if not _open(key.fileobj):  # type: ignore[arg-type]
                    closed_after.append(time.monotonic() - opened)
                    watch.unregister(key.fileobj)
    for s in held:
        s.close()
    return {
        "connections": HALF_OPEN,
        "closed_by_the_service": len(closed_after),
        "idle_timeout_s": IDLE_TIMEOUT_S,
        "last_closed_after_s": round(max(closed_after, default=float("nan")), 1),
        "api_answer_ms": {
            "median": round(statistics.median(answer_ms), 1),
            "max": round(max(answer_ms), 1),
        },
    }


def _open(s: socket.socket) -> bool:
    """Whether the service still holds ``s`` open (nothing to read, no end)."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
