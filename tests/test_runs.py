"""Runs of equal rows in sorted columns (tacit.runs) against a plain Python group-by."""

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tacit.runs import run_bounds, run_heads, run_positions, run_starts


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
