"""Traces as parent links: the root of every span."""

from __future__ import annotations

import numpy as np

from tacit.model.spans import NONE


def roots(parent: np.ndarray) -> np.ndarray:
    """The row of each row's topmost ancestor along ``parent`` rows (-1: none; itself if so)."""
    root = np.arange(len(parent))
    for _ in range(64):  # climb one level a round; traces are far shallower than 64
        up = parent[root]
        more = up != NONE
        if not more.any():
            break
        root = np.where(more, up, root)
    return root
