"""What ``tacit serve`` exposes at ``/metrics`` (Prometheus text format, prometheus-client).

One registry per service, so that two services in one process (tests) do not share counters.
RED metrics per service come from the finished spans of server kind: requests, errors and a
duration histogram.

The latency series label their samples by server (Pirate) and by source (RDA), not by
connection: connections come and go without bound, servers and sources are what one watches.
A label takes at most :data:`MAX_LABEL_VALUES` values; later ones are counted under ``other``.

Beside tacit's own: ``tacit_build_info`` (the version, as exporters name theirs), the process's
``process_*`` (CPU, memory, open files) and ``python_info``. Counters export no ``_created``
series: Prometheus does not read them, and they would double the families.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterator, Sequence
from importlib.metadata import version

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from tacit.extras import DISTRIBUTION
from tacit.reconstruct.online import NO_CAUSE
from tacit.reconstruct.result import ROOT_CALL
from tacit.reconstruct.traceweaver import NO_FIT, NOT_IN_CALLGRAPH, TAKEN
from tacit.serve.callgraph_learner import LEARNING
from tacit.serve.online_feed import FUTURE, LATE, NOT_RPC

disable_created_metrics()

PROBABILITY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
"""Of link and trace probabilities: tenths, as the calibration's bins, and 0.95 and 0.99 for
the traces sure enough to filter on."""
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
MAX_LABEL_VALUES = 100
"""Servers (Pirate) or sources (RDA) given a label value of their own."""
OTHER = "other"


class BoundedLabel:
    """The label value for a name: the name itself for the first ``limit`` names seen
    (:data:`MAX_LABEL_VALUES` by default), ``other`` after (a metric's series stay bounded
    whatever the traffic)."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str:
        with self._lock:
            if name in self._seen:
                return name
            if len(self._seen) < self.limit:
                self._seen.add(name)
                return name
            return OTHER


