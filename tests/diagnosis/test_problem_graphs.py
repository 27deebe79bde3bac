"""Topology paths, problem graphs from rules, and the graphs on a flagged RPC's path."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.diagnosis.problem_graphs import (
    ProblemParams,
    Topology,
    graphs_for_rpcs,
    problem_graphs,
)
from tacit.diagnosis.queueing import queueing_delay
from tacit.diagnosis.syslog_causality import INTER, INTRA, Rule, mine_syslog_rules
from tacit.errors import InputError
from tacit.formats.syslog import parse_syslog_text
from tacit.simulate.syslog_cascades import CascadeParams, simulate_cascades

S = 1_000_000_000
DOWN, STP, PEER, NOISE = range(4)
RULES = [
    Rule(DOWN, STP, INTRA, 0.7, 0, 0.9, 0.0, 50, 1e-9),
    Rule(STP, PEER, INTER, 0.4, 0, 0.8, 0.0, 40, 1e-9),
]
#  h1 - s1 - s2 - h2, and s1 - s3 (s3 logs but is on no path between h1 and h2)
TOPO = Topology([("h1", "s1"), ("s1", "s2"), ("s2", "h2"), ("s1", "s3")])
DEVICES = ["s1", "s2", "s3"]


def test_shortest_paths_cover_equal_cost_branches():
    t = Topology(
        [("s", "a"), ("a", "t"), ("s", "b"), ("b", "t"), ("s", "c"), ("c", "d"), ("d", "t")]
    )
    assert t.on_shortest_paths("s", "t") == {"s", "a", "b", "t"}
    assert t.on_shortest_paths("s", "nowhere") == set()
    assert Topology([("a", "b"), ("c", "d")]).on_shortest_paths("a", "d") == set()


def test_topology_parse_errors_name_the_line():
    assert Topology.parse("# links\na b\nb,c\n").links() == [("a", "b"), ("b", "c")]
    with pytest.raises(InputError) as e:
        Topology.parse("a b\na b c\n", "topo.txt")
    assert e.value.record == "line 2"
    with pytest.raises(InputError):
        Topology.parse("# nothing\n")


def graphs():
    #        time   device  template
    ev = [
        (100 * S, 0, DOWN),  # s1 link down
        (105 * S, 0, STP),  # s1 STP change
        (110 * S, 1, PEER),  # s2 (peer of s1) line protocol down
        (111 * S, 0, NOISE),  # noise: no rule involves it
        (5000 * S, 2, DOWN),  # s3, much later: its own graph
    ]
    t, d, k = (np.array(c) for c in zip(*ev, strict=True))
    return problem_graphs(t, d, k, DEVICES, RULES, TOPO, ProblemParams())


def test_cascade_forms_one_graph_rooted_at_the_link_down():
    g = graphs()
    assert len(g) == 2
    first = g[0]
    assert first.devices == {"s1", "s2"}
    assert sorted((n[0], n[1]) for n in first.nodes) == [("s1", DOWN), ("s1", STP), ("s2", PEER)]
    assert [first.nodes[i][:2] for i in first.roots] == [("s1", DOWN)]
    assert sorted(s for _, _, s in first.edges) == [INTER, INTRA]
    assert g[1].devices == {"s3"} and g[1].edges == []
    assert first.as_dict(["down", "stp", "peer", "noise"])["roots"] == first.roots


def test_effect_too_late_or_not_linked_is_not_joined():
    t = np.array([0, 200 * S, 10 * S])
    d = np.array([0, 0, 2])
    k = np.array([DOWN, STP, PEER])  # STP after the horizon; PEER on s3, linked to s1 only
    g = problem_graphs(t, d, k, DEVICES, RULES, TOPO, ProblemParams(horizon_ns=60 * S))
    assert len(g) == 3


def test_rpcs_get_the_graphs_on_their_path():
    g = graphs()
    ids = graphs_for_rpcs(
        np.array([120 * S, 120 * S, 9000 * S]),
        np.array(["h1", "s3", "h1"]),
        np.array(["h2", "s3", "h2"]),
        g,
        TOPO,
        slack_ns=60 * S,
    )
    assert ids == [[0], [], []]


def test_simulated_flagged_rpcs_find_their_incident():
    sim = simulate_cascades(CascadeParams(seed=4))
    read = parse_syslog_text(sim.text())
    mined = mine_syslog_rules(read.records, sim.topology.links())
    rec = read.records
    g = problem_graphs(
        rec.time, rec.device, mined.templates.template, rec.devices, mined.rules, sim.topology
    )
    q = queueing_delay(
        sim.rpc_time, sim.rpc_src, sim.rpc_dst, sim.rpc_one_way_ns, sim.rpc_end_to_end_ns
    )
    f = np.flatnonzero(q.flagged & (sim.rpc_incident >= 0))
    assert len(f) > 100
    attached = graphs_for_rpcs(sim.rpc_time[f], sim.rpc_src[f], sim.rpc_dst[f], g, sim.topology)
    found = 0
    for i, ids in zip(f, attached, strict=True):
        t0, dev, _ = sim.incidents[sim.rpc_incident[i]]
        found += any(g[j].has_event(dev, t0) for j in ids)
    assert found / len(f) >= 0.9
