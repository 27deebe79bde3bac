"""Reconstruction on every export shape real span data has, from a simulated app with ground
truth: no kinds, server-only spans, nested handler spans, untraced databases, a join, async
calls and calls repeated a variable number of times (tacit.simulate.exports)."""

from __future__ import annotations

import numpy as np
import pytest

from reviews_app import UNTRACED, reviews_app
from tacit.evaluation.reconstruction import evaluate
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.simulate import simulate
from tacit.simulate.exports import export_shape

SHAPES = {
    "kinds": {},
    "no kinds": {"kinds": False},
    "server only": {"client_spans": False},
    "server only, handler spans, no kinds": {
        "kinds": False,
        "client_spans": False,
        "handler_spans": True,
    },
}
BASELINES = ("fcfs", "wap5", "vpath")


@pytest.fixture(scope="module")
def spans():
    return simulate(reviews_app(), 120, n_requests=300, seed=5, record_threads=False)


@pytest.fixture(scope="module", params=list(SHAPES))
def shaped(request, spans):
    return request.param, export_shape(spans, untraced=UNTRACED, **SHAPES[request.param])


def test_every_shape_is_reconstructed_better_than_the_baselines(shaped):
    name, table = shaped
    ev = evaluate(table, ("traceweaver", *BASELINES))
    res = {r["algorithm"]: r for r in ev.results}
    tw = res["traceweaver"]
    assert ev.traces == 300
    assert tw["accuracy"] >= 0.6, (name, tw["accuracy"])
    assert tw["link_accuracy"] >= 0.95, (name, tw["link_accuracy"])
    for b in BASELINES:
        assert tw["accuracy"] >= res[b]["accuracy"], (name, b, res[b]["accuracy"])


def test_the_export_keeps_the_reconstruction_task(shaped, spans):
    """Whatever the shape, the same calls are to be mapped: one per RPC of the app."""
    name, table = shaped
    obs = infer_roles(table)
    a = obs.accounting
    calls = int((spans.kind == 1).sum())
    assert int((obs.spans.kind == 1).sum()) == calls, name
    if not SHAPES[name].get("client_spans", True):
        assert a["client_synthesized"] > 0
    if SHAPES[name].get("handler_spans"):
        assert a["internal"] > 0
    # Every call keeps a true parent at its own instance (the causal ground truth).
    t = obs.spans
    client = np.flatnonzero(t.kind == 1)
    assert np.all(t.parent[client] >= 0)
    assert np.all(t.instance[t.parent[client]] == t.instance[client])


@pytest.fixture(scope="module")
def graph(spans) -> CallGraph:
    obs = infer_roles(export_shape(spans, untraced=UNTRACED, client_spans=False))
    return learn_callgraph(obs.spans)


def test_a_join_is_learned_with_trigger_and_member_paths(graph):
    for ep in ("UploadText", "UploadUser", "UploadMovie"):
        g = graph.get("compose", ep)
        assert g.join is not None and g.join.size == 3
        roles = {p.role: sorted(s.service for s in p.slots) for p in g.paths}
        assert roles == {"member": [], "trigger": ["store", "timeline"]}


def test_variable_repetition_makes_one_path_per_count(graph):
    g = graph.get("movie", "Upload")
    counts = sorted(sum(s.service == "catalog" for s in p.slots) for p in g.paths)
    assert counts == [1, 2, 3, 4]
    for p in g.paths:  # each path is a chain: lookups one after the other, then compose
        assert p.is_sequential()


def test_async_calls_may_end_after_the_response(graph):
    g = graph.get("store", "Save")
    (insert,) = [s for s in g.slots if s.endpoint == "mongo.insert"]
    assert insert.late_ns > 0  # detached: it often ends after Save has responded
    (cache,) = [s for s in g.slots if s.endpoint == "redis.set"]
    assert cache.late_ns == 0


def test_paths_joins_and_tolerances_survive_yaml(graph, tmp_path):
    path = tmp_path / "cg.yaml"
    graph.save(path)
    back = CallGraph.load(path)
    assert back.to_yaml() == graph.to_yaml()
    for key, g in graph.endpoints.items():
        h = back.endpoints[key]
        assert h.join == g.join
        assert [(p.role, p.requests, p.preds) for p in h.paths] == [
            (p.role, p.requests, p.preds) for p in g.paths
        ]
        for p, q in zip(h.paths, g.paths, strict=True):
            assert [(s.callee, s.early_ns, s.late_ns) for s in p.slots] == [
                (s.callee, s.early_ns, s.late_ns) for s in q.slots
            ]


def test_an_input_without_spans_is_an_error_not_full_accuracy(tmp_path):
    from tacit.errors import InputError

    path = tmp_path / "empty.json"
    path.write_text('{"data": []}')
    with pytest.raises(InputError, match="no spans, nothing to evaluate"):
        evaluate([path])
