"""Benchmark: diagnosis of 1 M spans (YTrace detection + critical paths + contributions).

Prints one JSON object: the input (real HotelReservation traces from ../shared/data repeated
with fresh trace ids and shifted in time until there are 1 M spans; the simulator's traces when
the data is absent), the seconds of each step on one core (all kernels are single-threaded
numpy/numba, compiled before timing), and whether the target (< 60 s) is met.

Then (``--links`` for this part alone) it measures localization on reconstructed traces: for each
HotelReservation load (and all six overlaid on one time origin, six times the concurrency), the
traces are blinded and reconstructed with TraceWeaver, and each trace's top critical-path
contributor is compared with the ground truth's, without and with the weighing of uncertain
links (:func:`tacit.diagnosis.critical_path.weigh_uncertain_links`); also the mean total
variation distance between the two per-service share vectors.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from tacit.diagnosis.critical_path import W_WEIGHED, critical_paths
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
    from tacit.simulate import load_app, simulate

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


def agreement(truth, rebuilt) -> dict[str, float]:
    """Top-contributor agreement and mean total variation distance of the contribution shares,
    over the traces both have (matched by root row: blinding keeps rows)."""
    common, ia, ib = np.intersect1d(truth.root, rebuilt.root, return_indices=True)
    names = sorted(set(truth.services) | set(rebuilt.services))

    def shares(cp, idx):
        m = np.zeros((len(idx), len(names)))
        m[:, [names.index(s) for s in cp.services]] = cp.contribution[idx]
        return m / np.maximum(cp.latency[idx], 1)[:, None]

    a, b = shares(truth, ia), shares(rebuilt, ib)
    return {
        "traces_matched": len(common),
        "top_agreement": float((a.argmax(1) == b.argmax(1)).mean()),
        "mean_tv_distance": float(0.5 * np.abs(a - b).sum(1).mean()),
    }


def links() -> None:
    from tacit.diagnosis.tail import blind_and_reconstruct
    from tacit.formats import observe, read_spans
    from tacit.model.spans import concat

    files = sorted((DATA / "traceweaver/hotel_reservation").glob("load*.jaeger.json.gz"))
    tables = {f.name.split(".")[0]: read_spans([f]) for f in files}
    for t in tables.values():
        t0 = t.start.min()
        t.start -= t0
        t.end -= t0
    tables["overlay(all loads)"] = concat(list(tables.values()))
    rows = []
    for name, spans in tables.items():
        truth = observe(spans)[0].spans
        rebuilt, rec = blind_and_reconstruct(truth)
        gt = critical_paths(truth)
        plain = agreement(gt, critical_paths(rebuilt))
        weighed = critical_paths(rebuilt, rec=rec)
        rows.append(
            {
                "input": name,
                "traces": len(gt),
                "plain": plain,
                "weighed": agreement(gt, weighed),
                "weighed_slots": weighed.warnings.get(W_WEIGHED, 0),
                "sums_exact": bool((weighed.contribution.sum(1) == weighed.latency).all()),
            }
        )
    print(json.dumps({"benchmark": "diagnosis-links", "results": rows}), flush=True)


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
        ),
        flush=True,
    )


if __name__ == "__main__":
    if "--links" not in sys.argv[1:]:
        main()
    links()
