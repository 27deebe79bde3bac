"""Benchmark and reproduction: Pirate §5.1–5.2 on this machine, the paper's number beside
tacit's.

Runs :func:`tacit.experiment.asymmetric.run_asymmetric_experiment` (three namespaces with
asymmetric routing, a server whose CPU follows a per-second series through a cgroup) for
``--runs`` seeds of ``--seconds`` each, scores every response as §5.1 defines accuracy, and
prints one JSON object per run, then a table per estimator over the runs: Algorithm 2 as
published (``paper``: fixed ε = 100 µs, the largest mode is the IBG), with a fixed ε of 10 µs
and 1 ms beside it, Pirate's default in tacit (relative ε, minimum IBG share), tacit's
centre-tracking histogram, and the client-side req-to-req reference. With ``--markdown PATH``
it writes the table as the Pirate section of the reproduction report. Where the experiment
cannot run, it says why.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from tacit.experiment.asymmetric import (
    AsymmetricParams,
    default_estimators,
    experiment_unavailable,
    run_asymmetric_experiment,
)
from tacit.response_latency import PirateParams

PAPER_MEDIAN = "< 1 % (0.63 %)"


def estimators() -> dict[str, tuple[PirateParams, str]]:
    fixed = {
        f"paper, ε = {label}": (
            PirateParams(mode_epsilon_ns=eps, mode_epsilon_ratio=0, ibg_min_share=0),
            "modes",
        )
        for label, eps in (("10 µs", 10_000), ("1 ms", 1_000_000))
    }
    # §5.8: the two heuristics of §3.4 off, one at a time and both.
    heuristics = {
        "modes, no ACK coalescing": PirateParams(coalesce_acks=False),
        "modes, no MTU heuristic": PirateParams(batch_end_only=False),
        "modes, neither heuristic": PirateParams(coalesce_acks=False, batch_end_only=False),
    }
    return {**default_estimators(), **fixed, **{k: (p, "modes") for k, p in heuristics.items()}}


def markdown(rows: dict[str, list[dict]], runs: list[dict], args) -> str:
    rate = np.mean([r["requests_per_second"] for r in runs])
    lines = [
        "# Reproduction report",
        "",
        "Written by `make reproduce`. Each section: the paper's claim and setup, tacit's number "
        "on the same setup and metric, the command, and why they differ.",
        "",
        "Not reproduced yet: Pirate §5.3 (RTT baselines, one request in flight), §5.4 (1 % "
        "loss, 25 % reordering from client to vantage point: this kernel has no netem, a relay "
        "namespace is needed), §5.6 (load balancer: simulated only, `tacit experiment "
        "loadbalancer`), §5.7 (memcached with a memtier-style client, QUIC), §5.8 "
        "(heuristics on/off); WAP5 §6; YTrace; TraceWeaver §6.2.3, §6.2.4, §6.3.2, §6.4; "
        "RDA §IX.",
        "",
        "## Pirate §5.2: median relative error per response, web workload",
        "",
        f"Command: `python bench/bench_pirate_reproduction.py --runs {args.runs} "
        f"--seconds {args.seconds:g}` (`make reproduce`). Setup: §5.1 rebuilt on one machine "
        f"(see `tacit.experiment.asymmetric`): {args.runs} runs of {args.seconds:g} s, "
        f"8 connections with at most 4 outstanding requests, {rate:.0f} requests/s on "
        "average, a server at 250 µs of CPU per request under a cgroup quota that follows a "
        "generated per-second series (mean 0.6 of a core). Error = (truth − estimate) / truth "
        "per response (the paper's sign), the estimate being that of the response's "
        "connection and 100 ms epoch. Paper: " + PAPER_MEDIAN + ".",
        "",
        "| estimator | median error (paper's sign), per run | median abs. error | p5 / p95 |",
        "|---|---|---|---|",
    ]
    for name, results in rows.items():
        med = ", ".join(f"{r['median_error_paper_sign']:+.1%}" for r in results)
        mae = np.median([r["median_relative_error"] for r in results])
        p5 = np.median([-r["p95_signed_error"] for r in results])
        p95 = np.median([-r["p5_signed_error"] for r in results])
        lines.append(f"| {name} | {med} | {mae:.1%} | {p5:+.0%} / {p95:+.0%} |")
    lines += [
        "",
        "Why tacit differs from the paper: (1) Algorithm 2 read literally (fixed ε, the "
        "largest mode is the inter-batch gap) takes a lone outlier gap, such as one response "
        "delayed by a throttled CFS period, for the IBG and divides the epoch's whole time by "
        "one: estimates 6.5–15 times the truth whatever ε. tacit's default widens ε to 25 % "
        "of a mode and requires the IBG mode to hold 5 % of the epoch's gaps "
        "(`PirateParams`). (2) The per-response error compares each response with its "
        "epoch's mean estimate; with the "
        "CPU quota enforced per 100 ms CFS period, responses in one epoch range from a few ms "
        "to tens of ms, so the spread per response is wide even when the epoch mean is right. "
        "(3) Closed-loop clients with 4 outstanding requests send one request per response "
        "rather than batches, so the prominent-gap assumption of §3.2 is weak here; the "
        "paper's WebPolygraph workload is not available to compare. The client's own "
        "req-to-req delay is within 0.1 % of req-to-res, so client processing is not the cause.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    reason = experiment_unavailable()
    if reason:
        print(json.dumps({"benchmark": "pirate_reproduction", "skipped": reason}))
        return
    rows: dict[str, list[dict]] = {}
    runs = []
    for seed in range(args.runs):
        params = AsymmetricParams(seconds=args.seconds, seed=seed)
        with tempfile.TemporaryDirectory() as tmp:
            doc = run_asymmetric_experiment(params, tmp, estimators()).as_dict()
        runs.append(doc)
        print(json.dumps({"benchmark": "pirate_reproduction", "seed": seed, **doc}), flush=True)
        scored = {
            **doc["pirate"],
            "req-to-req (client)": doc["req_to_req"],
            **{f"oracle: true epoch {k}": v for k, v in doc["oracle"].items()},
        }
        for name, s in scored.items():
            rows.setdefault(name, []).append(s)
    table = markdown(rows, runs, args)
    print(table)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)


if __name__ == "__main__":
    main()