class BatchHistogram(Collector):
    """A histogram with labels, observed many values at a time.

    prometheus-client's :class:`Histogram` takes one value a call, under a lock, too costly for
    the duration of every finished request. Here a
    batch is counted into the buckets at once (numpy) and the registry reads the totals.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        buckets: tuple[float, ...],
        registry: CollectorRegistry,
    ) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self._bounds = np.array(buckets, dtype=np.float64)
        self._counts: dict[tuple[str, ...], np.ndarray] = {}  # per bucket, then +Inf
        self._sums: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, value: tuple[str, ...], samples: Sequence[float] | np.ndarray) -> None:
        """Count ``samples`` under the label values ``value``."""
        x = np.asarray(samples, dtype=np.float64)
        # Bucket le=b holds the samples <= b: the first bound at or above each sample.
        counts = np.bincount(np.searchsorted(self._bounds, x), minlength=len(self._bounds) + 1)
        with self._lock:
            self._counts[value] = self._counts.get(value, 0) + counts
            self._sums[value] = self._sums.get(value, 0.0) + float(x.sum())

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        les = [floatToGoString(b) for b in self._bounds] + ["+Inf"]
        with self._lock:
            for value, counts in self._counts.items():
                cumulative = np.cumsum(counts).tolist()
                family.add_metric(
                    list(value), list(zip(les, cumulative, strict=True)), self._sums[value]
                )
        yield family


REASON_LABELS = {
    ROOT_CALL: "root_call",
    NOT_IN_CALLGRAPH: "not_in_callgraph",
    LEARNING: "learning",
    TAKEN: "taken_by_another",
    NO_FIT: "no_request_fits",
    NO_CAUSE: "no_request_at_instance",
    LATE: "late",
    FUTURE: "future",
}
"""The label of each reason a span is stored without a parent (the store keeps the sentence)."""


def reason_label(reason: str) -> str:
    """The short label of ``reason`` (:data:`REASON_LABELS`; a span of another kind is
    ``not_rpc``), for ``tacit_spans_unmapped_total``."""
    label = REASON_LABELS.get(reason)
    if label is not None:
        return label
    return "not_rpc" if reason.startswith(NOT_RPC) else "other"


class ServeMetrics:
    """The service's counters and gauges, registered in :attr:`registry`."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Gauge(
            "tacit_build_info",
            "The running tacit's version, and Python's",
            ["version", "python_version"],
            registry=r,
        ).labels(version(DISTRIBUTION), platform.python_version()).set(1)
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
        self.given = Counter(
            "tacit_links_given",
            "Client spans whose parent the sender gave, kept as given",
            registry=r,
        )
        self.duplicates = Counter(
            "tacit_spans_duplicate",
            "Spans received again (the same trace and span id), stored once",
            registry=r,
        )
        self.drawn = Counter(
            "tacit_spans_drawn",
            "Spans drawn for a service that sent none (an uninstrumented hop), stored too",
            registry=r,
        )
        self.fates = Counter(
            "tacit_spans_stored",
            "Spans stored, by fate: given (a call whose parent the sender gave, kept), inferred "
            "(a call given its parent by reconstruction), unlinked (a call left without one), "
            "caller (a request paired with its call), root (a request without one), alone (not "
            "reconstructed: not an RPC span, or late)",
            ["fate"],
            registry=r,
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
        self.expired = Counter(
            "tacit_rows_expired",
            "Rows deleted from the store for being older than the retention time, by table "
            '(table="blocks": Parquet block files deleted)',
            ["table"],
            registry=r,
        )
        self.blocks_written = Counter(
            "tacit_blocks_written",
            "Rounds of finished traces moved into place as Parquet blocks (blocks: the "
            "reconstruct role's output for query replicas)",
            registry=r,
        )
        self.block_merges = Counter(
            "tacit_block_merges",
            "Compactions of the blocks, by result (merged; failed: the rounds stay as they are "
            "and the merge is tried again)",
            ["result"],
            registry=r,
        )
        self.log_position = Gauge(
            "tacit_log_position",
            "The sequence number of the next request the reconstruct role takes from the "
            "shared log",
            ["stream"],
            registry=r,
        )
        self.log_backlog = Gauge(
            "tacit_log_backlog_requests",
            "Requests in the shared log that the reconstruct role has not taken yet (read from "
            "the log at each scrape; NaN while it is out of reach)",
            ["stream"],
            registry=r,
        )
        self.callgraph_endpoints = Gauge(
            "tacit_callgraph_endpoints",
            "Endpoints of the call graph in use (learned from the stored spans when none was "
            "given)",
            registry=r,
        )
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
            "Mean probability that a link of the service's calls is right (an unmapped call "
            "counts 0), over its stored calls; no series for a service that made none",
            ["service"],
            registry=r,
        )
        self.link_probability = BatchHistogram(
            "tacit_link_probability",
            "Probability that a stored call's link to its parent is right (given by its sender: "
            "1; left unmapped: 0), by the calling service",
            ("service",),
            PROBABILITY_BUCKETS,
            r,
        )
        self.trace_probability = BatchHistogram(
            "tacit_trace_probability",
            "Probability that a stored trace is right (the share of sampled assignments that "
            "make all its links), by the service of its root",
            ("service",),
            PROBABILITY_BUCKETS,
            r,
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
        self.duration = BatchHistogram(
            "tacit_service_request_duration_seconds",
            "Duration of incoming requests",
            ("service",),
            DURATION_BUCKETS,
            r,
        )
        self.forwarded = Counter(
            "tacit_spans_forwarded",
            "Spans sent on to the downstream collector",
            ["result"],
            registry=r,
        )
        self.pirate_server = BoundedLabel()
        self.pirate_latency = Gauge(
            "tacit_pirate_latency_seconds",
            "Pirate: the samples-weighted mean of the server's connection estimates in the "
            "latest epoch closed",
            ["server"],
            registry=r,
        )
        self.pirate_estimates = Histogram(
            "tacit_pirate_estimate_seconds",
            "Pirate: every (connection, epoch) estimate of the server's response latency",
            ["server"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.pirate_packets = Counter(
            "tacit_pirate_packets",
            "Pirate: packets read, by stage (capture: the reader; estimator: Pirate's buckets)",
            ["stage", "bucket"],
            registry=r,
        )
        self.rda_source = BoundedLabel()
        self.rda_mean = Gauge(
            "tacit_rda_mean_seconds",
            "RDA: mean one-way latency of the source's latest interval with an estimate",
            ["source"],
            registry=r,
        )
        self.rda_std = Gauge(
            "tacit_rda_std_seconds",
            "RDA: standard deviation of the one-way latency in that interval",
            ["source"],
            registry=r,
        )
        self.rda_intervals = Counter(
            "tacit_rda_intervals", "RDA: interval records stored, by status", ["status"], registry=r
        )
        self.rda_lines = Counter(
            "tacit_rda_lines",
            "RDA: result lines read, by result (stored, summary, malformed)",
            ["result"],
            registry=r,
        )
