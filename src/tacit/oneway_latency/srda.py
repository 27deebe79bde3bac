"""sRDA: the RDA paper's naive synopsis (§IV), an invertible Bloom lookup table with IDSH.

Each bucket holds ID xor, IDSH (XOR of a hash of each identifier), TS sum and Δ, and every
packet updates k positions of one table (§IV-B). A bucket is pure iff Δ = ±1 and IDSH equals
the hash of its ID xor (§IV-C) — the classic IBLT test (Goodrich and Mitzenmacher, Allerton
'11), which costs a field per bucket that RDA's bank-hash test saves (§IV-D, "Space-
redundancy"). How tacit's layout departs from §IV-B (k distinct positions per packet, a 32-bit
IDSH) is in :mod:`~tacit.oneway_latency.synopsis`.

Everything after the synopsis — Algorithm 1 peeling, the cache checks and deletions, the
selection of Algorithm 2 and the statistics — is RDA's
(:func:`~tacit.oneway_latency.rda.reconcile`); only the layout differs
(:class:`~tacit.oneway_latency.synopsis.SynopsisLayout` with ``banked=False``). The paper
leaves sRDA's decoding to its appendix, which is not in the text, and gives sRDA's standard
deviation by collapsing adjacent buckets (§IV-D), a collapse that can cancel a packet's
timestamp and return a negative variance. tacit departs there: sRDA is measured as RDA is, so
that the comparison shows what the layout alone changes.

Defaults: k = 3 positions, where §IV-B has "k (2 by default)": tacit departs, because one table
peels well only with three (tacit's RDA default too); at most three peeling rounds (as RDA); no
late binding (sRDA has a fixed size); 3072 buckets (≈ 72 KiB; any size is a choice, the
equal-memory comparison replaces it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tacit.oneway_latency.intervals import IntervalWork
from tacit.oneway_latency.rda import ReconcileResult, reconcile_interval
from tacit.oneway_latency.synopsis import SynopsisLayout, bucket_bytes, buckets_fitting


@dataclass(frozen=True)
class SRDAParams:
    """sRDA parameters: ``k`` positions per packet in a table of ``buckets``."""

    k: int = 3
    buckets: int = 3072
    max_peel_rounds: int = 3
    sampling_rate: float = 1.0
    seed: int = 0

    def layout(self) -> SynopsisLayout:
        return SynopsisLayout(self.k, self.buckets, banked=False, seed=self.seed)

    def with_memory(self, memory_bytes: int) -> SRDAParams:
        """The same parameters with the most buckets that fit ``memory_bytes``."""
        buckets = buckets_fitting(
            memory_bytes, 1, bucket_bytes(banked=False), self.k, f"{self.k} sRDA buckets"
        )
        return dataclasses.replace(self, buckets=buckets)


def srda_interval(work: IntervalWork, params: SRDAParams) -> ReconcileResult:
    """sRDA on one interval."""
    work = work.sampled(params.sampling_rate, params.seed)
    return reconcile_interval(work, params.layout(), params.max_peel_rounds)
