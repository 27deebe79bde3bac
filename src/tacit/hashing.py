"""The seeded 64-bit hash tacit uses wherever values must hash alike across processes.

It is the splitmix64 finalizer (Steele, Lea and Flood, "Fast Splittable Pseudorandom Number
Generators", OOPSLA '14) of ``x XOR seed``: a bijection of 64-bit words with full avalanche.
It is written here rather than taken from a library because numba kernels call it, and no
maintained library offers a seeded 64-bit hash callable there. Packet identifiers (sampling and
bank hashes, :mod:`tacit.oneway_latency.identifiers`) and causal path shapes
(:mod:`tacit.causal_paths.patterns`) both use it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S27 = np.uint64(27)
_S30 = np.uint64(30)
_S31 = np.uint64(31)


@njit(cache=True, inline="always")
def mix64(x: np.uint64, seed: np.uint64) -> np.uint64:
    """The seeded 64-bit hash of one value (splitmix64 finalizer of ``x ^ seed``)."""
    z = x ^ seed
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def hash64(values: np.ndarray, seed: int = 0) -> np.ndarray:
    """The 64-bit hash of every value with one seed (vectorized)."""
    return _hash_all(ids64(values), np.uint64(seed))


def ids64(values: np.ndarray) -> np.ndarray:
    """``values`` as a contiguous uint64 array (wrapping), as the compiled hashes take them."""
    return np.ascontiguousarray(values, dtype=np.uint64)


@njit(cache=True)
def _hash_all(ids: np.ndarray, seed: np.uint64) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(ids.size, dtype=np.uint64)
    for i in range(ids.size):
        out[i] = mix64(ids[i], seed)
    return out
