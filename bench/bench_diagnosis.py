"""Benchmark: diagnosis of 1 M spans (YTrace detection + critical paths + contributions).

Prints one JSON object: the input (real HotelReservation traces from ../shared/data repeated
with fresh trace ids and shifted in time until there are 1 M spans; the simulator's traces when
the data is absent), the seconds of each step on one core (all kernels are single-threaded
numpy/numba, compiled before timing), and whether the target (< 60 s) is met.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from tacit.diagnosis.critical_path import critical_paths
from tacit.diagnosis.detect import confounder_keys, detect, history_window
from tacit.model.spans import SpanTable

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TARGET_SPANS = 1_000_000
TARGET_SECONDS = 60.0


def base_spans() -> tuple[SpanTable, str]:
    if DATA.is_dir():
        from tacit.formats import read_spans

        files = sorted((DATA / "traceweaver/hotel_reservation").glob("load*.jaeger.json.gz"))
        return read_spans(files), f"HotelReservation ({len(files)} files)"
    from tacit.simulate.microservices import load_app, simulate

    return simulate(load_app(None), 200, n_requests=5000, seed=0), "simulated shop"


def repeat(spans: SpanTable, total: int) -> SpanTable:
    """``spans`` repeated until ``total`` rows, each copy with its own trace ids, later in time."""
    copies = -(-total // len(spans))
    n = len(spans)
    period = int(spans.end.max() - spans.start.min()) + 1
    cols = {}
    for name, col in spans.columns().items():
        cols[name] = np.concatenate([col] * copies)[:total]
    copy = (np.arange(n * copies) // n)[:total]
    cols["start"] = cols["start"] + copy * period
    cols["end"] = cols["end"] + copy * period
    for ref in ("parent", "link"):
        cols[ref] = np.where(cols[ref] >= 0, cols[ref] + copy * n, -1)
    traces = np.unique(spans.trace)
    fresh = np.array(
        [spans.strings.code(f"{c}:{t}") for c in range(copies) for t in traces.tolist()]
    ).reshape(copies, len(traces))
    cols["trace"] = fresh[copy, np.searchsorted(traces, cols["trace"])]
    table = SpanTable(spans.strings, **cols, sources=spans.sources)
    # A trace cut by the limit loses spans; keep only whole ones (their parents are present).
    return table.take(np.isin(table.trace, np.unique(table.trace[table.parent == -1])))


def diagnose(spans: SpanTable) -> dict[str, float]:
    t0 = time.perf_counter()
    cp = critical_paths(spans)
    t1 = time.perf_counter()
    key, labels = confounder_keys(spans, cp.root, ["endpoint", "hour"])
    history = history_window(cp.start, 0.5)
    d = detect(cp.latency, key, history, ~history, keys=labels)
    t2 = time.perf_counter()
    return {
        "critical_paths_s": t1 - t0,
        "detect_s": t2 - t1,
        "total_s": t2 - t0,
        "traces": len(cp),
        "flagged": len(d.flagged()),
        "contribution_sums_exact": bool((cp.contribution.sum(axis=1) == cp.latency).all()),
    }


def main() -> None:
    base, source = base_spans()
    diagnose(base.take(np.arange(min(len(base), 2000))))  # compile the kernels
    spans = repeat(base, TARGET_SPANS)
    result = diagnose(spans)
    print(
        json.dumps(
            {
                "benchmark": "diagnosis",
                "source": source,
                "spans": len(spans),
                **result,
                "spans_per_second": len(spans) / result["total_s"],
                "target_s": TARGET_SECONDS,
                "meets_target": result["total_s"] < TARGET_SECONDS,
            }
        )
    )


if __name__ == "__main__":
    main()
