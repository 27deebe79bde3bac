"""RDA: reconcile the two synopses of an interval, then measure on every packet seen at both.

"Every Timestamp Counts: Accurate Tracking of Network Latencies using Reconcilable Difference
Aggregator" (RDA). Per interval and side (RDA's design as we reconstruct it; its text is not
available to us, so sections are not cited except §VII, the evaluation):

1. Each side caches its packets (identifier → timestamp) for the interval
   (:class:`~tacit.oneway_latency.intervals.IntervalCache`).
2. Late binding: at the end of the interval the sides exchange MinHash signatures of their
   caches and size the synopsis at ``2 ×`` the estimated set difference buckets per bank
   (:func:`late_binding_buckets`); or a fixed size is given (equal-memory comparisons).
3. Each side builds its synopsis (k banks of m buckets: ID xor, TS sum, Δ); the sender ships
   its synopsis, the receiver subtracts its own from it.
4. Algorithm 1 (:func:`~tacit.oneway_latency.synopsis.peel`) lists the packets seen at one side
   only. Each listed packet is looked up in the cache of the side its sign names — the lookup
   step 5 needs anyway: the receiver looks up Δ = −1 packets in its own cache and sends the
   Δ = +1 list to the sender, which looks them up in its cache. The bank-hash purity test
   passes an impure bucket whose count happens to be ±1 (e.g. two lost packets and one
   foreign one) with probability 1/m, and the identifier it then lists is garbage — found in
   no cache. Such identifiers are blocked and the difference is peeled again, up to
   ``max_peel_rounds`` times; if garbage remains, or the peeling stops before the difference
   is empty, the decoding is reported failed and only verified packets are acted on. (This
   verification loop is our reading of how the caches serve the decoder; the paper's text is
   not available to us. Without it, a garbage identifier from one falsely pure bucket corrupts
   the k buckets it is peeled from, and with mixed-sign differences well below the peeling
   threshold that alone can make the decoding fail.)
5. Deletion: a packet listed with Δ = +1 that the receiver counted in a later interval (it is
   in the receiver's cache of interval i + 1) was reordered across the boundary; it is added to
   the receiver's synopsis with its receive timestamp, so its delay counts in the interval it
   was sent in. Other Δ = +1 packets were lost and are deleted from the sender's synopsis with
   their send timestamps from the sender's cache. Δ = −1 packets were sent in another interval
   and are deleted from the receiver's synopsis.
6. Algorithm 2 (:func:`selective_collapse`): the buckets that now hold only packets seen at
   both sides (Δ = 0 and ID xor = 0 after the deletions) are selected, and each is collapsed
   with its twin into (delay sum, count). When decoding succeeded that is every bucket, and the
   mean delay is exact; when it failed RDA still measures on the clean buckets, as LDA would.
7. Algorithm 3: mean and standard deviation from the collapsed pairs
   (:func:`~tacit.oneway_latency.estimate.estimate_from_buckets`, with the overlap of the k
   banks accounted for).

Defaults are tacit's; :meth:`RDAParams.published` gives the paper's. They differ in one
setting, the number of banks: the paper's k = 2 (§VIII-B: "increasing the number k of hash
functions from one to two increases the percentage of decoded problematic packets, while more
than two hash functions decreases the decoding probability"; §VII uses two as well), tacit's
k = 3: with k = 2 a cycle among the differences, which peeling cannot break, has constant
probability, while k = 3's peeling threshold (≈ 0.82 differences per bucket) leaves the 2 ×
over-provisioning a wide margin (the reproduction report shows both). Both size the synopsis by
late binding, twice the estimated set difference per bank, from a MinHash estimate (§VIII-A).
tacit's own choices, where the paper gives none: a floor of 64 buckets per bank, since MinHash
cannot see a difference much smaller than ``|A ∪ B| / k_minhash``; MinHash signatures of 1024
values (8 KiB per side per interval); at most three peeling rounds (one false pure bucket per
interval is already rare below the threshold, two in a row rarer still).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError
from tacit.oneway_latency.estimate import LatencyEstimate, estimate_from_buckets
from tacit.oneway_latency.intervals import CacheLookup, IntervalCache, IntervalWork
from tacit.oneway_latency.minhash import BottomK, bottom_k, set_difference
from tacit.oneway_latency.synopsis import (
    Synopsis,
    SynopsisLayout,
    bucket_bytes,
    buckets_fitting,
    peel,
)


@dataclass(frozen=True)
class RDAParams:
    """RDA parameters; see the module docstring for where each default comes from.

    ``buckets_per_bank`` None means late binding; ``sampling_rate`` below 1 applies flow-hash
    sampling to both caches (the same packets at both sides).
    """

    k: int = 3
    buckets_per_bank: int | None = None
    late_binding_factor: float = 2.0
    min_buckets_per_bank: int = 64
    minhash_size: int = 1024
    max_peel_rounds: int = 3
    sampling_rate: float = 1.0
    seed: int = 0

    @classmethod
    def published(cls, **overrides) -> RDAParams:
        """The paper's: two banks (§VIII-B; module docstring)."""
        return cls(**{"k": 2, **overrides})

    def layout(self, buckets_per_bank: int) -> SynopsisLayout:
        return SynopsisLayout(self.k, self.k * buckets_per_bank, banked=True, seed=self.seed)

    def per_bank_fitting(self, memory_bytes: int) -> int:
        """The most buckets per bank whose synopsis fits ``memory_bytes``."""
        return buckets_fitting(
            memory_bytes, self.k, bucket_bytes(banked=True), 1, "one RDA bucket per bank"
        )

    def with_memory(self, memory_bytes: int) -> RDAParams:
        """The same parameters with the most buckets per bank that fit ``memory_bytes``."""
        return dataclasses.replace(self, buckets_per_bank=self.per_bank_fitting(memory_bytes))


