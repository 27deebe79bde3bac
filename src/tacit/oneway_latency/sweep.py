"""Error against set difference: the RDA paper's §VII comparison (its Figs. 6–8).

"Every Timestamp Counts: Accurate Tracking of Network Latencies using Reconcilable Difference
Aggregator" (RDA, §VII-B) compares RDA, LDA and FineComb as the set difference between the
sender's and the receiver's packets of an interval grows from 0 to 10,000: the relative error
``|f_g − f_e| / f_g`` (§VII-A, "Metrics") of the mean and of the standard deviation of latency
(Figs. 7–8), and the time RDA's decoding takes against FineComb's brute-force stash repair
(Fig. 6). This module runs that experiment on a sender stream — a replayed capture
(:mod:`~tacit.oneway_latency.replay`) or the Poisson stream of
:mod:`~tacit.oneway_latency.simulate` — and draws the figures; :func:`run_once` is the single
run behind ``tacit latency oneway simulate`` (one path, given loss and reordering).

How a set difference is made. §VII-A gives the loss and reordering models (random loss,
reordering at interval boundaries) and §VII-B sets "the loss rate and the reordering rate to be
identical with each other", but the text gives no procedure for reaching a given difference;
this one is tacit's. For a target difference D per interval, with the interval's packets P and
the packets P_w sent in the reordering window (``reorder_span_ns`` before the guard):

* the sender's packets of the last ``guard_ns`` of every interval are left out (counted in
  ``guard_removed``), so that a packet crosses a boundary only when reordered on purpose —
  without the guard, Weibull delays alone carry ≈ rate × mean delay packets across each
  boundary (≈ 140 at 10 Mpps), and no difference below that could be made;
* every packet is lost with probability D / 2P (D / 2 losses per interval);
* every packet in the window is reordered past the boundary with probability D / 4P_w: a late
  packet counts once in the interval it was sent in (sender only) and once in the next
  (receiver only), so D / 4 of them per boundary add D / 2 to every interval.

Loss and reordering thus contribute equal shares of the difference; their rates, as
probabilities per packet, are not equal (tacit departs from §VII-B there). The difference
actually obtained is measured per interval (:func:`set_differences`) and reported beside the
target. Every method gets ``memory_bytes`` per synopsis
(:func:`~tacit.oneway_latency.comparison.compare_methods`; §VII-A: "we set the same storage
size for these synopses"). FineComb is also run with its ideal repair, the variant §VII-B-1
uses for Figs. 7–8 ("an 'ideal' repairing procedure for FineComb, given that we know the
actual set of lost and reordered packets"), and RDA with late binding (its memory then follows
the difference). sRDA (§IV) is run beside them; §VII does not include it.

Defaults. Set differences 0, 10, 100, 1,000, 2,000, 5,000 and 10,000 (the paper's range);
100,000 bytes per synopsis: §VII-B-2's 5,000 RDA buckets ("the number of buckets of RDA to
5,000", which is also ``RDA.RDAEntries`` in the authors' yongquanf/RDA ``config/RDA.cfg``) at
tacit's 20 bytes per bucket; five 10 ms intervals at 10 Mpps (10^5 packets per interval, enough
for 10,000 differences); a guard of 0.3 ms (a Weibull delay of shape 0.65 and scale 10 µs
exceeds it with probability 10^-4) and a reordering window of 0.5 ms before it (5,000
candidates per boundary at 10 Mpps, twice the 2,500 that D = 10,000 needs).

Where these defaults depart from §VII:

* RDA runs with ``RDAParams()``, tacit's k = 3; §VII-B-2 sets "the number k of hash functions
  to two" (``RDAParams.published()``).
* At the paper's bucket width (§VIII-B, 192 bits) 5,000 buckets are 120,000 bytes, not 100,000,
  and the other methods' budget follows.
* Three seeds; §VII-A: "All experiments are repeated in ten times. We report both the mean value
  and the 95-th confidence interval". Here only the mean over seeds is reported.
* FineComb's stash is its own default (:mod:`~tacit.oneway_latency.finecomb`); §VII-A: "a stash
  of elements that is of the same size as the number of buckets".
* Decoding time is measured at the same memory as the errors; §VII-B-1 uses k = 2 and 4,000
  buckets.
* ``decoded_fraction`` is the share of intervals whose whole difference was decoded; the
  paper's "decoding success probability" (§VII-A) is "the ratio between the number of packets
  decoded by RDA and the size of the set difference".
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError
from tacit.oneway_latency.comparison import METHODS, MethodScore, compare_methods
from tacit.oneway_latency.finecomb import FineCombParams
from tacit.oneway_latency.intervals import IntervalParams
from tacit.oneway_latency.rda import RDAParams
from tacit.oneway_latency.simulate import (
    SimulatedStream,
    StreamParams,
    poisson_sender,
    replay_stream,
)
from tacit.oneway_latency.stream import PacketStream
from tacit.oneway_latency.synopsis import Synopsis
from tacit.oneway_latency.truth import packet_latencies
from tacit.outputs import atomic_output
from tacit.runs import contained, distinct

DIFFERENCES = (0, 10, 100, 1_000, 2_000, 5_000, 10_000)
PAPER_MEMORY_BYTES = 100_000
"""5,000 RDA buckets (§VII-B-2; yongquanf/RDA ``config/RDA.cfg``) of tacit's 20 bytes (see the
module docstring)."""


@dataclass(frozen=True)
class SweepParams:
    """The sweep's parameters; see the module docstring for the defaults.

    ``rate_pps`` and ``intervals_per_run`` shape the simulated Poisson sender; a given sender
    stream is used as it is. ``path`` gives the Weibull delays (its loss and reordering are
    set per target); ``seeds`` vary the path (and the simulated sender).
    """

    differences: tuple[int, ...] = DIFFERENCES
    memory_bytes: int = PAPER_MEMORY_BYTES
    seeds: tuple[int, ...] = (0, 1, 2)
    rate_pps: float = 10e6
    intervals_per_run: int = 5
    guard_ns: int = 300_000
    reorder_span_ns: int = 500_000
    intervals: IntervalParams = field(default_factory=IntervalParams)
    path: StreamParams = field(default_factory=StreamParams)
    methods: tuple[str, ...] = METHODS
    rda: RDAParams = field(default_factory=RDAParams)
    """RDA's parameters (its memory follows ``memory_bytes``, or the difference when late)."""

    def __post_init__(self) -> None:
        if not self.differences or min(self.differences) < 0:
            raise ConfigError(f"set differences must be non-negative, got {self.differences}")
        per_interval = self.rate_pps * self.intervals.length_ns / 1e9
        if max(self.differences) > per_interval:
            raise ConfigError(
                f"a set difference of {max(self.differences)} packets is more than the "
                f"{per_interval:.0f} sent per interval"
            )
        if not self.seeds:
            raise ConfigError("a sweep needs at least one seed")
        if self.guard_ns < 0 or self.reorder_span_ns <= 0:
            raise ConfigError("the guard must be ≥ 0 and the reordering window positive")
        if self.guard_ns + self.reorder_span_ns >= self.intervals.length_ns:
            raise ConfigError("guard and reordering window must fit in one interval")
        if self.intervals_per_run < 1:
            raise ConfigError(f"need at least one interval per run, got {self.intervals_per_run}")


