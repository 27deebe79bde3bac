"""MinHash (bottom-k) estimate of the set difference of two interval caches.

RDA binds the size of its synopsis late (the RDA paper's §VIII-A, "Late-binding RDA
Maintenance"): after the interval ends, "we estimate the size of the set difference via the
MinHash estimator [9], [10] based on a pair of caches at two measurement points", then build
synopses with twice that estimate of buckets per bank (§IX: "the Min-wise Estimator [9]";
[9] is Broder, Charikar, Frieze and Mitzenmacher, "Min-wise independent permutations", JCSS
2000, [10] Eppstein et al., "What's the Difference?", SIGCOMM '11). The paper names neither the
MinHash variant nor the signature size, nor how the caches are compared; tacit's choices: the
sides exchange a small signature of their caches, not the caches, and the signature is the
bottom-k sketch (Broder, "On the resemblance and containment of documents", SEQUENCES '97;
Cohen and Kaplan, "Summarizing data using bottom-k sketches", PODC '07): the k smallest hash
values of a set. The k smallest of ``A ∪ B`` are among the union of the two sketches, and the
fraction of those present in both sketches is an unbiased estimate of the Jaccard similarity
``J = |A ∩ B| / |A ∪ B|``, with standard error ≈ ``sqrt(J (1 − J) / k)``.

Each side knows its own set size exactly, so the symmetric difference follows from J alone:
``|A ∩ B| = J (|A| + |B|) / (1 + J)`` and ``|A Δ B| = (|A| + |B|) (1 − J) / (1 + J)``.
The relative error of that estimate grows as the difference shrinks relative to the sets
(about ``sqrt(J / (k (1 − J)))``), which is why tacit's RDA keeps a floor on the bucket count
(:mod:`~tacit.oneway_latency.rda`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError
from tacit.hashing import hash64
from tacit.oneway_latency.identifiers import derive_seeds
from tacit.runs import contained, distinct


@dataclass(frozen=True)
class BottomK:
    """The k smallest distinct hash values of a set (sorted) and the set's exact size."""

    values: np.ndarray
    k: int
    size: int


def bottom_k(ident: np.ndarray, k: int, seed: int) -> BottomK:
    """The bottom-k sketch of a set of packet identifiers."""
    if k < 1:
        raise ConfigError(f"a MinHash sketch needs k ≥ 1, got {k}")
    h = hash64(ident, int(derive_seeds(seed, "minhash")[0]))
    if len(h) > k:
        h = np.partition(h, k - 1)[:k]
    return BottomK(distinct(h), k, len(ident))


def jaccard(a: BottomK, b: BottomK) -> float:
    """Estimated Jaccard similarity of the two sets behind ``a`` and ``b``."""
    if a.k != b.k:
        raise ConfigError(f"MinHash sketches of different sizes: {a.k} and {b.k}")
    union = np.union1d(a.values, b.values)[: a.k]
    if not len(union):
        return 1.0
    both = np.intersect1d(a.values, b.values, assume_unique=True)
    return float(np.count_nonzero(contained(union, both))) / len(union)


def set_difference(a: BottomK, b: BottomK) -> float:
    """Estimated ``|A Δ B|`` from the two sketches and the exact set sizes."""
    j = jaccard(a, b)
    return (a.size + b.size) * (1.0 - j) / (1.0 + j)