@dataclass(frozen=True)
class ReconcileResult:
    """The outcome of reconciling one interval (RDA or sRDA)."""

    estimate: LatencyEstimate | None
    decoded: bool
    """Algorithm 1 listed the whole difference, and every listed packet checked out."""
    peel_rounds: int
    """Peelings run: one, plus one per round that found garbage."""
    lost: int
    late: int
    """Sent in this interval, received in a later one: re-homed and measured."""
    foreign: int
    """Received in this interval, sent in another: deleted from the receiver's synopsis."""
    memory_bytes: int
    decode_seconds: float
    """Subtraction, Algorithm 1, cache checks and deletions, Algorithms 2 and 3."""


def late_binding_buckets(sender: IntervalCache, receiver: IntervalCache, params: RDAParams) -> int:
    """Buckets per bank from the two caches (RDA's late binding; :func:`late_binding_size`)."""
    return late_binding_size(
        bottom_k(sender.ids, params.minhash_size, params.seed),
        bottom_k(receiver.ids, params.minhash_size, params.seed),
        params,
    )


def late_binding_size(sender: BottomK, receiver: BottomK, params: RDAParams) -> int:
    """Buckets per bank = late-binding factor × the MinHash estimate of the set difference of
    the two sides' sketches, at least ``min_buckets_per_bank``. Agents exchange the sketches, not
    the caches (:mod:`tacit.oneway_latency.agent`)."""
    d = set_difference(sender, receiver)
    return max(params.min_buckets_per_bank, math.ceil(params.late_binding_factor * d))


def rda_interval(work: IntervalWork, params: RDAParams) -> ReconcileResult:
    """RDA on one interval: late binding (unless sized), build, reconcile."""
    work = work.sampled(params.sampling_rate, params.seed)
    m = params.buckets_per_bank or late_binding_buckets(work.sender, work.receiver, params)
    return reconcile_interval(work, params.layout(m), params.max_peel_rounds)


def reconcile_interval(
    work: IntervalWork, layout: SynopsisLayout, max_peel_rounds: int
) -> ReconcileResult:
    """Build both sides' synopses from their caches and reconcile them."""
    sender = Synopsis.build(layout, work.sender.ids, work.sender.ts)
    receiver = Synopsis.build(layout, work.receiver.ids, work.receiver.ts)
    return reconcile(sender, receiver, work, max_peel_rounds)


