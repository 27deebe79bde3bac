"""Each link's and trace's probability of being right, as the service shows it: in the spans'
tags, in a search (``minProbability``), in the per-service confidence and in ``/metrics``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import serve_app
from serve_app import running, shop_callgraph, shop_spans
from serve_page import get_json, serving
from tacit.experiment.otlp_load import lost_context
from tacit.model.spans import CLIENT
from tacit.reconstruct import CallGraph, TraceWeaverParams, instrument_next

SAMPLES = TraceWeaverParams().marginal_samples


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shop app's spans at 600 requests/s (its calls contend) with every call's context
    lost: each link is inferred."""
    spans = lost_context(shop_spans(1.0, rate=600))
    with serving(spans, shop_callgraph(), tmp_path_factory.mktemp("serve") / "x.duckdb") as url:
        yield url


def _tags(span: dict) -> dict:
    return {t["key"]: t["value"] for t in span["tags"]}


def _traces(base: str) -> dict[str, dict]:
    """Every stored trace, by id: those of each service."""
    out = {}
    for service in get_json(base, "/api/services")["data"]:
        for t in get_json(base, f"/api/traces?service={service}&limit=1500")["data"]:
            out[t["traceID"]] = t
    return out


def test_a_link_carries_the_share_of_sampled_assignments_and_a_trace_their_joint_share(
    base: str,
) -> None:
    """A link's probability is the share of perturbed assignments that make it (a multiple of
    1/SAMPLES); each alternative carries its share of the call's alternatives. A trace's is
    the share that make all its links: no more than its least sure link's, no less than the
    links' shares allow (Fréchet's bound), and above their product where the links of a
    request go together."""
    above = 0
    for trace in _traces(base).values():
        ids = {s["spanID"] for s in trace["spans"]}
        product, links, roots = 1.0, [], []
        for span in trace["spans"]:
            tags = _tags(span)
            if not any(r["spanID"] in ids for r in span["references"]):
                roots.append(tags)
            if tags.get("span.kind") != "client":
                assert "tacit.probability" not in tags
                continue
            p = tags["tacit.probability"]
            assert 0.0 <= p <= 1.0
            product *= p
            links.append(p)
            if "tacit.unmapped" in tags:
                assert p == 0.0  # it has a parent, and none was found
                continue
            assert p * SAMPLES == pytest.approx(round(p * SAMPLES), abs=1e-3)
            alternatives = json.loads(tags["tacit.alternatives"])
            assert sum(q for *_, q in alternatives) == pytest.approx(1, abs=1e-3)
            parent = span["references"][0]["spanID"]
            assert parent in {a for a, *_ in alternatives}
        (root,) = roots
        joint = root["tacit.trace_probability"]
        assert max(0.0, sum(links) - len(links) + 1) - 1e-3 <= joint <= min(links, default=1) + 1e-3
        above += joint > product + 1e-3
    assert above > 0


def test_a_search_keeps_the_traces_at_least_that_sure(base: str) -> None:
    every = get_json(base, "/api/traces?service=frontend&limit=1500")["data"]
    sure = get_json(base, "/api/traces?service=frontend&limit=1500&minProbability=0.9")["data"]
    expected = {
        t["traceID"]
        for t in every
        if any(_tags(s).get("tacit.trace_probability", 0) >= 0.9 for s in t["spans"])
    }
    assert 0 < len(sure) < len(every)  # the shop at 600 requests/s has traces on both sides
    assert {t["traceID"] for t in sure} == expected


def test_confidence_is_the_mean_probability_of_a_services_calls(base: str) -> None:
    calls: dict[str, dict[str, float]] = {}
    for trace in _traces(base).values():
        for span in trace["spans"]:
            tags = _tags(span)
            if tags.get("span.kind") == "client":
                service = trace["processes"][span["processID"]]["serviceName"]
                calls.setdefault(service, {})[span["spanID"]] = tags["tacit.probability"]
    confidence = get_json(base, "/api/tacit/confidence")
    shown = {r["service"]: (r["links"], r["confidence"]) for r in confidence["data"]}
    assert shown == {
        s: (len(ps), pytest.approx(sum(ps.values()) / len(ps), abs=1e-4)) for s, ps in calls.items()
    }
    assert confidence["advice"] == instrument_next({s: c for s, (_, c) in shown.items()})
    with urllib.request.urlopen(base + "/metrics", timeout=30) as answer:
        metrics = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.read().decode())
            for s in family.samples
        }
    for r in confidence["data"]:
        label = (("service", r["service"]),)
        n = metrics[("tacit_link_probability_count", label)]
        assert n == r["links"]
        total = metrics[("tacit_link_probability_sum", label)]
        assert total / n == pytest.approx(r["confidence"], abs=1e-4)
        assert metrics[("tacit_service_confidence_ratio", label)] == pytest.approx(total / n)
    traces = sum(v for (name, _), v in metrics.items() if name == "tacit_trace_probability_count")
    assert traces == len(_traces(base))


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool (Debian's prometheus package) is not installed",
)
def test_promtool_reads_the_share_of_sure_traces_as_the_docs_say(base: str, tmp_path: Path) -> None:
    """Prometheus's own tool lints the exposition, and evaluates docs/serve.md's expression
    for the share of traces above 0.9 on the histogram the service exports: it is the share
    of stored traces whose ``tacit.trace_probability`` is above 0.9."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = (Path(__file__).parents[2] / "docs" / "serve.md").read_text()
    found = re.search(r"the share\s+above 0\.9 is `([^`]+)`", docs)
    assert found, "docs/serve.md no longer gives the expression"
    expr = " ".join(found.group(1).split())
    series = [
        {"series": _selector(s.name, s.labels), "values": f"{s.value:g}x2"}
        for family in text_string_to_metric_families(text)
        if family.name == "tacit_trace_probability"
        for s in family.samples
        if s.name.endswith(("_bucket", "_count"))
    ]
    probabilities = [
        _tags(span).get("tacit.trace_probability")
        for trace in _traces(base).values()
        for span in trace["spans"]
    ]
    sure = [p for p in probabilities if p is not None]
    expected = 1 - sum(p <= 0.9 for p in sure) / len(sure)  # in the expression's order
    assert 0 < expected < 1
    test = {
        "rule_files": [],
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "1m",
                        "exp_samples": [{"labels": "{}", "value": expected}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "share.yml").write_text(json.dumps(test))
    run = subprocess.run(
        ["promtool", "test", "rules", "share.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def _selector(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def test_calls_left_unmapped_make_confidence_zero_and_an_empty_store_has_no_data(
    tmp_path: Path,
) -> None:
    """A call graph that names none of the calls (a deployment it predates): every call is
    stored unmapped, and each calling service's confidence is 0, not 100 %."""
    spans = lost_context(shop_spans(0.5))
    with running(tmp_path) as svc:
        empty = serve_app.get_json(svc, "/api/tacit/confidence")
        assert empty == {"data": [], "advice": instrument_next({})}
        assert empty["advice"].startswith("no data")
    with serving(spans, CallGraph({}), tmp_path / "stale.duckdb") as url:
        confidence = get_json(url, "/api/tacit/confidence")["data"]
        callers = {spans.strings[c] for c in spans.service[spans.kind == CLIENT].tolist()}
        assert {r["service"] for r in confidence} == callers
        assert all(r["confidence"] == 0.0 and r["links"] > 0 for r in confidence)
