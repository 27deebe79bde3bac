"""Parent links are followed once per row and a cycle is reported, never looped on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naive import climb_naive
from tacit.errors import InputError
from tacit.model.parents import climb
from tacit.model.spans import SERVER, SpanTableBuilder


@st.composite
def parents(draw) -> list[int]:
    """A forest (each row's parent an earlier row or none), its rows shuffled, and sometimes
    one link turned back into a descendant or the row itself."""
    n = draw(st.integers(1, 40))
    forest = [-1] + [draw(st.integers(-1, i - 1)) for i in range(1, n)]
    perm = draw(st.permutations(range(n)))
    parent = [-1] * n
    for i, p in enumerate(forest):
        parent[perm[i]] = -1 if p == -1 else perm[p]
    if draw(st.booleans()):
        i = draw(st.integers(0, n - 1))
        below = [j for j in range(n) if _is_ancestor(parent, i, j)]
        parent[i] = draw(st.sampled_from(below))
    return parent


def _is_ancestor(parent: list[int], a: int, row: int) -> bool:
    while row != -1:
        if row == a:
            return True
        row = parent[row]
    return False


@settings(deadline=None)  # the first example compiles the kernel
@given(parents())
def test_climb_matches_walking_up_one_parent_at_a_time(parent) -> None:
    depth, root, cycle = climb(np.array(parent))
    want_depth, want_root, has_cycle = climb_naive(parent)
    assert (cycle >= 0) == has_cycle
    if has_cycle:  # the row reported lies on a cycle: its own ancestor
        x = parent[cycle]
        for _ in range(len(parent)):
            if x == cycle:
                break
            x = parent[x]
        assert x == cycle
    else:
        assert depth.tolist() == want_depth and root.tolist() == want_root


@pytest.mark.parametrize(
    ("links", "record"),
    [({"a": "b", "b": "a"}, 1), ({"a": None, "b": "b"}, 2), ({"a": "c", "b": "a", "c": "b"}, 1)],
)
def test_a_cycle_of_parents_is_an_input_error_naming_a_span_on_it(links, record) -> None:
    b = SpanTableBuilder("t.json")
    for i, (span, parent) in enumerate(links.items()):
        b.add(
            service="s",
            instance=None,
            endpoint="e",
            kind=SERVER,
            start=i,
            end=i + 10,
            record=i + 1,
            trace="t1",
            span_id=span,
            parent_id=parent,
        )
    with pytest.raises(InputError, match="parent links form a cycle") as e:
        b.build()
    assert f"record {record}" in str(e.value) and "t.json" in str(e.value)
