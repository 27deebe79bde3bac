"""The watermark controller of Pirate's load balancer (arXiv 2505.14358, §4): each rule on
constructed inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.response_latency.watermark import (
    DECREASE,
    HOLD,
    INCREASE,
    REGRESS,
    WatermarkController,
    WatermarkParams,
)

FRESH = np.full(4, 50)  # samples: plenty per connection
CONNS = np.full(4, 5)


def step(ctl: WatermarkController, latency, samples=FRESH, connections=CONNS):
    return ctl.step(np.asarray(latency, dtype=float), np.asarray(samples), np.asarray(connections))


def test_defaults_are_the_papers():
    p = WatermarkParams()
    assert (p.alpha_high, p.alpha_low, p.regress_after) == (1.5, 1.2, 3)


def test_high_watermark_cuts_weight_in_proportion():
    ctl = WatermarkController(4)
    out = step(ctl, [30, 10, 10, 10])  # mean 15, 30 > 1.5 * 15
    assert out.mean_latency_ns == 15
    assert out.action.tolist() == [DECREASE, HOLD, HOLD, HOLD]
    np.testing.assert_allclose(out.weights, [0.5, 1, 1, 1])
    np.testing.assert_allclose(ctl.weights, out.weights)


def test_just_below_high_watermark_does_nothing():
    ctl = WatermarkController(4)
    # mean 11.8, 1.5 * mean = 17.7: 17 stays below
    out = step(ctl, [17, 10, 10, 10.2])
    assert out.action.tolist() == [HOLD] * 4
    np.testing.assert_allclose(out.weights, 1)


def test_decrease_stops_at_the_floor():
    ctl = WatermarkController(4, WatermarkParams(min_weight=0.1))
    out = step(ctl, [1000, 1, 1, 1])  # the mean includes the slow server: 250.75
    assert out.weights[0] == pytest.approx(0.25075)
    for _ in range(2):
        out = step(ctl, [1000, 1, 1, 1])
        assert out.action[0] == DECREASE
    assert out.weights[0] == pytest.approx(0.1)


def test_configured_weights_scale_floor_and_cap():
    ctl = WatermarkController(np.array([2.0, 1.0, 1.0, 1.0]), WatermarkParams(min_weight=0.1))
    step(ctl, [1000, 1, 1, 1])
    out = step(ctl, [1000, 1, 1, 1])
    assert out.weights[0] == pytest.approx(0.2)
    out = step(ctl, [1, 1, 1, 1])
    assert out.action[0] == INCREASE and out.weights[0] == pytest.approx(0.4)  # + 0.1 * 2


def test_low_watermark_restores_weight_with_capped_steps():
    ctl = WatermarkController(4)
    step(ctl, [40, 10, 10, 10])  # mean 17.5: cut to 17.5 / 40
    cut = ctl.weights[0]
    assert cut == pytest.approx(17.5 / 40)
    seen = []
    for _ in range(8):
        out = step(ctl, [10, 10, 10, 10])  # below alpha_low * mean: back up, 0.1 at a time
        seen.append(out.weights[0])
        assert out.action[1:].tolist() == [HOLD] * 3  # at their configured weight already
    steps = np.diff([cut, *seen])
    assert np.all(steps <= 0.1 + 1e-12)
    np.testing.assert_allclose(seen[:5], cut + 0.1 * np.arange(1, 6))
    assert seen[-1] == 1.0 and max(seen) == 1.0


def test_between_watermarks_holds_then_regresses():
    ctl = WatermarkController(4)
    step(ctl, [40, 10, 10, 10])
    cut = ctl.weights[0]
    band = [13, 10, 10, 10]  # mean 10.75: 13 is between 1.2 and 1.5 times it
    actions = [step(ctl, band).action[0] for _ in range(4)]
    assert actions == [HOLD, HOLD, REGRESS, REGRESS]
    assert ctl.weights[0] == pytest.approx(cut + 0.2)


def test_stale_servers_are_not_judged_and_not_counted_in_the_mean():
    ctl = WatermarkController(4)
    # server 0: 2 samples over 5 connections (< 1 per connection); server 3: no connection
    out = step(ctl, [30, 10, 10, 40], samples=[2, 50, 50, 50], connections=[5, 5, 5, 0])
    assert out.fresh.tolist() == [False, True, True, False]
    assert out.mean_latency_ns == 10
    assert out.action.tolist() == [HOLD] * 4
    # NaN (no estimate) is stale too; with one fresh server nothing is compared
    out = step(ctl, [np.nan, 10, np.nan, np.nan])
    assert out.fresh.tolist() == [False, True, False, False]
    assert np.isnan(out.mean_latency_ns) and out.action.tolist() == [HOLD] * 4


def test_freshness_threshold_is_per_connection():
    ctl = WatermarkController(4, WatermarkParams(freshness=3.0))
    out = step(ctl, [30, 10, 10, 10], samples=[14, 50, 50, 50], connections=[5, 5, 5, 5])
    assert not out.fresh[0] and out.action[0] == HOLD
    out = step(ctl, [30, 10, 10, 10], samples=[15, 50, 50, 50], connections=[5, 5, 5, 5])
    assert out.fresh[0] and out.action[0] == DECREASE


def test_a_starved_server_recovers_by_regression():
    ctl = WatermarkController(4)
    for _ in range(3):
        step(ctl, [1000, 10, 10, 10])
    assert ctl.weights[0] == pytest.approx(0.05)
    weights = []
    for _ in range(15):  # no more samples from it: stale
        out = step(ctl, [np.nan, 10, 10, 10], samples=[0, 50, 50, 50])
        weights.append(out.weights[0])
    assert weights[:2] == [pytest.approx(0.05)] * 2
    assert weights[2] == pytest.approx(0.15)
    assert weights[-1] == 1.0
    assert np.all(np.diff(weights) <= 0.1 + 1e-12)


def test_weights_never_exceed_configured():
    ctl = WatermarkController(4)
    rng = np.random.default_rng(3)
    for _ in range(200):
        out = step(ctl, rng.lognormal(0, 0.7, 4), samples=rng.integers(0, 20, 4))
        assert np.all(out.weights <= 1.0) and np.all(out.weights >= 0.05 - 1e-12)


def test_bad_parameters_and_inputs():
    with pytest.raises(ConfigError):
        WatermarkParams(alpha_high=1.2, alpha_low=1.5)
    with pytest.raises(ConfigError):
        WatermarkParams(regress_after=0)
    with pytest.raises(ConfigError):
        WatermarkParams(min_weight=0)
    with pytest.raises(ConfigError):
        WatermarkController(np.array([1.0, 0.0]))
    with pytest.raises(ConfigError):
        step(WatermarkController(3), [1, 2, 3, 4])
