"""Benchmark: the shared log of ``tacit serve``'s roles, NATS JetStream as tacit uses it
(:class:`tacit.serve.span_log.SpanLog`), against appending to a file and ``fdatasync`` (what
an ingest replica would do on a shared filesystem instead).

Per log, ``--publishers`` processes at once each append ``--requests`` requests of
``--size`` random bytes, one at a time, each waiting for its acknowledgement as an ingest
replica waits before it answers its sender: the median and 99th percentile of an append, and
the requests per second of all publishers together (from each one's first append to the
slowest one's last; the body is made before its append is timed). Then JetStream's server is killed
(``kill -9``) right after a run of acknowledged appends and started again on its store: how
many acknowledged requests it lost.

Prints one JSON object. docs/scale-out.md says why the log is JetStream (with Redis Streams,
measured once by hand, beside these).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

from tacit.experiment.capture import stop_process
from tacit.experiment.memcached import free_port
from tacit.experiment.nats_server import nats_unavailable, start_nats
from tacit.serve.span_log import SpanLog


def _nats_publisher(url: str, n: int, size: int, out: multiprocessing.Queue) -> None:
    log = SpanLog(url, "bench", 2 * 1024**3).open()
    times = []
    start = time.perf_counter()
    for _ in range(n):
        body = os.urandom(size)
        t = time.perf_counter()
        log.publish(body, "protobuf", 0)
        times.append(time.perf_counter() - t)
    out.put((times, time.perf_counter() - start))
    log.close()


def _file_publisher(path: str, n: int, size: int, out: multiprocessing.Queue) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    times = []
    start = time.perf_counter()
    for _ in range(n):
        payload = os.urandom(size)
        body = len(payload).to_bytes(4, "big") + payload
        t = time.perf_counter()
        os.write(fd, body)
        os.fdatasync(fd)
        times.append(time.perf_counter() - t)
    out.put((times, time.perf_counter() - start))
    os.close(fd)


def _run(target, args_of, publishers: int) -> dict:
    out: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=target, args=(*args_of(i), out))
             for i in range(publishers)]  # fmt: skip
    for p in procs:
        p.start()
    answers = [out.get() for _ in procs]
    for p in procs:
        p.join()
    times = sorted(t for ts, _ in answers for t in ts)
    slowest = max(elapsed for _, elapsed in answers)  # from its first append to its last
    return {
        "p50_ms": round(statistics.median(times) * 1e3, 2),
        "p99_ms": round(times[int(0.99 * (len(times) - 1))] * 1e3, 2),
        "requests_per_s": round(len(times) / slowest),
    }


def _kill_check(store: Path, requests: int, size: int) -> dict:
    """Acknowledged appends, then the server killed and started again: what is left."""
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    server = start_nats(port, store)
    log = SpanLog(url, "kill", 2 * 1024**3).open()
    acknowledged = [log.publish(os.urandom(size), "protobuf", 0) for _ in range(requests)]
    server.kill()
    server.wait()
    log.close()
    server = start_nats(port, store)
    try:
        log = SpanLog(url, "kill", 2 * 1024**3).open()
        kept = log.messages()
        log.close()
    finally:
        stop_process(server)
    return {"acknowledged": len(acknowledged), "kept": kept, "lost": len(acknowledged) - kept}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000, help="per publisher")
    ap.add_argument("--size", type=int, default=100 * 1024, help="bytes a request")
    ap.add_argument("--publishers", type=int, default=2)
    args = ap.parse_args()
    reason = nats_unavailable()
    if reason:
        print(json.dumps({"skipped": reason}))
        return
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = start_nats(port, Path(tmp) / "jetstream")
        try:
            url = f"nats://127.0.0.1:{port}"
            SpanLog(url, "bench", 2 * 1024**3).open().close()  # the stream, made once
            for n in (1, args.publishers):
                result[f"jetstream, {n} publishers"] = _run(
                    _nats_publisher, lambda i: (url, args.requests, args.size), n
                )
        finally:
            stop_process(server)
        for n in (1, args.publishers):
            result[f"file + fdatasync, {n} publishers"] = _run(
                _file_publisher,
                lambda i, n=n: (str(Path(tmp) / f"segment-{n}-{i}"), args.requests, args.size),
                n,
            )
        result["jetstream kill -9 of the server"] = _kill_check(
            Path(tmp) / "killed", args.requests, args.size
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
