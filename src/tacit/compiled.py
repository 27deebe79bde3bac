"""Small helpers shared by numba-compiled kernels."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def grown(a: np.ndarray, cap: int) -> np.ndarray:  # pragma: no cover - compiled
    """``a`` copied into a new array of length ``cap`` (≥ len(a)), for output buffers that
    compiled loops fill without knowing their final size."""
    b = np.empty(cap, a.dtype)
    b[: len(a)] = a
    return b
