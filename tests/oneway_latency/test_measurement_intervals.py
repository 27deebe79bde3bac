"""Intervals on the synchronized clock, caches, and the pipeline that sees one interval ahead."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.errors import ConfigError, InputError
from tacit.oneway_latency.intervals import (
    IntervalCache,
    IntervalParams,
    IntervalSplit,
    pipeline,
)
from tacit.oneway_latency.stream import PacketStream

P = IntervalParams(start_ns=1_000, length_ns=100)


def test_interval_index_at_boundaries():
    t = np.array([999, 1_000, 1_099, 1_100, 1_250])
    assert P.index(t).tolist() == [-1, 0, 0, 1, 2]
    assert P.start(3) == 1_300
    with pytest.raises(ConfigError):
        IntervalParams(length_ns=0)


def test_packet_stream_validation():
    s = PacketStream(np.array([1, 2]), np.array([5, 6]))
    assert s.ident.dtype == np.uint64 and s.time.dtype == np.int64 and len(s) == 2
    with pytest.raises(InputError):
        PacketStream(np.array([1, 2]), np.array([5]))
    with pytest.raises(InputError):
        PacketStream(np.array([1.5]), np.array([5]))


def test_split_accounts_for_every_packet():
    s = PacketStream(np.arange(10, 20), np.array([900, 1_000, 1_050, 1_120, 1_199, 1_200, 1_450,
                                                  950, 1_001, 1_300]))  # fmt: skip
    split = IntervalSplit(s, P, "sender")
    assert split.before_start == 2
    assert split.indices.tolist() == [0, 1, 2, 3, 4]
    sizes = [len(split.cache(i)) for i in split.indices]
    assert sizes == [3, 2, 1, 1, 1] and sum(sizes) + split.before_start == len(s)
    c = split.cache(0)
    assert c.ids.tolist() == [11, 12, 18]
    assert c.ts.tolist() == [1_000, 1_050, 1_001]


def test_cache_lookup_and_duplicates():
    c = IntervalCache.build(np.array([30, 10, 20], np.uint64), np.array([3, 1, 2]))
    found, ts = c.lookup(np.array([20, 25, 30, 99], np.uint64))
    assert found.tolist() == [True, False, True, False]
    assert ts.tolist() == [2, 0, 3, 0]
    assert not IntervalCache.empty().contains(np.array([1], np.uint64)).any()
    with pytest.raises(InputError, match="more than once"):
        IntervalCache.build(np.array([5, 6, 5], np.uint64), np.array([1, 2, 3]))


def test_pipeline_sees_late_packets_in_the_next_interval():
    # packet 2 is sent at 1_095 (interval 0) and received at 1_105 (interval 1)
    sender = PacketStream(np.array([1, 2, 3]), np.array([1_010, 1_095, 1_150]))
    receiver = PacketStream(np.array([1, 2, 3]), np.array([1_020, 1_105, 1_160]))
    works = list(pipeline(IntervalSplit(sender, P, "s"), IntervalSplit(receiver, P, "r")))
    assert [w.index for w in works] == [0, 1]
    w0 = works[0]
    assert (w0.start_ns, w0.end_ns) == (1_000, 1_100)
    assert w0.sender.ids.tolist() == [1, 2] and w0.receiver.ids.tolist() == [1]
    assert w0.receiver_later.lookup(np.array([2], np.uint64))[1].tolist() == [1_105]
    assert works[1].receiver.ids.tolist() == [2, 3]


def test_pipeline_skips_idle_intervals_but_not_the_receivers_next_one():
    gap = 10**6 * P.length_ns  # a million idle intervals
    sender = PacketStream(np.array([1, 2]), np.array([1_010, 1_095 + gap]))
    receiver = PacketStream(np.array([1, 2]), np.array([1_020, 1_110 + gap]))
    works = list(pipeline(IntervalSplit(sender, P, "s"), IntervalSplit(receiver, P, "r")))
    assert [w.index for w in works] == [0, 10**6]
    assert works[1].receiver_later.ids.tolist() == [2] and len(works[1].receiver) == 0


def test_pipeline_lookahead_merges_later_intervals():
    sender = PacketStream(np.array([1, 2]), np.array([1_010, 1_020]))
    receiver = PacketStream(np.array([1, 2]), np.array([1_150, 1_250]))
    (w0,) = pipeline(IntervalSplit(sender, P, "s"), IntervalSplit(receiver, P, "r"), lookahead=2)
    assert len(w0.receiver) == 0 and w0.receiver_later.ids.tolist() == [1, 2]
    with pytest.raises(ConfigError):
        list(pipeline(IntervalSplit(sender, P, "s"), IntervalSplit(receiver, P, "r"), 0))


def test_sampled_work_keeps_the_same_packets_at_both_sides():
    ids = np.arange(1, 5_001, dtype=np.uint64)
    s = PacketStream(ids, np.full(len(ids), 1_010))
    r = PacketStream(ids, np.full(len(ids), 1_020))
    (w,) = pipeline(IntervalSplit(s, P, "s"), IntervalSplit(r, P, "r"))
    sampled = w.sampled(0.2, seed=3)
    assert np.array_equal(sampled.sender.ids, sampled.receiver.ids)
    assert 800 < len(sampled.sender) < 1_200
    assert w.sampled(1.0, 3) is w
