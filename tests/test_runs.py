"""Runs of equal rows in sorted columns (tacit.runs) against a plain Python group-by."""

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tacit.runs import (
    contained,
    distinct,
    find_sorted,
    run_bounds,
    run_heads,
    run_positions,
    run_starts,
    split_at,
)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=40))
def test_runs_match_groupby(rows):
    rows = sorted(rows)
    a = np.array([r[0] for r in rows], dtype=np.int64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    groups = [len(list(g)) for _, g in itertools.groupby(rows)]
    starts, sizes = run_bounds(a, b)
    assert sizes.tolist() == groups
    assert starts.tolist() == np.cumsum([0, *groups[:-1]]).tolist()[: len(groups)]
    assert run_heads(a, b).sum() == len(groups)
    first_column_groups = [len(list(g)) for _, g in itertools.groupby(r[0] for r in rows)]
    assert len(run_starts(a)) == len(first_column_groups)
    assert run_positions(a, b).tolist() == [i for n in groups for i in range(n)]


@given(
    st.lists(st.integers(0, 99), max_size=40),
    st.lists(st.integers(0, 40), max_size=10),
)
def test_split_at_gives_the_pieces_of_np_split(values, cuts):
    values = np.array(values, dtype=np.int64)
    cuts = np.sort(np.minimum(np.array(cuts, dtype=np.int64), len(values)))
    expected = np.split(values, cuts)
    pieces = split_at(values, cuts)
    assert [p.tolist() for p in pieces] == [p.tolist() for p in expected]
    assert split_at(values.tolist(), cuts) == [p.tolist() for p in expected]


integers = st.lists(st.integers(-5, 30), max_size=40)


@given(integers, integers, st.sampled_from([np.int64, np.int32, np.uint8]))
def test_distinct_and_contained_are_numpys_unique_and_isin(values, among, dtype):
    v, a = np.asarray(values, dtype=np.int64), np.asarray(among, dtype=np.int64)
    v = (np.abs(v) if np.dtype(dtype).kind == "u" else v).astype(dtype)
    assert distinct(v).tolist() == np.unique(v).tolist()
    assert contained(v, a).tolist() == np.isin(v, a).tolist()
    assert contained(v.reshape(-1, 1), a).tolist() == np.isin(v.reshape(-1, 1), a).tolist()
    assert contained([0.5, 2.0], [2]).tolist() == [False, True]  # other kinds: np.isin's


@given(integers, integers)
def test_find_sorted_is_each_values_index_or_minus_one(values, among):
    among = np.unique(np.array(among, dtype=np.int64))
    found = find_sorted(among, np.array(values, dtype=np.int64))
    assert found.tolist() == [among.tolist().index(x) if x in among else -1 for x in values]
