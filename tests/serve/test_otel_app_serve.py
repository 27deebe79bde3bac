"""``tacit serve`` fed live by services instrumented with the OpenTelemetry SDK (``tacit
experiment otel-app``), their trace context broken as deployments break it, its stored traces
scored against the app's own log of every span's parent. Small runs; ``bench/bench_serve_otel.py``
measures the targets at a moderate load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_app import get
from tacit.evaluation import score_traces
from tacit.experiment.otel_app import OtelAppParams, otel_app_unavailable, run_otel_app
from tacit.formats import observe
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.reconstruct.online import NS, OnlineParams
from tacit.serve import ServeConfig, Service

pytestmark = [
    pytest.mark.skipif(
        otel_app_unavailable() is not None,
        reason=f"otel app unavailable: {otel_app_unavailable()}",
    ),
    # Live: the app's processes, run beside the unit tests (make test). Reconstruction infers
    # from timing, which a loaded machine blurs: the accuracy asserted is what it keeps.
    pytest.mark.live,
]

RUN = {"duration_s": 3.0, "rate": 10.0, "concurrency": 3, "export_delay_s": 0.2}
WINDOWS = OnlineParams(window_ns=NS, lookahead_ns=NS, max_request_ns=2 * NS, lateness_ns=2 * NS)
"""Short windows, and a lateness for five processes that export every 0.2 s each on its own."""


@pytest.fixture(scope="module")
def callgraph(tmp_path_factory) -> CallGraph:
    """Learned from a run with full propagation: the test environment."""
    run = run_otel_app(OtelAppParams(mode="full", **RUN), tmp_path_factory.mktemp("test-env"))
    assert run.spans is not None
    return learn_callgraph(observe([run.spans])[0].spans)


def _served(mode: str, callgraph: CallGraph, tmp: Path) -> tuple[dict, dict, str]:
    """The score of what the service stored of a run in ``mode``, its status and metrics."""
    config = ServeConfig(http="127.0.0.1:0", grpc="", database=tmp / "tacit.duckdb", online=WINDOWS)
    svc = Service(config, callgraph).start()
    try:
        endpoint = f"http://127.0.0.1:{svc.http_port}"
        run = run_otel_app(OtelAppParams(mode=mode, otlp_endpoint=endpoint, **RUN), tmp / "app")
        assert svc.wait_idle(60)
        status = svc.extra("/api/tacit/status", {})
        metrics = get(svc, "/metrics")[1].decode()
        cur = svc.store._cursor()
        ids = [r[0] for r in cur.execute("SELECT trace_id FROM traces").fetchall()]
        traces = [json.loads(doc) for t in ids if (doc := svc.store.trace(t)) is not None]
        given = dict(cur.execute("SELECT span_id, given_parent_id FROM spans").fetchall())
        status["client spans tagged given"] = cur.execute(
            "SELECT count(*) FILTER (link = 'given'), count(*) FROM spans WHERE kind = 'client'"
        ).fetchall()[0]
    finally:
        svc.stop()
    assert run.requests_answered == run.requests_sent > 0
    return score_traces(run.truth, traces, given), status, metrics


def test_full_propagation_every_link_is_kept_and_every_request_whole(tmp_path, callgraph):
    score, status, metrics = _served("full", callgraph, tmp_path)
    assert score["missing"] == 0 and score["inferred"]["links"] == 0
    assert score["given"]["kept"] == score["given"]["links"] > 0
    assert score["requests"]["right"] == score["requests"]["total"]
    assert status["stored"]["spans"] == status["received"]
    fates = {
        x.labels["fate"]: x.value
        for family in text_string_to_metric_families(metrics)
        for x in family.samples
        if x.name == "tacit_spans_stored_total"
    }
    assert sum(fates.values()) == status["received"] and fates["given"] > 0
    tagged, calls = status["client spans tagged given"]
    assert tagged == calls > 0
    assert f"tacit_links_given_total {calls}.0" in metrics


def test_calls_that_lost_their_context_are_inferred_and_given_links_kept(tmp_path, callgraph):
    """A thread pool that does not carry the context: its calls are inferred, most of them
    right, the request's other call kept (how many are right, and the detached mode, every call
    lost, are in bench/bench_serve_otel.py)."""
    score, status, _ = _served("threadpool", callgraph, tmp_path)
    assert score["missing"] == 0
    assert score["given"]["kept"] == score["given"]["links"] > 0
    assert score["inferred"]["right"] > 0.5 * score["inferred"]["links"] > 0
    assert status["stored"]["spans"] == status["received"]


@pytest.mark.parametrize("mode", ["nopropagation", "queue"])
def test_without_context_requests_and_messages_are_paired_by_address(tmp_path, callgraph, mode):
    """A propagator that carries nothing: each server span is paired with the call that named
    its address and encloses it (the requests instrumentation's URL, the WSGI Host header). A
    queue's consumer, with the producer that named its queue and message."""
    score, _, _ = _served(mode, callgraph, tmp_path)
    assert score["missing"] == 0
    assert score["given"]["kept"] == score["given"]["links"] > 0
    assert score["inferred"]["right"] >= 0.9 * score["inferred"]["links"] > 0
    assert score["requests"]["right"] >= 0.9 * score["requests"]["total"]


def test_an_uninstrumented_service_is_drawn_between_its_caller_and_its_callees(tmp_path, callgraph):
    """The search service sends no spans and drops the context: the frontend's calls to it
    have no server span, and the geo and rate requests it makes no caller. Each such call gets
    a server span of search drawn with its times, each such request a client span of search,
    and TraceWeaver tells which call made which request: most of them here; how many is
    ``bench/bench_serve_otel.py``'s figure, since it moves with how much the machine's load
    makes requests overlap."""
    score, status, _ = _served("uninstrumented", callgraph, tmp_path)
    assert score["missing"] == 0
    assert score["given"]["kept"] == score["given"]["links"] > 0
    assert score["inferred"]["right"] > 0.5 * score["inferred"]["links"] > 0
    hops = score["unobserved_hops"]  # drawn right where every link it rests on is right
    assert 0 < hops["drawn"] <= hops["hops"]
    assert status["stored"]["spans"] == status["received"]
    assert status["stored"]["drawn_spans"] > 0
