"""Benchmark: A/B detection power at a realistic scale (issue 6; TraceWeaver §6.4.2).

The workload is a bootstrap of the real HotelReservation traces (load100: 1000 requests):
``REQUESTS`` whole traces drawn with replacement, each with a fresh trace id and a Poisson
arrival at the source's request rate (:func:`tacit.diagnosis.inject.resample_traces`), so the
reconstruction sees the source's concurrency. For each share of the reservation service's
requests routed to a version B 5% faster, and each seed (a fresh routing), B's effect is
tested four ways (:func:`tacit.diagnosis.abtest.ab_power`): end-to-end latency of B's requests
against A's from blinded-then-reconstructed traces and from ground-truth traces, the service's
own span latency, and all requests of a period with B against one without (no traces). Power is
the share of seeds with p < 0.05. "5%" is read both ways (``basis``; module docstring of
:mod:`tacit.diagnosis.abtest`): of the end-to-end latency of the requests B serves (with
reconstruction), and of the service's self time (ground truth only: it moves end-to-end latency
by about 0.5%). Prints one JSON object; skips (with a reason) when ../shared/data is absent.

Usage: ``python bench/bench_abtest.py [REQUESTS [SEEDS]]`` (default 50000 requests, 8 seeds).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tacit.diagnosis.abtest import ab_power
from tacit.diagnosis.inject import resample_traces
from tacit.reconstruct.pipeline import observe

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SOURCE = "traceweaver/hotel_reservation/load100.jaeger.json.gz"
REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
SEEDS = range(int(sys.argv[2]) if len(sys.argv) > 2 else 8)
SERVICE = "reservation"
EFFECT = -0.05
SHARES = (0.02, 0.2)


def main() -> None:
    if not (DATA / SOURCE).is_file():
        print(json.dumps({"skipped": f"{DATA / SOURCE} not found"}))
        return
    t0 = time.perf_counter()
    source = observe([DATA / SOURCE])[0].spans
    spans = resample_traces(source, REQUESTS, seed=0)
    rows = []
    for basis, blind in (("e2e", True), ("self", False)):
        for share in SHARES:
            power = ab_power(spans, SERVICE, share, EFFECT, SEEDS, basis, blind=blind)
            rows.append({"basis": basis, "share": share} | power)
    e2e_2pct = rows[0]["traces (reconstructed)"]
    print(
        json.dumps(
            {
                "workload": f"bootstrap of {SOURCE}: {REQUESTS} traces with replacement, "
                "fresh trace ids, Poisson arrivals at the source rate",
                "spans": len(spans),
                "service": SERVICE,
                "effect": EFFECT,
                "power": rows,
                "target (p < 0.05 at 2% from reconstructed traces, power >= 0.8)": (
                    e2e_2pct["power"] >= 0.8
                ),
                "seconds": time.perf_counter() - t0,
            }
        )
    )


if __name__ == "__main__":
    main()
