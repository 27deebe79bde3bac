"""Benchmark: Pirate's response-latency estimator — speed, state size and accuracy.

Prints one JSON object:
- ``in_memory``: packets per second through :func:`estimate_response_latency` (both
  algorithms) on a simulated capture already in memory (best of three, one core); target 2 M.
- ``end_to_end``: the same capture written to a temporary pcap file, then read
  (:func:`read_packets`) and estimated: packets per second from the file (best of three);
  target 500 k. ``write_seconds`` is the one-off cost of writing the file (frames cut to
  ``SNAPLEN`` bytes).
- ``state_bytes_per_connection`` per algorithm (the paper reports 154 bytes).
- ``accuracy``: median / p5 / p95 relative error per (connection, epoch) against the
  simulator's truth, clean and with 1 % loss + 25 % reordering: against the mean latency of the
  requests completing in the epoch (:func:`score_estimates`) and against the gaps of the causal
  pairs (``causal_pairs``, :func:`score_causal_pairs`), for three seeds each; Algorithms 2 and 1
  as published and Algorithm 2 with :meth:`PirateParams.pipelining`.
- ``real_captures`` (when ../shared/data is present): the HTTP/1.1 and Redis captures, the
  estimator given the client-to-server packets and scored against the truth parsed from both
  directions, clean and with 1 % loss + 25 % reordering injected (a reordered packet is seen up to
  two median inter-packet gaps late, so it swaps with its neighbours at any time scale). Epochs
  of 10 ms: the captures last from under a second to a few seconds.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tacit.formats.pcap import read_packets
from tacit.formats.pcap_write import write_packets
from tacit.response_latency import (
    PirateParams,
    StreamingEstimator,
    estimate_response_latency,
    request_truth,
    score_capture_truth,
    score_causal_pairs,
    score_estimates,
)
from tacit.simulate.request_streams import (
    RequestStreamParams,
    perturb_packets,
    simulate_requests,
)

MS = 1_000_000
SPEED = RequestStreamParams(clients=64, duration_ns=20_000 * MS, seed=1)
ACCURACY = [RequestStreamParams(clients=32, duration_ns=30_000 * MS, seed=s) for s in (2, 5, 11)]
SNAPLEN = 128
"""Frames are cut to their headers in the file (payload lengths come from the IP header), as
a capture for latency would be taken."""


def best_of_three(run) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def speed() -> dict:
    t0 = time.perf_counter()
    sim = simulate_requests(SPEED)
    sim_seconds = time.perf_counter() - t0
    packets = sim.packets
    n = len(packets)
    out: dict = {"packets": n, "simulate_seconds": round(sim_seconds, 2), "in_memory": {}}
    for algorithm in ("modes", "threshold"):
        estimate_response_latency(packets.take(np.arange(1000)), algorithm=algorithm)  # compile
        seconds = best_of_three(lambda a=algorithm: estimate_response_latency(packets, algorithm=a))
        out["in_memory"][algorithm] = round(n / seconds)
    print("in memory", out["in_memory"], file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sim.pcap"
        t0 = time.perf_counter()
        write_packets(path, packets, snaplen=SNAPLEN)
        out["write_seconds"] = round(time.perf_counter() - t0, 2)
        read_packets(path)  # warm the page cache and the reader
        seconds = best_of_three(lambda: estimate_response_latency(read_packets(path).packets))
        out["end_to_end"] = {"modes": round(n / seconds), "file_bytes": path.stat().st_size}
    print("end to end", out["end_to_end"], file=sys.stderr)
    return out


VARIANTS = {
    "modes": (PirateParams(), "modes"),
    "threshold": (PirateParams(), "threshold"),
    "modes_pipelining": (PirateParams.pipelining(), "modes"),
}
"""Algorithm 2 and 1 as published, and Algorithm 2 with the two changes for pipelining."""


def accuracy() -> dict:
    out = {}
    for params in ACCURACY:
        sim = simulate_requests(params)
        t = sim.truth
        key = (t.client_hi, t.client_lo, t.client_port)
        noisy = perturb_packets(sim.packets, loss=0.01, reorder=0.25, seed=3)
        for label, packets in (("clean", sim.packets), ("loss1_reorder25", noisy)):
            for name, (pirate, algorithm) in VARIANTS.items():
                est = estimate_response_latency(packets, pirate, algorithm=algorithm)
                d = score_estimates(est, key, t.seen_ns, t.latency_ns).as_dict()
                d["causal_pairs"] = score_causal_pairs(est, key, t.seen_ns, t.trigger).as_dict()
                out[f"seed{params.seed}/{label}/{name}"] = d
                print(params.seed, label, name, json.dumps(d), file=sys.stderr)
    return out


SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pcap"
REAL = (
    "zeek-http-1000-requests-one-dropped-response.pcap.gz",
    "zeek-http-bro.org.pcap.gz",
    "zeek-redis-50-pings.pcap.gz",
    "zeek-redis-django-cloud.pcapng.gz",
)


def real_captures() -> dict:
    if not SHARED.is_dir():
        return {"skipped": f"real data absent: {SHARED} not found"}
    out = {}
    for name in REAL:
        read = read_packets(SHARED / name, payloads=True)
        truth = request_truth(read)
        gap = int(np.median(np.diff(np.sort(read.packets.time))))
        noisy = perturb_packets(read.packets, 0.01, 0.25, seed=0, reorder_delay_ns=max(1, 2 * gap))
        for label, packets in (("clean", read.packets), ("loss1_reorder25", noisy)):
            est = estimate_response_latency(packets, PirateParams(epoch_ns=10 * MS))
            latency, causal = score_capture_truth(est, truth)
            d = latency.as_dict()
            d["causal_pairs"] = causal.as_dict()
            out[f"{name}/{label}"] = d
            print(name, label, json.dumps(d), file=sys.stderr)
    return out


def main() -> None:
    result = {
        "benchmark": "response",
        "speed": speed(),
        "state_bytes_per_connection": {
            a: StreamingEstimator(algorithm=a).state_bytes_per_connection
            for a in ("modes", "threshold")
        },
        "accuracy": accuracy(),
        "real_captures": real_captures(),
    }
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
