"""Benchmark: one-way latency synopses (RDA, sRDA, LDA, FineComb) — speed and accuracy.

Prints one JSON object:
- ``insertion``: packets per second inserted into each synopsis (64 KiB per side) on one core,
  for 1 M and 10 M packets (best of three), and the rate at which RDA's per-interval caches
  (sorted identifiers and timestamps, 10^5 packets per interval) are built, which RDA needs on
  top of the insertion.
- ``decode``: one 10 ms interval at 10 Mpps with ≈ 10,000 differences (losses and packets
  reordered across both boundaries). RDA sized by late binding: seconds for subtraction,
  Algorithm 1, cache checks and deletions and the statistics (median of five). FineComb at the
  same memory: seconds and subsets tried by the brute-force stash repair, and the ideal repair;
  and the brute force at 64 KiB for stash sizes 256–2,048 (its cost grows with candidates per
  bucket: ``2^c − 1`` subsets for ``c`` candidates).
- ``error_vs_difference``: per-interval set differences of 0, 10, 100, 1,000 and 10,000 (half
  losses, half from packets reordered across a boundary, each counting in two intervals),
  five 10 ms intervals at 10 Mpps, every method at 64 KiB per side: relative errors of the mean
  and standard deviation, useful packets; plus FineComb with ideal repair and RDA with late
  binding (memory it chose). Senders leave the last 0.3 ms of each interval idle, so that
  (almost) no packet crosses a boundary other than the ones reordered on purpose; those are
  sent 0.3–0.8 ms before the boundary and so have latencies of 0.3–0.8 ms (the rest: µs).
"""

from __future__ import annotations

import dataclasses
import json
import resource
import statistics
import sys
import time

import numpy as np

from tacit.oneway_latency.comparison import compare_methods
from tacit.oneway_latency.finecomb import FineCombParams, finecomb_interval
from tacit.oneway_latency.intervals import IntervalCache, IntervalParams, IntervalSplit, pipeline
from tacit.oneway_latency.lda import Aggregator, LDAParams
from tacit.oneway_latency.rda import RDAParams, rda_interval, reconcile
from tacit.oneway_latency.simulate import StreamParams, poisson_sender, replay_stream
from tacit.oneway_latency.srda import SRDAParams
from tacit.oneway_latency.synopsis import Synopsis

BUDGET = 64 * 1024
INTERVALS = IntervalParams()
MS = 1_000_000


def empty_synopses() -> dict:
    rda = RDAParams().with_memory(BUDGET)
    return {
        "rda": lambda: Synopsis.empty(rda.layout(rda.buckets_per_bank)),
        "srda": lambda: Synopsis.empty(SRDAParams().with_memory(BUDGET).layout()),
        "lda": lambda: Aggregator(LDAParams().with_memory(BUDGET).layout()),
        "finecomb": lambda: Aggregator(FineCombParams().with_memory(BUDGET).layout()),
    }


def best_of_three(run, *args) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run(*args)
        times.append(time.perf_counter() - t0)
    return min(times)


def build_caches(ids: np.ndarray, ts: np.ndarray, per_interval: int = 100_000) -> None:
    """RDA's per-interval caches over a stream, ``per_interval`` packets each."""
    for lo in range(0, len(ids), per_interval):
        IntervalCache.build(ids[lo : lo + per_interval], ts[lo : lo + per_interval])


def insertion() -> dict:
    rng = np.random.default_rng(0)
    out: dict = {}
    for n in (1_000_000, 10_000_000):
        ids = rng.integers(0, 2**64, n, dtype=np.uint64)
        ts = np.sort(rng.integers(0, 10**9, n))
        row = {}
        for name, make in empty_synopses().items():
            make().insert(ids[:100], ts[:100])  # compile
            row[name] = n / best_of_three(lambda i, t, make=make: make().insert(i, t), ids, ts)
        row["rda_cache_build"] = n / best_of_three(build_caches, ids, ts)
        out[f"{n} packets"] = {k: round(v) for k, v in row.items()}
        print(n, json.dumps(out[f"{n} packets"]), file=sys.stderr)
    return out


