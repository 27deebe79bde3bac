"""The error-versus-set-difference sweep (RDA §VII, Figs. 7–8) on a small simulated stream."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.oneway_latency.intervals import IntervalParams
from tacit.oneway_latency.rda import RDAParams
from tacit.oneway_latency.simulate import StreamParams, poisson_sender
from tacit.oneway_latency.stream import PacketStream
from tacit.oneway_latency.sweep import (
    SweepParams,
    difference_stream,
    plot_sweep,
    run_once,
    run_sweep,
    set_differences,
)

# 10^4 packets per 10 ms interval; 20 kB per synopsis: RDA has 3 × 333 buckets and decodes
# up to ≈ 800 differences, so 2,000 is beyond it.
SMALL = SweepParams(
    differences=(0, 30, 300, 2_000),
    memory_bytes=20_000,
    seeds=(0, 1),
    rate_pps=1e6,
    intervals_per_run=3,
)


@pytest.fixture(scope="module")
def result():
    """Every method, RDA with the paper's two banks."""
    return run_sweep(dataclasses.replace(SMALL, rda=RDAParams.published()))


@pytest.fixture(scope="module")
def tacit_result():
    """RDA with tacit's default three banks."""
    return run_sweep(dataclasses.replace(SMALL, methods=("rda",)))


def test_set_differences_by_hand():
    iv = IntervalParams(0, 100)
    sender = PacketStream(np.array([1, 2, 3, 4, 5]), np.array([10, 20, 95, 110, 150]))
    # 2 lost; 3 sent in interval 0, received in 1; 9 received but never sent
    receiver = PacketStream(np.array([1, 3, 4, 5, 9]), np.array([15, 104, 118, 160, 170]))
    index, diff = set_differences(sender, receiver, iv)
    assert index.tolist() == [0, 1]
    assert diff.tolist() == [2, 2]  # {2, 3} and {3, 9}


def test_difference_stream_hits_its_target():
    sender = poisson_sender(StreamParams(rate_pps=1e6, duration_ns=50_000_000, seed=4))
    made = difference_stream(sender, 400, SMALL, seed=4)
    sim = made.simulated
    _, diff = set_differences(sim.sender, sim.receiver, SMALL.intervals)
    # interval 0 has no packets arriving late from an earlier one: D/4 fewer
    assert diff[1:-1].mean() == pytest.approx(400, rel=0.2)
    assert made.guard_removed > 0
    phase = sim.sender.time % SMALL.intervals.length_ns
    assert (phase < SMALL.intervals.length_ns - SMALL.guard_ns).all()
    assert made.loss_rate == pytest.approx(200 / (len(sim.sender) / 5), rel=1e-9)


def test_rda_exact_while_decodable(result, tacit_result):
    """Late binding (the paper's sizing) decodes every difference, with either k. At equal
    memory (20,000 bytes: 1,000 buckets), tacit's k = 3 decodes up to 300 differences; the
    paper's k = 2 stops earlier (the reproduction report measures both)."""
    for point in result.points:
        late = point.methods["rda_late_binding"]
        assert late.decoded_fraction == 1.0 and late.mean_relative_error <= 1e-9
    for point in tacit_result.points:
        rda = point.methods["rda"]
        if point.target <= 300:
            assert rda.decoded_fraction == 1.0
            assert rda.mean_relative_error <= 1e-9
            assert rda.std_relative_error < 0.05
            assert rda.useful_fraction == 1.0
            assert rda.memory_bytes <= SMALL.memory_bytes
    beyond = tacit_result.points[-1].methods["rda"]
    assert beyond.decoded_fraction < 1.0 and beyond.mean_relative_error > 1e-9
    paper = {p.target: p.methods["rda"] for p in result.points}
    assert paper[30].decoded_fraction == 1.0 and paper[2_000].decoded_fraction < 1.0


def test_lda_and_finecomb_degrade_with_the_difference(result):
    for method in ("lda", "finecomb"):
        errors = result.series(method, "mean_relative_error")
        useful = result.series(method, "useful_fraction")
        assert errors[0] <= 1e-9  # no difference: every bucket usable, exact
        assert (np.diff(errors) > 0).all(), (method, errors)
        assert (np.diff(useful) < 0).all(), (method, useful)
        rda = result.series("rda", "mean_relative_error")
        assert (errors[1:3] > rda[1:3]).all()


def test_measured_differences_follow_targets(result):
    measured = np.array([p.set_difference for p in result.points])
    assert measured[0] == 0
    assert measured[1:] == pytest.approx([30, 300, 2_000], rel=0.25)
    doc = result.as_dict()
    assert doc["memory_bytes"] == 20_000 and len(doc["points"]) == 4
    methods = {r["method"] for r in doc["points"][0]["results"]}
    assert methods == {"rda", "srda", "lda", "finecomb", "finecomb_ideal", "rda_late_binding"}


def test_plots_are_png(result, tmp_path: Path):
    files = plot_sweep(result, tmp_path / "figs")
    assert [f.name for f in files] == [
        "rda-mean-error.png",
        "rda-std-error.png",
        "rda-decode-time.png",
    ]
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert matplotlib.image.imread(f).shape[:2] == (418, 660)


def test_bad_parameters():
    with pytest.raises(ConfigError):
        SweepParams(differences=(-1,))
    with pytest.raises(ConfigError):
        SweepParams(seeds=())
    with pytest.raises(ConfigError):
        SweepParams(guard_ns=9_000_000, reorder_span_ns=2_000_000)


def test_single_run_reports_the_issue_fields():
    sender = poisson_sender(StreamParams(rate_pps=1e6, duration_ns=30_000_000, seed=9))
    run = run_once(sender, StreamParams(loss_rate=0.01, reorder_rate=0.5, seed=9), 20_000)
    doc = run.as_dict()
    assert doc["packets"] == len(sender) and doc["received"] == len(sender) - doc["lost"]
    assert doc["set_difference_total"] == run.set_difference.sum() > 0
    rda = doc["results"][0]
    assert rda["method"] == "rda" and rda["decoded_intervals"] == doc["intervals"] == 3
    assert rda["mean_relative_error"] <= 1e-9 and rda["memory_bytes"] <= 20_000
    assert doc["insert_packets_per_second"] > 0 and doc["decode_seconds"] > 0


def test_set_differences_of_a_clock_jumping_by_years():
    """Counted per interval that has packets: a jump of 30 years allocates nothing per interval."""
    iv = IntervalParams(0, 100)
    jump = 30 * 365 * 86_400 * 10**9
    sender = PacketStream(np.array([1, 2, 3]), np.array([10, 20, jump]))
    receiver = PacketStream(np.array([1, 3, 9]), np.array([15, jump + 5, jump + 7]))
    index, diff = set_differences(sender, receiver, iv)
    assert index.tolist() == [0, jump // 100]
    assert diff.tolist() == [1, 1]  # {2} and {9}
