"""Jaeger's metrics API (``/api/metrics/{latencies,calls,errors,minstep}``), which the Jaeger
UI's Monitor tab draws: per service (and operation), the calls a second, the share of them that
failed and a quantile of their latency, as series over a time range.

Jaeger answers it from a Prometheus that the Collector's span metrics connector feeds; tacit
answers it from the spans it stores, as Jaeger's parameters define each point: at every
``step`` from ``endTs - lookback`` to ``endTs`` (milliseconds), over the spans that ended in
the ``ratePer`` before it, of the ``spanKind`` asked (``server`` by default). A rate is the
spans counted over the window's seconds, the error rate the failed (status ERROR) among them,
the latency the ``quantile`` of their durations, in milliseconds and exact rather than
interpolated in histogram buckets. A point whose window holds no span has no error rate and no
latency, and is left out of those series. The answer is Jaeger's ``MetricFamily`` as JSON; a
series has its ``service_name`` label, and ``operation`` with ``groupByOperation``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from tacit.errors import InputError
from tacit.serve.jaeger_api import INT64_MAX, envelope, int_param
from tacit.serve.store import Store

DEFAULT_LOOKBACK_MS = 3_600_000
DEFAULT_STEP_MS = 5_000
DEFAULT_RATE_PER_MS = 600_000
"""Jaeger's defaults: an hour back, a point every 5 s, rates over 10 minutes."""
MIN_STEP_MS = 1
"""``/api/metrics/minstep``: the stored spans have nanosecond times."""
MAX_POINTS = 11_000
"""The most points of one series, Prometheus's own bound on a range query."""
_KINDS = {
    "server": "server",
    "client": "client",
    "internal": "internal",
    "unspecified": "unknown",
    "producer": "producer",
    "consumer": "consumer",
}
"""Jaeger's span kinds (also as ``SPAN_KIND_SERVER`` and so on), and the store's."""
_TRUE, _FALSE = ("1", "t", "T", "true", "TRUE", "True"), ("0", "f", "F", "false", "FALSE", "False")
MS = 1_000_000
_MAX_MS = INT64_MAX // MS // 4
"""The largest time or duration taken (in ms: about 73 years), so that no sum of them in
nanoseconds leaves the store's integers."""


@dataclass(frozen=True)
class MetricsQuery:
    """What a metrics request selects: its services, span kinds (the store's names), grouping
    and time range (milliseconds)."""

    services: tuple[str, ...]
    kinds: tuple[str, ...]
    group_by_operation: bool
    end_ms: int
    lookback_ms: int
    step_ms: int
    rate_per_ms: int

    @property
    def points_ms(self) -> np.ndarray:
        return np.arange(self.end_ms - self.lookback_ms, self.end_ms + 1, self.step_ms)


def metrics_query(params: Mapping[str, str], values: Callable[[str], list[str]]) -> MetricsQuery:
    """The query of a request's parameters (``values``: every value of a repeated one)."""
    services = tuple(values("service"))
    if not services:
        raise InputError("service: please provide at least one service name")
    kinds = []
    for kind in values("spanKind") or ["server"]:
        short = kind.removeprefix("SPAN_KIND_").lower()
        if short not in _KINDS:
            raise InputError(f"spanKind: unsupported span kind {kind!r}")
        kinds.append(_KINDS[short])
    group = params.get("groupByOperation", "")
    if group not in ("", *_TRUE, *_FALSE):
        raise InputError(f"groupByOperation: {group!r} is not a boolean")
    end_ms = int_param(params, "endTs", 2 * _MAX_MS)
    query = MetricsQuery(
        services,
        tuple(kinds),
        group in _TRUE,
        time.time_ns() // MS if end_ms is None else end_ms,
        _positive(params, "lookback", DEFAULT_LOOKBACK_MS),
        _positive(params, "step", DEFAULT_STEP_MS),
        _positive(params, "ratePer", DEFAULT_RATE_PER_MS),
    )
    if query.lookback_ms // query.step_ms + 1 > MAX_POINTS:
        raise InputError(
            f"step: exceeded the maximum resolution of {MAX_POINTS:,} points per series "
            "(a longer step or a shorter lookback)"
        )
    return query


def _positive(params: Mapping[str, str], name: str, default: int) -> int:
    value = int_param(params, name, _MAX_MS)
    if value == 0:
        raise InputError(f"{name}: must be more than 0 ms")
    return default if value is None else value


