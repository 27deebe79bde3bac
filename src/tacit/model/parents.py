"""Following parent links safely: every place that walks up a table's parents goes through
:func:`climb`, which visits each row once and stops at a cycle instead of looping on it."""

from __future__ import annotations

import numpy as np
from numba import njit


def climb(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per row its depth (0: no parent) and topmost ancestor, and a row on a cycle of parent
    links (-1: none; depths and ancestors are then incomplete). ``parent`` holds row numbers,
    -1 for none. Linear in the number of rows."""
    return _climb(np.asarray(parent, dtype=np.int64))


@njit(cache=True)
def _climb(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:  # pragma: no cover
    n = len(parent)
    depth = np.full(n, -1, np.int64)
    root = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    for i in range(n):
        if depth[i] >= 0:
            continue
        top = 0
        x = i
        d = -1
        r = -1
        while x != -1:
            if depth[x] >= 0:
                d = depth[x]
                r = root[x]
                break
            if depth[x] == -2:
                return depth, root, x
            depth[x] = -2
            stack[top] = x
            top += 1
            x = parent[x]
        for j in range(top - 1, -1, -1):
            y = stack[j]
            d += 1
            if r == -1:
                r = y
            depth[y] = d
            root[y] = r
    return depth, root, -1
