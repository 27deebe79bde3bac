"""Benchmark: ``tacit serve`` started without a call graph, learning it from production.

The simulated shop app (``tacit.simulate``, its default app) sends its spans to a ``tacit serve``
in this process in real time, at the demo's rate, every call's context lost (each call a trace
of its own, as from a thread pool that does not carry it), from an empty store and without a
call graph. Halfway, a deployment adds a call (``frontend GET /product`` also asks
``reviews List`` a second time). Reported, in seconds of traffic:

- until every endpoint seen is in the learned call graph (``/api/tacit/status``), and until
  the calls after that are reconstructed (the share of the last part's calls mapped, and right
  against the simulator's truth);
- from the deployment until the new call is in the call graph.

Targets (issue: learn the call graph from production): both within 5 minutes of traffic.

``python bench/bench_serve_learning.py [--seconds S] [--rate R]`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tacit.experiment.otlp_load import lost_context, send_spans
from tacit.model.spans import CLIENT, concat
from tacit.serve import ServeConfig, Service
from tacit.simulate import load_app, parse_app, simulate

TARGET_S = 300.0
NEW_CALL = ("frontend", "GET /product", "reviews", "List")


def deployed_app():
    """The shop with one more call: GET /product asks reviews for a second page at its end."""
    from importlib import resources

    import yaml

    doc = yaml.safe_load(resources.files("tacit.simulate").joinpath("default_app.yaml").read_text())
    changed = copy.deepcopy(doc)
    calls = changed["services"]["frontend"]["endpoints"]["GET /product"]["calls"]
    calls.append({"service": "reviews", "endpoint": "List"})
    return parse_app(changed, "shop, deployed")


def traffic(seconds: float, rate: float):
    before = simulate(load_app(None), rate, duration_s=seconds / 2, seed=1, record_threads=False)
    after = simulate(deployed_app(), rate, duration_s=seconds / 2, seed=2, record_threads=False)
    shift = int(before.end.max()) - int(after.start.min()) + 1
    after.start += shift
    after.end += shift
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    before, after = traffic(args.seconds, args.rate)
    truth = concat([before, after])
    with tempfile.TemporaryDirectory() as tmp:
        config = ServeConfig(http="127.0.0.1:0", grpc="", database=Path(tmp) / "t.duckdb")
        svc = Service(config).start()
        url = f"http://127.0.0.1:{svc.http_port}/v1/traces"
        t0 = time.monotonic()
        deployed_at = t0 + (int(after.start.min()) - int(before.start.min())) / 1e9
        sender = threading.Thread(
            target=send_spans, args=(lost_context(truth), url), kwargs={"paced": True}
        )
        sender.start()
        all_learned = new_call = None
        while sender.is_alive():
            time.sleep(1.0)
            now = time.monotonic() - t0
            status = svc.extra("/api/tacit/status", {})["callgraph"]
            seen = status["endpoints"]
            if all_learned is None and seen and all(e["learned"] for e in seen.values()):
                all_learned = now
            graph = svc.callgraph.get(*NEW_CALL[:2])
            if new_call is None and graph is not None and time.monotonic() >= deployed_at:
                reviews = [sl for sl in graph.slots if sl.callee == NEW_CALL[2:]]
                if len(reviews) == 2:
                    new_call = time.monotonic() - deployed_at
        sender.join()
        svc.wait_idle(120)
        stored = dict(
            svc.store._cursor()
            .execute("SELECT span_id, parent_span_id FROM spans WHERE kind = 'client'")
            .fetchall()
        )
        svc.stop()
    ids = truth.strings.values
    last = np.flatnonzero((truth.kind == CLIENT) & (truth.start >= np.quantile(truth.start, 0.9)))
    right = sum(
        stored.get(ids[truth.span_id[c]]) == ids[truth.span_id[truth.parent[c]]] for c in last
    )
    mapped = sum(stored.get(ids[truth.span_id[c]]) is not None for c in last)
    print(
        json.dumps(
            {
                "rate": args.rate,
                "seconds": args.seconds,
                "target_s": TARGET_S,
                "every_endpoint_learned_after_s": all_learned,
                "new_call_learned_after_deployment_s": new_call,
                "last_tenth_calls": len(last),
                "last_tenth_mapped": round(mapped / len(last), 4),
                "last_tenth_right": round(right / len(last), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
