"""Jaeger's metrics API (the Monitor tab's series) against a naive count over the spans the SDK
sent: each point's calls a second, share failed and latency quantile over the spans that ended
in the window before it, per service and per operation; Jaeger's errors for bad parameters."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse

import numpy as np
import pytest

from serve_app import get, get_json, running, shop_spans
from tacit.experiment.otlp_load import send_spans
from tacit.model.span_details import STATUS_ERROR, SpanDetail
from tacit.model.spans import CLIENT, SERVER

STEP_MS, RATE_MS = 250, 1000


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """The shop app's spans, every fifth server span failed, sent with their times moved to
    end a minute ago; the service, and the sent spans' (service, operation, kind, end ns,
    duration ns, failed)."""
    spans = shop_spans(2)
    failed = np.zeros(len(spans), bool)
    failed[np.flatnonzero(spans.kind == SERVER)[::5]] = True
    details = np.array(
        [SpanDetail(status=STATUS_ERROR) if f else None for f in failed], dtype=object
    )
    spans = dataclasses.replace(spans, details=details)
    shift = time.time_ns() - 60 * 10**9 - int(spans.end.max())
    s = spans.strings
    sent = {
        "service": np.array(s.names(spans.service)),
        "operation": np.array(s.names(spans.endpoint)),
        "kind": spans.kind,
        "end": spans.end + shift,
        "duration": spans.end - spans.start,
        "failed": failed,
    }
    with running(tmp_path_factory.mktemp("serve")) as svc:
        send_spans(spans, f"http://127.0.0.1:{svc.http_port}/v1/traces", shift_ns=shift)
        assert svc.wait_idle(60)
        yield svc, sent


def _range(sent) -> dict[str, int]:
    """endTs and lookback (ms) covering every sent span with a window to spare."""
    end_ms = int(sent["end"].max()) // 10**6 + RATE_MS
    return {"endTs": end_ms, "lookback": end_ms - int(sent["end"].min()) // 10**6 + RATE_MS}


def _ask(svc, metric: str, **params) -> dict:
    query = urllib.parse.urlencode(params, doseq=True)
    return get_json(svc, f"/api/metrics/{metric}?{query}")


def _naive(sent, services, kind, group, t_ms: int, quantile: float):
    """Per series, (calls/s, failed share, latency quantile ms) of the window ending at t."""
    out = {}
    t = t_ms * 10**6
    window = (sent["end"] > t - RATE_MS * 10**6) & (sent["end"] <= t)
    rows = np.flatnonzero(window & np.isin(sent["service"], services) & (sent["kind"] == kind))
    keys = {(sent["service"][r], sent["operation"][r] if group else None) for r in rows.tolist()}
    for key in keys:
        mine = rows[sent["service"][rows] == key[0]]
        if group:
            mine = mine[sent["operation"][mine] == key[1]]
        out[key] = (
            len(mine) / (RATE_MS / 1000),
            sent["failed"][mine].mean(),
            np.quantile(sent["duration"][mine], quantile) / 1e6,
        )
    return out


def _series(family, group: bool) -> dict:
    out = {}
    for m in family["metrics"]:
        labels = {label["name"]: label["value"] for label in m["labels"]}
        key = (labels["service_name"], labels.get("operation") if group else None)
        out[key] = {p["timestamp"]: p["gaugeValue"]["doubleValue"] for p in m["metricPoints"]}
    return out


@pytest.mark.parametrize("group", [False, True])
@pytest.mark.parametrize("kind", ["server", "client"])
def test_each_point_is_the_window_of_spans_before_it(monitored, group, kind):
    svc, sent = monitored
    services = ["frontend", "cart", "catalog"]
    span_kind = SERVER if kind == "server" else CLIENT
    common = {
        "service": services,
        "groupByOperation": "true" if group else "false",
        "step": STEP_MS,
        "ratePer": RATE_MS,
        "spanKind": kind,
        **_range(sent),
    }
    calls = _series(_ask(svc, "calls", **common), group)
    errors = _series(_ask(svc, "errors", **common), group)
    family = _ask(svc, "latencies", quantile=0.95, **common)
    assert family["type"] == "GAUGE" and "0.95th quantile latency" in family["help"]
    latencies = _series(family, group)
    points = range(common["endTs"] - common["lookback"], common["endTs"] + 1, STEP_MS)
    seen = set()
    for t in points:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // 1000))
        stamp += f".{t % 1000:03d}Z" if t % 1000 else "Z"
        for key, (rate, share, latency) in _naive(
            sent, services, span_kind, group, t, 0.95
        ).items():
            seen.add(key)
            assert calls[key][stamp] == pytest.approx(rate)
            assert errors[key][stamp] == pytest.approx(share)
            assert latencies[key][stamp] == pytest.approx(latency)
    assert seen == set(calls) == set(errors) == set(latencies) and seen
    failing = {key for key, by_time in errors.items() if any(by_time.values())}
    assert bool(failing) == (kind == "server")  # only server spans were failed
    for key, by_time in calls.items():  # a rate at every point, 0 where no span ended
        assert len(by_time) == len(points)
        assert len(errors[key]) == len(latencies[key]) == sum(v > 0 for v in by_time.values())


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("calls", "service"),
        ("latencies?service=frontend", "quantile"),
        ("latencies?service=frontend&quantile=1.5", "quantile"),
        ("calls?service=frontend&spanKind=sideways", "spanKind"),
        ("calls?service=frontend&groupByOperation=maybe", "groupByOperation"),
        ("calls?service=frontend&step=0", "step"),
        ("calls?service=frontend&lookback=86400000&step=1", "11,000"),
        ("calls?service=frontend&endTs=-5", "endTs"),
    ],
)
def test_bad_parameters_are_jaeger_errors(monitored, query, says):
    svc, _ = monitored
    status, body, _ = get(svc, f"/api/metrics/{query}")
    doc = json.loads(body)
    assert status == 400 and doc["data"] is None
    assert doc["errors"][0]["code"] == 400 and says in doc["errors"][0]["msg"]


def test_min_step_and_unknown_metrics(monitored):
    svc, _ = monitored
    assert get_json(svc, "/api/metrics/minstep")["data"] == 1
    status, body, _ = get(svc, "/api/metrics/throughput?service=frontend")
    assert status == 404 and json.loads(body)["errors"][0]["code"] == 404
    assert _ask(svc, "calls", service="nosuch")["metrics"] == []
