"""A/B tests: version B routed to a share of a service's calls, found from traces."""

from __future__ import annotations

import numpy as np
import pytest
from serial_requests import requests

from tacit.diagnosis.abtest import (
    ab_periods,
    ab_power,
    ab_spans,
    ab_traces,
    mark_nested,
    route_to_b,
    self_time_factor,
    welch,
)
from tacit.diagnosis.inject import resample_traces
from tacit.diagnosis.tail import blind_and_reconstruct, self_latency
from tacit.errors import ConfigError, InputError
from tacit.formats import observe

HOTEL = "traceweaver/hotel_reservation/load100.jaeger.json.gz"


def test_welch_matches_the_effect_and_rejects_tiny_samples():
    rng = np.random.default_rng(0)
    a = np.exp(rng.normal(10, 0.2, 500))
    r = welch("x", a, a * 0.8)
    assert r.effect == pytest.approx(-0.2) and r.p < 1e-10
    with pytest.raises(ConfigError):
        welch("x", a, a[:1])


@pytest.fixture(scope="module")
def hotel(shared_data):
    return observe([shared_data / HOTEL])[0].spans


@pytest.mark.realdata
def test_version_b_is_found_from_reconstructed_traces(hotel):
    routed, rows = route_to_b(hotel, "reservation", 0.2, -0.5, 0)
    assert len(rows) == 200
    traces, _ = blind_and_reconstruct(routed)
    blind = ab_traces(traces, "reservation")
    truth = ab_traces(routed, "reservation")
    assert blind.n_b == truth.n_b == 200
    assert blind.p < 0.05 and blind.effect < 0
    assert blind.p == pytest.approx(truth.p, rel=0.5)
    assert ab_spans(routed, "reservation").effect < -0.3


@pytest.mark.realdata
def test_false_positive_rate_without_a_change_is_near_alpha(hotel):
    seeds = range(20)
    by_traces = [
        ab_traces(route_to_b(hotel, "reservation", 0.2, 0.0, s)[0], "reservation").p for s in seeds
    ]
    by_periods = [ab_periods(hotel, "reservation", 0.2, 0.0, s).p for s in seeds]
    assert np.mean(np.array(by_traces) < 0.05) <= 0.2
    assert np.mean(np.array(by_periods) < 0.05) <= 0.2


@pytest.mark.realdata
def test_traces_beat_periods_and_power_grows_with_share(hotel):
    # A bootstrap of 4000 requests; B's requests are 20% faster in expectation (its self time
    # scaled by one factor), ground-truth traces (the reconstruction is the benchmark's
    # business); the 2% share is nested in the 20% one.
    spans = resample_traces(hotel, 4000, seed=0)
    rows = ab_power(spans, "reservation", (0.02, 0.2), -0.2, range(6), "e2e-mean", blind=False)
    power = {r["share"]: r for r in rows}
    traces = {s: p["traces (ground truth)"]["power"] for s, p in power.items()}
    periods = {s: p["no traces"]["power"] for s, p in power.items()}
    assert traces[0.2] >= traces[0.02] > periods[0.02]
    assert periods[0.2] >= periods[0.02]
    assert traces[0.2] > periods[0.2]
    assert power[0.2]["traces (ground truth)"]["effect"] == pytest.approx(-0.2, abs=0.03)
    assert len(power[0.02]["spans"]["p"]) == power[0.02]["runs"] == 6


@pytest.mark.realdata
def test_expected_e2e_basis_realises_the_effect_on_the_real_traces(hotel):
    factor = self_time_factor(hotel, "reservation", -0.05)
    assert 0.6 < factor < 0.9  # reservation owns a mean 20% of its requests
    routed, _ = route_to_b(hotel, "reservation", 1.0, -0.05, 0, basis="e2e-mean")
    root = hotel.parent == -1
    ratio = (routed.end - routed.start)[root] / (hotel.end - hotel.start)[root]
    assert np.exp(np.log(ratio).mean()) == pytest.approx(0.95, abs=0.005)
    with pytest.raises(ConfigError, match="too small a part"):
        self_time_factor(hotel, "search", -0.05)  # search owns about 2% of its requests


