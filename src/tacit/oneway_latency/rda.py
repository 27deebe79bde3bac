"""RDA: reconcile the two synopses of an interval, then measure on every packet seen at both.

Fu, Barlet-Ros and Li, "Every Timestamp Counts: Accurate Tracking of Network Latencies using
Reconcilable Difference Aggregator" (RDA; text in ``/work/shared/papers``). Per interval and
side:

1. Each side caches its packets (identifier → timestamp) for the interval
   (:class:`~tacit.oneway_latency.intervals.IntervalCache`): §IV-A ("each measurement point has
   to keep a local cache of packets"), §VIII-A (an in-memory hash table, never transmitted).
2. Late binding (§VIII-A): at the end of the interval the sides estimate the set difference
   from MinHash signatures of their caches and size the synopsis at ``2 ×`` that estimate
   buckets per bank (:func:`late_binding_buckets`), the m = 2d of Theorem 2 (§VI); or a fixed
   size is given, as in §VII-B ("otherwise, we allocate a static number of buckets per bank")
   and in equal-memory comparisons.
3. Each side builds its synopsis (§V-A: k banks of m buckets in one array, ID xor, TS sum, Δ;
   :mod:`~tacit.oneway_latency.synopsis`), and one is subtracted from the other (§V-B (i)).
   §VIII-A has the receiver ship its RDA to the sender, which decodes and asks the receiver for
   the timestamps of the reordered packets. Here the roles are swapped: the sender ships, the
   receiver subtracts and decodes, and asks the sender for the timestamps it lacks (as the
   agent does; :mod:`~tacit.oneway_latency.agent` gives its reason). The same packets are
   listed and the same timestamps fetched; only the direction of the messages differs.
4. Algorithm 1 (§V-B (ii); :func:`~tacit.oneway_latency.synopsis.peel`) lists the packets seen
   at one side only. Each listed packet is looked up in the cache of the side its sign names —
   the lookup step 5 needs anyway. §V-B argues that an impure bucket's ID xor hashes "to a
   different index in this bank"; it does so only with probability 1 − 1/m, so an impure
   bucket whose count happens to be ±1 (e.g. two lost packets and one foreign one) passes the
   bank-hash test with probability 1/m, and the identifier it lists is garbage, found in no
   cache. tacit adds a verification loop that Algorithm 1 does not have: such identifiers are
   blocked and the difference is peeled again, up to ``max_peel_rounds`` times; if garbage
   remains, or the peeling stops before the difference is empty, the decoding is reported
   failed and only verified packets are acted on. Without it, a garbage identifier from one
   falsely pure bucket corrupts the k buckets it is peeled from, and with mixed-sign
   differences well below the peeling threshold that alone can make the decoding fail.
5. Deletion (§VIII-A, "Latency Aggregation"): the lost packets (Δ = +1 here) are deleted from
   the sender's synopsis with their send timestamps from the sender's cache, and the reordered
   ones (Δ = −1: received in this interval, sent in another) from the receiver's synopsis.
   tacit departs for a packet sent in this interval and received in a later one (it is in the
   receiver's cache of interval i + 1). §III-B treats it as lost in interval i and reordered in
   i + 1, so the paper deletes it from both. tacit re-homes it instead: it is added to the
   receiver's synopsis of interval i with its receive timestamp, so its delay counts in the
   interval it was sent in, as in tacit's ground truth (:mod:`~tacit.oneway_latency.truth`).
6. Selection (Algorithm 2, lines 5–7; :func:`selective_collapse`): the buckets that now hold
   only packets seen at both sides (Δ = 0 and ID xor = 0 in the difference) are selected. The
   mean is the sum of their delay sums over the sum of their counts, over every bank, so a
   packet counts once per selected bucket (§V-C, "Average Latency"). When decoding succeeded
   every bucket is selected and the mean is exact; when it failed RDA still measures on the
   selected buckets, and a packet is lost to the measurement only when none of its k buckets is
   selected (Lemma 1, §VI). tacit departs from Algorithm 2 after the selection: it does not pair
   selected buckets (lines 8–18) but keeps each as one (delay sum, count) pair.
7. Standard deviation: tacit departs from Algorithm 3 (§V-C); the estimator is
   :func:`~tacit.oneway_latency.estimate.estimate_from_buckets`, with the overlap of the k banks
   accounted for (see :mod:`~tacit.oneway_latency.estimate` for both estimators).

Defaults are tacit's; :meth:`RDAParams.published` gives the paper's number of banks. That is
the one setting in which they differ: the paper's k = 2 (§VIII-B: "increasing the number k of
hash functions from one to two increases the percentage of decoded problematic packets, while
more than two hash functions decreases the decoding probability"; §VII-B and §IX use two as
well), tacit's k = 3. Theorem 2 bounds the failure at O(d^−k) with m = 2d per bank; with k = 2,
however, a cycle among the differences, which peeling cannot break, has a probability that
does not vanish as d grows, while k = 3's peeling threshold (≈ 0.82 differences per bucket)
leaves the 2 × over-provisioning a wide margin (the reproduction report shows both). Both size
the synopsis by late binding, twice the estimated set difference per bank (§VIII-A).
tacit's own choices, where the paper gives none: the MinHash variant and size (bottom-k, 1024
values: 8 KiB per side per interval; :mod:`~tacit.oneway_latency.minhash`); a floor of 64
buckets per bank, since MinHash cannot see a difference much smaller than
``|A ∪ B| / k_minhash``; at most three peeling rounds (one false pure bucket per interval is
already rare below the threshold, two in a row rarer still).

Other departures, not parameters: a bucket is 20 bytes, not §VIII-B's 192 bits (Δ is 4 bytes
here, a 64-bit integer there), which gives RDA more buckets at equal memory; sampling
(``sampling_rate`` below 1) hashes each packet's identifier, where §VIII-B ("Cache Size")
samples "based on a flow identifier" (the same packets at both sides either way; §IX caches all
packets, as the default rate 1 does).
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
        """The paper's number of banks, two (§VII-B, §VIII-B, §IX; module docstring). The
        departures that are not parameters (bucket width, re-homing, Algorithms 2–3) remain."""
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
    """Subtraction, Algorithm 1, cache checks and deletions, selection and statistics."""


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
    """The selection of RDA Algorithm 2 (§V-C, lines 5–7): after the deletions, select the
    buckets whose difference is clean (only packets seen at both sides remain) and collapse each
    with its twin at the other side into (delay sum, count).

    Algorithm 2 selects a bucket when the two ID fields are equal and Δ > 0; here Δ must be
    equal as well, and empty buckets are dropped later, by the estimator. tacit departs from
    lines 8–18: selected buckets are not paired within a bank into signed differences
    (``TS[p] − TS[q]``); each stays one pair of its own.

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
    """Mean (§V-C, "Average Latency") and standard deviation from the buckets selected as in
    Algorithm 2. tacit departs from Algorithm 3 for the standard deviation: the estimator is
    :mod:`~tacit.oneway_latency.estimate`'s, which says how the two differ.

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
