"""The four methods at equal memory against the truth (the RDA paper's comparison, §VII)."""

from __future__ import annotations

import pytest

from oneway_streams import simulated
from tacit.errors import ConfigError, InputError
from tacit.oneway_latency.comparison import METHODS, compare_methods

BUDGET = 64 * 1024


@pytest.fixture(scope="module")
def scores():
    sim = simulated(loss_rate=2e-3, reorder_rate=0.3)
    return compare_methods(sim.sender, sim.receiver, BUDGET)


def test_every_method_at_equal_memory(scores):
    assert list(scores) == list(METHODS)
    for score in scores.values():
        assert 0.9 * BUDGET < score.memory_bytes <= BUDGET
        assert score.intervals == 10 and score.intervals_without_estimate == 0
        assert score.intervals_unscored == 0 and score.packets_before_start == 0
        assert score.useful_packets <= score.matched_packets
        row = score.as_dict()
        assert set(row) >= {"mean_relative_error", "std_relative_error", "useful_packets"}


def test_rda_is_exact_while_decodable_and_the_others_are_not(scores):
    rda = scores["rda"]
    assert rda.details["decoded"] == rda.intervals
    assert rda.mean_relative_error <= 1e-9 and scores["srda"].mean_relative_error <= 1e-9
    assert rda.std_relative_error < 0.05
    assert rda.useful_packets == rda.matched_packets
    for other in ("lda", "finecomb"):
        assert scores[other].mean_relative_error > 100 * max(rda.mean_relative_error, 1e-12)
        assert scores[other].useful_packets < rda.useful_packets
    assert scores["finecomb"].details["repair_repaired"] > 0


def test_beyond_capacity_rda_reports_failure_and_still_measures():
    sim = simulated(loss_rate=0.05, reorder_rate=0.0, duration_ns=30_000_000)
    scores = compare_methods(sim.sender, sim.receiver, 8 * 1024, methods=("rda", "lda"))
    rda = scores["rda"]
    assert rda.details["decoded"] < rda.intervals
    assert rda.intervals_without_estimate == 0
    assert rda.mean_relative_error < 0.2


def test_unknown_method_is_a_config_error():
    sim = simulated()
    with pytest.raises(ConfigError, match="unknown methods"):
        compare_methods(sim.sender, sim.receiver, BUDGET, methods=("rda", "ipa"))


def test_synopses_larger_than_memory_allows_are_refused_before_any_is_built(monkeypatch):
    sim = simulated(duration_ns=1_000_000)
    monkeypatch.setenv("TACIT_MEMORY_BUDGET", "4M")
    with pytest.raises(InputError, match=r"5 synopses of 1,048,576 bytes would need 5\.0 MiB"):
        compare_methods(sim.sender, sim.receiver, 2**20)
