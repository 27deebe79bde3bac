"""Benchmark: ``tacit serve`` given small requests that decode to millions of objects.

Each case is posted four times at once to ``/v1/traces`` of a ``tacit serve`` in its own
process; per case, the answers, the longest wait for one, and the service's peak resident
memory above what it held idle before the case (its high-water mark reset before each case
through ``/proc/PID/clear_refs``). Targets (the issue on bounded inputs): refused in under a
second, under 500 MB above idle, four at once. The baseline, in the same run: a valid request
of the SDK exporter's, 512 spans, four at once.

* empty resource spans: 8 KB of gzip inflating to 4 million empty ``ResourceSpans``;
* empty spans: 16 KB of gzip inflating to 8 million spans of no bytes (no ids);
* a million smallest spans: 30 MB of protobuf, each span its two ids and nothing else;
* zeros: gzip of more zero bytes than a body may hold;
* JSON of empty resource spans: 12 MB, four million ``{}``.

``python bench/bench_hostile_requests.py`` prints one JSON object.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_serve import Server, proc_status
from protobuf_wire import delimited
from tacit.experiment.otlp_load import encoded_requests
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.serve.ingest import MAX_BODY
from tacit.simulate import load_app, simulate

AT_ONCE = 4
TARGET_SECONDS = 1.0
TARGET_MIB = 500


def cases(valid: bytes) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Each case's body and headers."""
    pb = {"Content-Type": "application/x-protobuf"}
    gz = pb | {"Content-Encoding": "gzip"}
    smallest = delimited(1, b"\x01" * 16) + delimited(2, b"\x02" * 8)
    return {
        "valid 512 spans (baseline)": (valid, pb),
        "empty resource spans": (gzip.compress(b"\x0a\x00" * 4_000_000, 9), gz),
        "empty spans": (gzip.compress(delimited(1, delimited(2, b"\x12\x00" * 8_000_000)), 9), gz),
        "a million smallest spans": (
            delimited(1, delimited(2, delimited(2, smallest) * 1_000_000)),
            pb,
        ),
        "zeros": (gzip.compress(b"\0" * (MAX_BODY + 1024), 9), gz),
        "JSON of empty resource spans": (
            b'{"resourceSpans":[' + b",".join([b"{}"] * 4_000_000) + b"]}",
            {"Content-Type": "application/json"},
        ),
    }


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, float]:
    began = time.perf_counter()
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            status = answer.status
    except urllib.error.HTTPError as e:
        status = e.code
    return status, time.perf_counter() - began


def run_case(server: Server, body: bytes, headers: dict[str, str]) -> dict:
    pid = server.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the high-water mark starts again
    idle = proc_status(pid, "VmRSS") / 1024
    answers: list[tuple[int, float]] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(_post(server.url("/v1/traces"), body, headers))
        )
        for _ in range(AT_ONCE)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "bytes": len(body),
        "answers": sorted(status for status, _ in answers),
        "seconds_max": round(max(s for _, s in answers), 2),
        "peak_above_idle_mib": round(proc_status(pid, "VmHWM") / 1024 - idle, 1),
    }


def main() -> None:
    app = load_app(None)
    spans = infer_roles(simulate(app, 300, duration_s=3, seed=1)).spans
    graph = learn_callgraph(spans)
    valid = encoded_requests(spans)[0][1]
    with tempfile.TemporaryDirectory() as d:
        server = Server(Path(d), graph, defaults=True).start()
        try:
            results = {name: run_case(server, *case) for name, case in cases(valid).items()}
            alive = server.status()["received"] > 0
        finally:
            server.stop()
    print(
        json.dumps(
            {
                "at_once": AT_ONCE,
                "targets": {"seconds": TARGET_SECONDS, "peak_above_idle_mib": TARGET_MIB},
                "cases": results,
                "valid_requests_stored_after": alive,
                "cpus": len(os.sched_getaffinity(0)),
            }
        )
    )


if __name__ == "__main__":
    main()
