"""Gap models (tacit.reconstruct.delays) against data drawn from known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tacit.reconstruct.delays import (
    MIN_STD_US,
    Gaussian,
    Mixture,
    _em,
    fit_mixture,
    gap_floor,
    seed_gaussian,
)


def test_mixture_recovers_two_separated_components():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100, 5, 600), rng.normal(300, 10, 400)])
    m = fit_mixture(x, 5, 4000, 0)
    assert isinstance(m, Mixture)
    assert len(m.mean) == 2
    order = np.argsort(m.mean)
    np.testing.assert_allclose(m.mean[order], [100, 300], atol=2)
    np.testing.assert_allclose(m.std[order], [5, 10], rtol=0.15)
    np.testing.assert_allclose(m.weight[order], [0.6, 0.4], atol=0.03)


def test_bic_prefers_one_component_for_normal_data():
    x = np.random.default_rng(2).normal(50, 8, 2000)
    m = fit_mixture(x, 5, 4000, 0)
    assert len(m.mean) == 1
    assert m.mean[0] == pytest.approx(50, abs=1)
    assert m.std[0] == pytest.approx(8, rel=0.1)


def test_mixture_density_integrates_to_one():
    x = np.random.default_rng(3).gamma(2.0, 30.0, 3000)
    m = fit_mixture(x, 5, 4000, 0)
    grid = np.linspace(-500, 1500, 200001)
    density = np.exp(m.logpdf(grid, np.zeros(len(grid), dtype=np.int64)))
    assert np.trapezoid(density, grid) == pytest.approx(1.0, abs=1e-3)


def test_components_are_never_narrower_than_the_timestamp_rounding():
    # Millisecond timestamps: gaps are whole milliseconds.
    x = 1000.0 * np.random.default_rng(4).integers(0, 4, 3000)
    floor = 1000 / math.sqrt(6)
    m = fit_mixture(x, 5, 4000, 0, min_std=floor)
    assert np.all(m.std >= floor - 1e-9)


def test_too_few_values_give_no_model_and_one_value_a_floor_gaussian():
    assert fit_mixture(np.array([np.nan, 3.0]), 5, 4000, 0) is None
    m = fit_mixture(np.array([7.0, 7.0, 7.0]), 5, 4000, 0)
    assert isinstance(m, Gaussian)
    assert m.mean[0] == 7.0 and m.std[0] == MIN_STD_US


@pytest.mark.parametrize(
    ("unit_ns", "expected"),
    [(1, MIN_STD_US), (1000, MIN_STD_US), (10**6, 1000 / math.sqrt(6))],
)
def test_gap_floor_follows_the_timestamp_resolution(unit_ns, expected):
    times = unit_ns * np.random.default_rng(5).integers(10**6, 10**7, 500)
    times[0] = unit_ns * 1_234_567  # not a multiple of a coarser unit
    assert gap_floor(times) == pytest.approx(expected)


def test_seed_gaussian_estimates_the_gap_without_a_mapping():
    rng = np.random.default_rng(6)
    arrivals = np.sort(rng.uniform(0, 1e9, 1000)).astype(np.int64)  # ns
    calls = arrivals + rng.normal(50_000, 5_000, 1000).astype(np.int64)  # 50 µs later
    g = seed_gaussian(arrivals, rng.permutation(calls), 100, 10)
    assert len(g.mean) == 10
    assert np.median(g.mean) == pytest.approx(50, abs=1)
    # σ = sqrt(bucket size) · sd of bucket means estimates the per-request spread (5 µs).
    assert 2 < np.median(g.std) < 10


def reference_em(x, count, k, min_std, max_iter=100, tol=1e-3):
    """EM as :func:`delays._em` describes it, written with whole arrays: equal-count groups to
    start, then M and E steps until the log-likelihood per value gains less than ``tol``."""
    n = count.sum()
    below = np.cumsum(count) - count
    resp = np.zeros((len(x), k))
    resp[np.arange(len(x)), np.minimum((below * k // n).astype(int), k - 1)] = 1.0
    loglik = -np.inf
    for _ in range(max_iter):
        w = resp * count[:, None]
        nk = w.sum(axis=0) + 1e-12
        mean = (w * x[:, None]).sum(axis=0) / nk
        var = (w * (x[:, None] - mean) ** 2).sum(axis=0) / nk
        std = np.sqrt(np.maximum(var, min_std**2))
        weight = nk / n
        joint = -0.5 * ((x[:, None] - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
        joint += np.log(weight)
        top = joint.max(axis=1)
        total = np.exp(joint - top[:, None]).sum(axis=1)
        resp = np.exp(joint - top[:, None]) / total[:, None]
        new = ((top + np.log(total)) * count).sum()
        gained, loglik = new - loglik, new
        if gained < tol * n:
            break
    return weight, mean, std, loglik


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_compiled_em_is_the_reference(seed, k):
    rng = np.random.default_rng(seed)
    v = np.concatenate(
        [rng.normal(100, 5, 300), rng.normal(180, 20, 200), rng.exponential(50, 100)]
    )
    x, count = np.unique(np.round(v, 1), return_counts=True)
    model, loglik = _em(x, count.astype(np.float64), k, MIN_STD_US)
    weight, mean, std, ref_loglik = reference_em(x, count.astype(np.float64), k, MIN_STD_US)
    np.testing.assert_allclose(model.weight, weight, rtol=1e-6)
    np.testing.assert_allclose(model.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(model.std, std, rtol=1e-6)
    assert loglik == pytest.approx(ref_loglik, rel=1e-9)
