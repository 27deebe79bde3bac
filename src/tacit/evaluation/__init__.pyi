"""The names :mod:`tacit.evaluation` exports, each imported on first use (``__init__.py``)."""

from .calibration import calibration, reconstruction_calibration
from .demo import run_demo
from .otel_app import score_traces
from .reconstruction import Evaluation, evaluate
from .reliability import render_reliability
from .trace_accuracy import TraceScore, artifact_scope, score_reconstruction

__all__ = [
    "Evaluation",
    "TraceScore",
    "artifact_scope",
    "calibration",
    "evaluate",
    "reconstruction_calibration",
    "render_reliability",
    "run_demo",
    "score_reconstruction",
    "score_traces",
]
