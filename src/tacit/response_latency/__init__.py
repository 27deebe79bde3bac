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

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
