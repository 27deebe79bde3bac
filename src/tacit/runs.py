"""Runs of equal rows in sorted columns: the group-by that every sorted-array algorithm here
starts with."""

from __future__ import annotations

import numpy as np


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
