"""What ``tacit serve`` exposes at ``/metrics`` (Prometheus text format, prometheus-client).

One registry per service, so that two services in one process (tests) do not share counters.
RED metrics per service come from the finished spans of server kind: requests, errors and a
duration histogram.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ServeMetrics:
    """The service's counters and gauges, registered in :attr:`registry`."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.received = Counter(
            "tacit_spans_received", "Spans acknowledged to senders", ["transport"], registry=r
        )
        self.refused = Counter(
            "tacit_requests_refused",
            "Export requests refused, by reason (busy: backpressure; invalid: bad input)",
            ["transport", "reason"],
            registry=r,
        )
        self.mapped = Counter(
            "tacit_spans_mapped", "Client spans given a parent by reconstruction", registry=r
        )
        self.unmapped = Counter(
            "tacit_spans_unmapped",
            "Spans finished without a parent, by reason",
            ["reason"],
            registry=r,
        )
        self.checked = Counter(
            "tacit_links_checked",
            "Reconstructed parents compared with the parent the sender gave",
            ["result"],
            registry=r,
        )
        self.traces = Counter("tacit_traces_finished", "Traces finished and stored", registry=r)
        self.pending = Gauge(
            "tacit_spans_pending", "Spans received and not yet in a finished trace", registry=r
        )
        self.lag = Gauge(
            "tacit_reconstruction_lag_seconds",
            "Wall time since the end of the latest span, minus the latest span's end in the "
            "stream's clock: how far behind reconstruction runs",
            registry=r,
        )
        self.confidence = Gauge(
            "tacit_service_confidence_ratio",
            "TraceWeaver §6.3.2 per-service confidence over the service's finished spans",
            ["service"],
            registry=r,
        )
        self.requests = Counter(
            "tacit_service_requests",
            "Incoming requests (server spans) finished",
            ["service"],
            registry=r,
        )
        self.errors = Counter(
            "tacit_service_errors",
            "Incoming requests with an error status",
            ["service"],
            registry=r,
        )
        self.duration = Histogram(
            "tacit_service_request_duration_seconds",
            "Duration of incoming requests",
            ["service"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.forwarded = Counter(
            "tacit_spans_forwarded",
            "Spans sent on to the downstream collector",
            ["result"],
            registry=r,
        )