@dataclass(frozen=True)
class DifferenceStream:
    """A stream made to have a target set difference per interval."""

    simulated: SimulatedStream
    target: int
    guard_removed: int
    """Sender packets in the guard before a boundary, left out."""
    loss_rate: float
    reorder_rate: float


def set_differences(
    sender: PacketStream, receiver: PacketStream, intervals: IntervalParams
) -> tuple[np.ndarray, np.ndarray]:
    """``(index, difference)``: per sender interval, the size of the symmetric difference of
    the identifiers the two sides counted in it (sender by send time, receiver by receive
    time)."""
    sent_in = intervals.index(sender.time)
    received, latency = packet_latencies(sender, receiver)
    received_in = intervals.index(sender.time + latency)
    one_side = ~received | (received_in != sent_in)
    foreign = ~contained(receiver.ident, sender.ident)
    cells = [
        sent_in[one_side],
        received_in[received & one_side],
        intervals.index(receiver.time[foreign]),
    ]
    index = distinct(sent_in[sent_in >= 0])
    if not len(index):
        return index, np.zeros(0, np.int64)
    # Counted per position in ``index``, not per interval number: a capture whose clock jumps
    # by years must not allocate a count for every interval in between.
    every = np.concatenate(cells)
    pos = np.minimum(np.searchsorted(index, every), len(index) - 1)
    hit = index[pos] == every
    return index, np.bincount(pos[hit], minlength=len(index))


