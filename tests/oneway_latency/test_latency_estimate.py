"""Mean and standard deviation from collapsed bucket pairs (the estimator all methods share)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tacit.oneway_latency.estimate import estimate_from_buckets


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=2, max_size=200))
def test_one_packet_per_bucket_gives_the_sample_statistics(delays):
    d = np.array(delays, dtype=np.int64)
    est = estimate_from_buckets(d, np.ones(len(d), np.int64))
    assert est.mean_ns == pytest.approx(d.mean(), rel=1e-12)
    assert est.std_ns == pytest.approx(d.std(ddof=1), rel=1e-9, abs=1e-6)
    assert est.useful_packets == len(d)


def test_empty_and_tiny():
    assert estimate_from_buckets(np.zeros(4, np.int64), np.zeros(4, np.int64)) is None
    one = estimate_from_buckets(np.array([70]), np.array([7]))
    assert one.mean_ns == 10 and np.isnan(one.std_ns)


def bucket_sums(delays: np.ndarray, bucket: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    return np.bincount(bucket, weights=delays, minlength=m), np.bincount(bucket, minlength=m)


@pytest.mark.parametrize("k", [1, 3])
def test_variance_is_unbiased_for_disjoint_and_overlapping_buckets(k):
    """Weibull delays (shape 0.65) in k random partitions of m buckets each: σ̂² averages to
    σ² with the overlap correction c = k."""
    rng = np.random.default_rng(0)
    n, m, trials = 2_000, 200, 300
    ratios = []
    for _ in range(trials):
        d = np.rint(rng.weibull(0.65, n) * 10_000)
        sums, counts = [], []
        for j in range(k):
            s, c = bucket_sums(d, rng.integers(0, m, n) + j * m, (j + 1) * m)
            sums.append(s[j * m :])
            counts.append(c[j * m :])
        est = estimate_from_buckets(np.concatenate(sums), np.concatenate(counts), overlap=k)
        ratios.append(est.std_ns**2 / d.var(ddof=1))
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.03)
