"""The bottom-k MinHash estimate of a set difference, against its expected error."""

from __future__ import annotations

import numpy as np
import pytest

from oneway_streams import random_ids
from tacit.errors import ConfigError
from tacit.oneway_latency.minhash import bottom_k, jaccard, set_difference


def sets(n: int, diff: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of ``n`` with a symmetric difference of ``diff`` (half each side)."""
    ids = random_ids(n + diff // 2, seed)
    return ids[:n], ids[diff // 2 :]


def test_exact_cases():
    a = random_ids(5_000, 1)
    assert set_difference(bottom_k(a, 256, 0), bottom_k(a, 256, 0)) == 0
    b = random_ids(3_000, 2)
    assert set_difference(bottom_k(a, 256, 0), bottom_k(b, 256, 0)) == pytest.approx(8_000)
    small_a, small_b = sets(100, 30, 3)  # smaller than k: the sketches are the sets
    assert set_difference(bottom_k(small_a, 512, 0), bottom_k(small_b, 512, 0)) == pytest.approx(30)
    with pytest.raises(ConfigError):
        bottom_k(a, 0, 0)
    with pytest.raises(ConfigError):
        jaccard(bottom_k(a, 16, 0), bottom_k(a, 32, 0))


@pytest.mark.parametrize(("n", "diff", "k"), [(50_000, 10_000, 256), (50_000, 2_000, 1024)])
def test_estimate_within_its_expected_error(n, diff, k):
    a, b = sets(n, diff, 4)
    true_j = (n - diff // 2) / (n + diff // 2)
    se = np.sqrt(true_j * (1 - true_j) / k)
    trials = 40
    js = np.array([jaccard(bottom_k(a, k, s), bottom_k(b, k, s)) for s in range(trials)])
    assert abs(js.mean() - true_j) < 4 * se / np.sqrt(trials)  # unbiased
    assert 0.6 * se < js.std() < 1.5 * se  # with the stated standard error
    d = np.array([set_difference(bottom_k(a, k, s), bottom_k(b, k, s)) for s in range(trials)])
    # delta method: |A Δ B| = (|A| + |B|)(1 − J)/(1 + J)
    d_se = 2 * n * 2 / (1 + true_j) ** 2 * se
    assert abs(d.mean() - diff) < 4 * d_se / np.sqrt(trials) + 0.02 * diff
    assert np.all(np.abs(d - diff) < 5 * d_se)
