"""Benchmark: TraceWeaver scaled out on Dask (§6.5, §6.6) against one process.

Simulates the embedded shop app at 300 requests/s for streams of growing length and reconstructs
the same blind spans three ways: in this process (``reconstruct_traceweaver``), on a local Dask
cluster of 2 worker processes with one thread each, one part per instance
(``reconstruct_dask``), and on the same cluster with every instance also cut into windows of at
least 1 s where no request is open. Before timing, every process runs the compiled kernels once
on a small stream (numba loads them from its cache); the cluster's start-up is reported apart.
Times are wall seconds, the best of two runs (the machine is shared).

Prints one JSON object on stdout and a table on stderr: per stream, the spans, the parts, the
seconds of each run, the ratio of the one-process time to the cluster's, whether the cluster's
result is identical to the one-process one (parents, scores, alternatives, reasons, confidence),
and the end-to-end accuracy of each against the simulator's ground truth.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import numpy as np
from distributed import LocalCluster

from tacit.evaluation.trace_accuracy import score_reconstruction
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.result import Reconstruction
from tacit.reconstruct.scaleout import partition, reconstruct_dask
from tacit.reconstruct.traceweaver import reconstruct_traceweaver
from tacit.simulate import load_app, simulate

RATE = 300
DURATIONS = (10.0, 30.0, 60.0)
WINDOW_NS = 10**9
WORKERS = 2
REPEATS = 2


def best(run: Callable[[], Reconstruction]) -> tuple[float, Reconstruction]:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        rec = run()
        times.append(time.perf_counter() - t0)
    return round(min(times), 3), rec


def identical(a: Reconstruction, b: Reconstruction) -> bool:
    return (
        np.array_equal(a.parent, b.parent)
        and np.array_equal(a.score, b.score, equal_nan=True)
        and all(
            getattr(a, f) == getattr(b, f)
            for f in ("unmapped", "alternatives", "top_candidates", "fallback", "confidence")
        )
    )


def main() -> None:
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=400, seed=7)).spans)
    small = infer_roles(simulate(app, RATE, duration_s=1.0, seed=1)).without_truth()
    reconstruct_traceweaver(small, graph)  # warm-up: compiled kernels
    t0 = time.perf_counter()
    with LocalCluster(
        n_workers=WORKERS, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        reconstruct_dask(small, graph, address)  # warm-up: the workers' kernels
        startup = round(time.perf_counter() - t0, 3)
        rows = []
        for duration in DURATIONS:
            obs = infer_roles(simulate(app, RATE, duration_s=duration, seed=11))
            blind = obs.without_truth()
            one_s, one = best(lambda blind=blind: reconstruct_traceweaver(blind, graph))
            dask_s, dask = best(lambda blind=blind: reconstruct_dask(blind, graph, address))
            win_s, win = best(
                lambda blind=blind: reconstruct_dask(blind, graph, address, window_ns=WINDOW_NS)
            )
            rows.append(
                {
                    "seconds_of_traffic": duration,
                    "spans": len(blind),
                    "parts": len(partition(blind, graph)),
                    "one_process_s": one_s,
                    "dask_s": dask_s,
                    "ratio": round(one_s / dask_s, 2),
                    "identical": identical(one, dask),
                    "windowed_parts": len(partition(blind, graph, window_ns=WINDOW_NS)),
                    "windowed_s": win_s,
                    "windowed_ratio": round(one_s / win_s, 2),
                    "accuracy": {
                        name: round(score_reconstruction(obs.spans, rec).accuracy, 4)
                        for name, rec in (("one_process", one), ("dask", dask), ("windowed", win))
                    },
                }
            )
    head = (
        f"{'spans':>8s} {'parts':>5s} {'1 proc s':>8s} {'dask s':>7s} {'ratio':>5s} "
        f"{'identical':>9s} {'win parts':>9s} {'win s':>6s} {'ratio':>5s} {'acc':>6s} "
        f"{'win acc':>7s}"
    )
    print(f"{WORKERS} worker processes, start-up {startup} s", file=sys.stderr)
    print(head, file=sys.stderr)
    for r in rows:
        print(
            f"{r['spans']:8d} {r['parts']:5d} {r['one_process_s']:8.2f} {r['dask_s']:7.2f} "
            f"{r['ratio']:5.2f} {r['identical']!s:>9s} {r['windowed_parts']:9d} "
            f"{r['windowed_s']:6.2f} {r['windowed_ratio']:5.2f} "
            f"{r['accuracy']['one_process']:6.3f} {r['accuracy']['windowed']:7.3f}",
            file=sys.stderr,
        )
    print(
        json.dumps(
            {
                "benchmark": "dask_scaleout",
                "rate": RATE,
                "workers": WORKERS,
                "window_s": WINDOW_NS / 1e9,
                "cluster_startup_s": startup,
                "runs": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
