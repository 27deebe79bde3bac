"""The clock offsets' least squares (sparse normal equations) against the dense system it
replaces, solved by numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.causal_paths.clocks import _solve


def _dense(equations, reference):
    """θ minimising Σ w (θ_y − θ_x − v)², one host fixed at 0: the dense weighted system."""
    hosts = sorted({h for e in equations for h in e[:2]})
    free = [h for h in hosts if h != reference]
    a = np.zeros((len(equations), len(free)))
    rhs = np.zeros(len(equations))
    for r, (x, y, v, w) in enumerate(equations):
        s = np.sqrt(w)
        if y in free:
            a[r, free.index(y)] = s
        if x in free:
            a[r, free.index(x)] = -s
        rhs[r] = s * v
    theta = np.linalg.lstsq(a, rhs, rcond=None)[0]
    return {reference: 0.0, **dict(zip(free, theta.tolist(), strict=True))}


@pytest.mark.parametrize("seed", range(5))
def test_sparse_offsets_equal_the_dense_least_squares(seed):
    rng = np.random.default_rng(seed)
    hosts = [f"h{i:02d}" for i in range(25)]
    truth = dict(zip(hosts, rng.normal(0, 5e6, len(hosts)).tolist(), strict=True))
    pairs = {tuple(sorted(rng.choice(len(hosts), 2, replace=False))) for _ in range(80)}
    pairs |= {(i, i + 1) for i in range(len(hosts) - 1)}  # one connected group
    equations = [
        (hosts[a], hosts[b], truth[hosts[b]] - truth[hosts[a]] + rng.normal(0, 1e4),
         int(rng.integers(1, 50)))
        for a, b in sorted(pairs)
    ]  # fmt: skip
    got = _solve(equations, "h00").offset
    want = _dense(equations, "h00")
    assert got.keys() == want.keys()
    for h in hosts:
        assert got[h] == pytest.approx(want[h], abs=1e-3)  # ns
        assert got[h] == pytest.approx(truth[h] - truth["h00"], abs=1e5)