def decode() -> dict:
    params = StreamParams(
        rate_pps=10e6,
        duration_ns=30 * MS,
        loss_rate=0.06,
        reorder_rate=1.0,
        reorder_window_ns=200_000,
        seed=1,
    )
    sim = replay_stream(poisson_sender(params), params)
    work = list(
        pipeline(
            IntervalSplit(sim.sender, INTERVALS, "sender"),
            IntervalSplit(sim.receiver, INTERVALS, "receiver"),
        )
    )[1]
    difference = len(np.setxor1d(work.sender.ids, work.receiver.ids))
    rda = rda_interval(work, RDAParams())  # late binding; also compiles
    per_bank = rda.memory_bytes // (3 * 20)
    layout = RDAParams().layout(per_bank)
    seconds = []
    for _ in range(5):
        sender = Synopsis.build(layout, work.sender.ids, work.sender.ts)
        receiver = Synopsis.build(layout, work.receiver.ids, work.receiver.ts)
        t0 = time.perf_counter()
        result = reconcile(sender, receiver, work, RDAParams().max_peel_rounds)
        seconds.append(time.perf_counter() - t0)
    fc = FineCombParams(stash_capacity=8_192, stash_window_ns=300_000)
    finecomb = {}
    for repair in ("bruteforce", "ideal"):
        sized = dataclasses.replace(fc, repair=repair).with_memory(rda.memory_bytes)
        finecomb[repair] = dataclasses.asdict(finecomb_interval(work, sized).repair)
    sweep = {}
    for capacity in (256, 512, 1_024, 2_048):
        sized = dataclasses.replace(fc, stash_capacity=capacity).with_memory(BUDGET)
        sweep[f"stash {capacity}"] = dataclasses.asdict(finecomb_interval(work, sized).repair)
    return {
        "packets": len(work.sender),
        "set_difference": difference,
        "memory_bytes": rda.memory_bytes,
        "rda": {
            "seconds": statistics.median(seconds),
            "decoded": result.decoded,
            "buckets_per_bank": per_bank,
            "lost": result.lost,
            "late": result.late,
            "foreign": result.foreign,
        },
        "finecomb": finecomb,
        "finecomb_bruteforce_at_64KiB_by_stash_size": sweep,
    }


def stream_with_difference(target: int, intervals: int = 5):
    """Senders idle in the last 0.3 ms of each interval; ``target / 2`` losses and
    ``target / 4`` packets reordered per interval (each counts in two intervals)."""
    idle = 300_000
    rate, per_interval = 10e6, 10e6 * (INTERVALS.length_ns - idle) / 1e9
    window = idle + 500_000  # reordered packets are drawn from the 0.5 ms before the idle time
    base = StreamParams(rate_pps=rate, duration_ns=intervals * INTERVALS.length_ns, seed=2)
    sender = poisson_sender(base)
    phase = (sender.time - INTERVALS.start_ns) % INTERVALS.length_ns
    sender = sender.take(phase < INTERVALS.length_ns - idle)
    candidates = rate * (window - idle) / 1e9
    params = dataclasses.replace(
        base,
        loss_rate=target / 2 / per_interval,
        reorder_rate=min(1.0, target / 4 / candidates),
        reorder_window_ns=window,
    )
    return replay_stream(sender, params)


def error_vs_difference() -> dict:
    out = {}
    for target in (0, 10, 100, 1_000, 10_000):
        sim = stream_with_difference(target)
        works = list(
            pipeline(
                IntervalSplit(sim.sender, INTERVALS, "sender"),
                IntervalSplit(sim.receiver, INTERVALS, "receiver"),
            )
        )
        measured = np.mean([len(np.setxor1d(w.sender.ids, w.receiver.ids)) for w in works])
        scores = compare_methods(sim.sender, sim.receiver, BUDGET)
        ideal = compare_methods(
            sim.sender,
            sim.receiver,
            BUDGET,
            finecomb=FineCombParams(repair="ideal"),
            methods=("finecomb",),
        )["finecomb"]
        row: dict = {"measured_difference": float(measured)}
        for name, score in [*scores.items(), ("finecomb_ideal", ideal)]:
            d = score.as_dict()
            row[name] = {
                k: d[k] for k in ("mean_relative_error", "std_relative_error", "useful_packets")
            }
            row[name]["useful_fraction"] = score.useful_packets / score.matched_packets
        row["rda"]["decoded_intervals"] = scores["rda"].details["decoded"]
        late = [rda_interval(w, RDAParams()) for w in works]
        row["rda_late_binding"] = {
            "decoded_intervals": sum(r.decoded for r in late),
            "mean_memory_bytes": float(np.mean([r.memory_bytes for r in late])),
        }
        out[str(target)] = row
        print(target, json.dumps(row), file=sys.stderr)
    return out


def main() -> None:
    result = {
        "benchmark": "oneway",
        "memory_bytes_per_synopsis": BUDGET,
        "insertion_packets_per_second": insertion(),
        "decode_10k_differences": decode(),
        "error_vs_difference": error_vs_difference(),
    }
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
