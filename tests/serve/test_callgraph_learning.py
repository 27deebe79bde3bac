"""``tacit serve`` without a call graph: it learns one from the spans it stores, and
reconstructs with it from then on."""

from __future__ import annotations

import numpy as np

from serve_app import config, get_json, shop_spans
from tacit.experiment.otlp_load import encoded_requests, lost_context, post_requests
from tacit.model.spans import CLIENT
from tacit.serve import Service
from tacit.serve.callgraph_learner import MIN_SUPPORT


def _send(svc: Service, spans) -> None:
    url = f"http://127.0.0.1:{svc.http_port}/v1/traces"
    log = post_requests(encoded_requests(spans, shift_ns=0), url, connections=1)
    assert log.acknowledged == len(spans)


def test_without_a_call_graph_the_service_learns_one_and_reconstructs_with_it(tmp_path):
    """The shop app's spans, every call's context lost: the first part is stored unmapped
    while the call graph is learned from the requests that ran alone; the calls of the second
    part are reconstructed with it. A restart starts with the call graph learned."""
    truth = shop_spans(24, rate=20)
    spans = lost_context(truth)
    half = float(np.median(spans.start))
    first, second = spans.take(spans.start < half), spans.take(spans.start >= half)
    ids = truth.strings.values
    calls = np.flatnonzero((truth.kind == CLIENT) & (truth.start >= half))
    true_parent = {ids[truth.span_id[c]]: ids[truth.span_id[truth.parent[c]]] for c in calls}
    # The stream's clock stands still while the test waits for the learning between the parts
    # (the second part's spans continue the first's).
    svc = Service(config(tmp_path, idle_s=3600))
    svc.reconstructor.learn_every_s = 0.5
    svc.start()
    try:
        before = get_json(svc, "/api/tacit/status")["callgraph"]
        _send(svc, first)
        _wait(lambda: len(svc.callgraph.endpoints) > 0)
        learned = get_json(svc, "/api/tacit/status")["callgraph"]
        _send(svc, second)
        svc.reconstructor.idle_s = 1.0
        assert svc.wait_idle(60)
        stored = dict(
            svc.store._cursor()
            .execute(
                "SELECT span_id, parent_span_id FROM spans WHERE kind = 'client' AND seq >= ?",
                [len(first)],
            )
            .fetchall()
        )

    finally:
        svc.stop()
    assert before["endpoints"] == {} and svc.callgraph.endpoints
    endpoints = learned["endpoints"]
    assert endpoints["frontend GET /product"]["learned"]
    for name, e in endpoints.items():
        assert e["learned"] == (e["alone"] + e["given"] >= MIN_SUPPORT), name
    assert stored.keys() == true_parent.keys()
    right = sum(stored[c] == p for c, p in true_parent.items())
    assert right >= 0.9 * len(true_parent)
    again = Service(config(tmp_path))
    assert again.callgraph.endpoints.keys() == svc.callgraph.endpoints.keys()
    again.store.close()


def _wait(condition, timeout_s: float = 60) -> None:
    import time

    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "not learned in time"
        time.sleep(0.1)
