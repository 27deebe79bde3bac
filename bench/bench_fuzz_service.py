"""Fuzz ``tacit serve`` at length: the known hostile requests, then many drawn ones (OTLP/HTTP
and OTLP/gRPC bodies, damaged or gzip-wrapped, and query parameters; ``tests/fuzz/
service_cases.py``), against a ``tacit serve`` in its own process.

Prints JSON: cases by transport, the failures (answers a bad request may not get, or late, or
the service not ready after), the service's peak resident memory and its threads at the end.
A failing case belongs in ``service_cases.known`` once understood. Exits 1 when any failed.

    python bench/bench_fuzz_service.py [--examples 300]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))

from service_cases import Case, cases, known, ready, run_case, valid_bodies

from bench_serve import proc_status
from serve_app import shop_callgraph
from tacit.experiment.memcached import free_port

TACIT = Path(sys.executable).parent / "tacit"
SHOWN = 10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--examples", type=int, default=300, help="Drawn cases.")
    args = ap.parse_args()
    protobuf, json_body = valid_bodies()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        http_port, grpc_port = free_port(), free_port()
        shop_callgraph().save(tmp / "callgraph.yaml")
        (tmp / "serve.yaml").write_text(
            f"http: 127.0.0.1:{http_port}\ngrpc: 127.0.0.1:{grpc_port}\n"
            f"database: {tmp / 'tacit.duckdb'}\ncallgraph: {tmp / 'callgraph.yaml'}\n"
        )
        proc = subprocess.Popen(
            [str(TACIT), "serve", "--config", str(tmp / "serve.yaml")],
            stderr=subprocess.DEVNULL,
        )
        try:
            while ready(http_port) is not None:
                time.sleep(0.2)
            outcomes: Counter[str] = Counter()
            failures: list[dict] = []
            began = time.perf_counter()

            def one(case: Case) -> None:
                wrong = run_case(case, http_port, grpc_port) or ready(http_port)
                outcomes[f"{case.transport} {'failed' if wrong else 'ok'}"] += 1
                if wrong and len(failures) < SHOWN:
                    failures.append({"wrong": wrong, **case.show()})

            for case in known():
                one(case)

            @settings(max_examples=args.examples, deadline=None, database=None)
            @given(data=st.data())
            def drawn(data: st.DataObject) -> None:
                one(data.draw(cases(protobuf, json_body)))

            drawn()
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=30):
                pass
            report = {
                "known": len(known()),
                "drawn": args.examples,
                "outcomes": dict(outcomes),
                "failures": failures,
                "seconds": round(time.perf_counter() - began, 1),
                "service_peak_mib": round(proc_status(proc.pid, "VmHWM") / 1024, 1),
                "service_threads_after": proc_status(proc.pid, "Threads"),
            }
        finally:
            proc.terminate()
            report["exit_code"] = proc.wait(120)
    print(json.dumps(report, indent=1))
    failed = sum(n for k, n in outcomes.items() if k.endswith("failed"))
    return 1 if failed or report["exit_code"] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
