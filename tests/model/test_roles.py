"""Role inference on hand-built traces: kinds, in-process spans, synthesized callers, databases."""

from __future__ import annotations

import numpy as np

from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTableBuilder


def build(spans: list[tuple]):
    """spans: (span_id, parent_id, service, endpoint, kind, start, end); one trace."""
    b = SpanTableBuilder("hand")
    for i, (sid, pid, svc, ep, kind, s, e) in enumerate(spans):
        b.add(
            service=svc,
            instance=f"{svc}-0",
            endpoint=ep,
            kind=kind,
            start=s,
            end=e,
            record=i,
            trace="t1",
            span_id=sid,
            parent_id=pid,
        )
    return b.build()


def row(table, endpoint: str, kind: int | None = None, service: str | None = None) -> int:
    s = table.strings
    m = table.endpoint == s.find(endpoint)
    if kind is not None:
        m &= table.kind == kind
    if service is not None:
        m &= table.service == s.find(service)
    hits = np.flatnonzero(m)
    assert len(hits) == 1, (endpoint, kind, service, hits)
    return int(hits[0])


def check_accounting(obs, n_input: int) -> None:
    a = obs.accounting
    assert a["input"] == n_input
    internal = a["internal"]
    synth = a["client_synthesized"]
    assert a["server"] + a["client"] + internal == n_input
    assert len(obs.spans) == a["server"] + a["client"] + synth
    assert int(obs.synthesized.sum()) == synth
    assert int((obs.spans.kind == SERVER).sum()) == a["server"]
    assert int((obs.spans.kind == CLIENT).sum()) == a["client"] + synth


def check_links(t) -> None:
    """Links pair a client and a server span both ways; server parents are their links."""
    for r in np.flatnonzero(t.link != NONE):
        assert t.link[t.link[r]] == r
        assert {int(t.kind[r]), int(t.kind[t.link[r]])} == {SERVER, CLIENT}
    server = t.kind == SERVER
    assert np.array_equal(t.parent[server], t.link[server])


def test_missing_kinds_are_inferred():
    obs = infer_roles(
        build(
            [
                ("a", None, "front", "GET /", UNKNOWN, 0, 100),
                ("b", "a", "front", "call cart", UNKNOWN, 10, 60),
                ("c", "b", "cart", "Cart/Get", UNKNOWN, 20, 50),
            ]
        )
    )
    t = obs.spans
    root = row(t, "GET /")
    call = row(t, "call cart")
    srv = row(t, "Cart/Get")
    assert t.kind[root] == SERVER and t.kind[call] == CLIENT and t.kind[srv] == SERVER
    assert t.parent[call] == root
    assert t.link[call] == srv and t.link[srv] == call and t.parent[srv] == call
    assert t.parent[root] == NONE
    assert t.peer[call] == t.strings.find("cart")
    assert not obs.synthesized.any()
    check_links(t)
    check_accounting(obs, 3)


def test_internal_span_between_server_and_client_is_skipped():
    obs = infer_roles(
        build(
            [
                ("a", None, "front", "GET /", SERVER, 0, 100),
                ("i", "a", "front", "render", INTERNAL, 5, 90),
                ("j", "i", "front", "inner", UNKNOWN, 6, 80),  # in-process, has children
                ("b", "j", "front", "Cart/Get", CLIENT, 10, 60),
                ("c", "b", "cart", "Cart/Get", SERVER, 20, 50),
            ]
        )
    )
    t = obs.spans
    assert len(t) == 3
    assert t.strings.find("render") not in t.endpoint.tolist()
    assert t.strings.find("inner") not in t.endpoint.tolist()
    root = row(t, "GET /")
    call = row(t, "Cart/Get", CLIENT)
    srv = row(t, "Cart/Get", SERVER)
    assert t.parent[call] == root  # the internal spans are skipped
    assert t.link[call] == srv and t.parent[srv] == call
    check_links(t)
    check_accounting(obs, 5)
    assert obs.accounting["internal"] == 2


def test_server_called_by_server_gets_a_synthesized_client():
    obs = infer_roles(
        build(
            [
                ("a", None, "front", "GET /", SERVER, 0, 100),
                ("i", "a", "front", "handler", INTERNAL, 2, 95),
                ("c", "i", "cart", "Cart/Get", SERVER, 20, 50),
                ("d", "a", "pay", "Pay", UNKNOWN, 60, 80),  # kind missing, remote parent
            ]
        )
    )
    t = obs.spans
    s = t.strings
    root = row(t, "GET /")
    assert obs.synthesized.sum() == 2
    for ep, callee in (("Cart/Get", "cart"), ("Pay", "pay")):
        srv = row(t, ep, SERVER)
        cl = row(t, ep, CLIENT)
        assert obs.synthesized[cl] and not obs.synthesized[srv]
        # In the caller's process, with the callee as peer, causally under the caller's server span.
        assert t.service[cl] == s.find("front") and t.instance[cl] == s.find("front-0")
        assert t.peer[cl] == s.find(callee)
        assert t.parent[cl] == root
        assert t.link[cl] == srv and t.link[srv] == cl and t.parent[srv] == cl
        assert (t.start[cl], t.end[cl]) == (t.start[srv], t.end[srv])
        assert t.span_id[cl] == NONE
    assert not obs.synthesized[root]
    check_links(t)
    check_accounting(obs, 4)


