"""GrowingColumns against what it replaces: np.concatenate on every append and boolean
indexing on every drop, over random sequences of both."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.model.growing import GrowingColumns

DTYPES = {"position": np.int64, "final": np.bool_, "score": np.float64, "kind": np.int8}


def test_random_appends_and_drops_equal_plain_arrays() -> None:
    rng = np.random.default_rng(3)
    grown = GrowingColumns(DTYPES, capacity=4)
    plain = {k: np.empty(0, dtype=t) for k, t in DTYPES.items()}
    for _ in range(300):
        if rng.random() < 0.8:
            n = int(rng.integers(0, 50))
            rows = {
                "position": rng.integers(0, 10**9, n),
                "final": rng.random(n) < 0.5,
                "score": rng.random(n),
                "kind": rng.integers(-1, 3, n).astype(np.int8),
            }
            grown.extend(**rows)
            plain = {k: np.concatenate([plain[k], rows[k]]) for k in DTYPES}
        else:
            mask = rng.random(len(grown)) < 0.6
            grown.keep(mask)
            plain = {k: v[mask] for k, v in plain.items()}
        assert len(grown) == len(plain["position"])
        for k in DTYPES:
            assert grown[k].dtype == DTYPES[k]
            np.testing.assert_array_equal(grown[k], plain[k])


def test_a_column_is_written_through_its_view() -> None:
    grown = GrowingColumns(DTYPES)
    grown.extend(
        position=np.arange(3),
        final=np.zeros(3, bool),
        score=np.zeros(3),
        kind=np.zeros(3, np.int8),
    )
    grown["final"][[0, 2]] = True
    grown["position"][1] = 7
    np.testing.assert_array_equal(grown["final"], [True, False, True])
    np.testing.assert_array_equal(grown["position"], [0, 7, 2])


def test_columns_must_all_be_given_with_one_length() -> None:
    grown = GrowingColumns({"a": np.int64, "b": np.int64})
    with pytest.raises(ValueError, match="columns"):
        grown.extend(a=np.arange(2))
    with pytest.raises(ValueError, match="lengths"):
        grown.extend(a=np.arange(2), b=np.arange(3))
    with pytest.raises(ValueError, match="mask"):
        grown.keep(np.ones(1, bool))