def test_expected_e2e_factor_solves_the_mean_of_log_ratios():
    spans = requests(300, 0)
    root = spans.parent == -1
    for effect in (-0.1, 0.1):
        factor = self_time_factor(spans, "b", effect)
        assert (factor < 1) == (effect < 0)
        routed, _ = route_to_b(spans, "b", 1.0, effect, 0, basis="e2e-mean")
        ratio = (routed.end - routed.start)[root] / (spans.end - spans.start)[root]
        assert np.log(ratio).mean() == pytest.approx(np.log1p(effect), abs=1e-4)
    assert self_time_factor(spans, "b", 0.0) == 1.0


def test_nested_share_is_a_random_subset_marked_in_the_instance_and_the_rest_of_b_left_out():
    spans = requests(1000, 0)
    routed, rows = route_to_b(spans, "b", 0.2, -0.5, 3)
    mid = mark_nested(routed, "b", 0.1, 3)
    small = mark_nested(routed, "b", 0.02, 3)
    assert (len(mid), len(small)) == (100, 20)
    assert np.isin(small, mid).all() and np.isin(mid, rows).all()
    assert routed.strings[int(routed.instance[small[0]])].endswith("@B/0.1/0.02")
    # role inference reorders the rows; the marks travel with the spans
    shuffled = routed.take(np.random.default_rng(0).permutation(len(routed)))
    for t in (routed, shuffled):
        assert (ab_traces(t, "b").n_a, ab_traces(t, "b").n_b) == (800, 200)
        assert (ab_traces(t, "b", 0.1).n_a, ab_traces(t, "b", 0.1).n_b) == (800, 100)
        # the other 180 B requests are in neither group
        assert (ab_traces(t, "b", 0.02).n_a, ab_traces(t, "b", 0.02).n_b) == (800, 20)
        assert ab_spans(t, "b", 0.02).n_b == 20
    with pytest.raises(ConfigError, match="not nested"):
        mark_nested(routed, "b", 0.05, 3)


def test_e2e_basis_cuts_the_service_time_by_a_share_of_the_request():
    spans = requests(200, 0)
    routed, rows = route_to_b(spans, "b", 1.0, -0.05, 0, basis="e2e")
    assert len(rows) == 200
    before = spans.end[spans.parent == -1] - spans.start[spans.parent == -1]
    after = routed.end[routed.parent == -1] - routed.start[routed.parent == -1]
    own = self_latency(spans)[rows]
    saved = np.minimum(0.05 * before, own)  # b is on the critical path of every request
    assert np.allclose(before - after, saved, atol=2)
    with pytest.raises(ConfigError, match="basis"):
        route_to_b(spans, "b", 0.5, -0.05, 0, basis="wall")


def test_a_cycle_of_parents_is_an_input_error_naming_the_trace():
    spans = requests(3, 0)
    spans.parent[0] = 4  # the root now hangs under its own grandchild's subtree
    with pytest.raises(InputError, match="trace t0: parent links form a cycle"):
        ab_traces(spans, "b")


def test_the_effect_is_the_ratio_of_the_geometric_means_shown():
    """With one very slow request in B, B's arithmetic mean is far above A's while B is
    faster in the geometric mean the test compares: the effect follows the latter."""
    from tacit.diagnosis.abtest import welch

    a = np.full(200, 10_000_000.0) * np.exp(np.linspace(-0.1, 0.1, 200))
    b = np.r_[np.full(49, 9_000_000.0), 300_000_000.0]
    r = welch("x", a, b)
    assert r.mean_b_ms > r.mean_a_ms and r.effect < 0
    assert r.effect == pytest.approx(r.geomean_b_ms / r.geomean_a_ms - 1)
