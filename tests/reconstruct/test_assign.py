"""Joint assignment: water-filling of skip quotas, exact MWIS against brute force, batch by batch
over a round, and batching."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tacit.reconstruct.assign import (
    Batches,
    Candidates,
    SolveStats,
    batches,
    mapping_key,
    solve_all,
    solve_batch,
    water_fill,
)


def make_candidates(
    incoming: list[int], weight: list[float], outs: list[list[int]], skips: np.ndarray | None = None
) -> Candidates:
    ptr = np.concatenate([[0], np.cumsum([len(o) for o in outs])]).astype(np.int64)
    rows = np.array([r for o in outs for r in o], dtype=np.int64)
    if skips is None:
        skips = np.zeros((len(incoming), 0), dtype=np.int64)
    return Candidates(
        np.array(incoming, dtype=np.int64), np.array(weight, dtype=float), ptr, rows, skips
    )


# -- water_fill -----------------------------------------------------------------------------------

windows = st.integers(1, 8).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 20), min_size=n, max_size=n),
        st.lists(st.integers(0, 10), min_size=n, max_size=n),
        st.integers(0, 100),
    )
)


@settings(max_examples=200, deadline=None)
@given(windows)
def test_water_fill_spends_budget_within_capacity_emptiest_first(case):
    existing, capacity, budget = (np.array(case[0]), np.array(case[1]), case[2])
    quota = water_fill(existing, capacity, budget)
    assert quota.shape == existing.shape
    assert np.all(quota >= 0)
    assert np.all(quota <= capacity)
    assert quota.sum() == min(budget, capacity.sum())
    # Water-filling: a window that got skips is never more than one above a window that could
    # still have taken one.
    level = existing + quota
    for a in range(len(existing)):
        for b in range(len(existing)):
            if quota[b] > 0 and quota[a] < capacity[a]:
                assert level[b] <= level[a] + 1, (existing, capacity, budget, quota)


def test_water_fill_zero_budget_is_zeros():
    q = water_fill(np.array([3, 0, 5]), np.array([4, 4, 4]), 0)
    assert q.tolist() == [0, 0, 0]


def test_water_fill_fills_emptiest_window_first():
    # Two skips go to the empty window before the full ones get any.
    assert water_fill(np.array([5, 0, 5]), np.array([3, 3, 3]), 2).tolist() == [0, 2, 0]
    # Levels 5, 0, 3 with a budget of 6: the empty window rises to 3, then both 3s to 4 ... 5.
    q = water_fill(np.array([5, 0, 3]), np.array([10, 10, 10]), 6)
    assert q.sum() == 6
    assert q[0] == 0 and q[1] >= 3 and q[2] >= 1
    # A window at capacity passes the rest on.
    assert water_fill(np.array([0, 4]), np.array([1, 10]), 5).tolist() == [1, 4]


def test_water_fill_budget_beyond_capacity_fills_everything():
    cap = np.array([2, 0, 3])
    assert water_fill(np.array([1, 1, 1]), cap, 99).tolist() == cap.tolist()


# -- solve_batch against brute force --------------------------------------------------------------


def random_instance(rng: np.random.Generator):
    n_in = int(rng.integers(3, 7))
    n_out = int(rng.integers(2, 9))
    n_keys = int(rng.integers(0, 3))
    inc, wts, outs, skips = [], [], [], []
    for i in range(n_in):
        for _ in range(int(rng.integers(1, 5))):
            inc.append(i)
            wts.append(float(rng.uniform(0.5, 10.0)))
            k = int(rng.integers(0, min(3, n_out) + 1))
            outs.append(sorted(rng.choice(n_out, size=k, replace=False).tolist()))
            skips.append(rng.integers(0, 2, size=n_keys) if n_keys else np.zeros(0, np.int64))
    # Shuffle candidate order so incoming spans are not contiguous.
    perm = rng.permutation(len(inc))
    inc = [inc[p] for p in perm]
    wts = [wts[p] for p in perm]
    outs = [outs[p] for p in perm]
    sk = np.array([skips[p] for p in perm], dtype=np.int64).reshape(len(inc), n_keys)
    quota = rng.integers(0, 3, size=n_keys).astype(np.int64)
    return make_candidates(inc, wts, outs, sk), quota


def feasible(cands: Candidates, chosen: list[int], quota: np.ndarray) -> bool:
    inc = [int(cands.incoming[c]) for c in chosen]
    outs = [int(o) for c in chosen for o in cands.outs(c)]
    skips = cands.skips[chosen].sum(axis=0) if chosen else np.zeros_like(quota)
    return len(set(inc)) == len(inc) and len(set(outs)) == len(outs) and np.all(skips <= quota)


def brute_force(cands: Candidates, members: np.ndarray, quota: np.ndarray) -> float:
    """Best total weight: every incoming span picks one of its candidates or none."""
    by_in: dict[int, list[int]] = {}
    for c in members:
        by_in.setdefault(int(cands.incoming[c]), []).append(int(c))
    groups = list(by_in.values())
    best = 0.0

    def dfs(g: int, used: set[int], left: np.ndarray, total: float) -> None:
        nonlocal best
        if g == len(groups):
            best = max(best, total)
            return
        dfs(g + 1, used, left, total)
        for c in groups[g]:
            o = set(cands.outs(c).tolist())
            sk = cands.skips[c]
            if o & used or np.any(sk > left):
                continue
            dfs(g + 1, used | o, left - sk, total + cands.weight[c])

    dfs(0, set(), quota.copy(), 0.0)
    return best


@pytest.mark.parametrize("node_limit", [20_000, 0], ids=["branch-and-bound", "highs"])
@pytest.mark.parametrize("seed", range(60))
def test_solve_batch_matches_brute_force(seed, node_limit):
    rng = np.random.default_rng(seed)
    cands, quota = random_instance(rng)
    members = np.arange(len(cands.incoming))
    stats = SolveStats()
    chosen = solve_batch(cands, members, quota, 5.0, stats, node_limit)
    chosen = [int(c) for c in chosen]
    assert set(chosen) <= set(members.tolist())
    assert feasible(cands, chosen, quota)
    assert stats.batches == 1 and stats.fallbacks == 0
    assert stats.solver_calls == (1 if node_limit == 0 else 0)
    opt = brute_force(cands, members, quota)
    assert float(cands.weight[chosen].sum()) == pytest.approx(opt, rel=1e-9, abs=1e-9)


def test_highs_solves_by_the_relaxation_or_the_integer_program():
    """Both ways are taken (and checked above): an integral relaxation is optimal as it is,
    a fractional one goes on to the integer program."""
    stats = SolveStats()
    for seed in range(60):
        cands, quota = random_instance(np.random.default_rng(seed))
        solve_batch(cands, np.arange(len(cands.incoming)), quota, 5.0, stats, 0)
    assert stats.solver_calls == 60 and 0 < stats.relaxed < 60


def test_solve_batch_resolves_conflict_of_best_candidates():
    # Incoming 0: a (row 0, w=5); incoming 1: b (rows 0+1, w=8) or c (row 1, w=2).
    # The best per span (a, b) conflict on row 0: b alone (8) beats a + c (7) ...
    cands = make_candidates([0, 1, 1], [5.0, 8.0, 2.0], [[0], [0, 1], [1]])
    chosen = solve_batch(cands, np.arange(3), np.zeros(0, np.int64), 5.0, SolveStats())
    assert sorted(chosen.tolist()) == [1]
    # ... and with b at 6, a + c (7) wins.
    cands = make_candidates([0, 1, 1], [5.0, 6.0, 2.0], [[0], [0, 1], [1]])
    chosen = solve_batch(cands, np.arange(3), np.zeros(0, np.int64), 5.0, SolveStats())
    assert sorted(chosen.tolist()) == [0, 2]


def test_solve_batch_respects_skip_quota():
    # Both incoming spans' best candidates skip key 0; only one skip is allowed.
    sk = np.array([[1], [0], [1], [0]], dtype=np.int64)
    cands = make_candidates([0, 0, 1, 1], [9.0, 1.0, 9.0, 2.0], [[], [0], [], [1]], sk)
    chosen = solve_batch(cands, np.arange(4), np.array([1]), 5.0, SolveStats())
    assert feasible(cands, chosen.tolist(), np.array([1]))
    assert cands.weight[chosen].sum() == pytest.approx(11.0)
    none = solve_batch(cands, np.arange(4), np.array([0]), 5.0, SolveStats())
    assert sorted(none.tolist()) == [1, 3]


def test_solve_batch_empty_members():
    cands = make_candidates([0], [1.0], [[0]])
    assert len(solve_batch(cands, np.empty(0, np.int64), np.zeros(0), 1.0, SolveStats())) == 0


# -- batches ---------------------------------------------------------------------------


def _random_batching_instance(rng: np.random.Generator):
    n_in = int(rng.integers(2, 25))
    n_out = int(rng.integers(1, 30))
    inc, outs = [], []
    for i in range(n_in):
        if rng.random() < 0.1:
            continue  # an incoming span without candidates
        for _ in range(int(rng.integers(1, 4))):
            inc.append(i)
            k = int(rng.integers(0, 3))
            outs.append(rng.choice(n_out, size=min(k, n_out), replace=False).tolist())
    order_key = rng.permutation(n_in).astype(np.int64) * 10
    return make_candidates(inc, [1.0] * len(inc), outs), order_key


@pytest.mark.parametrize("seed", range(25))
def test_batches_are_sharing_components(seed):
    rng = np.random.default_rng(seed)
    cands, order_key = _random_batching_instance(rng)
    if len(cands.incoming) == 0:
        assert len(batches(cands, order_key, 1000)[0]) == 0
        return
    parts, _ = batches(cands, order_key, 1000)
    flat = np.concatenate(list(parts))
    assert sorted(flat.tolist()) == sorted(set(cands.incoming.tolist()))
    batch_of = {int(i): b for b, p in enumerate(parts) for i in p}
    # Candidates sharing an outgoing span put their incoming spans in one batch.
    owner: dict[int, int] = {}
    for c in range(len(cands.incoming)):
        for o in cands.outs(c):
            i = int(cands.incoming[c])
            if int(o) in owner:
                assert batch_of[owner[int(o)]] == batch_of[i]
            owner[int(o)] = i
    # And batches are minimal: each one is connected through shared outgoing spans.
    for p in parts:
        members = set(p.tolist())
        outs_of = {
            i: {int(o) for c in np.flatnonzero(cands.incoming == i) for o in cands.outs(c)}
            for i in members
        }
        reach, frontier = {int(p[0])}, [int(p[0])]
        while frontier:
            i = frontier.pop()
            for j in members - reach:
                if outs_of[i] & outs_of[j]:
                    reach.add(j)
                    frontier.append(j)
        assert reach == members
    # Batches in time order of their first (earliest) member, members in time order.
    firsts = [order_key[p[0]] for p in parts]
    assert firsts == sorted(firsts)
    for p in parts:
        assert np.all(np.diff(order_key[p]) > 0)
    # Cut into chunks of 2, the chunks that continue a component join up to it again.
    chunks, continued = batches(cands, order_key, 2)
    assert all(1 <= len(c) <= 2 for c in chunks)
    joined: list[list[int]] = []
    for c, more in zip(chunks, continued.tolist(), strict=True):
        if more:
            joined[-1].extend(c.tolist())
        else:
            joined.append(c.tolist())
    assert joined == [p.tolist() for p in parts]


@pytest.mark.parametrize("max_batch", [1, 2, 3, 5])
def test_batches_respect_max_batch(max_batch):
    # One component of 12 incoming spans chained through shared outgoing spans.
    inc = list(range(12))
    outs = [[i, i + 1] for i in range(12)]
    order_key = np.array([5, 3, 8, 1, 9, 0, 2, 7, 4, 6, 11, 10], dtype=np.int64)
    parts, continued = batches(make_candidates(inc, [1.0] * 12, outs), order_key, max_batch)
    assert continued.tolist() == [False] + [True] * (len(parts) - 1)
    assert all(1 <= len(p) <= max_batch for p in parts)
    flat = np.concatenate(list(parts))
    assert sorted(flat.tolist()) == inc
    # The component is cut in time order.
    assert np.all(np.diff(order_key[flat]) > 0)
    assert len(parts) == -(-12 // max_batch)


def reference_mapping(chosen):
    """The mapping as the set of (incoming span, its outgoing spans) of every picked candidate."""
    return frozenset(
        (int(cands.incoming[c]), tuple(cands.outs(c).tolist()))
        for cands, picked in chosen
        for c in picked.tolist()
    )


def random_mapping(rng, cands):
    """Picked candidates, at most one per incoming span, split at random into passes."""
    first = {}
    for c in rng.permutation(len(cands.incoming)).tolist():
        first.setdefault(int(cands.incoming[c]), c)
    picked = np.array([c for c in first.values() if rng.random() < 0.8], dtype=np.int64)
    cut = int(rng.integers(0, len(picked) + 1))
    return [(cands, picked[:cut]), (cands, picked[cut:])]


@pytest.mark.parametrize("seed", range(20))
def test_mapping_key_is_equal_exactly_when_the_mappings_are(seed):
    rng = np.random.default_rng(seed)
    cands, _ = random_instance(rng)
    mappings = [random_mapping(rng, cands) for _ in range(30)]
    # The same mapping split into passes another way, in another order.
    for chosen in mappings[:10]:
        together = np.concatenate([picked for _, picked in chosen])
        mappings.append([(cands, rng.permutation(together))])
    for a in mappings:
        explained, key = mapping_key(a)
        assert explained == sum(len(outs) for _, outs in reference_mapping(a))
        for b in mappings:
            assert (key == mapping_key(b)[1]) == (reference_mapping(a) == reference_mapping(b))


# -- solve_all: every batch of a round, chunks continuing a component ------------------------------


def random_round(rng: np.random.Generator) -> tuple[Candidates, np.ndarray]:
    """Several random components side by side (their incoming and outgoing spans apart), and a
    start time per incoming span."""
    parts = [random_instance(rng)[0] for _ in range(int(rng.integers(2, 6)))]
    inc, wts, outs, skips = [], [], [], []
    n_in = n_out = 0
    for p in parts:
        inc += (p.incoming + n_in).tolist()
        wts += p.weight.tolist()
        outs += [(p.outs(c) + n_out).tolist() for c in range(len(p.incoming))]
        skips.append(p.skips[:, :1] if p.skips.shape[1] else np.zeros((len(p.incoming), 1)))
        n_in += int(p.incoming.max()) + 1
        n_out += int(p.out_rows.max(initial=0)) + 1
    cands = make_candidates(inc, wts, outs, np.concatenate(skips).astype(np.int64))
    return cands, rng.permutation(n_in).astype(np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_solve_all_is_the_best_choice_of_every_batch_in_turn(seed):
    """Each batch's choice is a maximum-weight one among the candidates the batches before it
    left free (a chunk that continues a component cannot take what earlier chunks took), as
    brute force finds it: a greedy pick of each span's best candidate is not."""
    rng = np.random.default_rng(1000 + seed)
    cands, start = random_round(rng)
    parts, continued = batches(cands, start, max_batch=3)  # incoming spans per batch
    per_batch = [np.flatnonzero(np.isin(cands.incoming, part)) for part in parts]
    members = Batches(np.concatenate(per_batch), np.r_[0, np.cumsum([len(b) for b in per_batch])])
    quotas = rng.integers(0, 3, size=(len(members), 1)).astype(np.int64)
    chosen = set(solve_all(cands, members, continued, quotas, 5.0, SolveStats()).tolist())
    used: set[int] = set()
    for b, batch in enumerate(members):
        free = [int(c) for c in batch if not set(cands.outs(c).tolist()) & used]
        picked = [int(c) for c in batch if int(c) in chosen]
        assert set(picked) <= set(free) and feasible(cands, picked, quotas[b])
        best = brute_force(cands, np.array(free, dtype=np.int64), quotas[b])
        assert cands.weight[picked].sum() == pytest.approx(best, rel=1e-9, abs=1e-9)
        used |= {int(o) for c in picked for o in cands.outs(c)}
    assert chosen <= {int(c) for batch in members for c in batch}
