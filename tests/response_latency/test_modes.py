"""The N-mode IPG histogram with ε-merging (Pirate §3.3, Algorithm 2) and the timer modes."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.response_latency.modes import ModeHistogram
from tacit.response_latency.params import PirateParams
from tacit.response_latency.timers import is_timer_gap, timer_gaps_ns

MS = 1_000_000


def test_gaps_within_epsilon_share_a_mode():
    h = ModeHistogram()
    for g in (10 * MS, 11 * MS, 9 * MS, 12 * MS):
        h.add(g)
    h.add(40 * MS)
    modes = h.modes()
    assert [m[1] for m in modes] == [4, 1]
    assert 9 * MS <= modes[0][0] <= 12 * MS
    assert modes[1][0] == 40 * MS


def test_at_most_n_modes_and_the_weakest_gives_way():
    h = ModeHistogram(PirateParams(max_modes=3))
    for _ in range(5):
        h.add(2 * MS)
    for _ in range(3):
        h.add(20 * MS)
    h.add(200_000_000 // 3)  # 66.7 ms: a third, weak mode
    h.add(500 * MS)  # no slot left: replaces the weakest (66.7 ms, count 1)
    centres = [m[0] for m in h.modes()]
    assert len(centres) == 3
    assert centres == [2 * MS, 20 * MS, 500 * MS]


def test_modes_that_drift_together_merge():
    h = ModeHistogram(PirateParams(merge_epsilon=0.25))
    h.add(10 * MS)
    h.add(13 * MS)  # 30 % away from 10: a second mode
    assert len(h.modes()) == 2
    for _ in range(3):
        h.add(int(11.6 * MS))  # joins the 13 ms mode and pulls it within 25 % of 10 ms
    modes = h.modes()
    assert len(modes) == 1
    assert modes[0][1] == 5 and modes[0][2] == 5


def test_proportional_mode_sum_is_the_mean_of_response_mode_gaps():
    h = ModeHistogram(PirateParams(gap_threshold_ns=1 * MS, mode_floor_ratio=0))
    gaps = [20 * MS, 22 * MS, 21 * MS, 80 * MS, 84 * MS]
    for g in [*gaps, 100_000, 120_000, 90_000]:  # three intra-burst gaps below δ
        h.add(g)
    estimate, n = h.close_epoch()
    assert n == 5
    # Σ (n_m / n) · mean_m with modes {20,22,21} and {80,84}
    assert estimate == (3 * 21 * MS + 2 * 82 * MS) // 5
    # The epoch is over: the modes stay with their counts halved, nothing left to estimate.
    assert [m[1] for m in h.modes()] == [1, 1, 1]
    assert h.close_epoch() == (None, 0)


@pytest.mark.parametrize("scale", [20_000, 200_000, 30_000_000])
def test_adaptive_floor_follows_the_dominant_mode_at_any_scale(scale):
    """Many short gaps inside bursts (scale / 25), a few pipeline gaps spread below the causal
    mode, and the causal pairs (scale): the floor is half the mode holding the most time."""
    h = ModeHistogram(PirateParams.pipelining())
    gaps = [scale // 25] * 40 + [scale // 5, scale // 3] + [scale, scale * 21 // 20] * 6
    for g in gaps:
        h.add(g)
    estimate, n = h.close_epoch()
    assert n == 12
    assert estimate == (scale + scale * 21 // 20) // 2
    fixed = ModeHistogram(PirateParams(mode_floor_ratio=0))
    for g in gaps:
        fixed.add(g)
    # δ = 1 ms: everything below it is lost (loopback), or pipeline gaps pull the estimate down.
    estimate, n = fixed.close_epoch()
    assert estimate is None if scale < MS else estimate < (scale + scale * 21 // 20) // 2


def test_counts_age_so_that_old_modes_give_way():
    h = ModeHistogram(PirateParams(max_modes=2))
    for _ in range(8):
        h.add(10 * MS)
    for _ in range(3):
        h.close_epoch()  # 8 -> 4 -> 2 -> 1
    h.add(50 * MS)
    h.add(50 * MS)
    h.add(200 * MS)  # replaces the aged 10 ms mode (count 1) rather than 50 ms (count 2)
    assert [m[0] for m in h.modes()] == [50 * MS, 200 * MS]


@pytest.mark.parametrize("timer_ms", [200, 400, 1000, 999, 2000])
def test_timer_modes_are_removed(timer_ms):
    h = ModeHistogram()
    for _ in range(4):
        h.add(30 * MS)
    h.add(timer_ms * MS)
    estimate, n = h.close_epoch()
    assert (estimate, n) == (30 * MS, 4)
    kept = ModeHistogram(PirateParams(remove_timer_modes=False, mode_floor_ratio=0))
    for _ in range(4):
        kept.add(30 * MS)
    kept.add(timer_ms * MS)
    assert kept.close_epoch() == ((4 * 30 + timer_ms) * MS // 5, 5)


def test_timer_values():
    t = timer_gaps_ns(PirateParams())
    assert np.all(np.diff(t) > 0)
    for v in (200 * MS, 400 * MS, 1000 * MS, 999 * MS, 1024 * MS, 6400 * MS, 16_000 * MS):
        assert v in t
    assert np.all(t < PirateParams().idle_gap_ns)
    assert is_timer_gap(np.array([205 * MS, 300 * MS, 1010 * MS]), PirateParams()).tolist() == [
        True,
        False,
        True,
    ]


@pytest.mark.parametrize(
    "bad",
    [{"max_modes": 0}, {"merge_epsilon": 1.5}, {"gap_threshold_ns": 0}, {"timer_tolerance": 1}],
)
def test_bad_parameters(bad):
    with pytest.raises(ConfigError):
        PirateParams(**bad)
