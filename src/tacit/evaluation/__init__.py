"""Scoring against ground truth: trace accuracy, the TraceWeaver evaluation, the demo job.

- :mod:`~.trace_accuracy`: end-to-end, link and per-service accuracy (TraceWeaver §6.1).
- :mod:`~.reconstruction`: blind, reconstruct and score with every algorithm (§6).
- :mod:`~.demo`: accuracy against load on the simulated app (``make demo``).
"""

from tacit.evaluation.demo import run_demo
from tacit.evaluation.reconstruction import Evaluation, evaluate
from tacit.evaluation.trace_accuracy import TraceScore, artifact_scope, score_reconstruction

__all__ = [
    "Evaluation",
    "TraceScore",
    "artifact_scope",
    "evaluate",
    "run_demo",
    "score_reconstruction",
]
