"""FineComb: digests catch what LDA misses, stash recovery repairs reordering, and its cost."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oneway_streams import random_ids, work_of
from tacit.errors import ConfigError
from tacit.oneway_latency.finecomb import (
    STASH_ENTRY_BYTES,
    FineCombParams,
    Stash,
    finecomb_interval,
    stash_repair,
)
from tacit.oneway_latency.intervals import IntervalCache
from tacit.oneway_latency.lda import Aggregator, AggregatorLayout, usable_buckets

ONE_BUCKET = AggregatorLayout(rates=(1.0,), buckets_per_bank=1, digest=True)
MS = 1_000_000


def boundary_scenario(seed: int = 0):
    """One 10 ms interval with reordering at both boundaries and no loss.

    30 packets of the previous interval arrive in its first 50 µs; 30 of its own packets, sent
    in its last 50 µs, arrive after its end; 200 packets of the next interval follow them.
    """
    rng = np.random.default_rng(seed)
    ids = random_ids(20_260, seed)
    prev, cur, nxt = ids[:30], ids[30:20_030], ids[20_030:]
    send = np.sort(rng.integers(0, 10 * MS - 50_000, len(cur)))
    send[-30:] = np.sort(rng.integers(10 * MS - 50_000, 10 * MS, 30))
    delay = rng.integers(1_000, 20_000, len(cur))
    delay[-30:] += 50_000
    recv = send + delay
    prev_recv = rng.integers(0, 50_000, len(prev))
    nxt_recv = 10 * MS + 60_000 + rng.integers(0, 40_000, len(nxt))
    here = recv < 10 * MS
    work = work_of(
        (cur, send),
        (np.r_[prev, cur[here]], np.r_[prev_recv, recv[here]]),
        later=(np.r_[cur[~here], nxt], np.r_[recv[~here], nxt_recv]),
    )
    return work, float((recv - send).mean())


def test_digest_rejects_a_bucket_that_lost_one_packet_and_gained_another():
    ids = random_ids(10, 1)
    sender = Aggregator.build(ONE_BUCKET, ids[:9], np.zeros(9))
    receiver = Aggregator.build(ONE_BUCKET, ids[1:], np.full(9, 50))
    assert sender.count[0] == receiver.count[0]
    assert not usable_buckets(sender, receiver)[0]


@pytest.mark.parametrize("repair", ["bruteforce", "ideal"])
def test_stash_recovery_repairs_every_reordered_packet(repair):
    work, true_mean = boundary_scenario()
    params = FineCombParams(repair=repair)
    result = finecomb_interval(work, params)
    stats = result.repair
    assert stats.mismatched > 0 and stats.skipped == 0
    assert stats.repaired == stats.mismatched
    assert result.estimate.useful_packets == len(work.sender)
    assert result.estimate.mean_ns == pytest.approx(true_mean, rel=1e-12)
    unrepaired = finecomb_interval(work, dataclasses.replace(params, repair="none"))
    assert unrepaired.estimate.useful_packets < len(work.sender)


def test_brute_force_cost_is_every_subset_of_the_candidates():
    """A bucket that lost a packet cannot be repaired from the stash: all 2^c − 1 non-empty
    subsets of its c candidates are tried."""
    ids = random_ids(100, 2)
    sender = Aggregator.build(ONE_BUCKET, ids, np.zeros(100))
    receiver = Aggregator.build(ONE_BUCKET, ids[1:], np.full(99, 10))
    leaving = Stash(ids[1:11], np.full(10, 10))
    nothing = Stash(np.empty(0, np.uint64), np.empty(0, np.int64))
    stats = stash_repair(sender, receiver, leaving, nothing, max_candidates=16)
    assert (stats.mismatched, stats.repaired, stats.checks) == (1, 0, 2**10 - 1)
    assert stats.seconds > 0
    capped = stash_repair(sender, receiver, leaving, nothing, max_candidates=8)
    assert (capped.skipped, capped.checks) == (1, 0)


def test_brute_force_picks_the_smallest_matching_subset():
    ids = random_ids(60, 3)  # ids[0] is foreign: received here, sent in the interval before
    sender = Aggregator.build(ONE_BUCKET, ids[1:], np.zeros(59))
    receiver = Aggregator.build(ONE_BUCKET, ids, np.r_[5_000, np.full(59, 10)])
    leaving = Stash(ids[:8], np.r_[5_000, np.full(7, 10)])
    arriving = Stash(random_ids(4, 4), np.full(4, 10))
    stats = stash_repair(sender, receiver, leaving, arriving, max_candidates=16)
    assert stats.repaired == 1
    assert receiver.count[0] == 59 and int(receiver.tsum[0]) == 59 * 10  # foreign removed


@pytest.mark.parametrize("repair", ["bruteforce", "ideal"])
def test_nothing_to_repair(repair):
    ids = random_ids(50, 6)
    sender = Aggregator.build(ONE_BUCKET, ids, np.zeros(50))
    receiver = Aggregator.build(ONE_BUCKET, ids, np.full(50, 10))
    stash = Stash(ids[:5], np.full(5, 10))
    oracle = IntervalCache.build(ids, np.zeros(50, np.int64)) if repair == "ideal" else None
    stats = stash_repair(sender, receiver, stash, stash, max_candidates=8, oracle=oracle)
    assert (stats.mismatched, stats.repaired, stats.checks) == (0, 0, 0)
    empty = Stash(np.empty(0, np.uint64), np.empty(0, np.int64))
    receiver.count[0] += 1  # mismatched, but no candidates at all
    stats = stash_repair(sender, receiver, empty, empty, max_candidates=8, oracle=oracle)
    assert (stats.mismatched, stats.repaired, stats.checks) == (1, 0, 0)


def test_ideal_repair_uses_the_oracle_without_search():
    ids = random_ids(60, 5)
    sender = Aggregator.build(ONE_BUCKET, ids[1:], np.zeros(59))
    receiver = Aggregator.build(ONE_BUCKET, ids, np.full(60, 10))
    leaving = Stash(ids[:20], np.full(20, 10))
    nothing = Stash(np.empty(0, np.uint64), np.empty(0, np.int64))
    oracle = IntervalCache.build(ids[1:], np.zeros(59, np.int64))
    stats = stash_repair(sender, receiver, leaving, nothing, max_candidates=4, oracle=oracle)
    assert (stats.repaired, stats.checks, stats.skipped) == (1, 20, 0)


def test_stash_takes_the_first_packets_after_the_boundary():
    received = IntervalCache.build(
        np.array([1, 2, 3, 4, 5], np.uint64), np.array([500, 100, 300, 200, 9_000])
    )
    stash = Stash.head(received, start_ns=0, window_ns=1_000, capacity=3)
    assert stash.ids.tolist() == [2, 4, 3] and stash.ts.tolist() == [100, 200, 300]


def test_equal_memory_counts_the_stash():
    p = FineCombParams().with_memory(65_536)
    assert p.memory_bytes <= 65_536
    assert p.memory_bytes - p.layout().memory_bytes == 256 * STASH_ENTRY_BYTES
    with pytest.raises(ConfigError):
        FineCombParams().with_memory(256 * STASH_ENTRY_BYTES)
    with pytest.raises(ConfigError):
        FineCombParams(max_candidates=40)
