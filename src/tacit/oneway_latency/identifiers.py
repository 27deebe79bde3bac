"""Hashes of packet identifiers: flow-hash sampling and the bank hash functions.

Two capture points must take the same decision about the same packet without talking to each
other: whether to sample it (LDA, Kompella et al., SIGCOMM '09, samples by hashing the packet
so that both sides sample the same packets) and which buckets it updates (LDA, FineComb, RDA).
Every hash here is therefore a pure function of ``(ident, seed)`` with no per-process state.

The hash is :func:`tacit.hashing.mix64`, the splitmix64 finalizer of ``ident XOR seed``. Hash
functions that must be independent (the k bank hashes, the sampling hash, the digest hash) use
seeds derived from the user's seed and a role name by :func:`derive_seeds`.

Sampling compares the hash with ``rate · 2^64``. The comparison is made on the top 63 bits
(``hash >> 1 < rate · 2^63``) so that rate 1 is representable in a uint64; the decisions differ
from a 64-bit comparison only in the last bit of the threshold.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
from numba import njit

from tacit.errors import ConfigError
from tacit.hashing import ids64, mix64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S1 = np.uint64(1)
_S32 = np.uint64(32)
_HALF = 2**63


@njit(cache=True, inline="always")
def check32(x: np.uint64, seed: np.uint64) -> np.uint32:
    """A 32-bit hash of one identifier, for digests and purity checks."""
    return np.uint32(mix64(x, seed) >> _S32)


@njit(cache=True, inline="always")
def bucket_of(x: np.uint64, seed: np.uint64, m: int) -> np.int64:
    """The bucket in ``[0, m)`` that the hash with ``seed`` sends identifier ``x`` to."""
    return np.int64(mix64(x, seed) % np.uint64(m))


@njit(cache=True, inline="always")
def bank_of(x: np.uint64, seed: np.uint64, thresholds: np.ndarray) -> int:
    """The sampling bank of ``x``: the first ``j`` with ``hash >> 1 < thresholds[j]`` (the
    cumulative rates scaled to 2^63), or -1 when the packet is not sampled."""
    u = mix64(x, seed) >> _S1
    for j in range(thresholds.size):
        if u < thresholds[j]:
            return j
    return -1


def derive_seeds(seed: int, role: str, count: int = 1) -> np.ndarray:
    """``count`` independent uint64 seeds for the hash functions playing ``role``."""
    base = (int(seed) * 0x9E3779B97F4A7C15 + zlib.crc32(role.encode())) % 2**64
    return _derive(np.uint64(base), count)


@njit(cache=True)
def _derive(base: np.uint64, count: int) -> np.ndarray:
    out = np.empty(count, dtype=np.uint64)
    for j in range(count):
        out[j] = mix64(base + np.uint64(j) * _GOLDEN, _GOLDEN)
    return out


def rate_thresholds(rates: Sequence[float]) -> np.ndarray:
    """Cumulative sampling rates as uint64 thresholds on ``hash >> 1`` (see the module doc)."""
    cumulative = np.cumsum(np.asarray(rates, dtype=np.float64))
    if len(cumulative) == 0 or np.any(np.asarray(rates) < 0) or cumulative[-1] > 1 + 1e-12:
        raise ConfigError(f"sampling rates must be non-negative with a sum ≤ 1, got {rates}")
    return np.array([min(int(c * _HALF), _HALF) for c in cumulative], dtype=np.uint64)


def sampling_bank(ident: np.ndarray, rates: Sequence[float], seed: int) -> np.ndarray:
    """Flow-hash sampling into disjoint banks: packet → bank ``j`` with probability
    ``rates[j]``, or -1 (not sampled); identical at both capture points."""
    thresholds = rate_thresholds(rates)
    return _banks(ids64(ident), derive_seeds(seed, "sample")[0], thresholds)


@njit(cache=True)
def _banks(ids: np.ndarray, seed: np.uint64, thresholds: np.ndarray) -> np.ndarray:
    out = np.empty(ids.size, dtype=np.int64)
    for i in range(ids.size):
        out[i] = bank_of(ids[i], seed, thresholds)
    return out


def sample_mask(ident: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """Flow-hash sampling: True iff ``hash(ident, seed) < rate · 2^64``."""
    return sampling_bank(ident, (rate,), seed) == 0


def bank_hashes(ident: np.ndarray, k: int, m: int, seed: int) -> np.ndarray:
    """k independent seeded hashes of every identifier to ``[0, m)``: shape ``(k, n)``."""
    if k < 1 or m < 1:
        raise ConfigError(f"need at least one hash and one bucket, got k={k}, m={m}")
    return _bank_hashes(ids64(ident), derive_seeds(seed, "bank", k), m)


@njit(cache=True)
def _bank_hashes(ids: np.ndarray, seeds: np.ndarray, m: int) -> np.ndarray:
    out = np.empty((seeds.size, ids.size), dtype=np.int64)
    for i in range(ids.size):
        for j in range(seeds.size):
            out[j, i] = bucket_of(ids[i], seeds[j], m)
    return out
