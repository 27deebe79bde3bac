"""The values a request passes on to its calls, as evidence in TraceWeaver's scoring."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tacit.evaluation.trace_accuracy import score_reconstruction
from tacit.model.roles import Observed, infer_roles
from tacit.model.span_details import SpanDetail, detail_column
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


def test_a_call_shares_a_value_only_with_a_request_that_names_it():
    obs = infer_roles(simulate(load_app(None), 100, n_requests=3, seed=1))
    spans = _spans_with(obs, lambda r: f"/x?k={r % 2}").spans
    rows = np.arange(len(spans))
    cs = CandidateSet(
        CallPath(slots=[], preds=[]), np.array([0, 0, 1]), np.array([[2, -1], [3, 5], [4, 3]])
    )
    assert SharedValues(spans, rows).shares(cs).tolist() == [
        [True, False],
        [False, False],
        [False, True],
    ]
    assert not SharedValues(spans.take(rows[:0]), rows[:0])


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
