"""Algorithm 2 as published (Pirate §3.3–3.4): ``(min, max, count, sum)`` modes with an
absolute ε (tacit's relative widening off), and the proportional mode sum."""

from __future__ import annotations

import numpy as np
import pytest

from pirate_packets import CLIENT, MS, SERVER, T0, packet_table
from tacit.response_latency import PirateParams, estimate_response_latency
from tacit.response_latency.mode_sum import ModeSumHistogram
from tacit.simulate.request_streams import RequestStreamParams, simulate_requests

US = 1_000
FIXED = PirateParams.published(mode_epsilon_ns=10 * US)


def test_a_gap_joins_extends_or_starts_a_mode():
    h = ModeSumHistogram(FIXED)
    h.add(100 * US)
    h.add(105 * US)  # inside [min − ε, max + ε]: extends max
    h.add(300 * US)  # near nothing: a new mode
    h.add(95 * US)  # proximal from below: extends min
    assert h.modes() == [(95 * US, 105 * US, 3, 300 * US), (300 * US, 300 * US, 1, 300 * US)]


def test_modes_that_come_within_epsilon_merge():
    h = ModeSumHistogram(FIXED)
    for g in (100, 115, 130):
        h.add(g * US)
    assert len(h.modes()) == 3
    h.add(108 * US)  # extends the first to 108: within ε of 115, they merge
    h.add(122 * US)  # extends the merged mode to 122: within ε of 130, they merge
    assert h.modes() == [(100 * US, 130 * US, 5, 575 * US)]


