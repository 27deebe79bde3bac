"""Mean and standard deviation of latency from collapsed bucket pairs.

Every synopsis in this package ends the same way: a set of usable buckets, each the collapse of
a sender bucket and its receiver twin into one pair ``(D_b, n_b)`` — the sum of the one-way
delays of the ``n_b`` packets the two buckets share (receiver timestamp sum minus sender
timestamp sum) and their number. LDA calls these usable buckets (counts match; LDA Fig. 2),
FineComb adds a digest check, RDA obtains them from Algorithm 2 (selective collapse).

Mean (as in LDA and RDA): ``μ̂ = Σ D_b / Σ n_b``. The sums are integers, so when every packet
seen at both sides is in the usable buckets the mean is exact up to one float division.

Standard deviation (the RDA paper's Eq. 1–3 / Algorithm 3; the paper's text is not available
to us, so the estimator is stated and derived here). With delays i.i.d. of variance σ²,
``D_b − n_b μ`` has variance ``n_b σ²``, so each bucket gives one degree of freedom whatever
its size. With weights ``w_i`` = the number of usable buckets that contain packet ``i``
(1 when buckets are disjoint, as in LDA and FineComb; up to k in RDA, whose k banks each hold
every packet) and ``μ̂`` the ratio above,

    E[ Σ_b (D_b − n_b μ̂)² / n_b ] = σ² (B − Σ_i w_i² / Σ_i w_i),

for B usable buckets. Hence the unbiased estimator

    σ̂² = Σ_b (D_b − n_b μ̂)² / n_b  /  (B − c),     c = Σ_i w_i² / Σ_i w_i

(c = 1 for disjoint buckets, c = k when every packet sits in k usable buckets). Its relative
standard error is about ``sqrt((κ_b − 1) / (4 (B − c)))``, with κ_b the kurtosis of a bucket
sum, so a few hundred usable buckets give a standard deviation within a few percent. LDA's
paper has a variance estimator of its own, which is not reproduced (its text is not available
to us either); all four methods use this one, so that they are compared on the information in
their buckets alone.
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
