"""The series the OpenTelemetry Collector's ``spanmetrics`` and ``servicegraph`` connectors make
from traces, made here from the traces tacit reconstructs: what Jaeger's Monitor tab (Service
Performance Monitoring) and Grafana's service graph read from Prometheus, where the spans
carried no context for the connectors to join.

- ``traces_span_metrics_calls_total`` and ``traces_span_metrics_duration_seconds``, by
  ``service_name``, ``span_name``, ``span_kind`` (``SPAN_KIND_SERVER``, ...) and
  ``status_code`` (``STATUS_CODE_UNSET``, ``_OK``, ``_ERROR``), one count per finished span,
  as the connector with the namespace ``traces.span.metrics`` and seconds names them;
- ``traces_service_graph_request_total`` and ``..._failed_total`` (either end an error), and
  ``traces_service_graph_request_server_seconds`` / ``..._client_seconds`` (the server span's
  and the client span's durations), by ``client``, ``server`` and ``connection_type``
  (empty: a call between services), one per call whose server span hangs from a client span
  of another service: an edge exists only where tacit linked the two ends.

A span name beyond :data:`MAX_SPAN_NAMES` of them is counted as ``other``: the series stay
bounded whatever the traffic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, Counter

from tacit.model.span_details import STATUS_ERROR, STATUS_OK, status_codes
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, SpanTable
from tacit.serve.metrics import DURATION_BUCKETS, BatchHistogram, BoundedLabel

MAX_SPAN_NAMES = 1000
"""Span names (over all services) given series of their own."""
SPAN_KINDS = {
    SERVER: "SPAN_KIND_SERVER",
    CLIENT: "SPAN_KIND_CLIENT",
    INTERNAL: "SPAN_KIND_INTERNAL",
}
_SPAN_LABELS = ("service_name", "span_name", "span_kind", "status_code")
_EDGE_LABELS = ("client", "server", "connection_type")
_STATUS = {STATUS_OK: "STATUS_CODE_OK", STATUS_ERROR: "STATUS_CODE_ERROR"}


class TraceMetrics:
    """The connectors' series in ``registry``, fed what :func:`observed` finds in the finished
    traces by :meth:`add`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.calls = Counter(
            "traces_span_metrics_calls", "Spans finished", _SPAN_LABELS, registry=r
        )
        self.duration = BatchHistogram(
            "traces_span_metrics_duration_seconds",
            "Duration of the spans finished",
            _SPAN_LABELS,
            DURATION_BUCKETS,
            r,
        )
        self.requests = Counter(
            "traces_service_graph_request", "Calls between two services", _EDGE_LABELS, registry=r
        )
        self.failed = Counter(
            "traces_service_graph_request_failed",
            "Calls between two services with an error at either end",
            _EDGE_LABELS,
            registry=r,
        )
        self.server_seconds = BatchHistogram(
            "traces_service_graph_request_server_seconds",
            "Duration of the calls between two services, at the server",
            _EDGE_LABELS,
            DURATION_BUCKETS,
            r,
        )
        self.client_seconds = BatchHistogram(
            "traces_service_graph_request_client_seconds",
            "Duration of the calls between two services, at the client",
            _EDGE_LABELS,
            DURATION_BUCKETS,
            r,
        )
        self._span_name = BoundedLabel(MAX_SPAN_NAMES)

    def add(self, seen: Observed) -> None:
        """Count what :func:`observed` found in a batch of finished traces."""
        for (svc, name, kind, status), seconds in seen.spans:
            labels = (svc, self._span_name(name), kind, status)
            self.calls.labels(*labels).inc(len(seconds))
            self.duration.observe(labels, seconds)
        for edge, failed, server_seconds, client_seconds in seen.edges:
            self.requests.labels(*edge).inc(len(server_seconds))
            if failed:
                self.failed.labels(*edge).inc(failed)
            self.server_seconds.observe(edge, server_seconds)
            self.client_seconds.observe(edge, client_seconds)


@dataclass
class Observed:
    """What a batch of finished traces adds to the series: per group of spans its labels
    (the span name not yet bounded to :data:`MAX_SPAN_NAMES`) and durations; per edge its
    labels, the calls failed and the durations at the server and at the client."""

    spans: list[tuple[tuple[str, str, str, str], np.ndarray]]
    edges: list[tuple[tuple[str, str, str], int, np.ndarray, np.ndarray]]


def observed(spans: SpanTable) -> Observed:
    """What the finished ``spans`` (whole traces, each parent a row) add to the series. Rows
    are grouped by their labels' codes with numpy; only the groups are labelled in Python."""
    s = spans.strings
    seconds = (spans.end - spans.start) / 1e9
    codes = status_codes(spans.details, len(spans))
    keys = np.stack([spans.service, spans.endpoint, spans.kind, codes], axis=1)
    out = Observed([], [])
    for (svc, name, kind, code), rows in _groups(keys):
        labels = (
            s.values[svc],
            s.values[name] or "",
            SPAN_KINDS.get(kind, "SPAN_KIND_UNSPECIFIED"),
            _STATUS.get(code, "STATUS_CODE_UNSET"),
        )
        out.spans.append((labels, seconds[rows]))
    server = np.flatnonzero(spans.kind == SERVER)
    client = spans.parent[server]
    server, client = server[client != NONE], client[client != NONE]
    call = (spans.kind[client] == CLIENT) & (spans.service[client] != spans.service[server])
    server, client = server[call], client[call]
    failed = (codes[server] == STATUS_ERROR) | (codes[client] == STATUS_ERROR)
    pairs = np.stack([spans.service[client], spans.service[server]], axis=1)
    for (caller, callee), at in _groups(pairs):
        edge = (s.values[caller], s.values[callee], "")
        out.edges.append((edge, int(failed[at].sum()), seconds[server[at]], seconds[client[at]]))
    return out


def _groups(keys: np.ndarray) -> Iterator[tuple[list[int], np.ndarray]]:
    """Each distinct row of ``keys`` (non-negative ints) with the indices of the rows equal to
    it: the columns are packed into one int64 (a 1-D sort, not numpy's of row records)."""
    if not len(keys):
        return
    sizes = keys.max(axis=0).astype(np.int64) + 1
    packed = np.zeros(len(keys), np.int64)
    for column, size in zip(keys.T, sizes.tolist(), strict=True):
        packed = packed * size + column
    order = np.argsort(packed, kind="stable")
    starts = np.flatnonzero(np.diff(packed[order], prepend=-1))
    ends = np.append(starts[1:], len(order))
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield keys[order[start]].tolist(), order[start:end]
