"""Runs of equal rows in sorted columns (tacit.runs) against a plain Python group-by."""

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tacit.runs import run_bounds, run_heads, run_positions, run_starts, split_at


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
