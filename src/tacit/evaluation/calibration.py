"""How well predicted probabilities match how often the predictions are right.

Ten equal-width bins of predicted probability; per bin, the predictions in it, their mean
probability and the share of them that are right. The expected calibration error weighs each
bin's gap by its share of the predictions: ECE = Σ (n_bin / N) · |accuracy_bin − mean
probability_bin| (Guo et al., "On Calibration of Modern Neural Networks", ICML '17, §2). A
calibrated predictor has an ECE near 0: of the links given 0.9, nine in ten are right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.evaluation.trace_accuracy import wrong_traces
from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.link_probability import link_probability, trace_probability
from tacit.reconstruct.result import Reconstruction

BINS = 10


def calibration(probability: np.ndarray, right: np.ndarray, bins: int = BINS) -> dict:
    """The ECE of ``probability`` (each in [0, 1]) against ``right`` (booleans), and the
    reliability bins: ``{"ece": …, "n": N, "bins": [{"lo", "hi", "n", "probability",
    "accuracy"}, …]}`` (a bin without predictions has None for both). ECE is None for no
    predictions."""
    probability = np.asarray(probability, dtype=np.float64)
    right = np.asarray(right, dtype=bool)
    which = np.minimum((probability * bins).astype(np.int64), bins - 1)
    n = np.bincount(which, minlength=bins)
    mean_p = np.bincount(which, weights=probability, minlength=bins)
    hits = np.bincount(which, weights=right, minlength=bins)
    filled = n > 0
    p = np.divide(mean_p, n, out=np.zeros(bins), where=filled)
    acc = np.divide(hits, n, out=np.zeros(bins), where=filled)
    ece = float((n * np.abs(acc - p)).sum() / len(probability)) if len(probability) else None
    rows = [
        {
            "lo": b / bins,
            "hi": (b + 1) / bins,
            "n": int(n[b]),
            "probability": float(p[b]) if filled[b] else None,
            "accuracy": float(acc[b]) if filled[b] else None,
        }
        for b in range(bins)
    ]
    return {"ece": ece, "n": len(probability), "bins": rows}


@dataclass
class TraceOutcomes:
    """Per true trace of a reconstruction: the probability it was given, whether it is right
    (as :func:`.trace_accuracy.score_reconstruction` counts it), and when its root began."""

    probability: np.ndarray
    right: np.ndarray
    start: np.ndarray


def trace_outcomes(truth: SpanTable, blind: SpanTable, rec: Reconstruction) -> TraceOutcomes:
    """:class:`TraceOutcomes` of ``rec`` against ``truth`` (``blind``: what it was made
    from)."""
    trace, bad = wrong_traces(truth, rec, truth.kind == CLIENT)
    start = np.zeros(len(bad), dtype=np.int64)
    roots = np.flatnonzero(truth.parent == NONE)
    start[trace[roots]] = truth.start[roots]
    probability = trace_probability(link_probability(blind, rec), trace, rec.samples)
    return TraceOutcomes(probability, ~bad, start)


def reconstruction_calibration(
    truth: SpanTable, blind: SpanTable, rec: Reconstruction
) -> dict[str, dict]:
    """The calibration of ``rec``'s link probabilities (:mod:`tacit.reconstruct.
    link_probability`) over every client span of ``truth``, and of its trace probabilities
    over every trace (:func:`trace_outcomes`)."""
    client = truth.kind == CLIENT
    p = link_probability(blind, rec)
    traces = trace_outcomes(truth, blind, rec)
    return {
        "links": calibration(p[client], (rec.parent == truth.parent)[client]),
        "traces": calibration(traces.probability, traces.right),
    }
