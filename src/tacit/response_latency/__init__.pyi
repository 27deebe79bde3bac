"""The names :mod:`tacit.response_latency` exports, each imported on first use (``__init__.py``)."""

from .estimator import (
    ALGORITHMS,
    ResponseAccounting,
    ResponseEstimates,
    StreamingEstimator,
    concat_estimates,
    estimate_response_latency,
)
from .evaluate import (
    ErrorSummary,
    score_capture_truth,
    score_causal_pairs,
    score_estimates,
    score_responses,
    trigger_from_completions,
    trigger_from_triggered,
)
from .gaps import BUCKETS
from .maglev import MaglevParams, MaglevTable, disruption
from .mode_sum import ModeSumHistogram
from .modes import ModeHistogram
from .params import PirateParams
from .rtt_baselines import RttSamples, rtt_samples
from .timers import timer_gaps_ns
from .truth import RequestTruth, request_truth
from .watermark import WatermarkController, WatermarkParams

__all__ = [
    "ALGORITHMS",
    "BUCKETS",
    "ErrorSummary",
    "MaglevParams",
    "MaglevTable",
    "ModeHistogram",
    "ModeSumHistogram",
    "PirateParams",
    "RequestTruth",
    "ResponseAccounting",
    "ResponseEstimates",
    "RttSamples",
    "StreamingEstimator",
    "WatermarkController",
    "WatermarkParams",
    "concat_estimates",
    "disruption",
    "estimate_response_latency",
    "request_truth",
    "rtt_samples",
    "score_capture_truth",
    "score_causal_pairs",
    "score_estimates",
    "score_responses",
    "timer_gaps_ns",
    "trigger_from_completions",
    "trigger_from_triggered",
]
