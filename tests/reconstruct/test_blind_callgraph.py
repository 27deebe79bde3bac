"""A call graph learned from production's own spans: the requests that ran alone at their
instance, and those whose context was kept."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spanrows import table
from tacit.evaluation.trace_accuracy import score_reconstruction
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.blind_callgraph import _keeps_order, learn_blind
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.simulate import load_app, simulate

QUICK = TraceWeaverParams(max_components=2, max_iterations=4)


def _accuracy(obs, graph: CallGraph) -> float:
    rec = reconstruct_traceweaver(obs.without_truth(), graph, QUICK)
    return score_reconstruction(obs.spans, rec).accuracy


@pytest.fixture(scope="module")
def shop():
    app = load_app(None)
    return {rate: infer_roles(simulate(app, rate, n_requests=300, seed=3)) for rate in (100, 700)}


def test_blind_spans_at_a_moderate_load_teach_the_call_graph_their_truth_would(shop):
    """At 100 requests/s many requests run alone at every instance: the call graph learned
    from them reconstructs as well as the one learned from the same spans' ground truth."""
    obs = shop[100]
    graph, support = learn_blind(obs.without_truth())
    assert not support.left_out()
    assert set(graph.endpoints) == set(learn_callgraph(obs.spans).endpoints)
    for key, g in graph.endpoints.items():
        assert g.support == {"seen": support.seen[key], **support.counts(key)}
        assert g.requests == support.known(key)
        assert 0 < g.requests <= support.seen[key]
    assert _accuracy(obs, graph) >= _accuracy(obs, learn_callgraph(obs.spans)) - 0.01


def test_spans_whose_context_was_kept_are_ground_truth_as_they_are(shop):
    """With every call's parent given, every request is known, alone or by its context, and
    the call graph is the one its ground truth teaches (less the joins, which need the
    trace)."""
    obs = shop[700]
    graph, support = learn_blind(obs.without_truth(given=True))
    truth = learn_callgraph(obs.spans)
    assert all(support.known(key) == n for key, n in support.seen.items())
    assert sum(support.given.values()) > 0
    for key, g in truth.endpoints.items():
        g.support = graph.endpoints[key].support
    assert graph.to_yaml() == truth.to_yaml()


def test_an_endpoint_no_request_ran_alone_at_is_left_out_and_counted():
    """At 700 requests/s the front end is never alone, and without thread ids nothing tells
    its requests' calls apart: its endpoints are left out (with the requests seen), the
    services behind it learned."""
    spans = simulate(load_app(None), 700, n_requests=300, seed=3, record_threads=False)
    graph, support = learn_blind(infer_roles(spans).without_truth())
    left = support.left_out()
    assert {svc for svc, _ in left} == {"frontend"}
    assert sum(left.values()) == 300
    assert not set(left) & set(graph.endpoints) and graph.endpoints


def test_a_thread_per_request_tells_a_busy_instances_requests_apart(shop):
    """With thread ids, each worker of the busy front end serves one request at a time and
    makes its calls on its own thread: every request there is known on its thread, and the
    call graph reconstructs as the one its ground truth teaches."""
    obs = shop[700]
    graph, support = learn_blind(obs.without_truth())
    assert not support.left_out()
    assert all(support.alone[k] == n for k, n in support.seen.items() if k[0] == "frontend")
    assert _accuracy(obs, graph) >= _accuracy(obs, learn_callgraph(obs.spans)) - 0.01


