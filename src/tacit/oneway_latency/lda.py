"""LDA: the Lossy Difference Aggregator (Kompella, Levchenko, Snoeren, Varghese, "Every
Microsecond Counts: Tracking Fine-Grain Latencies with a Lossy Difference Aggregator",
SIGCOMM '09).

LDA's own paper is not in ``/work/shared/papers``; this follows the RDA paper's description of
it (§II-C, §III-C-1; the RDA paper's ref. [19]) and says where a detail is tacit's choice.

Sender and receiver each keep, per interval, banks of buckets holding a timestamp sum and a
packet count (RDA §II-C: "A bucket consists of a timestamp accumulator and a counter"; LDA's
Fig. 2). A packet is hashed — identically at both sides — to a bank (flow-hash sampling with
that bank's rate; RDA §III-C-1: "LDA selectively samples packets from the packet stream") and
to a bucket within it. At the end of the interval the sender ships its LDA; a bucket is
*usable* iff the two counts match (RDA §II-C: "A pair of buckets is useful if the value of their
counters is the same in both LDAs"), and the mean delay is the sum over usable buckets of
(receiver sum − sender sum) over their total count. The standard deviation comes from the same
bucket pairs by tacit's estimator, not from LDA's collapse of adjacent buckets (RDA §II-C,
Eq. 1–3): tacit departs there, as :mod:`tacit.oneway_latency.estimate` explains.

Banks (LDA's answer to an unknown loss rate): a single sampling rate is only right for one loss
rate, so LDA keeps banks with different rates. The RDA paper does not give LDA's bank
configuration (§VII-B: "We use the recommended parameters for LDA [19]"), so it is tacit's:
each packet is sampled into at most one bank (disjoint sampling), with rates halving from 1/2
to 1/128 and the remainder in the last bank (rates summing to 1). At no loss every packet is
then usable; at a loss rate L the banks whose expected losses per bucket are below one keep
most of their buckets usable, so some bank suits every L from 10^-5 to 10^-1 at the sizes used
here. Disjoint banks also make the usable packets of all banks distinct, so their estimates
combine without double counting.

Fields (tacit's widths; the RDA paper gives none for LDA): timestamp sum 8 bytes (modulo 2^64,
differences only), count 4 bytes: 12 bytes per bucket. The aggregator here also serves
FineComb, which adds a 4-byte digest per bucket.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.errors import ConfigError
from tacit.oneway_latency.estimate import LatencyEstimate, estimate_from_buckets
from tacit.oneway_latency.identifiers import (
    bank_of,
    bucket_of,
    check32,
    derive_seeds,
    rate_thresholds,
)
from tacit.oneway_latency.intervals import IntervalWork
from tacit.oneway_latency.synopsis import buckets_fitting

TS_BYTES = 8
COUNT_BYTES = 4
DIGEST_BYTES = 4
DEFAULT_RATES = (1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 128)


@dataclass(frozen=True)
class AggregatorLayout:
    """Banks of ``buckets_per_bank`` (timestamp sum, count[, digest]) buckets, one sampling
    rate per bank."""

    rates: tuple[float, ...]
    buckets_per_bank: int
    digest: bool
    seed: int = 0

    def __post_init__(self) -> None:
        rate_thresholds(self.rates)
        if self.buckets_per_bank < 1:
            raise ConfigError(f"need at least one bucket per bank, got {self.buckets_per_bank}")

    @property
    def buckets(self) -> int:
        return len(self.rates) * self.buckets_per_bank

    @property
    def bytes_per_bucket(self) -> int:
        return bucket_bytes(self.digest)

    @property
    def memory_bytes(self) -> int:
        return self.buckets * self.bytes_per_bucket

    def index(self, ident: np.ndarray) -> np.ndarray:
        """The bucket (over all banks) of every identifier, -1 when not sampled."""
        return _index_all(np.ascontiguousarray(ident, dtype=np.uint64), *self._hashing())

    def _hashing(self) -> tuple[np.ndarray, np.uint64, np.ndarray, int]:
        return (
            rate_thresholds(self.rates),
            derive_seeds(self.seed, "sample")[0],
            derive_seeds(self.seed, "aggregator bucket", len(self.rates)),
            self.buckets_per_bank,
        )


def bucket_bytes(digest: bool) -> int:
    """Bytes per bucket: timestamp sum, count, and FineComb's digest."""
    return TS_BYTES + COUNT_BYTES + (DIGEST_BYTES if digest else 0)


