"""Benchmark: the subset-query targets of issue 6 (TraceWeaver §6.4) on the real HotelReservation
traces.

Prints one JSON object: (1) for each load file and seed, the culprits the slowest 2% of requests
name after 40 ms is added to reservation and profile in a random 10% of requests each, from the
ground-truth traces and from blinded-then-reconstructed ones, and what the per-span top-2% view
blames; (2) A/B power: over seeds, the share of runs with p < 0.05 when a random 2% or 20% of
reservation's calls go to a version B with 5% (and 50%) less self time, for the three
comparisons (traces from reconstruction; the service's own spans; no traces). Skips (with a
reason in the JSON) when ../shared/data is absent.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tacit.diagnosis.abtest import ab_periods, ab_spans, ab_traces, route_to_b
from tacit.diagnosis.inject import delay_spans, pick_requests
from tacit.diagnosis.tail import blind_and_reconstruct, span_tail_profile, tail_profile
from tacit.reconstruct.pipeline import observe

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOADS = (25, 50, 75, 100, 125, 150)
SEEDS = range(int(sys.argv[1]) if len(sys.argv) > 1 else 5)


def hotel(load: int):
    return observe([DATA / f"traceweaver/hotel_reservation/load{load}.jaeger.json.gz"])[0].spans


def tail_rows() -> list[dict]:
    rows = []
    for load in LOADS:
        base = hotel(load)
        for seed in SEEDS:
            s = delay_spans(base, pick_requests(base, "reservation", 0.1, 2 * seed), 40_000_000)
            s = delay_spans(s, pick_requests(s, "profile", 0.1, 2 * seed + 1), 40_000_000)
            traces, rec = blind_and_reconstruct(s)
            truth = sorted(tail_profile(s).culprits)
            blind = sorted(tail_profile(traces, rec=rec).culprits)
            rows.append(
                {
                    "load": load,
                    "seed": seed,
                    "truth": truth,
                    "blind": blind,
                    "exact": blind == truth == ["profile", "reservation"],
                    "per_span": len(span_tail_profile(s).culprits),
                }
            )
    return rows


def power() -> list[dict]:
    bases = [hotel(load) for load in LOADS]
    rows = []
    for effect in (-0.05, -0.5):
        for share in (0.02, 0.2):
            hits = {"traces": 0, "spans": 0, "no traces": 0}
            for seed in SEEDS:
                for base in bases:
                    routed, _ = route_to_b(base, "reservation", share, effect, seed)
                    traces, _ = blind_and_reconstruct(routed)
                    hits["traces"] += ab_traces(traces, "reservation").p < 0.05
                    hits["spans"] += ab_spans(routed, "reservation").p < 0.05
                    hits["no traces"] += (
                        ab_periods(base, "reservation", share, effect, seed).p < 0.05
                    )
            runs = len(SEEDS) * len(bases)
            rows.append(
                {"effect": effect, "share": share, "runs": runs}
                | {k: v / runs for k, v in hits.items()}
            )
    return rows


def main() -> None:
    if not DATA.is_dir():
        print(json.dumps({"skipped": f"{DATA} not found"}))
        return
    t0 = time.perf_counter()
    tail = tail_rows()
    ab = power()
    print(
        json.dumps(
            {
                "tail": tail,
                "tail_exact": sum(r["exact"] for r in tail) / len(tail),
                "tail_blind_equals_truth": sum(r["blind"] == r["truth"] for r in tail) / len(tail),
                "abtest_power": ab,
                "seconds": time.perf_counter() - t0,
            }
        )
    )


if __name__ == "__main__":
    main()