def difference_stream(
    sender: PacketStream, target: int, params: SweepParams, seed: int
) -> DifferenceStream:
    """The sender's stream through a path giving about ``target`` differences per interval;
    see the module docstring."""
    iv = params.intervals
    phase = (sender.time - iv.start_ns) % iv.length_ns
    kept = phase < iv.length_ns - params.guard_ns
    sender = sender.take(kept)
    phase = phase[kept]
    n_intervals = max(1, len(distinct(iv.index(sender.time))))
    per_interval = len(sender) / n_intervals
    window_start = iv.length_ns - params.guard_ns - params.reorder_span_ns
    candidates = np.count_nonzero(phase >= window_start) / n_intervals
    loss = min(1.0, target / 2 / per_interval) if per_interval else 0.0
    reorder = min(1.0, target / 4 / candidates) if candidates else 0.0
    path = dataclasses.replace(
        params.path,
        loss_rate=loss,
        reorder_rate=reorder,
        reorder_window_ns=params.guard_ns + params.reorder_span_ns,
        intervals=iv,
        seed=seed,
    )
    return DifferenceStream(
        replay_stream(sender, path), target, int(np.count_nonzero(~kept)), loss, reorder
    )


@dataclass
class MethodPoint:
    """One method at one set difference, averaged over seeds."""

    method: str
    mean_relative_error: float
    std_relative_error: float
    useful_packets: float
    useful_fraction: float
    memory_bytes: int
    decode_seconds: float
    """Per interval: RDA/sRDA decoding (subtraction to statistics), FineComb's stash repair."""
    decoded_fraction: float | None = None
    """RDA and sRDA: share of intervals whose whole difference was decoded."""

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_number(v) for k, v in dataclasses.asdict(self).items()}


@dataclass
class SweepPoint:
    """Every method at one target set difference."""

    target: int
    set_difference: float
    """Measured: mean over intervals and seeds."""
    packets_per_interval: float
    guard_removed: int
    methods: dict[str, MethodPoint]

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "set_difference": self.set_difference,
            "packets_per_interval": self.packets_per_interval,
            "guard_removed": self.guard_removed,
            "results": [m.as_dict() for m in self.methods.values()],
        }


@dataclass
class SweepResult:
    """The sweep: one point per target set difference."""

    source: str
    memory_bytes: int
    seeds: int
    points: list[SweepPoint]

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "memory_bytes": self.memory_bytes,
            "seeds": self.seeds,
            "points": [p.as_dict() for p in self.points],
        }

    def series(self, method: str, attribute: str) -> np.ndarray:
        """``attribute`` of ``method`` at every point (NaN where the method was not run)."""
        return np.array(
            [
                getattr(p.methods[method], attribute) if method in p.methods else math.nan
                for p in self.points
            ],
            dtype=float,
        )


VARIANTS = ("finecomb_ideal", "rda_late_binding")
"""Run beside the equal-memory methods: FineComb with the oracle's repair, RDA sized by late
binding (not at equal memory)."""


def run_sweep(
    params: SweepParams | None = None,
    sender: PacketStream | None = None,
    source: str = "simulated Poisson stream",
    progress: Callable[[int], None] | None = None,
) -> SweepResult:
    """The error-versus-set-difference experiment; ``sender`` None simulates one per seed.
    ``progress`` is called with 1 after every (difference, seed) run."""
    params = params or SweepParams()
    points = []
    for target in params.differences:
        runs: list[dict[str, MethodScore]] = []
        differences, packets, removed = [], [], 0
        for seed in params.seeds:
            stream = difference_stream(sender or _poisson(params, seed), target, params, seed)
            sim = stream.simulated
            removed += stream.guard_removed
            _, diff = set_differences(sim.sender, sim.receiver, params.intervals)
            differences.append(float(diff.mean()) if len(diff) else 0.0)
            packets.append(float(sim.truth.sent.mean()) if len(sim.truth.sent) else 0.0)
            runs.append(_score_all(sim, params))
            if progress is not None:
                progress(1)
        names = [m for m in (*params.methods, *VARIANTS) if m in runs[0]]
        points.append(
            SweepPoint(
                target=target,
                set_difference=float(np.mean(differences)),
                packets_per_interval=float(np.mean(packets)),
                guard_removed=removed,
                methods={m: _average_point(m, [r[m] for r in runs]) for m in names},
            )
        )
    return SweepResult(source, params.memory_bytes, len(params.seeds), points)


