"""Timer gaps: inter-packet gaps made by a transport's timers, not by a response (Pirate,
arXiv 2505.14358, §3.4: modes of the IPG histogram at retransmission-timeout and idle values
are removed).

A client that retransmits after a timeout, or probes after a QUIC probe timeout, pauses for the
timer's length whatever the server does. Before it has an RTT sample the timer has a fixed
value, doubled on each expiry, so such pauses cluster at a few known values:

- TCP: the initial RTO of 1 s (RFC 6298 §2.1) and the minimum RTO (RFC 6298 §2.4: 1 s; Linux
  and most stacks: 200 ms), times ``2^k`` (exponential backoff, RFC 6298 §5.5).
- QUIC: the first PTO, ``kInitialRtt + 4 · kInitialRtt / 2`` (RFC 9002 §6.2.2, §6.2.1; plus
  ``max_ack_delay`` for application data), times ``2^k`` (RFC 9002 §6.2.1).

Gaps of at least ``idle_gap_ns`` are idle periods (:class:`~.params.PirateParams`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacit.response_latency.params import PirateParams


def timer_gaps_ns(params: PirateParams) -> np.ndarray:
    """The timer values (ns, sorted, int64) that a gap is compared with."""
    pto = params.quic_initial_rtt_ns + 4 * (params.quic_initial_rtt_ns // 2)
    bases = {
        params.tcp_initial_rto_ns,
        params.tcp_min_rto_ns,
        pto,
        pto + params.quic_max_ack_delay_ns,
    }
    values = {b << k for b in bases for k in range(params.max_backoffs + 1)}
    return np.array(sorted(v for v in values if v < params.idle_gap_ns), dtype=np.int64)


@njit(cache=True, inline="always")
def matches_timer(gap: int, timers: np.ndarray, tolerance: float) -> bool:  # pragma: no cover
    """Whether ``gap`` is within ``tolerance`` (relative) of one of ``timers``."""
    for t in timers:  # noqa: SIM110 - a loop numba compiles
        if abs(gap - t) <= tolerance * t:
            return True
    return False


def is_timer_gap(gaps: np.ndarray, params: PirateParams) -> np.ndarray:
    """Per gap (ns): whether it matches a timer value (vectorized :func:`matches_timer`)."""
    timers = timer_gaps_ns(params)
    g = np.asarray(gaps, dtype=np.int64)[:, None]
    return np.any(np.abs(g - timers[None, :]) <= params.timer_tolerance * timers[None, :], axis=1)