def test_the_command_learns_blind_and_says_what_it_rests_on(tmp_path, shop):
    from clirun import run_here
    from tacit.formats.blind import write_blind

    write_blind(tmp_path / "blind.jsonl", shop[100].without_truth())
    refused = run_here("callgraph", "blind.jsonl", cwd=tmp_path)
    assert refused.returncode == 2 and "blind spans" in refused.stderr
    done = run_here("callgraph", "blind.jsonl", "--blind", "--out", "cg.yaml", "--json",
                    cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["support"]["left_out"] == {}
    assert doc["support"]["endpoints"]["frontend GET /product"]["alone"] > 0
    graph = CallGraph.load(tmp_path / "cg.yaml")
    assert graph.get("frontend", "GET /product").support["seen"] > 0


def _instance(rows: list[tuple]) -> SpanTable:
    """Blind spans of one instance of service a; rows: (endpoint, kind, start, end, thread),
    every call to service b."""
    return table(
        [(k, ep, None if k == SERVER else "b", start, end, NONE, thread)
         for ep, k, start, end, thread in rows]
    )  # fmt: skip


def _burst(lag: list[int]) -> tuple[SpanTable, np.ndarray]:
    """a.E calling b.X: 5 requests alone, then 40 arriving 10 ns apart, request i calling
    lag[i % len(lag)] ns after its arrival; and the mapping that is their truth."""
    rows: list[tuple] = []
    truth: list[int] = []
    arrivals = [1000 * i for i in range(5)] + [10_000 + 10 * i for i in range(40)]
    for i, t in enumerate(arrivals):
        x = lag[i % len(lag)]
        rows += [("E", SERVER, t, t + 100, NONE), ("X", CLIENT, t + x, t + x + 5, NONE)]
        truth += [NONE, len(rows) - 2]
    return _instance(rows), np.array(truth, dtype=np.int64)


def test_whether_calls_leave_out_of_order_is_read_from_a_reconstruction():
    """Requests that ran alone never show calls overtaking each other: the order is read from
    the mapping of every request (here their truth; by default a reconstruction)."""
    for lag, reorders in (([25], False), ([25, 5], True)):
        spans, truth = _burst(lag)
        graph, support = learn_blind(spans, truth)
        assert support.alone[("a", "E")] == 5
        assert graph.get("a", "E").reorders is reorders


def test_requests_that_overlap_are_known_where_their_calls_are_apart_in_time():
    """Two requests of a.E overlap; each call overlaps only one of them, so it is that one's.
    A call that overlaps both leaves both unknown."""

    def spans(calls: list[tuple[int, int]]) -> SpanTable:
        rows = [("E", SERVER, 0, 100, NONE), ("E", SERVER, 60, 200, NONE)]
        return _instance(rows + [("X", CLIENT, a, b, NONE) for a, b in calls])

    apart = spans([(10, 20), (20, 40), (150, 190)])
    graph, support = learn_blind(apart, np.full(len(apart), NONE))
    assert support.alone[("a", "E")] == 2
    assert sorted(p.requests for p in graph.get("a", "E").paths) == [1, 1]
    assert sorted(len(p.slots) for p in graph.get("a", "E").paths) == [1, 2]
    graph, support = learn_blind(spans([(10, 20), (70, 90)]), np.full(4, NONE))
    assert support.known(("a", "E")) == 0 and not graph.endpoints


def test_a_join_is_learned_from_the_requests_whose_links_reach_one_top():
    """The reviews app's compose service is a join: three calls of one request arrive
    together, and the last calls onward for all. Blind, the three are known together (their
    calls apart in time) and grouped by the top span their known links reach."""
    from reviews_app import reviews_app

    obs = infer_roles(simulate(reviews_app(), 60, n_requests=200, seed=5, record_threads=False))
    truth = learn_callgraph(obs.spans)
    graph, _ = learn_blind(obs.without_truth())
    for key, g in truth.endpoints.items():
        if key[0] == "compose":
            assert g.join is not None and graph.endpoints[key].join == g.join
            roles = {p.role for p in graph.endpoints[key].paths}
            assert {"trigger", "member"} <= roles
    assert _accuracy(obs, graph) >= _accuracy(obs, truth) - 0.02


def test_calls_on_a_pool_thread_are_not_told_apart_by_thread():
    """Requests on their own threads whose calls run on a pool's thread: the threads tell
    nothing, and none of the overlapping requests is learned as making no call."""
    rows: list[tuple] = []
    for i in range(30):
        t = 50 * i
        rows += [("E", SERVER, t, t + 120, i % 3), ("X", CLIENT, t + 10, t + 110, 9)]
    graph, support = learn_blind(_instance(rows), np.full(len(rows), NONE))
    assert support.known(("a", "E")) == 0 and not graph.endpoints
    on_own = [(e, k, a, b, (i // 2) % 3) for i, (e, k, a, b, _) in enumerate(rows)]
    graph, support = learn_blind(_instance(on_own), np.full(len(rows), NONE))
    assert support.alone[("a", "E")] == 30
    assert [len(p.slots) for p in graph.get("a", "E").paths] == [1]


def test_tolerances_are_what_every_call_shows_at_least():
    """The requests known show no call ending after its request; two that are not (a call
    reaches from one into the other) show 30 ns at least: the tolerance is twice that."""
    rows = [("E", SERVER, 1000 * i, 1000 * i + 100, NONE) for i in range(5)]
    rows += [("X", CLIENT, 1000 * i + 10, 1000 * i + 90, NONE) for i in range(5)]
    rows += [("E", SERVER, 9000, 9100, NONE), ("X", CLIENT, 9050, 9130, NONE)]
    rows += [("E", SERVER, 9120, 9200, NONE), ("X", CLIENT, 9150, 9160, NONE)]
    graph, support = learn_blind(_instance(rows), np.full(len(rows), NONE))
    assert support.alone[("a", "E")] == 5 and support.seen[("a", "E")] == 7
    assert [(x.early_ns, x.late_ns) for x in graph.get("a", "E").slots] == [(0, 60)]


def test_a_call_started_soon_after_its_request_ended_is_its_continuation():
    """A call that starts 5 ns after the response (a continuation, or a start rounded past
    it) is the request's, ending 50 ns late; one that starts later than the request lasted
    after it is no request's."""
    rows = [("E", SERVER, 1000 * i, 1000 * i + 100, NONE) for i in range(3)]
    rows += [("X", CLIENT, 1000 * i + 105, 1000 * i + 150, NONE) for i in range(3)]
    rows += [("Y", CLIENT, 1000 * i + 300, 1000 * i + 310, NONE) for i in range(3)]
    graph, support = learn_blind(_instance(rows), np.full(len(rows), NONE))
    assert support.alone[("a", "E")] == 3
    assert [(x.endpoint, x.late_ns) for x in graph.get("a", "E").slots] == [("X", 100)]


def test_a_request_never_alone_is_known_once_the_requests_around_it_are_explained():
    """a.F runs long and never alone: an a.E request, whose path five lone ones teach, runs
    inside it, and that request's call overlaps both. The first reconstruction explains the
    a.E request by its one call; F's call to Y is then left to F alone, and F's path is its
    truth."""
    rows = [("E", SERVER, 1000 * i, 1000 * i + 100, NONE) for i in range(5)]
    rows += [("X", CLIENT, 1000 * i + 10, 1000 * i + 20, NONE) for i in range(5)]
    rows += [("F", SERVER, 9000, 9400, NONE), ("Y", CLIENT, 9300, 9350, NONE)]
    rows += [("E", SERVER, 9100, 9200, NONE), ("X", CLIENT, 9110, 9120, NONE)]
    graph, support = learn_blind(_instance(rows), np.full(len(rows), NONE))
    assert support.alone[("a", "E")] == 5 and support.explained == {("a", "F"): 1}
    assert [[x.callee for x in p.slots] for p in graph.get("a", "F").paths] == [[("b", "Y")]]
    assert graph.get("a", "F").support == {"seen": 1, "alone": 0, "given": 0, "explained": 1}


def test_path_frequencies_are_counted_over_every_request_not_only_those_alone():
    """a.E answers 4 requests from a cache (no call) and 8 by calling b.X, which takes long:
    the 4 and 2 of the 8 run alone, the other 6 in overlapping pairs whose calls overlap both.
    Known alone, the cache hit would be two paths in three; counted over the mapping of every
    request (here their truth), it is one in three."""
    rows: list[tuple] = []
    truth: list[int] = []
    for i in range(6):  # 4 cache hits, then 2 calls, each alone
        t = 1000 * i
        rows.append(("E", SERVER, t, t + (500 if i >= 4 else 50), NONE))
        truth.append(NONE)
        if i >= 4:
            rows.append(("X", CLIENT, t + 200, t + 250, NONE))
            truth.append(len(rows) - 2)
    for i in range(3):  # pairs: each call overlaps both requests of its pair
        t = 10_000 + 1000 * i
        rows += [("E", SERVER, t, t + 500, NONE), ("E", SERVER, t + 100, t + 600, NONE)]
        rows += [("X", CLIENT, t + 200, t + 250, NONE), ("X", CLIENT, t + 300, t + 350, NONE)]
        n = len(rows)
        truth += [NONE, NONE, n - 4, n - 3]
    graph, support = learn_blind(_instance(rows), np.array(truth, dtype=np.int64))
    assert support.alone[("a", "E")] == 6 and support.seen[("a", "E")] == 12
    paths = {tuple(x.callee for x in p.slots): p.requests for p in graph.get("a", "E").paths}
    assert paths == {(): 4, (("b", "X"),): 8}


def test_calls_that_break_the_order_lone_requests_keep_do_not_explain_a_request():
    """a.E calls b.X, then b.Y once X has answered, in each of its 5 lone requests. A request
    whose calls would be X and Y at once is not taken as known (its calls are likely another
    request's); one whose calls keep the order is, and so is one of a path not known yet."""
    rows = [("E", SERVER, 1000 * i, 1000 * i + 100, NONE) for i in range(5)]
    rows += [("X", CLIENT, 1000 * i + 10, 1000 * i + 20, NONE) for i in range(5)]
    rows += [("Y", CLIENT, 1000 * i + 30, 1000 * i + 40, NONE) for i in range(5)]
    rows += [("E", SERVER, 9000, 9100, NONE), ("X", CLIENT, 9010, 9050, NONE)]
    rows += [("Y", CLIENT, 9020, 9060, NONE), ("Y", CLIENT, 9070, 9080, NONE)]
    spans = _instance(rows)
    graph, _ = learn_blind(spans.take(np.arange(15)), np.full(15, NONE))
    request, x, y_at_once, y_after = 15, 16, 17, 18
    assert not _keeps_order(spans, graph, request, [x, y_at_once])
    assert _keeps_order(spans, graph, request, [x, y_after])
    assert _keeps_order(spans, graph, request, [x, y_at_once, y_after])  # a path not known


def test_requests_of_new_paths_that_overlap_each_other_are_known_in_rounds(monkeypatch):
    """Lone a.E requests make no call or call b.Y. An a.F request never runs alone; the first
    round learns its path (Z, then W) once the a.E request inside it is explained. Later an
    a.F and an a.E request overlap, each on a path no lone request showed (the E one calls X
    three times, and F's call to Z lasts through it). The next round maps the F request onto
    its path, and the X calls are then the E request's alone. Mapped onto no call, that E
    request is not taken as making none while its X calls are left unmapped."""
    rows = [("E", SERVER, 1000 * i, 1000 * i + 100, NONE) for i in range(4)]
    rows += [("Y", CLIENT, 1000 * i + 10, 1000 * i + 20, NONE) for i in (2, 3)]
    rows += [("F", SERVER, 9000, 9400, NONE), ("E", SERVER, 9100, 9200, NONE)]
    rows += [("Y", CLIENT, 9110, 9120, NONE), ("Z", CLIENT, 9250, 9300, NONE)]
    rows += [("W", CLIENT, 9320, 9350, NONE)]
    rows += [("F", SERVER, 20_000, 21_000, NONE), ("Z", CLIENT, 20_050, 20_900, NONE)]
    rows += [("W", CLIENT, 20_950, 20_980, NONE), ("E", SERVER, 20_100, 20_600, NONE)]
    rows += [("X", CLIENT, 20_100 + 100 * i, 20_150 + 100 * i, NONE) for i in (1, 2, 3)]
    spans = _instance(rows)

    def paths(graph: CallGraph, endpoint: str) -> set[tuple[str, ...]]:
        return {tuple(x.endpoint for x in p.slots) for p in graph.get("a", endpoint).paths}

    graph, support = learn_blind(spans, np.full(len(rows), NONE))
    assert paths(graph, "F") == {("Z", "W")}
    assert paths(graph, "E") == {(), ("Y",), ("X", "X", "X")}
    assert support.explained == {("a", "F"): 1, ("a", "E"): 1}
    monkeypatch.setattr("tacit.reconstruct.blind_callgraph.EXPLAIN_ROUNDS", 1)
    graph, support = learn_blind(spans, np.full(len(rows), NONE))
    assert paths(graph, "E") == {(), ("Y",)} and support.explained == {("a", "F"): 1}