def _poisson(params: SweepParams, seed: int) -> PacketStream:
    duration = params.intervals_per_run * params.intervals.length_ns
    return poisson_sender(
        dataclasses.replace(
            params.path,
            rate_pps=params.rate_pps,
            duration_ns=duration,
            intervals=params.intervals,
            seed=seed,
        )
    )


def _score_all(sim: SimulatedStream, params: SweepParams) -> dict[str, MethodScore]:
    scores = compare_methods(
        sim.sender,
        sim.receiver,
        params.memory_bytes,
        methods=params.methods,
        intervals=params.intervals,
        rda=params.rda,
    )
    if "finecomb" in params.methods:
        scores["finecomb_ideal"] = compare_methods(
            sim.sender,
            sim.receiver,
            params.memory_bytes,
            finecomb=FineCombParams(repair="ideal"),
            methods=("finecomb",),
            intervals=params.intervals,
        )["finecomb"]
    if "rda" in params.methods:
        scores["rda_late_binding"] = compare_methods(
            sim.sender,
            sim.receiver,
            None,
            methods=("rda",),
            intervals=params.intervals,
            rda=params.rda,
        )["rda"]
    return scores


def _average_point(method: str, scores: list[MethodScore]) -> MethodPoint:
    intervals = sum(s.intervals for s in scores)
    matched = sum(s.matched_packets for s in scores)
    useful = sum(s.useful_packets for s in scores)
    seconds_key = "repair_seconds" if method.startswith("finecomb") else "decode_seconds"
    seconds = sum(s.details.get(seconds_key, 0.0) for s in scores)
    decoded = None
    if method.startswith(("rda", "srda")):
        decoded = sum(s.details.get("decoded", 0.0) for s in scores) / intervals
    return MethodPoint(
        method=method,
        mean_relative_error=_nanmean([s.mean_relative_error for s in scores]),
        std_relative_error=_nanmean([s.std_relative_error for s in scores]),
        useful_packets=useful / len(scores),
        useful_fraction=useful / matched if matched else math.nan,
        memory_bytes=max(s.memory_bytes for s in scores),
        decode_seconds=seconds / intervals if intervals else math.nan,
        decoded_fraction=decoded,
    )


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _json_number(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass
class SingleRun:
    """All four methods at equal memory on one stream through one simulated path."""

    simulated: SimulatedStream
    scores: dict[str, MethodScore]
    set_difference: np.ndarray
    """Per sender interval (:func:`set_differences`)."""
    insert_packets_per_second: float
    memory_bytes: int

    def as_dict(self) -> dict[str, Any]:
        """The fields of the ``simulate`` command's JSON (and a few more)."""
        sim, rda = self.simulated, self.scores["rda"]
        intervals = max(rda.intervals, 1)
        diff = self.set_difference
        return {
            "packets": len(sim.sender),
            "set_difference": float(diff.mean()) if len(diff) else 0.0,
            "results": [_result(s) for s in self.scores.values()],
            "insert_packets_per_second": self.insert_packets_per_second,
            "decode_seconds": rda.details.get("decode_seconds", 0.0) / intervals,
            "finecomb_repair_seconds": self.scores["finecomb"].details.get("repair_seconds", 0.0)
            / intervals,
            "received": len(sim.receiver),
            "lost": sim.lost,
            "reordered": sim.reordered,
            "intervals": rda.intervals,
            "intervals_unscored": rda.intervals_unscored,
            "set_difference_total": int(diff.sum()),
            "memory_bytes": self.memory_bytes,
        }


def run_once(sender: PacketStream, path: StreamParams, memory_bytes: int) -> SingleRun:
    """``sender`` through the simulated ``path``, every method at ``memory_bytes``, and RDA's
    insertion rate on the sender's packets."""
    sim = replay_stream(sender, path)
    scores = compare_methods(sim.sender, sim.receiver, memory_bytes, intervals=path.intervals)
    _, diff = set_differences(sim.sender, sim.receiver, path.intervals)
    rate = rda_insertion_rate(sim.sender, memory_bytes)
    return SingleRun(sim, scores, diff, rate, memory_bytes)


def rda_insertion_rate(stream: PacketStream, memory_bytes: int) -> float:
    """Packets per second inserted into one RDA synopsis of ``memory_bytes`` (one core)."""
    params = RDAParams()
    layout = params.layout(params.per_bank_fitting(memory_bytes))
    Synopsis.build(layout, stream.ident[:1], stream.time[:1])  # load the compiled kernel
    t0 = time.perf_counter()
    Synopsis.build(layout, stream.ident, stream.time)
    seconds = time.perf_counter() - t0
    return len(stream) / seconds if seconds > 0 else math.inf


def _result(score: MethodScore) -> dict[str, Any]:
    d = score.as_dict()
    keys = (
        "method",
        "mean_relative_error",
        "std_relative_error",
        "useful_packets",
        "memory_bytes",
        "matched_packets",
        "intervals_without_estimate",
    )
    row = {k: d[k] for k in keys}
    if "decoded" in score.details:
        row["decoded_intervals"] = int(score.details["decoded"])
    return row


ERROR_FLOOR = 1e-16
"""Errors below this are drawn at it (a log axis has no zero): exact up to float rounding."""

LABELS = {
    "rda": ("RDA", "o", "-"),
    "srda": ("sRDA", "s", "--"),
    "lda": ("LDA", "^", "-"),
    "finecomb": ("FineComb", "D", "-"),
    "finecomb_ideal": ("FineComb (ideal repair)", "x", ":"),
    "rda_late_binding": ("RDA (late binding)", "v", ":"),
}
"""Label, marker and line style of every method in the figures."""


def plot_sweep(result: SweepResult, directory: str | Path, prefix: str = "rda-") -> list[Path]:
    """PNG figures of the sweep in ``directory``, as the RDA paper's Figs. 7–8: relative error
    of the mean and of the standard deviation against the set difference (log scales), and
    decoding time (RDA's decoding against FineComb's stash repair). Returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    x = np.array([p.set_difference for p in result.points])
    names = [m for m in LABELS if any(m in p.methods for p in result.points)]
    figures = (
        ("mean-error", "mean_relative_error", "relative error of the mean", names),
        ("std-error", "std_relative_error", "relative error of the std. deviation", names),
        (
            "decode-time",
            "decode_seconds",
            "decoding / repair time per interval (s)",
            [m for m in names if m != "lda"],
        ),
    )
    written = []
    for name, attribute, ylabel, shown in figures:
        fig, ax = plt.subplots(figsize=(6, 3.8), dpi=110)
        for method in shown:
            label, marker, style = LABELS[method]
            y = np.maximum(result.series(method, attribute), ERROR_FLOOR)
            ax.plot(x, y, marker=marker, linestyle=style, label=label, fillstyle="none")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_yscale("log")
        ax.set_xlabel("set difference per interval (packets)")
        ax.set_ylabel(ylabel)
        memory = f"{result.memory_bytes / 1000:.0f} kB per synopsis"
        ax.set_title(f"{Path(result.source).name}: {memory}, {result.seeds} seed(s)", fontsize=8)
        if attribute != "decode_seconds":
            ax.axhline(ERROR_FLOOR, color="grey", linewidth=0.5, linestyle=":")
            ax.annotate(
                "exact (error < 1e-16)",
                (x.min(), ERROR_FLOOR),
                xytext=(4, 4),
                textcoords="offset points",
                fontsize=7,
                color="grey",
            )
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = directory / f"{prefix}{name}.png"
        with atomic_output(path) as f:
            fig.savefig(f, format="png")
        plt.close(fig)
        written.append(path)
    return written
