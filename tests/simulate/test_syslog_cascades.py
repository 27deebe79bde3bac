"""The simulated network: cascades follow the known rules, lines parse, RPC truth holds."""

from __future__ import annotations

import numpy as np

from tacit.formats.syslog import parse_syslog_text
from tacit.simulate.syslog_cascades import (
    LINK_DOWN,
    PEER_DOWN,
    STP_CHANGE,
    CascadeParams,
    rule_precision_recall,
    simulate_cascades,
)

S = 1_000_000_000


def test_seeded_and_parsable():
    p = CascadeParams(seed=7, duration_ns=3600 * S, n_rpcs=500)
    a, b = simulate_cascades(p), simulate_cascades(p)
    assert a.lines == b.lines and (a.rpc_one_way_ns == b.rpc_one_way_ns).all()
    r = parse_syslog_text(a.text())
    assert r.accounting["unparsed"] == 0 and len(r.records) == len(a.lines)
    assert (np.diff(r.records.time) >= 0).all()
    assert set(r.records.devices) <= set(a.devices)


def test_cascades_follow_the_rules():
    sim = simulate_cascades(CascadeParams(seed=3, p_stp=1.0, p_peer=1.0, noise_per_device_hour=0))
    r = parse_syslog_text(sim.text())
    names = np.asarray(sim.line_template)
    dev = r.records.device_names()
    t = r.records.time
    assert (names == LINK_DOWN).sum() == (names == STP_CHANGE).sum() == len(sim.incidents)
    assert (names == PEER_DOWN).sum() == len(sim.incidents)
    for t0, d, peer in sim.incidents:
        assert peer in sim.topology.neighbors_of(d)
        later = (t > t0 // 1000 * 1000) & (t <= t0 + 40 * S)
        assert ((names == STP_CHANGE) & (dev == d) & later).any()
        assert ((names == PEER_DOWN) & (dev == peer) & later).any()


def test_rpc_truth_crosses_the_incident_device():
    sim = simulate_cascades(CascadeParams(seed=5, duration_ns=2 * 3600 * S, n_rpcs=3000))
    hit = np.flatnonzero(sim.rpc_incident >= 0)
    assert len(hit) > 0
    for i in hit[:50]:
        t0, dev, _ = sim.incidents[sim.rpc_incident[i]]
        assert 0 <= sim.rpc_time[i] - t0 <= 60 * S
        assert dev in sim.topology.on_shortest_paths(sim.rpc_src[i], sim.rpc_dst[i])
    assert sim.rpc_one_way_ns[hit].mean() > sim.rpc_one_way_ns[sim.rpc_incident < 0].mean() + 5e6


def test_precision_recall():
    truth = ((LINK_DOWN, STP_CHANGE, "intra"), (STP_CHANGE, PEER_DOWN, "inter"))
    assert rule_precision_recall([truth[0]]) == (1.0, 0.5)
    assert rule_precision_recall([truth[0], (PEER_DOWN, LINK_DOWN, "inter")]) == (0.5, 0.5)