def reconcile(
    sender: Synopsis, receiver: Synopsis, work: IntervalWork[CacheLookup], max_peel_rounds: int
) -> ReconcileResult:
    """Steps 4–7 of the module docstring; ``sender`` and ``receiver`` are updated in place."""
    if max_peel_rounds < 1:
        raise ConfigError(f"need at least one peeling round, got {max_peel_rounds}")
    t0 = time.perf_counter()
    difference = sender.subtract(receiver)
    blocked = np.empty(0, np.uint64)
    rounds = 0
    while True:
        rounds += 1
        listed = peel(difference, blocked, work.receiver.ids)
        is_plus = listed.signs > 0
        in_sender, send_ts = work.sender.lookup(listed.ids)
        in_receiver, recv_ts = work.receiver.lookup(listed.ids)
        valid = np.where(is_plus, in_sender & ~in_receiver, in_receiver & ~in_sender)
        garbage = np.concatenate([listed.repeated, listed.ids[~valid]])
        if not len(garbage) or rounds == max_peel_rounds:
            break
        blocked = np.concatenate([blocked, garbage])
    decoded = listed.complete and bool(valid.all())
    plus, send_ts = listed.ids[valid & is_plus], send_ts[valid & is_plus]
    minus, recv_ts = listed.ids[valid & ~is_plus], recv_ts[valid & ~is_plus]

    late, late_ts = work.receiver_later.lookup(plus)
    sender.delete(plus[~late], send_ts[~late])
    receiver.insert(plus[late], late_ts[late])
    receiver.delete(minus, recv_ts)

    kept = np.ones(len(work.receiver), bool)
    kept[np.searchsorted(work.receiver.ids, minus)] = False
    present = np.concatenate([work.receiver.ids[kept], plus[late]])
    return ReconcileResult(
        estimate=collapsed_statistics(sender, receiver, present),
        decoded=decoded,
        peel_rounds=rounds,
        lost=int(np.count_nonzero(~late)),
        late=int(np.count_nonzero(late)),
        foreign=len(minus),
        memory_bytes=sender.memory_bytes,
        decode_seconds=time.perf_counter() - t0,
    )


def selective_collapse(
    sender: Synopsis, receiver: Synopsis
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RDA Algorithm 2, as reconstructed here (the paper's text is not available to us): after
    the deletions, select the buckets whose difference is clean (only packets seen at both
    sides remain) and collapse each with its twin into (delay sum, count).

    Returns ``(delay_sums, counts, clean)``: per bucket the receiver-minus-sender timestamp sum
    and the packet count, zero where not selected, and the selection mask.
    """
    difference = receiver.subtract(sender)
    clean = difference.clean()
    delay_sums = np.where(clean, difference.ts.view(np.int64), 0)
    counts = np.where(clean, sender.count, 0)
    return delay_sums, counts, clean


def collapsed_statistics(
    sender: Synopsis, receiver: Synopsis, present: np.ndarray
) -> LatencyEstimate | None:
    """RDA Algorithm 3 (reconstructed; see :mod:`~tacit.oneway_latency.estimate`): mean and
    standard deviation from the selected bucket pairs of Algorithm 2.

    ``present`` are the packets now in the receiver's synopsis. Each is weighted by how many
    of its k buckets were selected (all k when the whole difference was decoded), which gives
    both the number of packets measured and the overlap correction of the k banks.
    """
    delay_sums, counts, clean = selective_collapse(sender, receiver)
    if clean.all():
        w = np.full(len(present), sender.layout.k)
    else:
        w = clean[sender.layout.positions(present)].sum(axis=0)
    used = int(w.sum())
    return estimate_from_buckets(
        delay_sums,
        counts,
        useful_packets=int(np.count_nonzero(w)),
        overlap=float(np.sum(w * w)) / used if used else 1.0,
    )
