"""Client-visible response latency from the client-to-server packets of a capture (Pirate,
Vannarth Shobhana et al., "Measuring (Round-Trip) Response Latencies Under Asymmetric
Routing", arXiv 2505.14358).

- :mod:`~.params`: :class:`PirateParams`, the defaults and where they come from.
- :mod:`~.flows`: connections and their client-to-server direction.
- :mod:`~.gaps`: packet buckets and inter-packet gaps with the §3.4 heuristics.
- :mod:`~.modes`: the per-connection histogram of gap modes (Algorithm 2).
- :mod:`~.timers`: retransmission-timeout, probe-timeout and idle gaps.
- :mod:`~.estimator`: :func:`estimate_response_latency` and :class:`StreamingEstimator`.
- :mod:`~.evaluate`: :func:`score_estimates` against ground truth.
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
from tacit.response_latency.evaluate import ErrorSummary, score_estimates
from tacit.response_latency.flows import (
    DECISIONS,
    ConnectionRegistry,
    Connections,
    ConnectionTable,
    connections,
)
from tacit.response_latency.gaps import BUCKETS
from tacit.response_latency.modes import ModeHistogram
from tacit.response_latency.params import PirateParams
from tacit.response_latency.timers import timer_gaps_ns

__all__ = [
    "ALGORITHMS",
    "BUCKETS",
    "DECISIONS",
    "ConnectionRegistry",
    "ConnectionTable",
    "Connections",
    "ErrorSummary",
    "ModeHistogram",
    "PirateParams",
    "ResponseAccounting",
    "ResponseEstimates",
    "StreamingEstimator",
    "concat_estimates",
    "connections",
    "estimate_batches",
    "estimate_response_latency",
    "score_estimates",
    "timer_gaps_ns",
]
