"""The packet stream simulator: Weibull delays, loss, reordering at boundaries, and its truth."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from oneway_streams import simulated
from tacit.errors import ConfigError
from tacit.oneway_latency.intervals import IntervalParams
from tacit.oneway_latency.simulate import StreamParams, replay_stream, simulate_stream
from tacit.oneway_latency.stream import PacketStream
from tacit.oneway_latency.truth import latency_truth, packet_latencies


def test_delays_are_weibull_with_the_given_shape_and_scale():
    sim = simulated(loss_rate=0.0, reorder_rate=0.0)
    _, delay = packet_latencies(sim.sender, sim.receiver)
    shape, _, scale = stats.weibull_min.fit(delay[delay > 0], floc=0)
    assert shape == pytest.approx(0.65, abs=0.02)
    assert scale == pytest.approx(10_000, rel=0.03)


def test_poisson_arrivals_and_distinct_identifiers():
    sim = simulated()
    n = len(sim.sender)
    assert abs(n - 100_000) < 5 * np.sqrt(100_000)
    assert len(np.unique(sim.sender.ident)) == n
    gaps = np.diff(sim.sender.time)
    assert gaps.mean() == pytest.approx(1_000, rel=0.02)
    assert gaps.std() == pytest.approx(1_000, rel=0.05)  # exponential: std = mean


def test_loss_rate_and_receiver_order():
    sim = simulated(loss_rate=0.01)
    assert sim.lost == len(sim.sender) - len(sim.receiver)
    assert abs(sim.lost - 0.01 * len(sim.sender)) < 5 * np.sqrt(0.01 * len(sim.sender))
    assert (np.diff(sim.receiver.time) >= 0).all()


def test_reordered_packets_cross_into_the_next_interval():
    sim = simulated(reorder_rate=1.0, loss_rate=0.0)
    iv = IntervalParams()
    recv = sim.sender.time + packet_latencies(sim.sender, sim.receiver)[1]
    near_end = iv.start(iv.index(sim.sender.time) + 1) - sim.sender.time <= 100_000
    assert (iv.index(recv)[near_end] == iv.index(sim.sender.time)[near_end] + 1).all()
    assert sim.reordered == near_end.sum()
    # overtaken: received after packets sent later
    assert (np.diff(sim.receiver.time) >= 0).all() and not (np.diff(recv) >= 0).all()


def test_truth_matches_a_direct_computation():
    sender = PacketStream(np.array([1, 2, 3, 4, 5, 6]), np.array([0, 10, 20, 105, 150, 199]))
    receiver = PacketStream(np.array([2, 1, 4, 6, 3]), np.array([14, 25, 112, 240, 210]))
    truth = latency_truth(sender, receiver, IntervalParams(0, 100))
    assert truth.index.tolist() == [0, 1]
    assert truth.sent.tolist() == [3, 3] and truth.matched.tolist() == [3, 2]
    assert truth.mean_ns == pytest.approx([np.mean([25, 4, 190]), np.mean([7, 41])])
    assert truth.std_ns == pytest.approx([np.std([25, 4, 190], ddof=1), np.std([7, 41], ddof=1)])
    assert truth.row(1) == 1 and truth.row(5) is None


def test_replay_keeps_the_given_sender():
    sender = PacketStream(np.arange(1, 1_001), np.arange(1_000) * 5_000)
    sim = replay_stream(sender, StreamParams(loss_rate=0.0, seed=3))
    assert sim.sender is sender
    assert sorted(sim.receiver.ident.tolist()) == list(range(1, 1_001))
    with pytest.raises(ConfigError):
        simulate_stream(StreamParams(loss_rate=1.5))


def test_a_stream_beyond_the_memory_budget_is_refused_before_it_is_drawn(monkeypatch) -> None:
    """10^7 packets hold about 1.2 GiB in a run: against a budget of 256 MiB, a one-line
    error naming the count, before any array is made; 10^4 fit."""
    from tacit.errors import InputError

    monkeypatch.setenv("TACIT_MEMORY_BUDGET", "256M")
    with pytest.raises(InputError, match=r"stream of 10,000,000 packets would need 1\.2 GiB"):
        simulate_stream(StreamParams(packets=10**7))
    assert len(simulate_stream(StreamParams(packets=10**4)).sender) == 10**4
