"""Benchmark: A/B detection power at a scale that decides the target (issue 6; TraceWeaver §6.4.2).

The target: from reconstructed traces, a 5% improvement routed to 2% of traffic is detected with
p < 0.05 — here, in at least 80% of the seeds (power ≥ 0.8), where the untraced comparison of
periods needs about 20% of traffic.

The workload is a bootstrap of the real HotelReservation traces (load100: 1000 requests, 11
spans each): ``REQUESTS`` whole traces drawn with replacement, each with a fresh trace id and a
Poisson arrival at the source's request rate (:func:`tacit.diagnosis.inject.resample_traces`),
so the reconstruction sees the source's concurrency. B is a version of the reservation service
whose requests are 5% faster end to end in expectation (``basis="e2e-mean"``: its self time
scaled by one calibrated factor; module docstring of :mod:`tacit.diagnosis.abtest`). For each
seed B is routed to 20% of the requests and the 2% share is a nested random subset of B's
requests, marked in the instance names (:func:`tacit.diagnosis.abtest.mark_nested`); the traces
are blinded and reconstructed with traceweaver once (:func:`tacit.diagnosis.abtest.ab_power`).
Four comparisons: end-to-end latency of B's requests against A's from the reconstructed and from
the ground-truth traces, the service's own span latency, and all requests of a period with B
against one without (no traces). The two other
readings of "5%" (``"e2e"``: 5% of each request, clipped to B's self time; ``"self"``: 5% of B's
self time) are run on ground-truth traces only, for comparison. Prints one JSON object with
power, mean effect and per-seed p-values; skips (with a reason) when ../shared/data is absent.

Usage: ``python bench/bench_abtest.py [REQUESTS [SEEDS]]`` (default 200000 requests, 5 seeds).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tacit.diagnosis.abtest import ab_power, self_time_factor
from tacit.diagnosis.inject import resample_traces
from tacit.formats import observe

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SOURCE = "traceweaver/hotel_reservation/load100.jaeger.json.gz"
REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
SEEDS = range(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
SERVICE = "reservation"
EFFECT = -0.05
SHARES = (0.02, 0.2)
ALPHA = 0.05


def main() -> None:
    if not (DATA / SOURCE).is_file():
        print(json.dumps({"skipped": f"{DATA / SOURCE} not found"}))
        return
    t0 = time.perf_counter()
    source = observe([DATA / SOURCE])[0].spans
    spans = resample_traces(source, REQUESTS, seed=0)
    rows, seconds = [], {}
    for basis, blind in (("e2e-mean", True), ("e2e", False), ("self", False)):
        t = time.perf_counter()
        power = ab_power(spans, SERVICE, SHARES, EFFECT, SEEDS, basis, ALPHA, blind)
        rows += [{"basis": basis} | r for r in power]
        seconds[basis] = round(time.perf_counter() - t, 1)
    decisive = rows[0]["traces (reconstructed)"]
    print(
        json.dumps(
            {
                "workload": f"bootstrap of {SOURCE}: {REQUESTS} traces with replacement, "
                "fresh trace ids, Poisson arrivals at the source rate",
                "spans": len(spans),
                "service": SERVICE,
                "effect": EFFECT,
                "self_time_factor (e2e-mean)": round(self_time_factor(spans, SERVICE, EFFECT), 4),
                "alpha": ALPHA,
                "power": rows,
                "target (p < 0.05 at 2% from reconstructed traces, power >= 0.8)": (
                    decisive["power"] >= 0.8
                ),
                "seconds": seconds | {"total": round(time.perf_counter() - t0, 1)},
            }
        )
    )


if __name__ == "__main__":
    main()
