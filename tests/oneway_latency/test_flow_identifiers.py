"""Flow-hash sampling and bank hashes: identical decisions at both sides, right rates, uniform."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oneway_streams import random_ids
from tacit.errors import ConfigError
from tacit.hashing import hash64, mix64
from tacit.oneway_latency.identifiers import (
    bank_hashes,
    derive_seeds,
    sample_mask,
    sampling_bank,
)

N = 200_000


def within_sigmas(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * np.sqrt(n * p * (1 - p)) + 1


def test_sampling_is_a_function_of_the_identifier_alone():
    ids = random_ids(N, 1)
    sender = sample_mask(ids, 0.1, seed=7)
    perm = np.random.default_rng(2).permutation(N)
    receiver_subset = perm[: N // 2]  # the receiver saw half the packets, in another order
    assert np.array_equal(sample_mask(ids[receiver_subset], 0.1, seed=7), sender[receiver_subset])


@pytest.mark.parametrize("rate", [0.5, 0.1, 0.01, 0.001])
def test_sampling_rate(rate):
    ids = random_ids(N, 3)
    assert within_sigmas(int(sample_mask(ids, rate, seed=0).sum()), N, rate)


def test_sampling_extremes_and_seeds():
    ids = random_ids(10_000, 4)
    assert sample_mask(ids, 1.0, 0).all()
    assert not sample_mask(ids, 0.0, 0).any()
    a, b = sample_mask(ids, 0.5, 0), sample_mask(ids, 0.5, 1)
    assert within_sigmas(int((a & b).sum()), len(ids), 0.25)  # independent seeds


def test_sampling_banks_are_disjoint_with_their_rates():
    ids = random_ids(N, 5)
    rates = (0.5, 0.25, 0.125)
    bank = sampling_bank(ids, rates, seed=3)
    for j, r in enumerate(rates):
        assert within_sigmas(int((bank == j).sum()), N, r)
    assert within_sigmas(int((bank == -1).sum()), N, 0.125)
    # a single-rate bank is the sample mask
    assert np.array_equal(sampling_bank(ids, (0.5,), 3) == 0, sample_mask(ids, 0.5, 3))


def test_bad_rates_are_config_errors():
    with pytest.raises(ConfigError):
        sampling_bank(np.arange(3, dtype=np.uint64), (0.7, 0.4), 0)
    with pytest.raises(ConfigError):
        bank_hashes(np.arange(3, dtype=np.uint64), 0, 10, 0)


def test_bank_hashes_are_uniform_and_independent():
    ids = random_ids(N, 6)
    k, m = 3, 64
    h = bank_hashes(ids, k, m, seed=11)
    assert h.shape == (k, N) and h.min() >= 0 and h.max() < m
    for j in range(k):
        counts = np.bincount(h[j], minlength=m)
        chi2 = float(((counts - N / m) ** 2 / (N / m)).sum())
        assert chi2 < m + 6 * np.sqrt(2 * m)  # 63 degrees of freedom, six sigmas
    for a in range(k):
        for b in range(a + 1, k):
            assert within_sigmas(int((h[a] == h[b]).sum()), N, 1 / m)
    assert not np.array_equal(h, bank_hashes(ids, k, m, seed=12))


def test_vectorized_hash_equals_the_scalar_kernel():
    ids = random_ids(100, 8)
    seed = derive_seeds(5, "test")[0]
    expected = [mix64(np.uint64(x), seed) for x in ids]
    assert np.array_equal(hash64(ids, int(seed)), np.array(expected, dtype=np.uint64))
    assert len(np.unique(hash64(np.arange(10_000, dtype=np.uint64), 0))) == 10_000


@settings(max_examples=50, deadline=None)
@given(
    ids=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50),
    k=st.integers(1, 5),
    m=st.integers(1, 1000),
    seed=st.integers(0, 2**32),
)
def test_bank_hashes_in_range_and_deterministic(ids, k, m, seed):
    arr = np.array(ids, dtype=np.uint64)
    h = bank_hashes(arr, k, m, seed)
    assert h.shape == (k, len(ids)) and (h >= 0).all() and (h < m).all()
    assert np.array_equal(h[:, ::-1], bank_hashes(arr[::-1], k, m, seed))