def test_database_leaf_becomes_a_client_span():
    obs = infer_roles(
        build(
            [
                ("a", None, "front", "GET /", SERVER, 0, 100),
                ("q", "a", "front", "SELECT * FROM items", UNKNOWN, 10, 20),
                ("r", "a", "front", "redis HGET cart", UNKNOWN, 25, 30),
                ("w", "a", "front", "compute totals", UNKNOWN, 35, 40),
            ]
        )
    )
    t = obs.spans
    root = row(t, "GET /")
    q = row(t, "SELECT * FROM items")
    r = row(t, "redis HGET cart")
    assert t.kind[q] == CLIENT and t.kind[r] == CLIENT
    assert t.parent[q] == root and t.parent[r] == root
    assert t.link[q] == NONE  # the database is not traced
    assert t.strings.find("compute totals") not in t.endpoint.tolist()  # in-process work
    assert obs.accounting["internal"] == 1
    check_accounting(obs, 4)


def test_without_truth_removes_identifiers_but_keeps_links():
    obs = infer_roles(
        build(
            [
                ("a", None, "front", "GET /", SERVER, 0, 100),
                ("b", "a", "front", "Cart/Get", CLIENT, 10, 60),
                ("c", "b", "cart", "Cart/Get", SERVER, 20, 50),
            ]
        )
    )
    blind = obs.without_truth()
    assert np.all(blind.parent == NONE) and np.all(blind.trace == NONE)
    assert np.all(blind.span_id == NONE)
    assert np.array_equal(blind.link, obs.spans.link)
    assert np.array_equal(blind.kind, obs.spans.kind)
    assert np.any(obs.spans.parent != NONE)  # the original keeps its truth


def test_several_traces_and_instances_accounting():
    b = SpanTableBuilder("hand")
    rec = 0
    for k in range(5):
        inst = f"front-{k % 2}"
        spans = [
            ("a", None, "front", inst, "GET /", SERVER, 0, 100),
            ("i", "a", "front", inst, "work", INTERNAL, 1, 99),
            ("b", "i", "front", inst, "Cart/Get", CLIENT, 10, 60),
            ("c", "b", "cart", "cart-0", "Cart/Get", SERVER, 20, 50),
            ("d", "c", "cart", "cart-0", "Store", SERVER, 30, 40),
        ]
        for sid, pid, svc, ins, ep, kind, s, e in spans:
            b.add(
                service=svc,
                instance=ins,
                endpoint=ep,
                kind=kind,
                start=1000 * k + s,
                end=1000 * k + e,
                record=rec,
                trace=f"t{k}",
                span_id=sid,
                parent_id=pid,
            )
            rec += 1
    obs = infer_roles(b.build())
    check_accounting(obs, 25)
    a = obs.accounting
    assert (a["server"], a["client"]) == (15, 5)
    t = obs.spans
    # Every client span's causal parent is a server span of its own process.
    for c in np.flatnonzero(t.kind == CLIENT):
        p = t.parent[c]
        assert p != NONE and t.kind[p] == SERVER
        assert (t.service[p], t.instance[p]) == (t.service[c], t.instance[c])
        assert t.trace[p] == t.trace[c]
    check_links(t)
    assert np.all(np.diff(t.start) >= 0)


def test_an_in_process_span_calling_several_services_is_not_a_client_span():
    # Media Microservices' nginx: a handler span (ComposeReview) in the same process as the
    # request is the parent of calls to two services, which record only their server spans.
    obs = infer_roles(
        build(
            [
                ("r", None, "nginx", "/compose", UNKNOWN, 0, 100),
                ("h", "r", "nginx", "ComposeReview", UNKNOWN, 5, 95),
                ("a", "h", "text", "UploadText", UNKNOWN, 10, 40),
                ("b", "h", "user", "UploadUser", UNKNOWN, 20, 60),
            ]
        )
    )
    t = obs.spans
    check_accounting(obs, 4)
    check_links(t)
    assert obs.accounting["internal"] == 1
    assert obs.accounting["client_synthesized"] == 2
    root = row(t, "/compose", SERVER)
    for ep, svc in (("UploadText", "text"), ("UploadUser", "user")):
        call = row(t, ep, CLIENT)
        assert t.parent[call] == root  # the request, not the handler span
        assert t.name("peer", call) == svc
        assert t.link[call] == row(t, ep, SERVER)


def test_a_span_wrapping_retries_of_one_call_is_a_client_span():
    obs = infer_roles(
        build(
            [
                ("r", None, "front", "GET /", UNKNOWN, 0, 100),
                ("c", "r", "front", "call cart", UNKNOWN, 10, 80),
                ("s1", "c", "cart", "Cart/Get", UNKNOWN, 15, 30),
                ("s2", "c", "cart", "Cart/Get", UNKNOWN, 40, 70),
            ]
        )
    )
    t = obs.spans
    call = row(t, "call cart")
    assert t.kind[call] == CLIENT
    assert obs.accounting["client_synthesized"] == 1
