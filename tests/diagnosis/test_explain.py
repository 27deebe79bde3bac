"""Explaining slow traces: constructed traces whose slowness has a known cause, detected,
localized and put through the packaged trace rules."""

from __future__ import annotations

import numpy as np
import pytest
from constructed_traces import PARALLEL_CALLS, SERIAL_CALLS, trace

from tacit.diagnosis.critical_path import NETWORK, critical_paths, transit_by_edge
from tacit.diagnosis.detect import detect
from tacit.diagnosis.explain import ExplainParams, explain, trace_features, trace_rules
from tacit.diagnosis.rules import RuleSyntaxError, parse_rules
from tacit.errors import ConfigError
from tacit.model.spans import concat

# Slow because of RPC transit: the call to A takes 470 µs, A answers in 20.
NETWORK_SLOW = ([("a", None, "A", 10, 480, 15, 35)], 500)
# Slow because B, one of two parallel calls, took 466 µs.
STRAGGLER = ([("a", None, "A", 10, 50, 12, 48), ("b", None, "B", 10, 480, 12, 478)], 500)
# Slow with no culprit: six short calls one after another.
CHAIN = (
    [
        (f"c{i}", None, f"S{i}", 10 + 45 * i, 50 + 45 * i, 12 + 45 * i, 48 + 45 * i)
        for i in range(6)
    ],
    300,
)
# A parallel fan-out where the frontend itself is slow (not the network, not a callee).
SLOW_CALLER = ([(n, None, s, cs, ce, ss, se) for n, _, s, cs, ce, ss, se in PARALLEL_CALLS], 400)


def _shifted(calls, end, t0, name):
    moved = [(n, p, s, cs + t0, ce + t0, ss + t0, se + t0) for n, p, s, cs, ce, ss, se in calls]
    return trace(moved, root=("frontend", t0, t0 + end), trace_id=name)[0]


@pytest.fixture(scope="module")
def flagged():
    rng = np.random.default_rng(0)
    tables = [
        _shifted(SERIAL_CALLS, 100 + int(rng.integers(0, 6)), 1000 * i, f"n{i:02d}")
        for i in range(40)
    ]
    cases = {"network": NETWORK_SLOW, "straggler": STRAGGLER, "chain": CHAIN}
    cases["caller"] = SLOW_CALLER
    for j, (name, (calls, end)) in enumerate(cases.items()):
        tables.append(_shifted(calls, end, 1000 * (40 + j), name))
    cp = critical_paths(concat(tables))
    history = np.zeros(len(cp), dtype=bool)
    history[:30] = True
    d = detect(cp.latency, np.zeros(len(cp), dtype=np.int64), history, ~history)
    return cp, d


def test_each_slow_trace_gets_its_known_pathology(flagged):
    cp, d = flagged
    problems = {p["trace"]: p for p in explain(cp, d)}
    assert set(problems) == {"network", "straggler", "chain", "caller"}  # normal ones pass
    assert problems["network"]["holds"] == ["slow_network"]
    assert problems["straggler"]["holds"] == ["slow_service", "fanout_straggler"]
    assert problems["chain"]["holds"] == ["serial_chain"]
    assert problems["caller"]["holds"] == ["slow_service", "fanout_straggler"]
    f = problems["network"]["features"]
    assert f["top_service"] != NETWORK and f["network_share"] == pytest.approx(450 / 500)
    assert problems["straggler"]["features"]["top_service"] == "B"
    assert problems["caller"]["features"]["top_service"] == "frontend"
    chain = problems["chain"]["features"]
    assert chain["serial_calls"] and not chain["parallel_calls"] and chain["top_share"] < 0.5


def test_localization_names_what_grew_against_the_baseline(flagged):
    """The history traces are all the same serial calls; each slow one grew in one place. The
    caller's own time grew; the straggler's callee B; the slow network's transit."""
    cp, d = flagged
    problems = {p["trace"]: p["features"] for p in explain(cp, d)}
    assert problems["straggler"]["grew_service"] == "B"
    assert problems["network"]["grew_service"] == NETWORK
    assert problems["caller"]["grew_service"] == "frontend"
    for f in problems.values():
        assert 0 < f["grew_ms"] <= f["latency_ms"]
    # the transit that grew is named by its edge; other growth names none
    assert problems["network"]["grew_edge"] == "frontend → A"
    assert problems["straggler"]["grew_edge"] is None


def test_transit_split_by_edge_adds_up_to_the_network_contribution(flagged):
    cp, _ = flagged
    edges, transit = transit_by_edge(cp)
    assert set(edges) >= {("frontend", "A"), ("frontend", "B")}
    network = cp.contribution[:, cp.services.index(NETWORK)]
    assert np.array_equal(transit.sum(axis=1), network)
    i = [cp.trace_name(k) for k in range(len(cp))].index("network")
    assert transit[i, edges.index(("frontend", "A"))] == network[i] > 400_000


def test_thresholds_change_the_features(flagged):
    cp, d = flagged
    i = [cp.trace_name(k) for k in range(len(cp))].index("chain")
    loose = trace_features(cp, i, d, ExplainParams(dominant_share=0.1))
    assert loose["service_dominant"] and loose["slow"]
    with pytest.raises(ConfigError):
        ExplainParams(network_share=0)


def test_custom_rules_and_bad_rule_files(flagged, tmp_path):
    cp, d = flagged
    rules = parse_rules(
        "SYMPTOM slow\nSYMPTOM redundant_calls\nPATHOLOGY hedged DEF slow AND "
        "redundant_calls\nPATHOLOGY plain DEF slow AND NOT redundant_calls\n"
    )
    assert {p["trace"]: p["holds"] for p in explain(cp, d, rules)} == {
        "network": ["plain"],
        "straggler": ["plain"],
        "chain": ["plain"],
        "caller": ["plain"],
    }
    bad = tmp_path / "bad.rules"
    bad.write_text("SYMPTOM slow\nPATHOLOGY x DEF slow AND (\n")
    with pytest.raises(RuleSyntaxError) as e:
        trace_rules(bad)
    assert e.value.line == 3