def quantile_param(params: Mapping[str, str]) -> float:
    """The ``quantile`` of a latencies request, in (0, 1]."""
    text = params.get("quantile", "")
    try:
        q = float(text)
    except ValueError:
        raise InputError(f"quantile: {text!r} is not a number") from None
    if not 0 < q <= 1:
        raise InputError(f"quantile: {text!r} is not in (0, 1]")
    return q


def calls(store: Store, q: MetricsQuery) -> dict[str, Any]:
    seconds = q.rate_per_ms / 1000
    return _family(
        store,
        q,
        "call_rate",
        "calls/sec",
        lambda s: np.ones(len(s.count), bool),
        lambda s: s.count / seconds,
    )


def errors(store: Store, q: MetricsQuery) -> dict[str, Any]:
    return _family(
        store,
        q,
        "error_rate",
        "error rate, computed as a fraction of errors/sec over calls/sec",
        lambda s: s.count > 0,
        lambda s: s.failed / np.maximum(s.count, 1),
    )


def latencies(store: Store, q: MetricsQuery, quantile: float) -> dict[str, Any]:
    def value(s: _Windows) -> np.ndarray:
        out = np.zeros(len(s.count))
        for k in np.flatnonzero(s.count):
            out[k] = np.quantile(s.duration_ns[s.lo[k] : s.hi[k]], quantile) / MS
        return out

    help_text = f"{quantile:.2f}th quantile latency"
    return _family(store, q, "latencies", help_text, lambda s: s.count > 0, value)


def min_step() -> dict[str, Any]:
    return envelope(MIN_STEP_MS)


@dataclass
class _Windows:
    """One series' spans (ordered by end) and, per point, the rows of its window."""

    duration_ns: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    count: np.ndarray
    failed: np.ndarray


def _family(
    store: Store,
    q: MetricsQuery,
    name: str,
    help_text: str,
    shown: Callable[[_Windows], np.ndarray],
    value: Callable[[_Windows], np.ndarray],
) -> dict[str, Any]:
    points = q.points_ms * MS
    rate_ns = q.rate_per_ms * MS
    service, operation, end, duration, failed = store.span_ends(
        list(q.services), list(q.kinds), int(points[0]) - rate_ns, int(points[-1])
    )
    operations = operation if q.group_by_operation else [""] * len(service)
    keys = list(zip(service, operations, strict=True))
    names: list[tuple[str, str]] = sorted(set(keys))
    code = {k: i for i, k in enumerate(names)}
    series = np.array([code[k] for k in keys], np.int64)
    order = np.lexsort((end, series))  # by series, then end
    series, end, duration, failed = series[order], end[order], duration[order], failed[order]
    bounds = np.searchsorted(series, np.arange(len(names) + 1))
    stamps = [_timestamp(int(t)) for t in q.points_ms.tolist()]
    metrics = []
    for i, key in enumerate(names):
        rows = slice(int(bounds[i]), int(bounds[i + 1]))
        windows = _windows(end[rows], duration[rows], failed[rows], points, rate_ns)
        keep, values = shown(windows), value(windows)
        labels = [{"name": "service_name", "value": key[0]}]
        if q.group_by_operation:
            labels.insert(0, {"name": "operation", "value": key[1]})
        metrics.append(
            {
                "labels": labels,
                "metricPoints": [
                    {"gaugeValue": {"doubleValue": float(values[k])}, "timestamp": stamps[k]}
                    for k in np.flatnonzero(keep).tolist()
                ],
            }
        )
    grouped = " & operation" if q.group_by_operation else ""
    return {
        "name": f"service_operation_{name}" if q.group_by_operation else f"service_{name}",
        "type": "GAUGE",
        "help": f"{help_text}, grouped by service{grouped}",
        "metrics": metrics,
    }


def _windows(
    end: np.ndarray, duration: np.ndarray, failed: np.ndarray, points: np.ndarray, rate_ns: int
) -> _Windows:
    """The window of one series' spans (ordered by ``end``) that ends at each point."""
    hi = np.searchsorted(end, points, "right")
    lo = np.searchsorted(end, points - rate_ns, "right")
    failed_before = np.concatenate([[0], np.cumsum(failed)])
    return _Windows(duration, lo, hi, hi - lo, failed_before[hi] - failed_before[lo])


def _timestamp(ms: int) -> str:
    """RFC 3339 in UTC, as protobuf's JSON writes a Timestamp (milliseconds when not whole)."""
    at = datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{at}.{ms % 1000:03d}Z" if ms % 1000 else f"{at}Z"
