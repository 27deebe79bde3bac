"""RDA and sRDA: exact listing of the difference, exact mean, honest failure, late binding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oneway_streams import random_ids, simulated, work_of, works
from tacit.errors import ConfigError
from tacit.oneway_latency.identifiers import bank_hashes
from tacit.oneway_latency.rda import (
    RDAParams,
    late_binding_buckets,
    rda_interval,
    reconcile,
    reconcile_interval,
)
from tacit.oneway_latency.srda import SRDAParams, srda_interval
from tacit.oneway_latency.synopsis import Synopsis, SynopsisLayout, peel
from tacit.oneway_latency.truth import packet_latencies

LAYOUTS = {
    "rda": lambda buckets: SynopsisLayout(3, 3 * (buckets // 3), banked=True, seed=1),
    "srda": lambda buckets: SynopsisLayout(3, buckets, banked=False, seed=1),
}


def difference(layout, a, b):
    sa = Synopsis.build(layout, a, np.arange(len(a)))
    sb = Synopsis.build(layout, b, np.arange(len(b)))
    return sa.subtract(sb)


@pytest.mark.parametrize("name", LAYOUTS)
def test_peeling_lists_the_symmetric_difference(name):
    ids = random_ids(5_000, 1)
    a, b = ids[:4_700], ids[200:]  # 200 only in a, 300 only in b
    listed = peel(difference(LAYOUTS[name](1_500), a, b))
    assert listed.complete
    assert set(listed.ids[listed.signs > 0].tolist()) == set(ids[:200].tolist())
    assert set(listed.ids[listed.signs < 0].tolist()) == set(ids[4_700:].tolist())


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_difference_beyond_capacity_is_reported_incomplete(name):
    ids = random_ids(3_000, 2)
    listed = peel(difference(LAYOUTS[name](300), ids[:2_000], ids[1_000:]))
    assert not listed.complete


def test_the_empty_bucket_check_keeps_garbage_from_being_listed():
    """Found by hypothesis with the bank-hash test alone: a false pure bucket listed garbage
    that a later one listed back with the other sign (reported apart, in ``repeated``). The
    garbage's buckets in the other banks were empty, which a packet of the difference never
    leaves them; with that check the same difference peels completely and exactly."""
    ids = random_ids(183 + 28 + 499, 8284)
    listed = peel(difference(LAYOUTS["rda"](318), ids[: 183 + 499], ids[183:]))
    assert listed.complete and not len(listed.repeated)
    assert set(listed.ids[listed.signs > 0].tolist()) == set(ids[:183].tolist())
    assert set(listed.ids[listed.signs < 0].tolist()) == set(ids[183 + 499 :].tolist())


PROPERTY = {
    "n_a": st.integers(0, 300),
    "n_b": st.integers(0, 300),
    "common": st.integers(0, 500),
    "buckets": st.integers(3, 400),
    "seed": st.integers(0, 10_000),
}


@settings(max_examples=200, deadline=None)
@given(**PROPERTY)
def test_a_complete_idsh_peel_is_never_garbage(n_a, n_b, common, buckets, seed):
    """sRDA's IDSH test is wrong with probability 2^-32, so a complete peel lists exactly the
    difference. (RDA's bank-hash test alone is not enough — with one bucket per bank every
    identifier passes it — which is why RDA checks what it lists against the caches.)"""
    ids = random_ids(n_a + n_b + common, seed)
    listed = peel(difference(LAYOUTS["srda"](buckets), ids[: n_a + common], ids[n_a:]))
    if listed.complete:
        assert sorted(listed.ids[listed.signs > 0].tolist()) == sorted(ids[:n_a].tolist())
        minus = listed.ids[listed.signs < 0].tolist()
        assert sorted(minus) == sorted(ids[n_a + common :].tolist())


@pytest.mark.parametrize("name", LAYOUTS)
@settings(max_examples=100, deadline=None)
@given(**PROPERTY)
def test_a_decoded_interval_is_never_garbage(name, n_a, n_b, common, buckets, seed):
    """Whatever the synopsis size, RDA and sRDA either report failure or account for every
    lost and foreign packet exactly, with the exact mean delay."""
    ids = random_ids(n_a + n_b + common, seed)
    send = np.arange(n_a + common) * 1_000
    delay = 100 + (ids[n_a : n_a + common] % 997).astype(np.int64)
    recv = np.r_[send[n_a:] + delay, np.arange(n_b) * 1_000]
    work = work_of((ids[: n_a + common], send), (ids[n_a:], recv))
    result = reconcile_interval(work, LAYOUTS[name](max(buckets, 3)), 3)
    if result.decoded:
        assert (result.lost, result.late, result.foreign) == (n_a, 0, n_b)
        if common:
            assert result.estimate.mean_ns == pytest.approx(delay.mean(), rel=1e-12)
            assert result.estimate.useful_packets == common
        else:
            assert result.estimate is None


def test_positions_are_distinct_and_banked_ones_are_the_bank_hashes():
    ids = random_ids(5_000, 11)
    tiny = SynopsisLayout(3, 4, banked=False, seed=2)
    pos = tiny.positions(ids)
    assert (pos[0] != pos[1]).all() and (pos[0] != pos[2]).all() and (pos[1] != pos[2]).all()
    banked = LAYOUTS["rda"](300)
    expected = bank_hashes(ids, 3, 100, 1) + np.array([[0], [100], [200]])
    assert np.array_equal(banked.positions(ids), expected)
    # the vectorized positions are the ones the kernels update
    for layout in (tiny, banked):
        syn = Synopsis.build(layout, ids[:1], np.zeros(1))
        assert sorted(np.flatnonzero(syn.count).tolist()) == sorted(layout.positions(ids[:1])[:, 0])


def mixed_difference(d: int, seed: int):
    """20,000 common packets; ``d`` differences, three quarters sender-only."""
    ids = random_ids(20_000 + d, seed)
    n_plus = 3 * d // 4
    a, b = ids[: 20_000 + n_plus], np.r_[ids[:20_000], ids[20_000 + n_plus :]]
    return work_of((a, np.zeros(len(a))), (b, np.full(len(b), 10)))


def test_false_purity_is_checked_against_the_local_cache_while_peeling():
    """Near the threshold the bank-hash test takes some impure buckets for pure. Checking
    each listed packet against the receiver's cache while peeling (Δ = −1: must be in it,
    Δ = +1: must not) leaves the garbage unlisted, so one round decodes; without the check
    the same differences list garbage."""
    layout = SynopsisLayout(3, 3_276, banked=True, seed=1)
    works_ = [mixed_difference(2_300, s) for s in range(12)]
    one = [reconcile_interval(w, layout, 1) for w in works_]
    assert all(r.decoded and r.lost == 1_725 and r.foreign == 575 for r in one)
    garbage = 0
    for w in works_:
        sender = Synopsis.build(layout, w.sender.ids, w.sender.ts)
        d = sender.subtract(Synopsis.build(layout, w.receiver.ids, w.receiver.ts))
        truth = np.setxor1d(w.sender.ids, w.receiver.ids)
        listed = peel(d)
        garbage += bool(len(listed.repeated) or not np.isin(listed.ids, truth).all())
        with_local = peel(d, local=w.receiver.ids)
        assert with_local.complete and np.isin(with_local.ids, truth).all()
    assert garbage > 0


def test_insert_then_delete_leaves_nothing():
    layout = LAYOUTS["srda"](99)
    syn = Synopsis.build(layout, random_ids(1_000, 3), np.arange(1_000) * 7)
    syn.delete(random_ids(1_000, 3), np.arange(1_000) * 7)
    assert syn.clean().all() and not syn.ts.any()
    with pytest.raises(ConfigError):
        SynopsisLayout(3, 100, banked=True)
    with pytest.raises(ConfigError):
        Synopsis.empty(layout).subtract(Synopsis.empty(LAYOUTS["rda"](99)))


RUNNERS = {
    "rda": lambda work, buckets: rda_interval(work, RDAParams(buckets_per_bank=buckets // 3)),
    "srda": lambda work, buckets: srda_interval(work, SRDAParams(buckets=buckets)),
}


def per_interval_truth(sim, work):
    """The truth of one sender interval: latencies of its packets received anywhere, and how
    many were lost or received in a later interval."""
    received, latency = packet_latencies(sim.sender, sim.receiver)
    mine = (sim.sender.time >= work.start_ns) & (sim.sender.time < work.end_ns)
    recv_time = sim.sender.time + latency
    late = mine & received & (recv_time >= work.end_ns)
    return latency[mine & received], int((mine & ~received).sum()), int(late.sum())


@pytest.mark.parametrize("name", RUNNERS)
def test_exact_mean_with_loss_and_reordering(name):
    sim = simulated(loss_rate=2e-3, reorder_rate=0.3)
    for work in works(sim):
        result = RUNNERS[name](work, 3_072)
        latencies, lost, late = per_interval_truth(sim, work)
        assert result.decoded
        assert (result.lost, result.late) == (lost, late)
        assert late > 0 and lost > 0
        assert result.estimate.useful_packets == len(latencies)
        assert abs(result.estimate.mean_ns - latencies.mean()) <= 1e-9 * latencies.mean()
        assert result.estimate.std_ns == pytest.approx(latencies.std(ddof=1), rel=0.05)


@pytest.mark.parametrize("name", RUNNERS)
def test_decode_failure_is_reported_and_falls_back_to_clean_buckets(name):
    sim = simulated(rate_pps=5e6, duration_ns=30_000_000, loss_rate=0.06, reorder_rate=0.0)
    work = works(sim)[1]
    latencies, lost, _ = per_interval_truth(sim, work)
    assert lost > 2_800
    result = RUNNERS[name](work, 3_072)  # capacity ≈ 0.8 × 3072 < 3000 differences
    assert not result.decoded
    assert 1_000 < result.estimate.useful_packets < 0.9 * len(latencies)
    assert result.estimate.mean_ns == pytest.approx(latencies.mean(), rel=0.15)
    tiny = RUNNERS[name](work, 3)
    assert not tiny.decoded and tiny.estimate is None


def test_a_listed_packet_that_the_caches_contradict_fails_the_decoding():
    ids = random_ids(1_000, 5)
    send = np.arange(1_000) * 1_000
    layout = RDAParams().layout(100)
    sender = Synopsis.build(layout, ids, send)
    receiver = Synopsis.build(layout, ids[10:], send[10:] + 500)
    # the sender's cache does not hold what its synopsis says it sent: the listing is not
    # trusted, and nothing is deleted on its account
    work = work_of((ids[20:], send[20:]), (ids[10:], send[10:] + 500))
    result = reconcile(sender, receiver, work, 3)
    assert not result.decoded and result.lost == 0
    honest = reconcile_interval(work_of((ids, send), (ids[10:], send[10:] + 500)), layout, 3)
    assert honest.decoded and honest.lost == 10 and honest.estimate.mean_ns == 500


def test_late_binding_sizes_the_synopsis_from_the_minhash_estimate():
    sim = simulated(loss_rate=0.01, reorder_rate=0.0)
    work = works(sim)[1]
    params = RDAParams()
    m = late_binding_buckets(work.sender, work.receiver, params)
    diff = len(np.setxor1d(work.sender.ids, work.receiver.ids))
    assert 1.0 * diff < m < 3.0 * diff  # 2 × the estimate, which is within ±50 % here
    result = rda_interval(work, params)
    assert result.decoded and result.memory_bytes == params.k * m * 20
    quiet = simulated(loss_rate=0.0, reorder_rate=0.0)
    assert late_binding_buckets(works(quiet)[1].sender, works(quiet)[1].sender, params) == 64


def test_sampling_measures_the_same_sample_at_both_sides_exactly():
    rng = np.random.default_rng(6)
    ids = random_ids(40_000, 6)
    send = rng.integers(0, 9_000_000, len(ids))
    recv = send + rng.integers(1_000, 90_000, len(ids))
    received = rng.random(len(ids)) > 0.01
    work = work_of((ids, send), (ids[received], recv[received]))
    params = RDAParams(buckets_per_bank=512, sampling_rate=0.25, seed=9)
    result = rda_interval(work, params)
    sampled = work.sampled(0.25, 9).sender.ids
    both = received & np.isin(ids, sampled)
    assert result.decoded and result.estimate.useful_packets == both.sum()
    assert result.estimate.mean_ns == pytest.approx((recv - send)[both].mean(), rel=1e-12)


def test_equal_memory_sizing():
    sized = RDAParams.published().with_memory(65_536)  # k = 2 banks of 65,536 // (2 · 20)
    assert sized.buckets_per_bank == 1_638
    assert sized.layout(sized.buckets_per_bank).memory_bytes == 65_520
    assert RDAParams().with_memory(65_536).buckets_per_bank == 1_092  # k = 3
    assert SRDAParams().with_memory(65_536).layout().memory_bytes == 2_730 * 24
    with pytest.raises(ConfigError):
        RDAParams().with_memory(30)  # not one bucket per bank


def test_ten_thousand_differences_decode():
    """§VIII-A's scale; bench_oneway.py measures the decode time."""
    ids = random_ids(110_000, 7)
    send = np.arange(100_000) * 90
    layout = RDAParams.published().layout(40_000)  # §VIII-A: twice the 20,000 differences a bank
    work = work_of((ids[:100_000], send), (ids[10_000:], np.r_[send[10_000:] + 700, send[:10_000]]))
    sender = Synopsis.build(layout, work.sender.ids, work.sender.ts)
    receiver = Synopsis.build(layout, work.receiver.ids, work.receiver.ts)
    result = reconcile(sender, receiver, work, 3)
    assert result.decoded and result.lost + result.foreign == 20_000


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("seed", range(5))
def test_the_compiled_insert_matches_a_naive_synopsis(name, seed):
    """Every field of every bucket, against :func:`naive.synopsis_naive` fed the layout's
    positions (the vectorised hashes) packet by packet."""
    from naive import synopsis_naive
    from tacit.oneway_latency.identifiers import check32

    layout = LAYOUTS[name](300)
    rng = np.random.default_rng(seed)
    ident = random_ids(500, seed)
    stamps = rng.integers(0, 2**62, 500, dtype=np.int64)
    syn = Synopsis.build(layout, ident, stamps)
    check_seed = layout._seeds()[1]
    idx, ts, count, check = synopsis_naive(
        layout.positions(ident),
        ident,
        stamps,
        layout.id_check,
        lambda x: check32(np.uint64(x), check_seed),
    )
    used = len(idx)
    assert syn.idx[:used].tolist() == idx and syn.ts[:used].tolist() == ts
    assert syn.count[:used].tolist() == count
    assert not syn.idx[used:].any() and not syn.count[used:].any()
    if layout.id_check:
        assert syn.check[:used].tolist() == check
