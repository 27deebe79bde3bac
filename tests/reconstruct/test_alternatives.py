"""Alternatives as columns behave as the dict of lists they replace (the naive reference)."""

from __future__ import annotations

import numpy as np

from tacit.reconstruct.alternatives import Alternatives


def _lists(rng: np.random.Generator, calls: int) -> dict[int, list[tuple[int, float]]]:
    """Random top-K lists: distinct calls in random order, 1 to 5 parents each, best first."""
    out = {}
    for call in rng.choice(1000, size=calls, replace=False).tolist():
        k = int(rng.integers(1, 6))
        scores = sorted(rng.normal(size=k).tolist(), reverse=True)
        out[call] = list(zip(rng.integers(0, 1000, size=k).tolist(), scores, strict=True))
    return out


def test_columns_read_as_the_lists_they_were_made_from() -> None:
    lists = _lists(np.random.default_rng(1), 50)
    alts = Alternatives.of(lists)
    assert alts == lists and dict(alts.items()) == lists
    assert list(alts) == list(lists)  # the calls in the order given
    assert len(alts) == 50 and 7 not in Alternatives.empty()
    call, best = alts.firsts()
    assert dict(zip(call.tolist(), best.tolist(), strict=True)) == {
        c: pairs[0][0] for c, pairs in lists.items()
    }


def test_merged_keeps_the_last_list_of_a_call_as_dict_update_does() -> None:
    rng = np.random.default_rng(2)
    parts = [_lists(rng, 30) for _ in range(4)]
    expected: dict[int, list[tuple[int, float]]] = {}
    for part in parts:
        expected.update(part)
    assert set.intersection(*(set(p) for p in parts[:2])), "the parts must share calls"
    merged = Alternatives.merged([Alternatives.of(p) for p in parts])
    assert merged == expected
    assert len(merged.owner) == sum(map(len, expected.values()))  # the earlier lists are gone
    assert Alternatives.merged([]) == {}


def test_renumbered_and_where_act_on_calls_and_parents() -> None:
    lists = _lists(np.random.default_rng(3), 20)
    number = np.arange(1000) * 3 + 5
    keep = {c for c in lists if c % 2}
    alts = Alternatives.of(lists)
    picked = alts.where(np.isin(alts.owner, list(keep))).renumbered(number)
    assert picked == {
        int(number[c]): [(int(number[p]), s) for p, s in pairs]
        for c, pairs in lists.items()
        if c in keep
    }


def test_parents_among_rows_and_not_among_them() -> None:
    lists = _lists(np.random.default_rng(4), 40)
    rows = np.arange(0, 1000, 3)
    every = {p for pairs in lists.values() for p, _ in pairs}
    alts = Alternatives.of(lists)
    assert alts.parents(rows, among=True).tolist() == sorted(every & set(rows.tolist()))
    assert alts.parents(rows, among=False).tolist() == sorted(every - set(rows.tolist()))
