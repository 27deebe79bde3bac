"""RDA, sRDA, LDA and FineComb on the same packet streams at equal memory (RDA §VII).

Each method gets the same per-side, per-interval byte budget, and its bucket count follows from
its per-bucket field sizes: RDA 20 bytes (ID xor 8, TS sum 8, Δ 4) in k banks; sRDA 24 bytes
(plus IDSH 4); LDA 12 bytes (TS sum 8, count 4); FineComb 16 bytes (plus digest 4) after its
stash (16 bytes per entry) is taken out of the budget. What is not counted, for any method: the
per-interval caches RDA and sRDA keep of (identifier → timestamp) — kept in ordinary memory, not
in the synopsis that is exchanged — and RDA's MinHash signatures (not used at a fixed size).

Scores are over the sender's intervals in which the receiver saw at least two packets: the mean
over intervals of ``|estimate − truth| / truth`` for the mean and the standard deviation of
latency, the packets the estimates rest on (against the packets seen at both sides), and the
intervals where a method had no usable bucket at all (left out of the errors, counted apart).
What is not scored is counted: sender intervals with fewer than two packets seen at both sides,
and packets (of either side) timestamped before the first interval.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tacit.budget import check_allocation
from tacit.errors import ConfigError
from tacit.oneway_latency.finecomb import FineCombParams, finecomb_interval
from tacit.oneway_latency.intervals import IntervalParams, IntervalSplit, IntervalWork, pipeline
from tacit.oneway_latency.lda import LDAParams, lda_interval
from tacit.oneway_latency.rda import RDAParams, rda_interval
from tacit.oneway_latency.srda import SRDAParams, srda_interval
from tacit.oneway_latency.stream import PacketStream
from tacit.oneway_latency.truth import latency_truth

METHODS = ("rda", "srda", "lda", "finecomb")


@dataclass
class MethodScore:
    """How one method did over all intervals."""

    method: str
    mean_relative_error: float
    std_relative_error: float
    useful_packets: int
    matched_packets: int
    memory_bytes: int
    intervals: int
    intervals_without_estimate: int
    intervals_unscored: int
    """Sender intervals with fewer than two packets seen at both sides."""
    packets_before_start: int
    details: dict[str, float] = field(default_factory=dict)
    """Method-specific totals over intervals (RDA: decoded intervals, lost, late, ...;
    FineComb: repair statistics)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as None)."""
        out = dataclasses.asdict(self)
        for key in ("mean_relative_error", "std_relative_error"):
            if not math.isfinite(out[key]):
                out[key] = None
        return out


SYNOPSES_HELD = 5
"""Synopses' worth of memory a comparison holds at once, checked before it runs: its peak
resident memory grows by up to this many times the synopsis size."""


def compare_methods(
    sender: PacketStream,
    receiver: PacketStream,
    memory_bytes: int | None,
    *,
    intervals: IntervalParams | None = None,
    rda: RDAParams | None = None,
    srda: SRDAParams | None = None,
    lda: LDAParams | None = None,
    finecomb: FineCombParams | None = None,
    methods: Sequence[str] = METHODS,
    lookahead: int = 1,
) -> dict[str, MethodScore]:
    """Score each method against the truth of ``sender``/``receiver`` at ``memory_bytes`` per
    synopsis; see the module docstring. ``memory_bytes`` None keeps every method's own sizing
    (RDA's late binding, the others' bucket counts)."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ConfigError(f"unknown methods {sorted(unknown)}; known: {', '.join(METHODS)}")
    if memory_bytes is not None:
        what = f"{SYNOPSES_HELD} synopses of {memory_bytes:,} bytes"
        check_allocation((SYNOPSES_HELD, memory_bytes), np.uint8, what)
    intervals = intervals or IntervalParams()
    runners: dict[str, Callable[[IntervalWork], Any]] = {}
    for name, params, run in (
        ("rda", rda or RDAParams(), rda_interval),
        ("srda", srda or SRDAParams(), srda_interval),
        ("lda", lda or LDAParams(), lda_interval),
        ("finecomb", finecomb or FineCombParams(), finecomb_interval),
    ):
        if name in methods:
            sized = params if memory_bytes is None else params.with_memory(memory_bytes)
            runners[name] = functools.partial(_run_sized, run, sized)

    truth = latency_truth(sender, receiver, intervals)
    sent = IntervalSplit(sender, intervals, "sender")
    received = IntervalSplit(receiver, intervals, "receiver")
    tallies = {name: _Tally(name) for name in runners}
    unscored = 0
    for work in pipeline(sent, received, lookahead):
        row = truth.row(work.index)
        if row is None or truth.matched[row] < 2:
            unscored += 1
            continue
        for name, runner in runners.items():
            tallies[name].add(
                runner(work), truth.mean_ns[row], truth.std_ns[row], truth.matched[row]
            )
    early = sent.before_start + received.before_start
    return {name: tally.score(unscored, early) for name, tally in tallies.items()}


@dataclass
class _Tally:
    method: str
    mean_errors: list[float] = field(default_factory=list)
    std_errors: list[float] = field(default_factory=list)
    useful: int = 0
    matched: int = 0
    memory: int = 0
    intervals: int = 0
    missing: int = 0
    details: dict[str, float] = field(default_factory=dict)

    def add(self, result: Any, mean: float, std: float, matched: int) -> None:
        self.intervals += 1
        self.matched += int(matched)
        self.memory = max(self.memory, result.memory_bytes)
        for key, value in _numeric_fields(result):
            self.details[key] = self.details.get(key, 0.0) + value
        est = result.estimate
        if est is None:
            self.missing += 1
            return
        self.useful += est.useful_packets
        self.mean_errors.append(abs(est.mean_ns - mean) / mean)
        if math.isfinite(est.std_ns):
            self.std_errors.append(abs(est.std_ns - std) / std)

    def score(self, unscored: int, before_start: int) -> MethodScore:
        return MethodScore(
            method=self.method,
            mean_relative_error=_average(self.mean_errors),
            std_relative_error=_average(self.std_errors),
            useful_packets=self.useful,
            matched_packets=self.matched,
            memory_bytes=self.memory,
            intervals=self.intervals,
            intervals_without_estimate=self.missing,
            intervals_unscored=unscored,
            packets_before_start=before_start,
            details=self.details,
        )


def _run_sized(run: Callable[[IntervalWork, Any], Any], params: Any, work: IntervalWork) -> Any:
    """One method on one interval, with its (sized) parameters."""
    return run(work, params)


def _numeric_fields(result: Any, prefix: str = "") -> list[tuple[str, float]]:
    """The numeric fields of a per-interval result (nested dataclasses flattened), but not its
    estimate or memory, which are scored on their own."""
    out: list[tuple[str, float]] = []
    for f in dataclasses.fields(result):
        if f.name in ("estimate", "memory_bytes"):
            continue
        value = getattr(result, f.name)
        if dataclasses.is_dataclass(value):
            out += _numeric_fields(value, f"{prefix}{f.name}_")
        elif isinstance(value, bool | int | float):
            out.append((prefix + f.name, float(value)))
    return out


def _average(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")
