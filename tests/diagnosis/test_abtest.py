"""A/B tests: version B routed to a share of a service's calls, found from traces."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.diagnosis.abtest import ab_periods, ab_spans, ab_traces, route_to_b, welch
from tacit.diagnosis.tail import blind_and_reconstruct
from tacit.errors import ConfigError
from tacit.reconstruct.pipeline import observe

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
