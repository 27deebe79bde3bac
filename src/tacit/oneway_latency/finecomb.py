"""FineComb: LDA buckets with order-agnostic digests, repaired with a stash of boundary packets.

Lee, Goldberg, Kompella and Varghese, "Fine-grained latency and loss measurements in the
presence of reordering", SIGMETRICS '11 (the RDA paper's ref. [22]; an IEEE/ACM ToN version is
titled "FineComb: Measuring Microscopic Latency and Loss in the Presence of Reordering"; a
CoNEXT '11 title, "FineComb: Measuring Microsecond Latencies and Jitter", once given for it
could not be confirmed). Neither FineComb text is in ``/work/shared/papers``: this follows the
RDA paper's description (§III-C-2, §V-B, §VII), which compares against it, and says where a
detail is tacit's choice.

LDA cannot tell a bucket that lost one packet and gained a reordered one from an intact bucket:
the counts match, the delay sum is wrong (RDA §III-C-1, Fig. 2). FineComb adds to each bucket a
parity string, and a bucket is usable iff count *and* parity match (RDA §III-C-2: "If two
buckets have some different packets ... their parity strings will differ from each other, and
they will be discarded as useless"). RDA describes the parity string as "the XOR value of entire
packets"; tacit departs: its digest is the XOR of a 32-bit hash of each packet's identifier,
order-agnostic like the parity string.

Reordering at interval boundaries would still spoil many buckets, so the receiver keeps a
*stash* (RDA §III-C-2: "a stash of packets that are likely to be reordered at the receiver"):
here the first packets it receives after each boundary, with their timestamps, the ones most
likely to have been sent in the previous interval. A mismatched bucket of interval i is repaired
by trying subsets of its candidates — stashed packets of the start of interval i (to remove:
sent in i − 1) and of the start of interval i + 1 (to add: sent in i) — until count and digest
match the sender's (stash recovery). Every mismatched bucket with candidates is tried: those
whose counts match but whose content differs (a loss or late packet offset by a foreign one),
and those that only lack a late packet or hold an extra foreign one. Lost packets are not
repaired (RDA §III-C-2: "if a bucket contains some lost packets, FineComb will be unable to
repair this bucket"). The search is exhaustive over the ``2^c`` subsets of a bucket's ``c``
candidates, the smallest matching subset wins, and its cost (subsets tried, seconds) is
reported. Buckets with more than ``max_candidates`` candidates are left as they are. tacit
departs from the brute force RDA describes ("each possible combination of packets in the
stash", O(m · 2^|stash|), §V-B): a bucket's candidates are only the stashed packets whose
identifier hashes to it, since no other stashed packet can be in it, so the cost grows with
``2^c`` per bucket, not with ``2^|stash|``. "Ideal repair" is the variant RDA uses for its Figs. 7–8
(§VII-B-1): an oracle (the sender's packet set) names the right subset outright; same stash, no
search — an upper bound on stash recovery.

Parameters. The RDA paper gives FineComb's stash size: "a stash of elements that is of the same
size as the number of buckets as recommended in [22]" (§VII-A). tacit departs: a stash of 256
entries (16 bytes each, identifier and timestamp, counted in FineComb's memory: per interval the
receiver keeps one stash). tacit's choices, where the paper gives none: the stash is filled with
the first packets received within 100 µs of a boundary (about 17 times the median delay
simulated: a packet late by its own delay arrives inside the window with probability ≈ 99 %),
at most 16 candidates per bucket (65,535 subsets), and LDA's banks.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numba import njit

from tacit.errors import ConfigError
from tacit.oneway_latency.estimate import LatencyEstimate
from tacit.oneway_latency.intervals import IntervalCache, IntervalWork
from tacit.oneway_latency.lda import (
    DEFAULT_RATES,
    Aggregator,
    AggregatorLayout,
    bucket_bytes,
    bucket_pairs_estimate,
)
from tacit.oneway_latency.synopsis import buckets_fitting

STASH_ENTRY_BYTES = 16
Repair = Literal["bruteforce", "ideal", "none"]


@dataclass(frozen=True)
class FineCombParams:
    """FineComb parameters; see the module docstring for where each default comes from."""

    sampling_rates: tuple[float, ...] = DEFAULT_RATES
    buckets_per_bank: int = 1024
    stash_capacity: int = 256
    stash_window_ns: int = 100_000
    max_candidates: int = 16
    repair: Repair = "bruteforce"
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.max_candidates <= 30:
            raise ConfigError(f"max_candidates must be in 1..30, got {self.max_candidates}")

    def layout(self) -> AggregatorLayout:
        return AggregatorLayout(self.sampling_rates, self.buckets_per_bank, True, self.seed)

    @property
    def memory_bytes(self) -> int:
        return self.layout().memory_bytes + self.stash_capacity * STASH_ENTRY_BYTES

    def with_memory(self, memory_bytes: int) -> FineCombParams:
        """The same stash and banks with the most buckets per bank that fit ``memory_bytes``."""
        left = memory_bytes - self.stash_capacity * STASH_ENTRY_BYTES
        per_bank = buckets_fitting(
            left, len(self.sampling_rates), bucket_bytes(True), 1, "FineComb's stash and banks"
        )
        return dataclasses.replace(self, buckets_per_bank=per_bank)


@dataclass(frozen=True)
class Stash:
    """Packets the receiver got first after a boundary: identifiers and receive timestamps."""

    ids: np.ndarray
    ts: np.ndarray

    @classmethod
    def head(cls, received: IntervalCache, start_ns: int, window_ns: int, capacity: int) -> Stash:
        """The first ``capacity`` packets received in ``[start_ns, start_ns + window_ns)``."""
        near = received.window(start_ns, start_ns + window_ns)
        first = np.argsort(near.ts, kind="stable")[:capacity]
        return cls(near.ids[first], near.ts[first])


@dataclass(frozen=True)
class RepairStats:
    mismatched: int
    """Buckets whose count or digest differed before repair."""
    repaired: int
    skipped: int
    """Mismatched buckets with more than ``max_candidates`` candidates."""
    checks: int
    """Subsets tried (brute force) or candidates judged (ideal)."""
    seconds: float


def stash_repair(
    sender: Aggregator,
    receiver: Aggregator,
    leaving: Stash,
    arriving: Stash,
    max_candidates: int,
    oracle: IntervalCache | None = None,
) -> RepairStats:
    """Repair the receiver's mismatched buckets of one interval in place (FineComb stash
    recovery). ``leaving``: the stash of this interval's start (candidates to remove);
    ``arriving``: the stash of the next interval's start (candidates to add). With an
    ``oracle`` (the sender's packets of the interval) the ideal repair is applied instead of
    the search."""
    t0 = time.perf_counter()
    layout = sender.layout
    mismatched = (sender.count != receiver.count) | (sender.digest != receiver.digest)
    ids = np.concatenate([leaving.ids, arriving.ids])
    ts = np.concatenate([leaving.ts, arriving.ts]).view(np.uint64)
    sign = np.concatenate([np.full(len(leaving.ids), -1), np.full(len(arriving.ids), 1)])
    bucket = layout.index(ids)
    keep = bucket >= 0
    keep[keep] = mismatched[bucket[keep]]
    order = np.flatnonzero(keep)[np.argsort(bucket[keep], kind="stable")]
    ids, ts, sign, bucket = ids[order], ts[order], sign[order], bucket[order]
    digest = receiver.digest_of(ids)
    chosen = np.zeros(len(ids), bool)
    if oracle is None:
        starts = np.flatnonzero(np.diff(bucket, prepend=-1, append=-1))  # groups + end
        checks, skipped = _bruteforce(
            starts,
            bucket,
            sign,
            digest,
            sender.count,
            sender.digest,
            receiver.count,
            receiver.digest,
            max_candidates,
            chosen,
        )
    else:
        in_sender = oracle.contains(ids)
        chosen[:] = np.where(sign > 0, in_sender, ~in_sender)
        checks, skipped = len(ids), 0
    _apply(bucket, sign, digest, ts, chosen, receiver.tsum, receiver.count, receiver.digest)
    now_matching = (sender.count == receiver.count) & (sender.digest == receiver.digest)
    return RepairStats(
        mismatched=int(mismatched.sum()),
        repaired=int(np.count_nonzero(mismatched & now_matching)),
        skipped=int(skipped),
        checks=int(checks),
        seconds=time.perf_counter() - t0,
    )


@dataclass(frozen=True)
class FineCombResult:
    estimate: LatencyEstimate | None
    memory_bytes: int
    repair: RepairStats


def finecomb_interval(work: IntervalWork, params: FineCombParams) -> FineCombResult:
    """FineComb on one interval: aggregate, repair from the stashes, measure usable buckets."""
    layout = params.layout()
    sender = Aggregator.build(layout, work.sender.ids, work.sender.ts)
    receiver = Aggregator.build(layout, work.receiver.ids, work.receiver.ts)
    if params.repair == "none":
        stats = RepairStats(0, 0, 0, 0, 0.0)
    else:
        stash = (params.stash_window_ns, params.stash_capacity)
        stats = stash_repair(
            sender,
            receiver,
            Stash.head(work.receiver, work.start_ns, *stash),
            Stash.head(work.receiver_later, work.end_ns, *stash),
            params.max_candidates,
            oracle=work.sender if params.repair == "ideal" else None,
        )
    return FineCombResult(bucket_pairs_estimate(sender, receiver), params.memory_bytes, stats)


@njit(cache=True)
def _bruteforce(  # noqa: C901
    starts, bucket, sign, digest, s_count, s_digest, r_count, r_digest, max_candidates, chosen
):
    """Per bucket, every non-empty subset of its candidates in Gray-code order (one candidate
    toggled per step); the smallest subset that makes count and digest match is chosen."""
    checks = 0
    skipped = 0
    for g in range(starts.size - 1):
        lo = starts[g]
        c = starts[g + 1] - lo
        b = bucket[lo]
        if c > max_candidates:
            skipped += 1
            continue
        count = r_count[b]
        dig = r_digest[b]
        best = -1
        best_size = c + 1
        mask = 0
        for step in range(1, 1 << c):
            bit = 0
            while ((step >> bit) & 1) == 0:
                bit += 1
            mask ^= 1 << bit
            if (mask >> bit) & 1:
                count += sign[lo + bit]
            else:
                count -= sign[lo + bit]
            dig ^= digest[lo + bit]
            checks += 1
            if count == s_count[b] and dig == s_digest[b]:
                size = 0
                for t in range(c):
                    size += (mask >> t) & 1
                if size < best_size:
                    best_size = size
                    best = mask
        if best >= 0:
            for t in range(c):
                if (best >> t) & 1:
                    chosen[lo + t] = True
    return checks, skipped


@njit(cache=True)
def _apply(bucket, sign, digest, ts, chosen, r_tsum, r_count, r_digest):
    for i in range(bucket.size):
        if chosen[i]:
            b = bucket[i]
            r_count[b] += sign[i]
            r_digest[b] ^= digest[i]
            if sign[i] > 0:
                r_tsum[b] += ts[i]
            else:
                r_tsum[b] -= ts[i]
