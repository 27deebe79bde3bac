"""Rule mining: lagged correlation, quasi-experimental test, transitive reduction."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naive import lagged_correlation_naive
from tacit.diagnosis.syslog_causality import (
    INTER,
    INTRA,
    CausalityParams,
    Presence,
    SyslogEvents,
    lagged_correlation,
    mine_rules,
    mine_syslog_rules,
    neighbor_lists,
)
from tacit.errors import ConfigError, InputError
from tacit.formats.syslog import parse_syslog_text
from tacit.simulate.syslog_cascades import CascadeParams, rule_precision_recall, simulate_cascades

S = 1_000_000_000
HOUR = 3600 * S
A, B, C, D = range(4)
LINE = np.array([[0, 1], [1, 2], [2, 3]])  # devices 0-1-2-3 in a line


def synthetic(seed: int, inter: bool) -> SyslogEvents:
    """A causes B 2-20 s later (same device, or the next device when ``inter``); C and D are
    independent noise, D as frequent as B."""
    rng = np.random.default_rng(seed)
    t, d, k = [], [], []
    for _ in range(80):
        t0, dev = int(rng.integers(0, 24 * HOUR)), int(rng.integers(0, 3))
        t += [t0, t0 + int(rng.integers(2 * S, 20 * S))]
        d += [dev, dev + 1 if inter else dev]
        k += [A, B]
    for tmpl in (C, D):
        n = 400
        t += rng.integers(0, 24 * HOUR, n).tolist()
        d += rng.integers(0, 4, n).tolist()
        k += [tmpl] * n
    return SyslogEvents(np.array(t), np.array(d), np.array(k), 4, 4)


@pytest.mark.parametrize("inter", [False, True])
def test_finds_the_cause_and_only_it(inter):
    rules = mine_rules(synthetic(1, inter), LINE)
    assert [(r.cause, r.effect, r.scope) for r in rules] == [(A, B, INTER if inter else INTRA)]
    r = rules[0]
    assert r.treated_rate > 0.9 and r.control_rate < 0.2 and r.p_value < 1e-6


def test_no_rule_without_a_link():
    """The effect on device d+1 is not a rule when the topology does not link d and d+1."""
    rules = mine_rules(synthetic(2, True), np.array([[0, 3]]))
    assert not [r for r in rules if (r.cause, r.effect) == (A, B)]


def test_lagged_correlation_finds_the_lag():
    w = np.r_[np.arange(0, 100, 7), np.arange(1, 100, 7)]
    t = np.r_[np.zeros(15, np.int64), np.ones(15, np.int64)]
    x = Presence(t, np.zeros(len(w), np.int64), w, 2, 1, 100)
    corr, lag = _dense_result(lagged_correlation(x, x, 2), 2)
    assert corr[0, 1] == pytest.approx(1.0) and lag[0, 1] == 1
    assert not corr[1, 0] >= 0.2  # absent (not positive) or weak


def _dense_result(pairs, n_templates: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs' correlations and lags as [cause, effect] arrays (NaN and -1 elsewhere)."""
    corr = np.full((n_templates, n_templates), np.nan)
    lag = np.full((n_templates, n_templates), -1)
    corr[pairs.cause, pairs.effect] = pairs.corr
    lag[pairs.cause, pairs.effect] = pairs.lag
    return corr, lag


def test_many_rare_templates_need_memory_for_their_co_occurrences_only(monkeypatch):
    """200,000 templates seen once each beside the cascade: dense [template, template]
    correlations would need 320 GB; the pairs that share a window are few. The rule found is the
    same, and a budget smaller than those pairs need is refused naming the input."""
    base = synthetic(1, False)
    n_rare = 200_000
    rare = SyslogEvents(
        np.r_[base.time, np.arange(n_rare) * 60 * S],  # one a minute
        np.r_[base.device, np.zeros(n_rare, np.int64)],
        np.r_[base.template, 4 + np.arange(n_rare)],
        4,
        4 + n_rare,
        ("rare.log",),
    )
    rules = mine_rules(rare, LINE)
    assert [(r.cause, r.effect, r.scope) for r in rules] == [(A, B, INTRA)]
    monkeypatch.setenv("TACIT_MEMORY_BUDGET", "1M")
    with pytest.raises(InputError, match="co-occurrences of 200,004 templates") as e:
        mine_rules(rare, LINE)
    assert e.value.path == "rare.log"


def _dense(p: Presence) -> np.ndarray:
    x = np.zeros((p.n_templates, p.n_units, p.n_windows))
    x[p.template, p.unit, p.window] = 1
    return x


@settings(deadline=None, max_examples=60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 5), st.integers(0, 3))
def test_sparse_correlation_matches_the_dense_one(seed, n_templates, n_devices, max_lag):
    """Presence and its neighbours' presence, correlated from the co-occurring cells only,
    give what the dense arrays give (the naive reference) for every pair that correlates
    positively, with its lag, and no other pair."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    events = SyslogEvents(
        rng.integers(0, 40 * 60 * S, n),
        rng.integers(0, n_devices, n),
        rng.integers(0, n_templates, n),
        n_devices,
        n_templates,
    )
    links = rng.integers(0, n_devices, (int(rng.integers(0, 6)), 2))
    x = Presence.of(events, 60 * S)
    near = x.around(neighbor_lists(n_devices, links))
    for effect in (x, near):
        got = _dense_result(lagged_correlation(x, effect, max_lag), n_templates)
        want = lagged_correlation_naive(_dense(x), _dense(effect), max_lag)
        positive = want[0] > 1e-9
        np.testing.assert_array_equal(~np.isnan(got[0]), positive)
        np.testing.assert_allclose(got[0][positive], want[0][positive], atol=1e-9)
        np.testing.assert_array_equal(got[1][positive], want[1][positive])
    adjacency = np.zeros((n_devices, n_devices))
    for a, b in links:
        if a != b:
            adjacency[a, b] = adjacency[b, a] = 1
    spread = np.minimum(np.einsum("de,tew->tdw", adjacency, _dense(x)), 1)
    assert np.array_equal(_dense(near), spread)


def test_bad_params():
    with pytest.raises(ConfigError):
        CausalityParams(window_ns=0)
    with pytest.raises(ConfigError):
        CausalityParams(alpha=1.5)


def true_names(sim, templates) -> list[str]:
    names = np.asarray(sim.line_template)
    return [
        Counter(names[templates.template == k]).most_common(1)[0][0]
        for k in range(len(templates.texts))
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simulated_cascades_precision_recall(seed):
    """Link down → STP change (intra) → peer line protocol down (inter); the transitive
    link down → peer rule is explained by the chain and dropped."""
    sim = simulate_cascades(CascadeParams(seed=seed, noise_per_device_hour=6.0))
    read = parse_syslog_text(sim.text())
    mined = mine_syslog_rules(read.records, sim.topology.links())
    names = true_names(sim, mined.templates)
    found = [(names[r.cause], names[r.effect], r.scope) for r in mined.rules]
    assert rule_precision_recall(found) == (1.0, 1.0), found
