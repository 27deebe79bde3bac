"""Small helpers shared by numba-compiled kernels."""

from __future__ import annotations

import os
from pathlib import Path

import numba
import numpy as np


@numba.njit(cache=True)
def grown(a: np.ndarray, cap: int) -> np.ndarray:  # pragma: no cover - compiled
    """``a`` copied into a new array of length ``cap`` (≥ len(a)), for output buffers that
    compiled loops fill without knowing their final size."""
    b = np.empty(cap, a.dtype)
    b[: len(a)] = a
    return b


def kernels_cached() -> bool:
    """Whether numba has cached any of tacit's compiled kernels (``cache=True`` writes an index
    file per kernel beside its module, or under ``NUMBA_CACHE_DIR``); if not, this is the first
    run and the kernels a command uses compile before it starts (tens of seconds, once)."""
    root = os.environ.get("NUMBA_CACHE_DIR") or Path(__file__).parent
    return next(Path(root).rglob("*.nbi"), None) is not None
