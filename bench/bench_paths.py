"""Benchmark: WAP5 causal path analysis — accuracy on real traces, speed and memory at scale.

Prints one JSON object:
- ``real``: per file of ../shared/data/traceweaver and nezha, messages derived from the traces
  (each host's clock shifted by up to 5 s), linked and scored: parent accuracy, pattern
  precision/recall (counts within 10%), true patterns found at all, clock offset error, time.
  Skipped (with the reason) when ../shared/data is absent.
- ``simulated``: the wide-area CDN and DHT settings (WAP5 §6) at default parameters.
- ``scale``: messages per second (analysis alone, one core) and peak memory growth for the
  CDN simulator's messages at 0.5 M and 5 M messages, next to the paper's 4.7 M messages in
  730 CPU-seconds and 1.35 GB.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import tracemalloc
from pathlib import Path

from tacit.causal_paths.analysis import analyze_paths, evaluate_paths, score_paths
from tacit.simulate.widearea import WideAreaParams, simulate_widearea

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
OFFSET_MAX_NS = 5_000_000_000


def real() -> dict:
    from tacit.formats import observe

    if not DATA.is_dir():
        return {"skipped": f"{DATA} not found"}
    files = []
    for app in ("hotel_reservation", "nodejs_microservices"):
        for load in (25, 50, 75, 100, 125, 150):
            files.append(
                (f"{app} load{load}", [DATA / f"traceweaver/{app}/load{load}.jaeger.json.gz"])
            )
    for app, day, minute in (
        ("online_boutique", "2022-08-22", "03_53"),
        ("train_ticket", "2023-01-29", "08_43"),
    ):
        d = DATA / "nezha" / app / day
        found = sorted(d.glob(f"*{minute}*")) if d.is_dir() else []
        if found:
            files.append((f"nezha {app} {minute}", found[:1]))
    out = {}
    for name, paths in files:
        observed, _ = observe(paths)
        ev = evaluate_paths(observed.spans, OFFSET_MAX_NS)
        row = ev.as_dict()
        row.pop("accounting")
        out[name] = row
        print(
            name,
            json.dumps({k: row[k] for k in ("parent_accuracy", "patterns_found")}),
            file=sys.stderr,
        )
    return out


def simulated() -> dict:
    out = {}
    for scenario in ("cdn", "dht"):
        run = simulate_widearea(WideAreaParams(scenario=scenario))
        ev = score_paths(run.messages, run.truth, analyze_paths(run.messages)).as_dict()
        ev.pop("accounting")
        out[scenario] = ev
    return out


def scale() -> dict:
    """The CDN at its default load (200 requests/s over 8 proxies) for as long as it takes to
    send 0.5 M and 5 M messages: the analysis with the hops of the top 10 patterns, on one
    core, after a warm-up that compiles the kernels."""
    warm = simulate_widearea(WideAreaParams(scenario="cdn", duration_s=5))
    analyze_paths(warm.messages).patterns.ranked("count", 10)
    per_second = len(warm.messages) / 5
    out = {}
    for target in (500_000, 5_000_000):
        run = simulate_widearea(WideAreaParams(scenario="cdn", duration_s=target / per_second))
        n = len(run.messages)
        tracemalloc.start()
        t0 = time.process_time()
        analysis = analyze_paths(run.messages)
        analysis.patterns.ranked("count", 10)
        cpu = time.process_time() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        ev = score_paths(run.messages, run.truth, analysis)
        out[f"{n} messages"] = {
            "cpu_seconds": cpu,
            "messages_per_second": n / cpu,
            "peak_traced_memory_mb": peak / 2**20,
            "input_table_mb": sum(c.nbytes for c in run.messages.columns().values()) / 2**20,
            "patterns": len(analysis.patterns),
            "parent_accuracy": ev.parent_accuracy,
        }
        print(target, json.dumps(out[f"{n} messages"]), file=sys.stderr)
        del run, analysis
    return out


def main() -> None:
    result = {"benchmark": "paths", "real": real(), "simulated": simulated(), "scale": scale()}
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
