"""Runs of equal rows in sorted columns: the group-by that every sorted-array algorithm here
starts with."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TypeVar

import numpy as np
import numpy.typing as npt

_Pieces = TypeVar("_Pieces", np.ndarray, list)


def distinct(values: npt.ArrayLike) -> np.ndarray:
    """``np.unique(values)``: the distinct values, sorted. Integers are sorted here: since
    numpy 2.3 ``np.unique`` finds them through a hash set, far slower than a sort on many
    distinct int64; other kinds (NaN is one value there) go to ``np.unique``."""
    a = np.asarray(values)
    if a.dtype.kind not in "biu":
        return np.unique(a)
    ordered = np.sort(a, axis=None)
    return ordered[run_heads(ordered)]


def contained(values: npt.ArrayLike, among: npt.ArrayLike) -> np.ndarray:
    """``np.isin(values, among)``: whether each of ``values`` is one of ``among``. For integers,
    by a sort of ``among`` and a bisection per value: numpy's own sorts ``values`` with
    ``among`` and, since 2.3, makes ``among`` distinct through a hash set, both slower than
    one bisection per value; other kinds go to ``np.isin``."""
    v, a = np.asarray(values), np.asarray(among)
    if v.dtype.kind not in "biu" or a.dtype.kind not in "biu":
        return np.isin(v, a)
    return find_sorted(distinct(a), v) >= 0


def run_heads(*columns: np.ndarray) -> np.ndarray:
    """A boolean mask, True at each row that starts a run: the first row, and every row that
    differs from the one before it in any of ``columns`` (equal lengths, already sorted so that
    equal rows are adjacent)."""
    n = len(columns[0])
    head = np.ones(n, dtype=bool)
    if n > 1:
        head[1:] = columns[0][1:] != columns[0][:-1]
        for c in columns[1:]:
            head[1:] |= c[1:] != c[:-1]
    return head


def run_starts(*columns: np.ndarray) -> np.ndarray:
    """The row index at which each run of equal rows starts (see :func:`run_heads`)."""
    return np.flatnonzero(run_heads(*columns))


def run_bounds(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The start of each run of equal rows and its length."""
    starts = run_starts(*columns)
    return starts, np.diff(np.r_[starts, len(columns[0])])


def run_positions(*columns: np.ndarray) -> np.ndarray:
    """Each row's position within its run of equal rows (0 at the head of the run)."""
    n = len(columns[0])
    index = np.arange(n)
    return index - np.maximum.accumulate(np.where(run_heads(*columns), index, 0))


def split_at(values: _Pieces, cuts: np.ndarray | Sequence[int]) -> list[_Pieces]:
    """The pieces of ``values`` between the sorted indices ``cuts``, as ``np.split`` gives
    them, by slicing: faster where pieces are many and small (``np.split`` makes each one
    through several array calls), and for a list, lists."""
    bounds = [0, *np.asarray(cuts).tolist(), len(values)]
    return [values[a:b] for a, b in pairwise(bounds)]


def find_sorted(sorted_values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The index of each of ``x`` in ``sorted_values`` (ascending, distinct), -1 where it is not
    there: one bisection each, where ``np.isin`` or ``np.intersect1d`` would sort again."""
    at = np.searchsorted(sorted_values, x)
    found = at < len(sorted_values)
    found[found] = sorted_values[at[found]] == x[found]
    return np.where(found, at, -1)
