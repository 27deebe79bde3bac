"""Maglev consistent hashing with weighted backends: the lookup table of a layer-4 load balancer.

Follows Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load Balancer", NSDI '16,
§3.4. Every backend has a preference list over the ``M`` table entries (``M`` prime), the
permutation ``(offset + j * skip) mod M`` with ``offset = h1(name) mod M`` and
``skip = h2(name) mod (M - 1) + 1``; backends take turns claiming their next preferred entry
that is still free until the table is full (Pseudocode 1). A connection goes to
``table[hash(5-tuple) mod M]``. Because a backend's preferences do not depend on the others,
changing one backend moves few entries (§3.4 "minimal disruption"); :func:`disruption`
measures how many.

Weights: the paper's population gives every backend one turn per round. We weight the turns as
Envoy's Maglev load balancer does (``source/extensions/load_balancing_policies/maglev/
maglev_lb.cc``, ``OriginalMaglevTable::constructImplementationInternals``): in round
``r = 1, 2, ...`` a backend of weight ``w`` takes a turn only when ``r * w`` has reached its
running target, which then grows by the largest weight ``w_max``. A backend of weight
``w_max`` takes a turn every round, one of weight ``w_max / 3`` every third round, so each
backend owns a share of the entries close to ``w / sum(w)``. A weight of 0 takes the backend
out of the table (as if removed).

Hashes are tacit's seeded splitmix64 (:mod:`tacit.hashing`); backend names are first turned into
64-bit words with xxHash64 (:func:`tacit.model.packets.xxh64`). The population loop is compiled
(numba): it is sequential by nature (each turn depends on the entries taken before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.errors import ConfigError
from tacit.hashing import hash64, mix64
from tacit.model.packets import PacketTable, xxh64

DEFAULT_TABLE_SIZE = 65537
"""The lookup table size ``M`` (Maglev §3.4 and §5.3 use 65537, a prime)."""


@dataclass(frozen=True)
class MaglevParams:
    """Maglev table parameters.

    - ``table_size``: ``M``, prime (Maglev §3.4: 65537; it must be prime so that every
      ``skip`` generates a full permutation).
    - ``seed``: seed of the backend hashes ``h1`` (``seed``) and ``h2`` (``seed + 1``) and of
      the connection hash (``seed + 2``); any value, as long as every load balancer uses the same.
    """

    table_size: int = DEFAULT_TABLE_SIZE
    seed: int = 0

    def __post_init__(self) -> None:
        if self.table_size < 2 or not _is_prime(self.table_size):
            raise ConfigError(f"Maglev table size must be a prime ≥ 2, got {self.table_size}")


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % d for d in range(2, int(n**0.5) + 1))


@dataclass(frozen=True)
class MaglevTable:
    """A populated lookup table: ``entries[i]`` is the index in ``backends`` of entry ``i``."""

    backends: tuple[str, ...]
    weights: np.ndarray
    entries: np.ndarray
    params: MaglevParams

    @classmethod
    def build(
        cls,
        backends: Sequence[str],
        weights: Sequence[float] | np.ndarray | None = None,
        params: MaglevParams | None = None,
    ) -> MaglevTable:
        """Populate the table for ``backends`` (equal weights unless given)."""
        params = params or MaglevParams()
        names = tuple(backends)
        if not names or len(set(names)) != len(names):
            raise ConfigError("Maglev needs at least one backend, with distinct names")
        w = np.ones(len(names)) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (len(names),) or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ConfigError(f"need one finite weight ≥ 0 per backend, got {weights!r}")
        if not np.any(w > 0):
            raise ConfigError("at least one Maglev backend needs a positive weight")
        offset, skip = backend_permutations(names, params)
        entries = _populate(offset, skip, w, params.table_size)
        return cls(names, w, entries, params)

    def rebuild(self, weights: Sequence[float] | np.ndarray) -> MaglevTable:
        """The table for the same backends with new weights."""
        return MaglevTable.build(self.backends, weights, self.params)

    def lookup(self, flow_hashes: np.ndarray) -> np.ndarray:
        """The backend index of each connection hash (see :func:`flow_hash`)."""
        slots = np.asarray(flow_hashes, dtype=np.uint64) % np.uint64(self.params.table_size)
        return self.entries[slots.astype(np.int64)]

    def shares(self) -> np.ndarray:
        """The fraction of entries each backend owns (the share of new connections it gets)."""
        return np.bincount(self.entries, minlength=len(self.backends)) / self.params.table_size


def backend_permutations(
    backends: Sequence[str], params: MaglevParams
) -> tuple[np.ndarray, np.ndarray]:
    """``offset`` and ``skip`` of each backend's preference list (Maglev §3.4)."""
    keys = np.array([xxh64(name.encode()) for name in backends], dtype=np.uint64)
    m = np.uint64(params.table_size)
    offset = hash64(keys, params.seed) % m
    skip = hash64(keys, params.seed + 1) % (m - np.uint64(1)) + np.uint64(1)
    return offset.astype(np.int64), skip.astype(np.int64)


