"""Benchmark: Pirate's latency-aware load balancer (arXiv 2505.14358, §4) in simulation.

Prints one JSON object: for the default scenario (:class:`LoadBalancerParams`: 2 clients with
8 persistent connections each, 4 servers, server 0's CPU cut to a quarter from 10 s to 30 s of
a 40 s run, 1 s control intervals) and seeds 0–4, the clients' p50 and p99 response latency
with equal Maglev weights and with the watermark controller fed by Pirate's estimates, the
relative p99 reduction (the paper reports 37 %), and the same with the controller fed the true
latencies (an oracle: how much of the gain the estimator leaves on the table). Also the median
relative error of Pirate's per-server, per-interval estimates and the seconds one experiment
(both runs) takes on one core, after compilation.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import statistics
import sys
import time

from tacit.experiment.loadbalancer import LoadBalancerParams, run_loadbalancer_experiment

SEEDS = range(5)


def experiment(source: str) -> dict:
    rows, seconds = [], []
    for seed in SEEDS:
        params = dataclasses.replace(LoadBalancerParams(), seed=seed, latency_source=source)
        t0 = time.perf_counter()
        result = run_loadbalancer_experiment(params)
        seconds.append(time.perf_counter() - t0)
        d = result.as_dict()
        row = {
            "seed": seed,
            "p50_ms_unweighted": d["unweighted"]["p50_ms"],
            "p99_ms_unweighted": d["unweighted"]["p99_ms"],
            "p50_ms_controlled": d["controlled"]["p50_ms"],
            "p99_ms_controlled": d["controlled"]["p99_ms"],
            "p99_reduction": d["p99_reduction"],
            "requests_controlled": d["controlled"]["requests"],
            "estimate_median_relative_error": d["estimate_vs_truth"]["median_relative_error"],
        }
        rows.append(row)
        print(source, json.dumps(row), file=sys.stderr)
    return {
        "runs": rows,
        "mean_p99_reduction": statistics.mean(r["p99_reduction"] for r in rows),
        "median_seconds_per_experiment": statistics.median(seconds),
    }


def main() -> None:
    run_loadbalancer_experiment(LoadBalancerParams(duration_ns=2 * 10**9))  # compile
    result = {
        "benchmark": "loadbalancer",
        "scenario": {
            "clients": 2,
            "servers": 4,
            "connections_per_client": 8,
            "duration_s": 40,
            "slow_server_cpu_share": 0.25,
        },
        "pirate": experiment("pirate"),
        "oracle": experiment("truth"),
    }
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
