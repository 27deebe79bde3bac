"""The load-balancer simulation (Pirate, arXiv 2505.14358, §4): queueing against mean-value
analysis, the packets the balancer sees, and the controller against equal weights."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.experiment.loadbalancer import (
    MS,
    SECOND,
    VIP,
    CpuEpisode,
    LoadBalancerParams,
    run_loadbalancer_experiment,
    simulate_run,
)
from tacit.model.packets import ACK, FIN, SYN, parse_address


def mva(service: float, think: float, n: int) -> tuple[float, float]:
    """Exact mean-value analysis of a closed network: one processor-sharing station
    (exponential service) and a delay station; residence time and throughput with n jobs."""
    queue = 0.0
    for k in range(1, n + 1):
        residence = service * (1 + queue)
        throughput = k / (residence + think)
        queue = throughput * residence
    return residence, throughput


@pytest.fixture(scope="module")
def default_result():
    return run_loadbalancer_experiment(LoadBalancerParams())


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_one_server_matches_mean_value_analysis(share):
    duration = 20 * SECOND
    p = LoadBalancerParams(
        clients=1,
        servers=1,
        connections_per_client=4,
        duration_ns=duration,
        cpu=(CpuEpisode(0, 0, duration, share),) if share < 1 else (),
        service_ns=1 * MS,
        think_probability=0.0,
        client_processing_ns=500_000.0,
        requests_per_connection=1e9,
        seed=3,
    )
    log = simulate_run(p, controlled=False).log
    steady = log.completed() & (log.sent > 1 * SECOND)
    residence = (log.done - log.arrived)[steady]
    # the delay station: from a response leaving the server to the next request arriving
    order = np.lexsort((log.sent, log.connection))
    conn, arrived, done = log.connection[order], log.arrived[order], log.done[order]
    follows = (conn[1:] == conn[:-1]) & (done[:-1] >= 0) & (arrived[1:] >= 0)
    think = float(np.mean(arrived[1:][follows] - done[:-1][follows]))
    expect_r, expect_x = mva(1 * MS / share, think, 4)
    assert residence.mean() == pytest.approx(expect_r, rel=0.04)
    assert steady.sum() / ((duration - 1 * SECOND) / 1e9) == pytest.approx(expect_x * 1e9, rel=0.04)
    # the client sees the server's time plus the network both ways
    latency = (log.received - log.sent)[steady]
    assert np.all(latency > residence + 2 * p.one_way_ns)


def test_balancer_sees_client_packets_only():
    p = LoadBalancerParams(duration_ns=3 * SECOND, requests_per_connection=20.0, seed=5)
    run = simulate_run(p, controlled=True, keep_packets=True)
    pk = run.packets
    assert len(pk) == run.summary.packets == sum(run.accounting.values())  # all accounted for
    assert run.accounting["used"] > 0 and run.accounting["coalesced_ack"] > 0
    assert np.all(np.diff(pk.time) >= 0)
    vip = parse_address(VIP)
    assert np.all((pk.dst_hi == vip[0]) & (pk.dst_lo == vip[1]) & (pk.dport == 80))
    # one 5-tuple per connection: ports are not reused
    key = pk.src_lo.astype(np.int64) * 65536 + pk.sport
    assert len(np.unique(key)) == run.summary.connections
    syn = (pk.tcp_flags & SYN) != 0
    assert syn.sum() == run.summary.connections and np.all(pk.payload_len[syn] == 0)
    assert np.all(pk.tcp_flags[~syn] & ACK)
    assert ((pk.tcp_flags & FIN) != 0).sum() > 0  # connections were closed and replaced
    # multi-segment requests: a full segment followed by the rest of the request
    full = pk.payload_len == p.mss
    assert full.any() and np.any((pk.payload_len > 0) & (pk.payload_len < p.mss))
    # TCP sequence numbers run on per connection: each data segment starts where the last ended
    data = np.flatnonzero(pk.payload_len > 0)
    data = data[np.lexsort((pk.time[data], key[data]))]
    same = key[data][1:] == key[data][:-1]
    expect = (pk.seq[data][:-1].astype(np.int64) + pk.payload_len[data][:-1]) % 2**32
    assert np.array_equal(pk.seq[data][1:][same], expect[same])


def test_controller_lowers_tail_latency(default_result):
    r = default_result
    plain, ctl = r.unweighted, r.controlled
    assert ctl.summary.p99_ms < plain.summary.p99_ms
    assert r.p99_reduction == pytest.approx(1 - ctl.summary.p99_ms / plain.summary.p99_ms)
    # it does so by moving load off server 0 while its CPU is cut (10 s to 30 s)
    episode = slice(12, 30)
    assert ctl.weights[episode, 0].mean() < ctl.weights[episode, 1:].mean()
    slow = (plain.log.sent > 12 * SECOND) & (plain.log.sent < 30 * SECOND)
    slow_ctl = (ctl.log.sent > 12 * SECOND) & (ctl.log.sent < 30 * SECOND)
    share_plain = np.mean(plain.log.server[slow] == 0)
    share_ctl = np.mean(ctl.log.server[slow_ctl] == 0)
    assert share_ctl < share_plain
    # equal weights never change
    assert np.all(plain.weights == 1.0)
    d = r.as_dict()
    assert d["p99_reduction"] == r.p99_reduction and d["intervals"] == 40
    assert d["controlled"]["requests"] == ctl.summary.requests


def test_pirate_estimates_follow_the_truth(default_result):
    run = default_result.controlled
    lag = run.input_lag
    est = run.estimated_ns[lag:]
    true = run.true_ns[: len(run.true_ns) - lag]
    both = np.isfinite(est) & np.isfinite(true)
    assert both.sum() > 100
    ranks = np.corrcoef(np.argsort(np.argsort(est[both])), np.argsort(np.argsort(true[both])))
    assert ranks[0, 1] > 0.8


def test_oracle_latencies_lower_tail_latency_too():
    p = LoadBalancerParams(latency_source="truth", seed=2)
    r = run_loadbalancer_experiment(p)
    assert r.controlled.input_lag == 0
    assert r.controlled.summary.p99_ms < r.unweighted.summary.p99_ms
    assert np.all(np.abs(r.controlled.estimate_errors()) < 1e-9)


def test_seeded():
    p = LoadBalancerParams(duration_ns=4 * SECOND)
    a, b = simulate_run(p, controlled=False), simulate_run(p, controlled=False)
    assert np.array_equal(a.log.received, b.log.received)
    c = simulate_run(dataclasses.replace(p, seed=1), controlled=False)
    assert not np.array_equal(a.log.sent[:100], c.log.sent[:100])


@pytest.mark.parametrize(
    "change",
    [
        {"servers": 0},
        {"interval_ns": 0},
        {"think_probability": 1.5},
        {"lb_delay_ns": 1e9},
        {"latency_source": "oracle"},
        {"cpu": (CpuEpisode(4, 0, SECOND, 0.5),)},
        {"cpu": (CpuEpisode(0, 0, SECOND, 0.0),)},
    ],
)
def test_bad_parameters(change):
    with pytest.raises(ConfigError):
        LoadBalancerParams(**change)
