"""Reconstruction against ground truth: the TraceWeaver evaluation (SIGCOMM '24, §6).

:func:`evaluate` blinds the ground-truth traces, reconstructs them with each algorithm and
scores the result. Each algorithm's ``seconds`` covers reading the input, reconstruction and
scoring. Besides tacit's accuracy (every link of every trace), each result has the accuracy over
the links the paper's artifact scores (:func:`~tacit.evaluation.trace_accuracy.artifact_scope`),
to set beside published numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.evaluation.calibration import reconstruction_calibration
from tacit.evaluation.trace_accuracy import artifact_scope, score_reconstruction
from tacit.formats import observe
from tacit.model.spans import SpanTable
from tacit.reconstruct.blind_callgraph import learn_blind
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.reconstruct.pipeline import ALGORITHMS, Progress, check_algorithm, run_algorithm
from tacit.reconstruct.traceweaver import TraceWeaverParams
from tacit.runs import contained, distinct


@dataclass
class Evaluation:
    traces: int
    spans: int
    callgraph: str
    accounting: dict[str, int]
    results: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "traces": self.traces,
            "spans": self.spans,
            "callgraph": self.callgraph,
            "accounting": self.accounting,
            "results": self.results,
        }


def evaluate(
    source: list[str | Path] | SpanTable,
    algorithms: list[str] | tuple[str, ...] = ALGORITHMS,
    *,
    callgraph: CallGraph | None = None,
    callgraph_sample: float = 1.0,
    blind_callgraph: bool = False,
    params: TraceWeaverParams | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    instrumented: list[str] | tuple[str, ...] = (),
) -> Evaluation:
    """Blind ground-truth traces, reconstruct them with each algorithm, and score each.

    Without ``callgraph`` it is learned from the input's own ground truth (standing in for a
    test environment), from a random ``callgraph_sample`` fraction of its traces; with
    ``blind_callgraph``, from the input's spans with their context removed, as production would
    give them (:mod:`tacit.reconstruct.blind_callgraph`): the two compare. The calls of
    the ``instrumented`` services keep their parents (they propagate trace context): every
    algorithm maps only the rest, and the score still counts every link.
    """
    if not algorithms:
        raise ConfigError("no algorithm to evaluate: name at least one")
    for a in algorithms:  # fail before the (long) read
        check_algorithm(a)
    observed, read_seconds = observe(source)
    truth = observed.spans
    if not len(truth):
        named = ", ".join(map(str, source)) if isinstance(source, list) else "the input"
        raise InputError(f"{named}: no spans, nothing to evaluate")
    how = "given"
    blind = observed.without_truth(instrumented)
    if callgraph is None and blind_callgraph:
        t0 = time.perf_counter()
        callgraph, support = learn_blind(blind)
        read_seconds += time.perf_counter() - t0
        left = support.left_out()
        how = (
            "learned blind from the input's own spans (the requests whose calls were told apart): "
            f"{len(support.seen) - len(left)} of {len(support.seen)} endpoints"
        )
    if callgraph is None:
        t0 = time.perf_counter()
        callgraph = learn_callgraph(_sample_traces(truth, callgraph_sample, seed))
        read_seconds += time.perf_counter() - t0
        how = (
            "learned from the input's own ground-truth traces"
            if callgraph_sample >= 1
            else f"learned from {callgraph_sample:.0%} of the input's ground-truth traces"
        )
    scope = artifact_scope(truth)
    ev = Evaluation(
        traces=len(distinct(truth.trace)),
        spans=len(truth),
        callgraph=how,
        accounting=observed.accounting,
    )
    for name in algorithms:
        t0 = time.perf_counter()
        rec = run_algorithm(name, blind, callgraph, params, progress)
        score = score_reconstruction(truth, rec)
        seconds = read_seconds + time.perf_counter() - t0
        narrow = score_reconstruction(truth, rec, scored=scope)
        ev.results.append(
            {
                "algorithm": name,
                "accuracy": score.accuracy,
                "link_accuracy": score.link_accuracy,
                "top5_accuracy": score.top5_accuracy,
                "artifact_scope_accuracy": narrow.accuracy,
                "seconds": seconds,
                "spans_per_second": len(truth) / seconds if seconds > 0 else None,
                "unmapped": len(rec.unmapped),
                "per_latency_bin": score.per_latency_bin,
                "per_service": score.per_service,
                "calibration": (
                    reconstruction_calibration(truth, blind, rec) if len(rec.alternatives) else None
                ),
                "info": rec.info,
            }
        )
    return ev


def _sample_traces(truth: SpanTable, fraction: float, seed: int) -> SpanTable:
    if fraction >= 1:
        return truth
    traces = distinct(truth.trace)
    rng = np.random.default_rng(seed)
    keep = rng.choice(traces, max(1, round(fraction * len(traces))), replace=False)
    return truth.take(contained(truth.trace, keep))
