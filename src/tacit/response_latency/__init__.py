"""Client-visible response latency from the client-to-server packets of a capture (Pirate,
Vannarth Shobhana et al., "Measuring (Round-Trip) Response Latencies Under Asymmetric
Routing", arXiv 2505.14358).

- :mod:`~.params`: :class:`PirateParams`, the defaults and where they come from.
- connections and their client-to-server direction: :mod:`tacit.formats.connections`.
- :mod:`~.gaps`: packet buckets and inter-packet gaps with the §3.4 heuristics.
- :mod:`~.mode_sum`: Algorithm 2 as published, the proportional mode sum (the default).
- :mod:`~.modes`: tacit's centre-tracking histogram (``algorithm="centres"``).
- :mod:`~.timers`: retransmission-timeout, probe-timeout and idle gaps.
- :mod:`~.estimator`: :func:`estimate_response_latency` and :class:`StreamingEstimator`.
- :mod:`~.evaluate`: :func:`score_responses` (per response, §5.2) and :func:`score_estimates`
  (per epoch) against ground truth.
- :mod:`~.truth`: the truth from both directions of a capture (HTTP/1.1, Redis, memcached).
- :mod:`~.rtt_baselines`: the RTT baselines (sequence/acknowledgement, timestamp echo,
  handshake).
- :mod:`~.maglev` and :mod:`~.watermark`: the latency-aware load balancer (§4).
"""

from tacit.response_latency.estimator import (
    ALGORITHMS,
    ResponseAccounting,
    ResponseEstimates,
    StreamingEstimator,
    concat_estimates,
    estimate_batches,
    estimate_response_latency,
)
from tacit.response_latency.evaluate import (
    ErrorSummary,
    score_capture_truth,
    score_causal_pairs,
    score_estimates,
    score_responses,
    trigger_from_completions,
    trigger_from_triggered,
)
from tacit.response_latency.gaps import BUCKETS
from tacit.response_latency.maglev import MaglevParams, MaglevTable, disruption
from tacit.response_latency.mode_sum import ModeSumHistogram
from tacit.response_latency.modes import ModeHistogram
from tacit.response_latency.params import PirateParams
from tacit.response_latency.rtt_baselines import RttSamples, rtt_samples
from tacit.response_latency.timers import timer_gaps_ns
from tacit.response_latency.truth import RequestTruth, request_truth
from tacit.response_latency.watermark import WatermarkController, WatermarkParams

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
    "estimate_batches",
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