def test_relative_epsilon_keeps_a_noisy_latency_in_one_mode():
    gaps = [25_300, 26_200, 26_700, 27_100, 27_600, 28_700]  # µs: one service's latency
    fixed = ModeSumHistogram(PirateParams.published())
    wide = ModeSumHistogram()
    for g in gaps:
        for _ in range(3):
            fixed.add(50 * US)  # the gaps inside the batch
        fixed.add(g * US)
        for _ in range(3):
            wide.add(50 * US)
        wide.add(g * US)
    assert len(fixed.modes()) == 7 and len(wide.modes()) == 2
    epoch = (sum(gaps) + 18 * 50) * US
    assert wide.close_epoch() == (epoch // 6, 6)
    assert fixed.close_epoch() == (epoch, 1)  # a lone gap taken for the IBG


def test_batch_ends_spread_over_two_modes_all_count_as_inter_batch_gaps():
    """A connection whose latency moves from 8 to 12 ms within the epoch: its batch ends fill
    two modes (more than 25 % apart). Counting only the largest as the IBG divides the epoch's
    time by its 2 batches instead of 10; the default counts both."""
    batches = [8_000] * 8 + [12_000] * 2  # µs: the gap that ends each batch
    spread, largest_only = ModeSumHistogram(), ModeSumHistogram(PirateParams(ibg_spread_ratio=0))
    for h in (spread, largest_only):
        for g in batches:
            for _ in range(3):
                h.add(250 * US)  # the server's spacing of the batch's responses
            h.add(g * US)
    epoch = (sum(batches) + 30 * 250) * US
    assert len(spread.modes()) == 3
    assert spread.close_epoch() == (epoch // 10, 10)
    assert largest_only.close_epoch() == (epoch // 2, 2)


def test_a_slow_tail_holding_little_time_is_not_the_inter_batch_gap():
    """One request in flight (§5.7's memtier-style clients): every gap is a response. A
    throttled server answers 57 of them in 1.0–2.4 ms and 4 in 3.1–4.3 ms. The slow four hold
    enough of the gaps to be the IBG by count and are over twice the others' mean, so taking
    them for the IBG makes the fast ones gaps inside batches: the epoch over 4 batches, 16
    times the latency. They hold 13 % of the time, under ``ibg_min_time_share``: the fast mode
    is the IBG."""
    fast = [1_000 + 25 * i for i in range(57)]  # µs
    slow = [3_100, 3_500, 3_900, 4_300]
    default, by_count = ModeSumHistogram(), ModeSumHistogram(PirateParams(ibg_min_time_share=0))
    for h in (default, by_count):
        for g in fast + slow:
            h.add(g * US)
    assert [m[2] for m in default.modes()] == [57, 4]
    assert default.close_epoch() == (sum(fast) * US // 57, 57)
    assert by_count.close_epoch() == ((sum(fast) + sum(slow)) * US // 4, 4)


def test_gaps_beyond_n_modes_are_discarded_and_counted():
    h = ModeSumHistogram(PirateParams(max_modes=3, mode_epsilon_ns=1 * US, mode_epsilon_ratio=0))
    for g in (10, 20, 30, 40, 50, 20):
        h.add(g * US)
    assert [m[0] for m in h.modes()] == [10 * US, 20 * US, 30 * US]
    assert h.discarded == 2
    assert h.modes()[1][2] == 2  # the second 20 µs gap still joined its mode


def test_the_papers_worked_example():
    """§3.3: modes 100, 150 and 250 µs with probabilities 0.4, 0.2 and 0.1 give 950 µs."""
    h = ModeSumHistogram(FIXED)
    for g, n in ((100, 4), (150, 2), (250, 1)):
        for _ in range(n):
            h.add(g * US)
    h.add(200 * MS)  # the minimum retransmission timeout: a timer mode, removed
    assert h.close_epoch() == (950 * US, 1)
    assert h.modes() == []  # every epoch starts empty


def test_only_a_mode_after_a_non_mtu_packet_is_the_inter_batch_gap():
    params = FIXED
    h = ModeSumHistogram(params)
    for _ in range(3):
        h.add(100 * US, after_non_mtu=True)
        h.add(5 * MS, after_non_mtu=False)  # a stall inside a burst, after a full segment
    # Only the 100 µs mode may be the IBG, and the modes above the IBG are left out.
    assert h.close_epoch() == (100 * US, 3)
    off = ModeSumHistogram(
        PirateParams(mode_epsilon_ns=10 * US, mode_epsilon_ratio=0, batch_end_only=False)
    )
    for _ in range(3):
        off.add(100 * US, after_non_mtu=True)
        off.add(5 * MS, after_non_mtu=True)
    assert off.close_epoch() == ((3 * 100 * US + 3 * 5 * MS) // 3, 3)
    none = ModeSumHistogram(params)
    none.add(5 * MS, after_non_mtu=False)
    assert none.close_epoch() == (None, 0)


def test_a_batch_period_from_the_packets():
    """Bursts of three requests (the first two full-size, 50 µs apart) every 2 ms: the mode sum
    is the period from burst start to burst start, not the pause after the burst."""
    rows, t, seq = [], T0, 0
    for _ in range(40):
        for k, seg in enumerate((1448, 1448, 300)):
            rows.append(
                {"t": t + k * 50 * US, "src": CLIENT, "dst": SERVER, "payload": seg, "seq": seq}
            )
            seq += seg
        t += 2 * MS
    est = estimate_response_latency(packet_table(rows), PirateParams(epoch_ns=10**9))
    # 39 batch-ending gaps; the epoch's time includes the last batch's own 100 µs.
    assert est.latency_ns.tolist() == [(39 * 2 * MS + 100 * US) // 39]
    assert est.samples.tolist() == [39]


@pytest.mark.parametrize("seed", [3, 4])
def test_close_to_the_simulated_causal_pairs(seed):
    """The request simulator's pipelining clients: the per-epoch estimate against the mean of
    the epoch's causal-pair gaps."""
    from tacit.response_latency import score_causal_pairs

    sim = simulate_requests(RequestStreamParams(clients=6, duration_ns=6_000 * MS, seed=seed))
    t = sim.truth
    est = estimate_response_latency(sim.packets, PirateParams(epoch_ns=10**9))
    pairs = score_causal_pairs(est, (t.client_hi, t.client_lo, t.client_port), t.seen_ns, t.trigger)
    assert pairs.samples >= 30
    assert pairs.median_relative_error < 0.1, pairs
    assert np.isfinite(pairs.median_signed_error)


def test_discarded_gaps_are_reported_per_connection():
    """Gaps Algorithm 2 cannot place (all N modes live, none near) are counted, not lost."""
    rows, t = [], T0
    for k in range(30):  # 30 gaps of widely different lengths: 3 modes at most, 27 discarded
        rows.append({"t": t, "src": CLIENT, "dst": SERVER, "payload": 100, "seq": 100 * k})
        t += (k + 1) * 7 * MS
    params = PirateParams(max_modes=3, mode_epsilon_ratio=0, epoch_ns=10**10)
    est = estimate_response_latency(packet_table(rows), params)
    assert est.discarded_gaps.tolist() == [26]  # 29 gaps; the first 3 made the modes
    assert estimate_response_latency(
        packet_table(rows), params, algorithm="centres"
    ).discarded_gaps.tolist() == [0]


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_histogram_matches_a_naive_algorithm_2(seed):
    """Random epochs of gaps around a few latencies, some far apart: joins, extensions, merges
    and discards all happen; the compiled kernel and :func:`naive.mode_sum_naive` agree."""
    from naive import mode_sum_naive

    rng = np.random.default_rng(seed)
    centres = rng.choice([50, 300, 1_000, 5_000, 20_000], size=3) * US
    gaps = (rng.choice(centres, 60) * rng.lognormal(0, 0.3, 60)).astype(np.int64).tolist()
    n_max = int(rng.integers(2, 6))
    eps = int(rng.choice([5, 50, 200])) * US
    ratio = float(rng.choice([0.0, 0.1, 0.25]))
    share = float(rng.choice([0.0, 0.05, 0.2]))
    spread = float(rng.choice([0.0, 0.5]))
    time_share = float(rng.choice([0.0, 0.25, 0.6]))
    params = PirateParams(
        max_modes=n_max,
        mode_epsilon_ns=eps,
        mode_epsilon_ratio=ratio,
        ibg_min_share=share,
        ibg_spread_ratio=spread,
        ibg_min_time_share=time_share,
        remove_timer_modes=False,
        batch_end_only=False,
    )
    h = ModeSumHistogram(params)
    for g in gaps:
        h.add(g)
    modes, discarded, estimate = mode_sum_naive(gaps, n_max, eps, ratio, share, spread, time_share)
    assert h.modes() == [tuple(m) for m in modes]
    assert h.discarded == discarded
    assert h.close_epoch()[0] == estimate
