"""Calibration: the ECE of predicted probabilities against how often they are right, and the
probabilities TraceWeaver's alternatives give each link and trace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.evaluation.calibration import (
    calibration,
    reconstruction_calibration,
    trace_outcomes,
)
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, NONE
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.reconstruct.link_probability import link_probability, sample_mask, trace_probability
from tacit.reconstruct.result import NOT_SAMPLED
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.simulate import SlowdownSpec, load_app, simulate, slow_down
from tacit.simulate.microservices import EPOCH_NS


def test_the_ece_weighs_each_bins_gap_by_its_share():
    # 100 links given 0.95, 95 right: calibrated. 100 more given 0.85, half right: 0.35 off.
    p = np.r_[np.full(100, 0.95), np.full(100, 0.85)]
    right = np.r_[np.arange(100) < 95, np.arange(100) < 50]
    doc = calibration(p, right)
    assert doc["ece"] == pytest.approx(0.5 * 0.0 + 0.5 * 0.35)
    assert [b["n"] for b in doc["bins"]] == [0] * 8 + [100, 100]
    assert doc["bins"][9]["accuracy"] == pytest.approx(0.95)
    assert doc["bins"][0]["probability"] is None
    assert calibration(np.array([1.0, 0.0]), np.array([True, False]))["ece"] == 0.0
    assert calibration(np.empty(0), np.empty(0, bool))["ece"] is None


SHARES = TraceWeaverParams(marginal_samples=0)


@pytest.fixture(scope="module")
def shop():
    obs = infer_roles(simulate(load_app(None), 600, n_requests=200, seed=4, record_threads=False))
    blind = obs.without_truth()
    return obs, blind, reconstruct_traceweaver(blind, learn_callgraph(obs.spans), SHARES)


def test_a_links_probability_is_its_parents_share_of_the_alternatives(shop):
    """Without samples of the joint assignment: exp(score) of the chosen parent over the sum
    for the call's alternatives; a call left unmapped has 0; the other spans have none."""
    _, blind, rec = shop
    assert rec.probability is None
    p = link_probability(blind, rec)
    client = blind.kind == CLIENT
    assert np.isnan(p[~client]).all() and ((p[client] >= 0) & (p[client] <= 1)).all()
    assert (p[client & (rec.parent == NONE)] == 0).all()
    checked = 0
    for call, pairs in rec.alternatives.items():
        if rec.parent[call] == NONE or len(pairs) < 2:
            continue
        top = max(s for _, s in pairs)
        total = sum(math.exp(s - top) for _, s in pairs)
        mine = sum(math.exp(s - top) for q, s in pairs if q == rec.parent[call])
        assert p[call] == pytest.approx(mine / total)
        checked += 1
    assert checked > 10
    # a higher temperature spreads the probability: the chosen parent, mostly the best, loses
    assert np.nanmean(link_probability(blind, rec, 10.0)[client]) < np.nanmean(p[client])


def test_a_traces_probability_is_the_product_of_its_links(shop):
    obs, blind, rec = shop
    p = link_probability(blind, rec)
    _, trace = np.unique(obs.spans.trace, return_inverse=True)
    per_trace = trace_probability(p, trace)
    t = int(trace[np.flatnonzero(blind.kind == CLIENT)[0]])
    links = p[(trace == t) & (blind.kind == CLIENT)]
    assert per_trace[t] == pytest.approx(float(np.prod(links)))
    assert len(per_trace) == trace.max() + 1


def test_a_traces_probability_is_the_share_of_samples_that_make_all_its_links():
    """Two links of one trace made by the same 10 of 20 sampled assignments: the trace is
    right in those 10 (0.5), not in a quarter of them as the product of their shares says. A
    third link of another instance, sampled apart (made by 10 other samples), and a link
    measured otherwise (0.8) multiply in; a trace without sampled links is the product."""
    made = np.uint64(2**10 - 1)
    other = np.uint64((2**20 - 1) ^ (2**10 - 1)) | np.uint64(1)  # 11 of 20: samples 0, 10-19
    masks = np.r_[sample_mask(np.array([made, made, other]), 20), [NOT_SAMPLED] * 3]
    p = np.array([0.5, 0.5, 0.55, 0.8, 0.9, np.nan])
    trace = np.array([0, 0, 0, 0, 1, 1])
    per_trace = trace_probability(p, trace, masks)
    assert per_trace[0] == pytest.approx(1 / 20 * 0.8)  # only sample 0 makes all three
    assert per_trace[1] == pytest.approx(0.9)
    two = trace_probability(p[:2], np.zeros(2, np.int64), masks[:2])
    assert two[0] == pytest.approx(0.5)
    assert trace_probability(p[:2], np.zeros(2, np.int64))[0] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="1 to 56 samples"):
        sample_mask(np.array([made]), 57)


