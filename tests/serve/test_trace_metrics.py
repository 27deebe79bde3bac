"""The span metrics and service graph series, from the traces tacit finished, against the
senders' own context: every span counted once under its service, name, kind and status, every
call between two services under its edge; and the queries Jaeger's Monitor tab and Grafana's
service graph issue, run by Prometheus's own tool on the series scraped."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_app import get, running, shop_spans
from tacit.experiment.otlp_load import send_spans
from tacit.model.spans import CLIENT, NONE, SERVER
from tacit.serve.trace_metrics import SPAN_KINDS


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    spans = shop_spans(2)
    with running(tmp_path_factory.mktemp("serve")) as svc:
        send_spans(spans, f"http://127.0.0.1:{svc.http_port}/v1/traces")
        assert svc.wait_idle(60)
        text = get(svc, "/metrics")[1].decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    return spans, samples


def _values(samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(s.labels[k] for k in labels): s.value for s in samples if s.name == name and s.value
    }


def test_every_span_is_counted_under_its_service_name_kind_and_status(scraped):
    spans, samples = scraped
    s = spans.strings
    truth = Counter(
        (s.values[int(spans.service[r])], s.values[int(spans.endpoint[r])], SPAN_KINDS[int(k)])
        for r, k in enumerate(spans.kind.tolist())
    )
    labels = ("service_name", "span_name", "span_kind")
    counted = _values(samples, "traces_span_metrics_calls_total", *labels, "status_code")
    assert {key[:3]: v for key, v in counted.items()} == truth
    assert {key[3] for key in counted} == {"STATUS_CODE_UNSET"}
    durations = _values(
        samples, "traces_span_metrics_duration_seconds_count", *labels, "status_code"
    )
    assert durations == counted


def test_every_call_between_services_is_an_edge(scraped):
    spans, samples = scraped
    s = spans.strings
    truth: Counter[tuple[str, str, str]] = Counter()
    for r in np.flatnonzero(spans.kind == SERVER).tolist():
        p = int(spans.parent[r])
        if p != NONE and spans.kind[p] == CLIENT and spans.service[p] != spans.service[r]:
            truth[(s.values[int(spans.service[p])], s.values[int(spans.service[r])], "")] += 1
    edges = _values(
        samples, "traces_service_graph_request_total", "client", "server", "connection_type"
    )
    assert edges == truth and truth
    for histogram in ("server", "client"):
        name = f"traces_service_graph_request_{histogram}_seconds_count"
        assert _values(samples, name, "client", "server", "connection_type") == truth
    assert not _values(samples, "traces_service_graph_request_failed_total", "client", "server")


MONITOR_CALLS = (
    'sum(increase(traces_span_metrics_calls_total{service_name=~"frontend", '
    'span_kind=~"SPAN_KIND_SERVER"}[2m])) by (service_name, span_name)'
)
"""As Jaeger's Monitor tab asks for a service's calls per operation (over a rate's range)."""


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool (Debian's prometheus package) is not installed",
)
def test_the_monitor_tab_and_service_graph_queries_read_them(scraped, tmp_path: Path):
    """Jaeger's Monitor tab asks for calls per operation of a service's server spans, and
    Grafana's service graph for requests per edge; over a minute from zero to what was
    scraped, their increase is what was counted."""
    _, samples = scraped
    series = [
        {
            "series": s.name
            + "{"
            + ",".join(f"{k}={json.dumps(v)}" for k, v in s.labels.items())
            + "}",
            "values": f"0 {s.value:g}",
        }
        for s in samples
        if s.name in ("traces_span_metrics_calls_total", "traces_service_graph_request_total")
    ]
    calls = _values(
        samples, "traces_span_metrics_calls_total", "service_name", "span_name", "span_kind"
    )
    frontend = {
        k[1]: v for k, v in calls.items() if k[0] == "frontend" and k[2] == "SPAN_KIND_SERVER"
    }
    edges = _values(samples, "traces_service_graph_request_total", "client", "server")
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": MONITOR_CALLS,
                        "eval_time": "1m",
                        "exp_samples": [
                            {
                                "labels": f'{{service_name="frontend",span_name="{name}"}}',
                                "value": v,
                            }
                            for name, v in frontend.items()
                        ],
                    },
                    {
                        "expr": "sum by (client, server) "
                        "(increase(traces_service_graph_request_total[2m]))",
                        "eval_time": "1m",
                        "exp_samples": [
                            {"labels": f'{{client="{c}",server="{sv}"}}', "value": v}
                            for (c, sv), v in edges.items()
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "queries.yml").write_text(json.dumps(test))
    done = subprocess.run(
        ["promtool", "test", "rules", "queries.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert frontend and edges
