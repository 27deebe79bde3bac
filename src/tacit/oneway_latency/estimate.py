"""Mean and standard deviation of latency from collapsed bucket pairs.

Every synopsis in this package ends the same way: a set of usable buckets, each the collapse of
a sender bucket and its receiver twin into one pair ``(D_b, n_b)`` — the sum of the one-way
delays of the ``n_b`` packets the two buckets share (receiver timestamp sum minus sender
timestamp sum) and their number. LDA calls these usable buckets (counts match; the RDA paper's
§II-C: "A pair of buckets is useful if the value of their counters is the same in both LDAs"),
FineComb adds a digest check, RDA obtains them by the selection of Algorithm 2 (§V-C).

Mean (the RDA paper's §II-C for LDA, §V-C for RDA): ``μ̂ = Σ D_b / Σ n_b``. The sums are
integers, so when every packet seen at both sides is in the usable buckets the mean is exact up
to one float division.

Standard deviation: tacit departs from the RDA paper here, for all four methods. The paper
collapses pairs of buckets into signed differences and subtracts the squared mean from a second
moment. For LDA (§II-C, Eq. 1–3): adjacent buckets ``2j − 1`` and ``2j``, with
``T̃ = T[2j] − T[2j − 1]`` and ``C̃ = C[2j] + C[2j − 1]``; then
``F = Σ (T̃_B − T̃_A)² / Σ C̃_A`` over pairs whose counts match, and ``σ² = F − μ²`` (printed
garbled as ``F² − μ²``). For RDA (Algorithm 2, lines 8–18, and Algorithm 3): consecutive pairs
among the selected buckets of each bank, and ``SqSum / Count − μ̂²``. Neither is
implemented. tacit uses the estimator below instead, the same for every method, so that the
methods are compared on the information in their buckets alone. Unlike Eq. 3 and Algorithm 3,
it cannot come out negative (§IV-D shows a collapse giving a variance of −6089.6).

The estimator. With delays i.i.d. of variance σ², ``D_b − n_b μ`` has variance ``n_b σ²``, so
each bucket gives one degree of freedom whatever its size. With weights ``w_i`` = the number of
usable buckets that contain packet ``i`` (1 when buckets are disjoint, as in LDA and FineComb;
up to k in RDA, whose k banks each hold every packet) and ``μ̂`` the ratio above,

    E[ Σ_b (D_b − n_b μ̂)² / n_b ] = σ² (B − Σ_i w_i² / Σ_i w_i),

for B usable buckets. Hence the unbiased estimator

    σ̂² = Σ_b (D_b − n_b μ̂)² / n_b  /  (B − c),     c = Σ_i w_i² / Σ_i w_i

(c = 1 for disjoint buckets, c = k when every packet sits in k usable buckets). Its relative
standard error is about ``sqrt((κ_b − 1) / (4 (B − c)))``, with κ_b the kurtosis of a bucket
sum, so a few hundred usable buckets give a standard deviation within a few percent. LDA's own
paper (Kompella et al., SIGCOMM '09) is not in ``/work/shared/papers``; its estimator is known
here only through the RDA paper's Eq. 1–3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyEstimate:
    """One interval's estimated latency (ns) and how many packets it rests on."""

    mean_ns: float
    std_ns: float
    useful_packets: int


def estimate_from_buckets(
    delay_sums: np.ndarray,
    counts: np.ndarray,
    useful_packets: int | None = None,
    overlap: float = 1.0,
) -> LatencyEstimate | None:
    """Mean and standard deviation from collapsed bucket pairs; see the module docstring.

    ``overlap`` is ``c = Σ w² / Σ w`` (1 for disjoint buckets); ``useful_packets`` is the
    number of distinct packets behind the buckets (default: ``Σ n_b``, right when disjoint).
    None when no bucket holds a packet.
    """
    counts = np.asarray(counts, dtype=np.int64)
    nonempty = counts > 0
    if not nonempty.any():
        return None
    d = np.asarray(delay_sums, dtype=np.int64)[nonempty]
    n = counts[nonempty]
    total = int(n.sum())
    mean = int(d.sum()) / total
    dof = len(n) - overlap
    if dof > 0:
        r = d.astype(np.float64) - n * mean
        std = float(np.sqrt(max(float(np.sum(r * r / n)) / dof, 0.0)))
    else:
        std = float("nan")
    return LatencyEstimate(mean, std, total if useful_packets is None else int(useful_packets))
