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
- ``sweep``: the RDA paper's §VII experiment (:mod:`tacit.oneway_latency.sweep`, its defaults:
  set differences 0–10,000 per interval, 100,000 bytes per synopsis, three seeds, five 10 ms
  intervals at 10 Mpps): per method, relative errors of the mean and standard deviation,
  useful fraction, decoded intervals and decode/repair seconds per interval; on the simulated
  Poisson stream and on a real capture replayed (tiled with fresh identifiers to 5 × 10^5
  packets at 10 Mpps; skipped with the reason when ../shared/data is absent).
- ``targets``: the issue's speed targets against what was measured: insertion ≥ 5 M packets/s
  on one core (the slowest synopsis, and RDA's cache build), RDA decoding of ≈ 10,000
  differences ≤ 20 ms.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from tacit.formats.pcap import read_packets
from tacit.oneway_latency.finecomb import FineCombParams, finecomb_interval
from tacit.oneway_latency.intervals import IntervalCache, IntervalParams, IntervalSplit, pipeline
from tacit.oneway_latency.lda import Aggregator, LDAParams
from tacit.oneway_latency.rda import RDAParams, rda_interval, reconcile
from tacit.oneway_latency.replay import ReplayParams, replay_capture
from tacit.oneway_latency.simulate import StreamParams, poisson_sender, replay_stream
from tacit.oneway_latency.srda import SRDAParams
from tacit.oneway_latency.sweep import SweepParams, SweepResult, run_sweep
from tacit.oneway_latency.synopsis import Synopsis

BUDGET = 64 * 1024
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pcap"
REPLAYED = "zeek-http-1000-requests-one-dropped-response.pcap.gz"
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


def sweep_table(result: SweepResult) -> dict:
    """The sweep as {target: {method: errors, useful fraction, decoded, decode seconds}}."""
    out = {}
    for p in result.points:
        row: dict = {"measured_difference": p.set_difference}
        for m in p.methods.values():
            row[m.method] = {
                k: v
                for k, v in m.as_dict().items()
                if k not in ("method", "useful_packets") and v is not None
            }
        out[str(p.target)] = row
        print(result.source, p.target, json.dumps(row), file=sys.stderr)
    return out


def sweeps() -> dict:
    """The §VII sweep on the simulated stream and, when ../shared is present, on a replayed
    real capture (tiled to 5 × 10^5 packets at 10 Mpps)."""
    params = SweepParams()
    out = {"simulated": sweep_table(run_sweep(params))}
    capture = DATA / REPLAYED
    if not capture.exists():
        out["replayed"] = {"skipped": f"{capture} not found (../shared/data absent)"}
        return out
    replay = replay_capture(
        read_packets(capture).packets,
        ReplayParams(packets=params.intervals_per_run * 100_000, rate_pps=params.rate_pps),
    )
    out["replayed"] = {
        "replay": replay.as_dict(),
        "sweep": sweep_table(run_sweep(params, replay.stream, replay.source)),
    }
    return out


def main() -> None:
    result = {
        "benchmark": "oneway",
        "memory_bytes_per_synopsis": BUDGET,
        "insertion_packets_per_second": insertion(),
        "decode_10k_differences": decode(),
        "sweep": sweeps(),
    }
    slowest = min(min(v.values()) for v in result["insertion_packets_per_second"].values())
    seconds = result["decode_10k_differences"]["rda"]["seconds"]
    result["targets"] = {
        "insertion_packets_per_second_min": slowest,
        "insertion_met": slowest >= 5e6,
        "rda_decode_10k_seconds": seconds,
        "decode_met": seconds <= 0.020,
    }
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