def test_probabilities_fall_with_accuracy_when_a_service_slows_down():
    """The shop's front end five times slower for the middle third of the load: its traces
    there are right far less often, and their probabilities say so, within 0.1 of the
    accuracy in each third. The gaps of a slowed request are all long at once and its calls
    all late at once: counted as independent evidence, the sampled assignments agreed on it
    and gave the slowed third 0.8-0.9 where 0.6-0.7 of it was right."""
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=400, seed=7)).spans)
    third = 1500 / 600 / 3
    slow = slow_down(app, "frontend", SlowdownSpec(5.0, third, 2 * third))
    obs = infer_roles(simulate(slow, 600, n_requests=1500, seed=1, record_threads=False))
    blind = obs.without_truth()
    traces = trace_outcomes(obs.spans, blind, reconstruct_traceweaver(blind, graph))
    began = (traces.start - EPOCH_NS) / 1e9
    slowed = (began >= third) & (began < 2 * third)
    accuracy = {k: traces.right[m].mean() for k, m in (("calm", ~slowed), ("slowed", slowed))}
    assert accuracy["slowed"] < accuracy["calm"] - 0.15, accuracy
    for k, m in (("calm", ~slowed), ("slowed", slowed)):
        p = traces.probability[m].mean()
        assert abs(p - accuracy[k]) < 0.1, (k, p, accuracy[k])


def test_sampled_assignments_give_probabilities_closer_to_how_often_links_are_right():
    """Perturb-and-MAP (TraceWeaverParams.marginal_samples) against the alternatives' shares,
    on the shop app at 800 requests/s (its calls contend, 96 % of links right): the share of
    perturbed assignments that make a link is nearer its chance of being right, for links and
    for whole traces. Each probability is a share of the samples; a run is repeatable."""
    app = load_app(None)
    graph = learn_callgraph(
        infer_roles(simulate(app, 50, n_requests=500, seed=11, record_threads=False)).spans
    )
    obs = infer_roles(simulate(app, 800, n_requests=1000, seed=4, record_threads=False))
    blind, truth = obs.without_truth(), obs.spans
    client = truth.kind == CLIENT
    params = TraceWeaverParams(marginal_samples=20)
    sampled = reconstruct_traceweaver(blind, graph, params)
    shares = reconstruct_traceweaver(blind, graph, SHARES)
    assert np.array_equal(sampled.parent, shares.parent)  # the mapping is the same
    assert sampled.probability is not None
    mapped = client & (sampled.parent != NONE)
    unmeasured = np.flatnonzero(mapped & np.isnan(sampled.probability))
    assert set(unmeasured.tolist()) <= set(sampled.fallback)  # given after, by the fallback
    measured = sampled.probability[mapped & ~np.isnan(sampled.probability)]
    assert np.allclose(measured * 20, np.round(measured * 20))
    assert 0.05 < np.mean(measured < 1) < 0.5  # contended links are told apart from sure ones
    ece = {}
    for name, rec in (("sampled", sampled), ("shares", shares)):
        doc = reconstruction_calibration(truth, blind, rec)
        ece[name] = (doc["links"]["ece"], doc["traces"]["ece"])
    assert ece["sampled"][0] < ece["shares"][0] and ece["sampled"][1] < ece["shares"][1], ece
    assert ece["sampled"][0] < 0.03 and ece["sampled"][1] < 0.1, ece
    again = reconstruct_traceweaver(blind, graph, params)
    assert np.array_equal(again.probability, sampled.probability, equal_nan=True)


def test_more_samples_than_a_mask_holds_are_refused(shop):
    _, blind, _ = shop
    with pytest.raises(ConfigError, match="marginal_samples: at most 56, got 57"):
        reconstruct_traceweaver(blind, CallGraph({}), TraceWeaverParams(marginal_samples=57))
