"""Pirate on a live interface: packets captured with libpcap fed to the streaming estimator."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tacit.model.captures import PacketAccounting
from tacit.response_latency.estimator import (
    ResponseEstimates,
    StreamingEstimator,
    concat_estimates,
)
from tacit.response_latency.params import PirateParams


@dataclass
class LiveEstimates:
    """What a live run gave: the estimates, the packets captured and what became of them, and
    the seconds the estimator itself took (not the wait for packets)."""

    estimates: ResponseEstimates
    packets: int
    accounting: PacketAccounting
    busy_seconds: float


def estimate_live(
    interface: str,
    bpf: str,
    seconds: float,
    params: PirateParams,
    server: str | None = None,
    algorithm: str = "modes",
) -> LiveEstimates:
    """Capture on ``interface`` (through BPF filter ``bpf``) for ``seconds`` (positive and
    finite: :meth:`~tacit.formats.live.LiveCapture.batches`) and estimate the response latency
    of its connections, batch by batch as the packets arrive."""
    from tacit.formats.live import LiveCapture

    est = StreamingEstimator(params, server, algorithm)
    parts, n, accounting, busy = [], 0, PacketAccounting(), 0.0
    with LiveCapture(interface, bpf) as cap:
        for read in cap.batches(seconds):
            if read is None:  # only when asked to see idle waits
                continue
            t = time.perf_counter()
            parts.append(est.feed(read.packets))
            busy += time.perf_counter() - t
            n += len(read.packets)
            accounting = accounting + read.accounting
    t = time.perf_counter()
    parts.append(est.flush())
    busy += time.perf_counter() - t
    return LiveEstimates(concat_estimates(parts), n, accounting, busy)
