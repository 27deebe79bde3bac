"""The feed between acknowledged spans and online TraceWeaver, without a running service."""

from __future__ import annotations

import math

import numpy as np

from serve_app import QUICK, shop_callgraph, shop_spans
from tacit.experiment.otlp_load import BATCH, sdk_spans
from tacit.formats.otlp import read_export_request
from tacit.model.spans import SERVER
from tacit.reconstruct.online import NS
from tacit.serve.online_feed import FUTURE, OnlineFeed


def _requests(seconds: float):
    """The shop app's spans as the SDK exporter's protobuf requests, decoded as ingest does."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = shop_spans(seconds, rate=200)
    readable = sdk_spans(spans)
    order = np.argsort(spans.end, kind="stable").tolist()
    for a in range(0, len(order), BATCH):
        body = encode_spans([readable[r] for r in order[a : a + BATCH]]).SerializeToString()
        yield read_export_request(body, "protobuf", "test request")


def test_low_water_is_the_lowest_sequence_number_still_pending():
    feed = OnlineFeed(shop_callgraph(), QUICK, first_position=1000)
    next_seq, checked = 5000, 0
    pending: set[int] = set()  # sequence numbers pushed and not yet released
    for spans, parent_ids in _requests(8):
        seq = np.arange(next_seq, next_seq + len(spans))
        fed = feed.push(spans, parent_ids, seq, math.inf)
        next_seq += len(spans)
        pending |= set(seq.tolist()) - {n for a in fed.alone for n in a.seq.tolist()}
        for f in fed.finished:
            released = feed.release(f)[0].tolist()
            assert set(released) <= pending and len(set(released)) == len(released)
            pending -= set(released)
            checked += 1
        assert feed.low_water(next_seq) == min(pending, default=next_seq)
        assert feed.pending == len(pending)
    for f in feed.advance(feed.tw.latest_end + 10 * NS):
        pending -= set(feed.release(f)[0].tolist())
    assert checked and not feed.pending and not pending
    assert feed.low_water(next_seq) == next_seq


def test_a_span_ending_after_it_may_is_finished_alone_and_moves_no_clock():
    """Amid the shop's requests, one whose server span ends 175 years after the request
    came: that span is finished alone with its reason, and the stream's clock, and so every
    span after it, is as without it: none is late, and everything finishes."""
    requests = list(_requests(4))
    cut = len(requests) // 2
    received = max(int(spans.end.max()) for spans, _ in requests[:cut])  # as if sent at once
    spans, parent_ids = requests[cut]
    server = int(np.flatnonzero(spans.kind == SERVER)[0])
    spans.end[server] = 230 * 365 * 86_400 * NS  # 2200
    feed = OnlineFeed(shop_callgraph(), QUICK)
    next_seq, alone, finished = 0, [], 0
    for k, (spans, parent_ids) in enumerate(requests):
        seq = np.arange(next_seq, next_seq + len(spans))
        ends_by = (received if k == cut else int(spans.end.max())) + 600 * NS
        fed = feed.push(spans, parent_ids, seq, ends_by)
        next_seq += len(spans)
        alone += [(int(n), why) for a in fed.alone for n, why in zip(a.seq, a.reason, strict=True)]
        finished += sum(len(f.position) for f in fed.finished)
        assert feed.tw.latest_end < 200 * 365 * 86_400 * NS
    finished += sum(len(f.position) for f in feed.advance(feed.tw.latest_end + 10 * NS))
    first = sum(len(s) for s, _ in requests[:cut])
    assert alone == [(first + server, FUTURE)]
    assert finished + len(alone) == next_seq


def test_every_reason_a_span_is_stored_without_a_parent_has_a_short_label():
    from tacit.serve.metrics import REASON_LABELS, reason_label

    assert len(set(REASON_LABELS.values())) == len(REASON_LABELS)
    assert all(label.isidentifier() for label in REASON_LABELS.values())
    assert reason_label("not an RPC span (internal)") == "not_rpc"


def test_ebpf_spans_pair_by_the_service_map_where_their_ends_are_named_apart(tmp_path):
    """Beyla's spans, each its own trace: a caller names the cart by its host name
    (``cart:8080``), the cart names its own address (``10.0.0.3:8080``). With the service map
    that names both, every call is paired with its request and reconstructed into it; without
    it, only the calls whose ends are named alike (catalog's address) are paired."""
    import json

    from agent_logs import CALLGRAPH_YAML, SERVICE_MAP_YAML, beyla_document, truth
    from serve_app import config, post
    from tacit.reconstruct.callgraph import CallGraph
    from tacit.serve import Service

    calls = truth(20, 2.0)
    body = json.dumps(beyla_document(calls)).encode()
    (tmp_path / "cg.yaml").write_text(CALLGRAPH_YAML)
    (tmp_path / "pods.yaml").write_text(SERVICE_MAP_YAML)
    graph = CallGraph.load(tmp_path / "cg.yaml")
    paired, unmapped = {}, {}
    for named in (True, False):
        d = tmp_path / str(named)
        d.mkdir()
        extra = {"capture_services": tmp_path / "pods.yaml"} if named else {}
        svc = Service(config(d, **extra), graph).start()
        try:
            assert post(svc, body, "application/json")[0] == 200
            assert svc.wait_idle(60)
            rows = svc.store._cursor().execute(
                "SELECT span_id, parent_span_id FROM spans WHERE kind = 'server'"
            )
            paired[named] = dict(rows.fetchall())
            unmapped[named] = (
                svc.store._cursor()
                .execute(
                    "SELECT count(*) FROM spans WHERE kind = 'client' AND parent_span_id IS NULL"
                )
                .fetchone()[0]
            )
        finally:
            svc.stop()
    callers = {
        f"{k + 1:016x}": f"{k:016x}"  # each server span follows its caller's client span
        for k, c in enumerate(calls)
        if c.kind == "server" and c.role != "front"
    }
    assert all(paired[True][s] == c for s, c in callers.items())
    # each call mapped to its request, the cart's ("GET", as the agent names a client span)
    # as the call graph names it, by the route its server span answered
    assert unmapped[True] == 0
    cart = [s for k, s in enumerate(callers) if calls[int(s, 16) - 1].role == "cart"]
    assert cart and all(paired[False][s] is None for s in cart)


def test_a_call_whose_server_span_was_lost_is_named_where_its_callee_was_seen_serving(tmp_path):
    """Beyla's spans with the cart's server spans of every other request lost: the calls to it
    that nothing answers are named by the address the cart's other requests were served at
    (through the service map), so each is reconstructed into the request that made it."""
    import json

    from agent_logs import CALLGRAPH_YAML, SERVICE_MAP_YAML, beyla_document, truth
    from serve_app import config, post
    from tacit.reconstruct.callgraph import CallGraph
    from tacit.serve import Service

    calls = truth(20, 2.0)
    doc = beyla_document(calls)
    lost = {
        f"{k + 1:016x}"
        for k, c in enumerate(calls)
        if c.role == "cart" and c.kind == "server" and c.request % 2
    }
    for resource in doc["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            scope["spans"] = [
                s for s in scope["spans"] if not {s["spanId"], s["parentSpanId"]} & lost
            ]
    (tmp_path / "cg.yaml").write_text(CALLGRAPH_YAML)
    (tmp_path / "pods.yaml").write_text(SERVICE_MAP_YAML)
    front = {c.request: f"{k + 1:016x}" for k, c in enumerate(calls) if c.role == "front"}
    unanswered = {
        f"{k + 1:016x}": front[c.request]
        for k, c in enumerate(calls)
        if c.role == "cart" and c.kind == "client" and c.request % 2
    }
    svc = Service(
        config(tmp_path, capture_services=tmp_path / "pods.yaml"),
        CallGraph.load(tmp_path / "cg.yaml"),
    ).start()
    try:
        assert post(svc, json.dumps(doc).encode(), "application/json")[0] == 200
        assert svc.wait_idle(60)
        rows = svc.store._cursor().execute("SELECT span_id, parent_span_id FROM spans")
        parent = dict(rows.fetchall())
    finally:
        svc.stop()
    assert unanswered and {s: parent[s] for s in unanswered} == unanswered
