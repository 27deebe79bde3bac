"""The values a request passes on to its calls, as evidence in TraceWeaver's scoring."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tacit.evaluation.trace_accuracy import score_reconstruction
from tacit.model.roles import Observed, infer_roles
from tacit.model.span_details import SpanDetail, detail_column
from tacit.model.spans import CLIENT, SERVER, SpanTableBuilder
from tacit.reconstruct.callgraph import CallPath, learn_callgraph
from tacit.reconstruct.candidates import CandidateSet
from tacit.reconstruct.shared_values import SharedValues, ShareModel, request_values
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.simulate import load_app, simulate

N = 100


@pytest.mark.parametrize(
    ("attributes", "values"),
    [
        ({"url.full": "http://geo:8080/near?lat=37.1&lon=-122.4"}, {"37.1", "-122.4"}),
        ({"http.url": "http://h/users/u-42/orders?ids=7,8"}, {"u-42", "7,8", "7", "8"}),
        ({"http.target": "/hotels/17/rooms"}, {"17"}),
        ({"url.path": "/carts/c9", "url.query": "coupon="}, {"c9"}),
        ({"url.path": "/health"}, set()),
        ({"rpc.method": "Get"}, set()),
        ({"url.full": "http://h:port/x"}, set()),  # a port that is not a number: no values read
    ],
)
def test_a_request_target_carries_its_query_values_and_its_ids_in_the_path(attributes, values):
    assert request_values(attributes) == values


def _spans_with(obs: Observed, target) -> Observed:
    """``obs`` with each span's target given by ``target(row)``."""
    details = detail_column(
        [SpanDetail(attributes={"http.target": target(r)}) for r in range(len(obs.spans))]
    )
    return dataclasses.replace(obs, spans=dataclasses.replace(obs.spans, details=details))


def test_shared_values_score_only_what_the_mapping_shows_them_worth():
    """Sharing along an edge the chosen calls share more often than the others gains; an edge
    whose calls share as often as chance gains nothing either way."""
    calls = np.array([[10, 20], [11, 21], [10, 21], [11, 20]])
    shares = np.array([[True, False], [True, False], [False, False], [False, False]])
    model = ShareModel.fit(2, [shares], [calls], [np.array([0, 1])], [np.array([0, 1])])
    assert model.gain_shared[0] > 1 > 0 > -1 > model.gain_apart[0]
    assert model.gain_shared[1] == pytest.approx(0) and model.gain_apart[1] == pytest.approx(0)
    score = model.score(shares, np.where(calls == 21, -1, calls), np.array([0, 1]))
    assert score[0] == pytest.approx(model.gain_shared[0])  # a skipped slot scores nothing
    assert score[3] == pytest.approx(model.gain_apart[0])


def test_a_call_shares_with_its_request_or_with_what_the_requests_other_calls_passed_on():
    """A profile call's id is in no request's target, but below the request's call to search,
    which shares the request's own value: search passed the id to rate. Only the candidate that
    holds both calls sees it shared."""
    b = SpanTableBuilder("t")
    spans = [
        # name, service, kind, target, (trace, span id, parent id)
        ("p", "front", SERVER, "/hotels?lat=1", ("t1", "p", None)),
        ("q", "front", SERVER, "/hotels?lat=7", ("t2", "q", None)),
        ("c1", "front", CLIENT, "http://search/nearby?lat=1", ("t3", "c1", None)),
        ("s1", "search", SERVER, "/nearby?lat=1", ("t3", "s1", "c1")),
        ("k1", "search", CLIENT, "http://rate/rates?ids=7,8", ("t3", "k1", "s1")),
        ("c2", "front", CLIENT, "http://profile/profile?id=7", ("t4", "c2", None)),
    ]  # fmt: skip
    for k, (name, svc, kind, target, (trace, span_id, parent_id)) in enumerate(spans):
        key = "url.full" if kind == CLIENT else "http.target"
        b.add(svc, None, name, kind, k, 100 - k, k, trace=trace, span_id=span_id,
              parent_id=parent_id, detail=SpanDetail(span_id, {key: target}))  # fmt: skip
    table = b.build()
    table.link[2], table.link[3] = 3, 2  # c1 and s1: one RPC
    rows = np.array([0, 1, 2, 5])
    cs = CandidateSet(
        CallPath(slots=[], preds=[]),
        np.array([0, 0, 1, 1]),
        np.array([[2, 5], [-1, 5], [2, 5], [-1, 5]]),
    )
    assert SharedValues(table, rows).shares(cs).tolist() == [
        [True, True],  # c1 passed p's value on, and c2's id is below c1
        [False, False],  # without c1, nothing of p's
        [False, True],  # q's own target names 7; c1 is not q's
        [False, True],
    ]
    assert not SharedValues(table.take(rows[:0]), rows[:0])


@pytest.fixture(scope="module")
def busy():
    """The shop at a load where timing alone maps about two thirds of the requests right."""
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=300, seed=7)).spans)
    obs = infer_roles(simulate(app, 1000, n_requests=N, seed=3, record_threads=False))
    return graph, obs


def _accuracy(graph, obs: Observed, shared: bool) -> float:
    params = TraceWeaverParams(max_components=2, max_iterations=4, shared_values=shared)
    rec = reconstruct_traceweaver(obs.without_truth(), graph, params)
    return score_reconstruction(obs.spans, rec).accuracy


def test_values_passed_on_through_a_request_tell_apart_what_timing_cannot(busy):
    graph, obs = busy
    order = obs.spans.trace
    passed_on = _spans_with(obs, lambda r: f"/op?order={1000 + int(order[r])}")
    timing = _accuracy(graph, passed_on, shared=False)
    assert timing < 0.8
    assert _accuracy(graph, passed_on, shared=True) >= max(0.9, timing + 0.2)


def test_values_that_are_not_passed_on_change_nothing(busy):
    graph, obs = busy
    rng = np.random.default_rng(0)
    own = rng.permutation(len(obs.spans))
    alone = _spans_with(obs, lambda r: f"/op?order={own[r]}")
    assert _accuracy(graph, alone, shared=True) == pytest.approx(
        _accuracy(graph, alone, shared=False), abs=0.02
    )
