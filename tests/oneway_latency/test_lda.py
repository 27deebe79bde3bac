"""LDA: usable buckets are those whose counts match; the mean is over exactly their packets."""

from __future__ import annotations

import numpy as np
import pytest

from oneway_streams import random_ids, work_of
from tacit.errors import ConfigError
from tacit.oneway_latency.lda import (
    Aggregator,
    AggregatorLayout,
    LDAParams,
    bucket_pairs_estimate,
    lda_interval,
    usable_buckets,
)

ONE_BANK = AggregatorLayout(rates=(1.0,), buckets_per_bank=4, digest=False)


def test_usable_buckets_as_in_lda_figure_2():
    """One bank of four buckets; one packet lost: its bucket is unusable, the mean is over the
    packets of the other three."""
    ids = random_ids(12, 1)
    send = np.arange(12, dtype=np.int64) * 1_000
    delay = np.array([5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27], dtype=np.int64)
    bucket = ONE_BANK.index(ids)
    lost = 4
    received = np.arange(12) != lost
    sender = Aggregator.build(ONE_BANK, ids, send)
    receiver = Aggregator.build(ONE_BANK, ids[received], (send + delay)[received])
    usable = usable_buckets(sender, receiver)
    expected = np.isin(np.arange(4), bucket) & (np.arange(4) != bucket[lost])
    assert usable.tolist() == expected.tolist()
    in_usable = usable[bucket]
    est = bucket_pairs_estimate(sender, receiver)
    assert est.mean_ns == pytest.approx(delay[in_usable].mean(), rel=1e-12)
    assert est.useful_packets == in_usable.sum()


def test_no_loss_every_packet_counts_and_the_mean_is_exact():
    rng = np.random.default_rng(4)
    ids = random_ids(50_000, 4)
    send = rng.integers(0, 9_000_000, len(ids))
    recv = send + rng.integers(1_000, 50_000, len(ids))
    est = lda_interval(work_of((ids, send), (ids, recv)), LDAParams()).estimate
    assert est.useful_packets == len(ids)  # the default banks partition every packet
    assert est.mean_ns == pytest.approx((recv - send).mean(), rel=1e-12)
    assert est.std_ns == pytest.approx((recv - send).std(ddof=1), rel=0.05)


def test_loss_excludes_exactly_the_buckets_that_lost_packets():
    rng = np.random.default_rng(3)
    ids = random_ids(20_000, 3)
    send = np.sort(rng.integers(0, 9_000_000, len(ids)))
    recv = send + rng.integers(1_000, 50_000, len(ids))
    received = rng.random(len(ids)) > 0.01
    work = work_of((ids, send), (ids[received], recv[received]))
    params = LDAParams(buckets_per_bank=256)
    layout = params.layout()
    bucket = layout.index(ids)
    sampled = bucket >= 0
    sent = np.bincount(bucket[sampled], minlength=layout.buckets)
    got = np.bincount(bucket[sampled & received], minlength=layout.buckets)
    usable = (sent == got) & (sent > 0)
    mine = sampled & usable[np.maximum(bucket, 0)]
    result = lda_interval(work, params)
    assert result.estimate.useful_packets == mine.sum() < received.sum()
    assert result.estimate.mean_ns == pytest.approx((recv - send)[mine].mean(), rel=1e-12)


def test_reordering_corrupts_lda_silently():
    """A bucket that lost one packet and gained a foreign one has matching counts: LDA uses it
    and its delay sum is wrong (FineComb's motivation)."""
    layout = ONE_BANK
    ids = random_ids(400, 2)
    bucket = layout.index(ids)
    in0 = np.flatnonzero(bucket == 0)
    lost, foreign = ids[in0[0]], ids[in0[1]]
    sender_ids = ids[ids != foreign]
    receiver_ids = ids[ids != lost]
    send = np.full(len(sender_ids), 1_000)
    sender = Aggregator.build(layout, sender_ids, send)
    receiver_ts = np.where(receiver_ids == foreign, 9_000_000, 1_050)  # foreign: received late
    receiver = Aggregator.build(layout, receiver_ids, receiver_ts)
    assert usable_buckets(sender, receiver)[0]
    assert bucket_pairs_estimate(sender, receiver).mean_ns > 1_000  # true delay is 50 ns


def test_equal_memory_sizing():
    p = LDAParams().with_memory(65_536)
    assert p.layout().memory_bytes <= 65_536 < p.layout().memory_bytes + 8 * 12
    with pytest.raises(ConfigError):
        LDAParams().with_memory(10)
