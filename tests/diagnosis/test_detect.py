"""Detection against per-key IQR baselines, with outliers planted where they are known."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.diagnosis.critical_path import critical_paths
from tacit.diagnosis.detect import (
    FASTER,
    NO_BASELINE,
    NORMAL,
    NOT_EVALUATED,
    SLOWER,
    VERDICT_NAMES,
    DetectParams,
    confounder_keys,
    detect,
    history_window,
)
from tacit.errors import ConfigError
from tacit.simulate import load_app, simulate


def _two_endpoints(rng, n=2000):
    """Endpoint 0 takes ~10 ms, endpoint 1 ~100 ms; the last quarter is evaluated."""
    key = rng.integers(0, 2, n)
    latency = np.where(key == 0, 10e6, 100e6) * rng.lognormal(0, 0.1, n)
    history = np.arange(n) < 3 * n // 4
    return latency.astype(np.int64), key, history


def test_baseline_quartiles_and_planted_outliers():
    rng = np.random.default_rng(1)
    latency, key, history = _two_endpoints(rng)
    ev = ~history
    planted = np.flatnonzero(ev)[::10]
    slow, fast = planted[::2], planted[1::2]
    latency[slow] *= 3
    latency[fast] //= 3
    d = detect(latency, key, history, ev)
    for k in (0, 1):
        h = np.sort(latency[history & (key == k)])
        q1, q3 = np.quantile(h, [0.25, 0.75])
        rows = key == k
        assert np.allclose(d.q1[rows], q1) and np.allclose(d.q3[rows], q3)
    assert (d.verdict[slow] == SLOWER).all() and (d.verdict[fast] == FASTER).all()
    assert (d.verdict[history] == NOT_EVALUATED).all()
    # A lognormal(0, 0.1) has few points past Tukey's fences: almost no false alarms.
    others = ev.copy()
    others[planted] = False
    assert (d.verdict[others] != NORMAL).mean() < 0.02
    assert sum(d.accounting[VERDICT_NAMES[v]] for v in VERDICT_NAMES) == len(latency)


def test_flagged_traces_rank_by_distance_from_their_keys_middle():
    rng = np.random.default_rng(1)
    latency, key, history = _two_endpoints(rng)
    ev = ~history
    one, two = np.flatnonzero(ev & (key == 0))[:2]
    latency[one] *= 3  # slower than its key's quartiles
    latency[two] *= 9  # farther still
    d = detect(latency, key, history, ev)
    ranked = d.ranked()
    assert set(ranked.tolist()) == set(d.flagged().tolist())
    distance = np.abs(d.latency[ranked] - (d.q1[ranked] + d.q3[ranked]) / 2)
    assert np.all(np.diff(distance) <= 0)
    assert ranked.tolist().index(two) < ranked.tolist().index(one)


def test_confounders_change_the_verdict():
    """50 ms is slow for the 10 ms endpoint and fast for the 100 ms one; pooled, it is normal."""
    rng = np.random.default_rng(2)
    latency, key, history = _two_endpoints(rng)
    probe = np.flatnonzero(~history)[:20]
    latency[probe] = 50_000_000
    by_key = detect(latency, key, history, ~history)
    assert (by_key.verdict[probe] == np.where(key[probe] == 0, SLOWER, FASTER)).all()
    pooled = detect(latency, np.zeros_like(key), history, ~history)
    assert (pooled.verdict[probe] == NORMAL).all()


def test_too_little_history_is_accounted():
    latency = np.arange(30, dtype=np.int64)
    key = np.r_[np.zeros(25, np.int64), np.ones(5, np.int64)]
    d = detect(latency, key, np.ones(30, bool), params=DetectParams(min_history=10))
    assert (d.verdict[25:] == NO_BASELINE).all() and np.isnan(d.q1[25:]).all()
    assert d.accounting[VERDICT_NAMES[NO_BASELINE]] == 5


def test_keys_from_root_spans_and_time_of_day():
    spans = simulate(load_app(None), 100, n_requests=400, seed=4)
    cp = critical_paths(spans)
    key, labels = confounder_keys(spans, cp.root, ["endpoint", "hour"])
    names = {lab[0] for lab in labels}
    assert names == {"GET /product", "POST /checkout"}
    hour = (spans.start[cp.root] // 3_600_000_000_000) % 24
    for i, (ep, hh) in enumerate(labels):
        rows = key == i
        assert (spans.endpoint[cp.root[rows]] == spans.strings.find(ep)).all()
        assert (hour[rows] == int(hh[:2])).all()
    custom, clabels = confounder_keys(spans, cp.root, [lambda s, r: s.end[r] - s.start[r] > 5e6])
    assert {c[0] for c in clabels} <= {True, False}
    assert len(custom) == len(cp.root)
    with pytest.raises(ConfigError, match="unknown confounder"):
        confounder_keys(spans, cp.root, ["region"])


def test_history_window():
    start = np.arange(10, dtype=np.int64) * 10
    assert history_window(start, 0.5).sum() == 5
    assert history_window(start, until=30).sum() == 3
    assert history_window(start, 1.0).all()
    with pytest.raises(ConfigError):
        history_window(start, 0.0)
