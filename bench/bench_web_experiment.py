"""Benchmark: Pirate's live experiment on this machine (issue 4), web server and memcached.

Runs :func:`tacit.experiment.web.run_web_experiment` for ``--seconds`` (default 30) against the
HTTP/1.1 server and against memcached, and prints one JSON object per server with the issue's
fields (connections, samples, median / p5 / p95 relative error of Pirate's estimate against
the mean latency the clients logged, and under ``causal_pairs`` against the gaps of the causal
pairs, packets, packets per second of the estimator) and the capture's drop counts; under
``threshold`` the same two scores for Algorithm 1 on the same capture, under ``centres`` for
tacit's centre-tracking histogram and under ``pipelining`` for it with
:meth:`PirateParams.pipelining`. The target is a median relative error below 1 % (Pirate §5.2;
bench_pirate_reproduction.py runs the paper's own setup).
Where packet capture or memcached is unavailable, the object says why instead.
"""

from __future__ import annotations

import argparse
import json

from tacit.experiment.capture import capture_unavailable
from tacit.experiment.memcached import memcached_unavailable
from tacit.experiment.web import HOST, SERVERS, run_web_experiment, score_web_log
from tacit.response_latency import PirateParams, estimate_response_latency

TARGET_MEDIAN_RELATIVE_ERROR = 0.01


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    for server in SERVERS:
        out = {"benchmark": "web_experiment", "server": server, "seconds": args.seconds}
        reason = capture_unavailable() or (
            memcached_unavailable() if server == "memcached" else None
        )
        if reason:
            out["skipped"] = reason
        else:
            result = run_web_experiment(args.seconds, clients=args.clients, server=server)
            out |= result.as_dict()
            server_at = f"{HOST}:{result.server_port}"
            variants = {
                "threshold": (result.estimates.params, "threshold"),
                "centres": (PirateParams(), "centres"),
                "pipelining": (PirateParams.pipelining(), "centres"),
            }
            for name, (params, algorithm) in variants.items():
                est = estimate_response_latency(
                    result.packet_table, params, server=server_at, algorithm=algorithm
                )
                mean, causal = score_web_log(est, result.log)
                out[name] = {"mean": mean.as_dict(), "causal_pairs": causal.as_dict()}
            out["target_median_relative_error"] = TARGET_MEDIAN_RELATIVE_ERROR
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
