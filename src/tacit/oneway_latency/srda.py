"""sRDA: the RDA paper's simple variant, an invertible Bloom lookup table with a purity field.

Each bucket holds ID xor, IDSH (XOR of a hash of each identifier), TS sum and Δ; every packet
updates k distinct positions of one table (as we reconstruct it; the paper's text is not
available to us). A bucket is pure iff Δ = ±1 and IDSH equals the hash of its ID xor — the
classic IBLT test (Goodrich and Mitzenmacher, Allerton '11), which costs a field per bucket
that RDA's bank-hash test saves. Everything after the synopsis — Algorithm 1 peeling, the cache
checks and deletions, selective collapse and the statistics — is RDA's
(:func:`~tacit.oneway_latency.rda.reconcile`); only the layout differs
(:class:`~tacit.oneway_latency.synopsis.SynopsisLayout` with ``banked=False``).

Defaults: k = 3 positions (one table peels well only with three; RDA's k by default) and
at most three peeling rounds (as RDA), no late binding (sRDA
has a fixed size), 3072 buckets (≈ 72 KiB; any size is a choice, the equal-memory comparison
replaces it).
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