@njit(cache=True)
def _populate(
    offset: np.ndarray, skip: np.ndarray, weight: np.ndarray, m: int
) -> np.ndarray:  # pragma: no cover - compiled
    # Maglev Pseudocode 1, with Envoy's weighted turns (module docstring).
    n = offset.size
    entries = np.full(m, -1, dtype=np.int32)
    position = offset.copy()  # the entry each backend would claim next
    target = np.zeros(n)
    w_max = weight.max()
    filled = 0
    turn = 1
    while filled < m:
        for i in range(n):
            if weight[i] <= 0.0 or turn * weight[i] < target[i]:
                continue
            target[i] += w_max
            c = position[i]
            while entries[c] >= 0:
                c = (c + skip[i]) % m
            entries[c] = i
            position[i] = (c + skip[i]) % m
            filled += 1
            if filled == m:
                break
        turn += 1
    return entries


def disruption(before: MaglevTable, after: MaglevTable) -> float:
    """The fraction of entries whose backend changed (compared by name, so that tables over
    different backend lists compare)."""
    if before.params.table_size != after.params.table_size:
        raise ConfigError("tables of different sizes do not compare")
    a = np.asarray(before.backends, dtype=object)[before.entries]
    b = np.asarray(after.backends, dtype=object)[after.entries]
    return float(np.mean(a != b))


@njit(cache=True, inline="always")
def flow_key(
    src_hi: np.uint64,
    src_lo: np.uint64,
    dst_hi: np.uint64,
    dst_lo: np.uint64,
    sport: np.uint64,
    dport: np.uint64,
    proto: np.uint64,
    seed: np.uint64,
) -> np.uint64:  # pragma: no cover - compiled
    """The hash of one connection's 5-tuple (chained splitmix64), callable from numba."""
    h = mix64(src_hi, seed)
    h = mix64(h ^ src_lo, seed)
    h = mix64(h ^ dst_hi, seed)
    h = mix64(h ^ dst_lo, seed)
    return mix64(h ^ ((sport << np.uint64(24)) | (dport << np.uint64(8)) | proto), seed)


@njit(cache=True)
def _flow_keys(
    src_hi: np.ndarray,
    src_lo: np.ndarray,
    dst_hi: np.ndarray,
    dst_lo: np.ndarray,
    sport: np.ndarray,
    dport: np.ndarray,
    proto: np.ndarray,
    seed: np.uint64,
) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(src_hi.size, dtype=np.uint64)
    for i in range(src_hi.size):
        out[i] = flow_key(
            src_hi[i],
            src_lo[i],
            dst_hi[i],
            dst_lo[i],
            np.uint64(sport[i]),
            np.uint64(dport[i]),
            np.uint64(proto[i]),
            seed,
        )
    return out


def flow_hash(packets: PacketTable, params: MaglevParams | None = None) -> np.ndarray:
    """The connection hash of every packet (client → server direction: source is the client)."""
    params = params or MaglevParams()
    return _flow_keys(
        packets.src_hi,
        packets.src_lo,
        packets.dst_hi,
        packets.dst_lo,
        packets.sport,
        packets.dport,
        packets.proto,
        np.uint64(params.seed + 2),
    )