class Aggregator:
    """One side's banks for one interval."""

    def __init__(self, layout: AggregatorLayout) -> None:
        self.layout = layout
        self.tsum = np.zeros(layout.buckets, np.uint64)
        self.count = np.zeros(layout.buckets, np.int32)
        self.digest = np.zeros(layout.buckets if layout.digest else 0, np.uint32)

    @classmethod
    def build(cls, layout: AggregatorLayout, ident: np.ndarray, time: np.ndarray) -> Aggregator:
        agg = cls(layout)
        agg.insert(ident, time)
        return agg

    @property
    def memory_bytes(self) -> int:
        return self.layout.memory_bytes

    def insert(self, ident: np.ndarray, time: np.ndarray) -> None:
        """Add packets (identifier, timestamp ns) to their bucket, if sampled."""
        _aggregate(
            np.ascontiguousarray(ident, dtype=np.uint64),
            np.ascontiguousarray(time, dtype=np.int64).view(np.uint64),
            *self.layout._hashing(),
            derive_seeds(self.layout.seed, "digest")[0],
            self.tsum,
            self.count,
            self.digest,
        )

    def digest_of(self, ident: np.ndarray) -> np.ndarray:
        """Each identifier's contribution to a bucket digest."""
        seed = derive_seeds(self.layout.seed, "digest")[0]
        return _digests(np.ascontiguousarray(ident, np.uint64), seed)


def usable_buckets(sender: Aggregator, receiver: Aggregator) -> np.ndarray:
    """Buckets whose counts (and digests, when kept) match and are not empty (RDA §II-C; LDA
    Fig. 2)."""
    usable = (sender.count == receiver.count) & (sender.count > 0)
    if sender.layout.digest:
        usable &= sender.digest == receiver.digest
    return usable


def bucket_pairs_estimate(sender: Aggregator, receiver: Aggregator) -> LatencyEstimate | None:
    """Mean and standard deviation from the usable buckets (disjoint, so no overlap)."""
    usable = usable_buckets(sender, receiver)
    delay = (receiver.tsum - sender.tsum).view(np.int64)
    return estimate_from_buckets(np.where(usable, delay, 0), np.where(usable, sender.count, 0))


@dataclass(frozen=True)
class LDAParams:
    """LDA parameters; see the module docstring for the bank rates."""

    sampling_rates: tuple[float, ...] = DEFAULT_RATES
    buckets_per_bank: int = 1024
    seed: int = 0

    def layout(self) -> AggregatorLayout:
        return AggregatorLayout(self.sampling_rates, self.buckets_per_bank, False, self.seed)

    def with_memory(self, memory_bytes: int) -> LDAParams:
        """The same banks with the most buckets per bank that fit ``memory_bytes``."""
        per_bank = buckets_fitting(
            memory_bytes,
            len(self.sampling_rates),
            bucket_bytes(False),
            1,
            "one LDA bucket per bank",
        )
        return dataclasses.replace(self, buckets_per_bank=per_bank)


@dataclass(frozen=True)
class LDAResult:
    estimate: LatencyEstimate | None
    memory_bytes: int


def lda_interval(work: IntervalWork, params: LDAParams) -> LDAResult:
    """LDA on one interval: both sides aggregate their packets, usable buckets are compared."""
    layout = params.layout()
    sender = Aggregator.build(layout, work.sender.ids, work.sender.ts)
    receiver = Aggregator.build(layout, work.receiver.ids, work.receiver.ts)
    return LDAResult(bucket_pairs_estimate(sender, receiver), layout.memory_bytes)


@njit(cache=True, inline="always")
def _bucket(x, thresholds, sample_seed, bucket_seeds, m):
    j = bank_of(x, sample_seed, thresholds)
    if j < 0:
        return -1
    return j * m + bucket_of(x, bucket_seeds[j], m)


@njit(cache=True)
def _index_all(ids, thresholds, sample_seed, bucket_seeds, m):
    out = np.empty(ids.size, dtype=np.int64)
    for i in range(ids.size):
        out[i] = _bucket(ids[i], thresholds, sample_seed, bucket_seeds, m)
    return out


@njit(cache=True)
def _aggregate(ids, ts, thresholds, sample_seed, bucket_seeds, m, digest_seed, tsum, count, digest):
    has_digest = digest.size > 0
    for i in range(ids.size):
        x = ids[i]
        b = _bucket(x, thresholds, sample_seed, bucket_seeds, m)
        if b < 0:
            continue
        tsum[b] += ts[i]
        count[b] += 1
        if has_digest:
            digest[b] ^= check32(x, digest_seed)


@njit(cache=True)
def _digests(ids, seed):
    out = np.empty(ids.size, dtype=np.uint32)
    for i in range(ids.size):
        out[i] = check32(ids[i], seed)
    return out
