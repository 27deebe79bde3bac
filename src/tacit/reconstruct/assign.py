"""Joint assignment of candidate mappings: batching and maximum-weight independent set.

TraceWeaver (SIGCOMM '24, §4.1 and Appendix A): candidates conflict when they belong to the
same incoming span or share an outgoing span; the best consistent mapping of a batch is a
maximum-weight independent set of that conflict graph. We solve it exactly as the equivalent
integer program (one binary per candidate; at most one per incoming span; at most one per
outgoing span; skipped calls within the batch's quota). Small batches are solved exactly in
process by branch and bound; a batch whose search passes :data:`BRANCH_AND_BOUND_NODES` goes to
HiGHS through ``scipy.optimize.milp`` under a time budget. When HiGHS finds no feasible point in
time, a greedy pass by weight is the documented fallback.

Batches follow Appendix A.2: a *perfect cut* separates incoming spans whose candidates share no
outgoing span, so batches are the connected components of the incoming/outgoing sharing graph,
taken in time order. A component larger than the maximum batch size is cut into chunks of that
size in time order, solved one after the other, each chunk's chosen spans removed from the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components

from tacit.runs import run_heads, run_starts


@dataclass
class Candidates:
    """Flat candidates of one instance: incoming index, weight, used outgoing spans and skips.

    ``outs`` is CSR-like: candidate ``c`` uses ``out_rows[out_ptr[c]:out_ptr[c+1]]``; ``skips``
    is a (candidates x keys) count of skipped calls per callee key.
    """

    incoming: np.ndarray
    weight: np.ndarray
    out_ptr: np.ndarray
    out_rows: np.ndarray
    skips: np.ndarray

    def outs(self, c: int) -> np.ndarray:
        return self.out_rows[self.out_ptr[c] : self.out_ptr[c + 1]]

    def outs_of(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The outgoing spans of all ``members`` at once, and the position in ``members`` of
        the candidate each belongs to."""
        per = np.diff(self.out_ptr)[members]
        ends = np.cumsum(per)
        index = np.repeat(self.out_ptr[members] - (ends - per), per) + np.arange(
            ends[-1] if len(ends) else 0
        )
        return self.out_rows[index], np.repeat(np.arange(len(members)), per)


BRANCH_AND_BOUND_NODES = 20_000
"""Search nodes the in-process branch and bound may visit before a batch goes to HiGHS."""


@dataclass
class SolveStats:
    batches: int = 0
    solver_calls: int = 0
    fallbacks: int = 0


def batches(
    cands: Candidates, order_key: np.ndarray, max_batch: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Incoming indices per batch: connected components, cut into chunks of ``max_batch``.

    ``order_key[i]`` orders incoming spans in time (their start). Also returns, per batch,
    whether it continues the component of the batch before it (a later chunk).
    """
    n_in = len(order_key)
    if len(cands.incoming) == 0:
        return [], np.zeros(0, dtype=bool)
    uniq, out_idx = np.unique(cands.out_rows, return_inverse=True)
    per_cand = np.diff(cands.out_ptr)
    rows = np.repeat(cands.incoming, per_cand)
    graph = coo_matrix(
        (np.ones(len(rows)), (rows, n_in + out_idx)), shape=(n_in + len(uniq), n_in + len(uniq))
    )
    _, label = connected_components(graph, directed=False)
    present = np.unique(cands.incoming)
    lab = label[present]
    order = np.lexsort((order_key[present], lab))
    present, lab = present[order], lab[order]
    cut = run_starts(lab)[1:]
    comps = np.split(present, cut)
    comps.sort(key=lambda c: order_key[c[0]])
    out: list[np.ndarray] = []
    continued: list[bool] = []
    for c in comps:
        out.extend(c[a : a + max_batch] for a in range(0, len(c), max_batch))
        continued.extend(a > 0 for a in range(0, len(c), max_batch))
    return out, np.array(continued, dtype=bool)


def solve_all(
    cands: Candidates,
    members: list[np.ndarray],
    continued: np.ndarray,
    quotas: np.ndarray,
    time_limit: float,
    stats: SolveStats,
) -> np.ndarray:
    """The chosen candidates of every batch (``members[b]``: candidate indices; ``quotas[b]``:
    its skip quota per key), batches solved in time order.

    A chunk that continues a component loses the candidates using spans the chunks before it
    took. Every other batch whose incoming spans' best candidates share no outgoing span and
    stay within the quota is solved by them (that choice is optimal); this is checked for all
    batches at once, and only the rest go through :func:`solve_batch` one by one.
    """
    nb = len(members)
    if nb == 0:
        return np.empty(0, dtype=np.int64)
    sizes = np.array([len(m) for m in members])
    flat = np.concatenate(members)
    label = np.repeat(np.arange(nb), sizes)
    order = np.lexsort((-cands.weight[flat], cands.incoming[flat]))
    first = run_heads(cands.incoming[flat[order]])
    best, best_label = flat[order[first]], label[order[first]]
    outs, owner = cands.outs_of(best)
    _, inverse, counts = np.unique(outs, return_inverse=True, return_counts=True)
    out_label = best_label[owner]
    hard = continued.copy()
    hard[out_label[counts[inverse] > 1]] = True
    if cands.skips.shape[1]:
        used = np.zeros((nb, cands.skips.shape[1]), dtype=np.int64)
        np.add.at(used, best_label, cands.skips[best])
        hard |= np.any(used > quotas, axis=1)
    stats.batches += int((~hard).sum())  # solve_batch counts the others
    chosen = [best[~hard[best_label]]]
    taken = np.empty(0, dtype=np.int64)  # spans taken so far in the current component
    for b in np.flatnonzero(hard):
        m = members[b]
        if not continued[b]:
            taken = np.empty(0, dtype=np.int64)
        else:
            if not hard[b - 1]:  # a first chunk solved by the fast path
                taken = outs[out_label == b - 1]
            m = m[_uses_none(cands, m, taken)]
        pick = solve_batch(cands, m, quotas[b], time_limit, stats)
        chosen.append(pick)
        taken = np.concatenate([taken, *(cands.outs(c) for c in pick)])
    return np.concatenate(chosen).astype(np.int64)


def _uses_none(cands: Candidates, members: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """For each candidate in ``members``: True unless it uses one of the ``taken`` spans."""
    outs, owner = cands.outs_of(members)
    return np.bincount(owner[np.isin(outs, taken)], minlength=len(members)) == 0


def water_fill(existing: np.ndarray, capacity: np.ndarray, budget: int) -> np.ndarray:
    """Spread ``budget`` skips over windows, filling the emptiest first (TraceWeaver §4.2).

    Window ``w`` has ``existing[w]`` observed calls and room for ``capacity[w]`` skips; the
    level λ rises until the budget is spent, each window getting ``min(cap, max(0, λ - existing))``.
    """
    quota = np.zeros(len(existing), dtype=np.int64)
    budget = int(min(budget, capacity.sum()))
    if budget <= 0:
        return quota
    lo, hi = float(existing.min()), float((existing + capacity).max())
    for _ in range(60):
        lam = (lo + hi) / 2
        if np.minimum(capacity, np.maximum(0, lam - existing)).sum() > budget:
            hi = lam
        else:
            lo = lam
    quota = np.minimum(capacity, np.floor(np.maximum(0, lo - existing))).astype(np.int64)
    rest = budget - int(quota.sum())
    for w in np.argsort(existing + quota, kind="stable"):
        if rest <= 0:
            break
        if quota[w] < capacity[w]:
            quota[w] += 1
            rest -= 1
    return quota


def solve_batch(
    cands: Candidates,
    members: np.ndarray,
    quota: np.ndarray,
    time_limit: float,
    stats: SolveStats,
    node_limit: int = BRANCH_AND_BOUND_NODES,
) -> np.ndarray:
    """Indices of the chosen candidates among ``members`` (candidate indices): a maximum-weight
    consistent choice, by branch and bound within ``node_limit`` search nodes, else by HiGHS."""
    stats.batches += 1
    if len(members) == 0:
        return members
    exact = _branch_and_bound(cands, members, quota, node_limit)
    if exact is not None:
        return exact
    stats.solver_calls += 1
    n = len(members)
    inc = cands.incoming[members]
    _, in_idx = np.unique(inc, return_inverse=True)
    per = np.diff(cands.out_ptr)[members]
    outs = np.concatenate([cands.outs(c) for c in members])
    _, out_idx = np.unique(outs, return_inverse=True)
    n_in, n_out = in_idx.max() + 1, out_idx.max() + 1 if len(outs) else 0
    sk = cands.skips[members]
    keys = np.flatnonzero(sk.sum(axis=0) > 0)
    rows = [in_idx, n_in + out_idx]
    cols = [np.arange(n), np.repeat(np.arange(n), per)]
    data = [np.ones(n), np.ones(len(outs))]
    for q, k in enumerate(keys):
        nz = np.flatnonzero(sk[:, k])
        rows.append(np.full(len(nz), n_in + n_out + q))
        cols.append(nz)
        data.append(sk[nz, k].astype(float))
    a = csr_matrix(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n_in + n_out + len(keys), n),
    )
    ub = np.concatenate([np.ones(n_in + n_out), quota[keys].astype(float)])
    res = milp(
        c=-cands.weight[members],
        constraints=LinearConstraint(a, -np.inf, ub),
        integrality=np.ones(n),
        bounds=Bounds(0, 1),
        options={"time_limit": time_limit, "mip_rel_gap": 1e-9},
    )
    if res.x is not None:
        return members[res.x > 0.5]
    stats.fallbacks += 1
    return _greedy(cands, members, quota)


def _branch_and_bound(
    cands: Candidates, members: np.ndarray, quota: np.ndarray, node_limit: int
) -> np.ndarray | None:
    """Exact maximum-weight choice by depth-first branch and bound, or None past ``node_limit``.

    Each incoming span takes one of its candidates (best first) or none; a branch is cut when
    its weight plus every remaining span's best weight cannot beat the incumbent, which starts
    as the greedy solution. Small batches, the common case, are solved here (compiled) in
    microseconds, where a HiGHS call costs about ten milliseconds.
    """
    by_weight = members[np.lexsort((np.arange(len(members)), -cands.weight[members]))]
    # Groups (one per incoming span) in order of their best candidate, best first inside.
    inc = cands.incoming[by_weight]
    first_seen = np.unique(inc, return_index=True)[1]
    group_rank = np.empty(len(first_seen), np.int64)
    group_rank[np.argsort(first_seen, kind="stable")] = np.arange(len(first_seen))
    _, group = np.unique(inc, return_inverse=True)
    order = by_weight[np.lexsort((np.arange(len(by_weight)), group_rank[group]))]
    group_ptr = np.r_[0, np.cumsum(np.bincount(group_rank[group]))].astype(np.int64)
    outs, owner = cands.outs_of(order)
    _, local_out = np.unique(outs, return_inverse=True)
    out_ptr = np.r_[0, np.cumsum(np.bincount(owner, minlength=len(order)))].astype(np.int64)
    found, chosen = _bnb(
        group_ptr,
        cands.weight[order].astype(np.float64),
        out_ptr,
        local_out.astype(np.int64),
        int(local_out.max(initial=-1)) + 1,
        cands.skips[order].astype(np.int64),
        quota.astype(np.int64),
        node_limit,
    )
    if not found:
        return None
    return np.sort(order[chosen])


@njit(cache=True)
def _fits(c, used, out_ptr, outs, skips, left):  # pragma: no cover - compiled
    for q in range(out_ptr[c], out_ptr[c + 1]):
        if used[outs[q]]:
            return False
    for k in range(skips.shape[1]):  # noqa: SIM110 - compiled: a loop, not a generator
        if skips[c, k] > left[k]:
            return False
    return True


@njit(cache=True)
def _take(c, sign, used, out_ptr, outs, skips, left):  # pragma: no cover - compiled
    for q in range(out_ptr[c], out_ptr[c + 1]):
        used[outs[q]] = sign > 0
    for k in range(skips.shape[1]):
        left[k] -= sign * skips[c, k]


@njit(cache=True)
def _bnb(group_ptr, w, out_ptr, outs, n_out, skips, quota, node_limit):  # pragma: no cover
    """The search of :func:`_branch_and_bound` on candidates grouped and sorted by it:
    (found within the node limit, indices of the chosen candidates)."""
    n_groups = len(group_ptr) - 1
    used = np.zeros(n_out, np.bool_)
    left = quota.copy()
    # Greedy incumbent: candidates by weight, best first, when they fit.
    by_weight = np.argsort(-w, kind="mergesort")
    group_of = np.empty(len(w), np.int64)
    for g in range(n_groups):
        group_of[group_ptr[g] : group_ptr[g + 1]] = g
    group_taken = np.zeros(n_groups, np.bool_)
    best = np.empty(n_groups, np.int64)
    n_best = 0
    best_total = 0.0
    for c in by_weight:
        if not group_taken[group_of[c]] and _fits(c, used, out_ptr, outs, skips, left):
            _take(c, 1, used, out_ptr, outs, skips, left)
            group_taken[group_of[c]] = True
            best[n_best] = c
            n_best += 1
            best_total += w[c]
    used[:] = False
    left[:] = quota
    bound = np.zeros(n_groups + 1)
    for g in range(n_groups - 1, -1, -1):
        bound[g] = bound[g + 1] + w[group_ptr[g]]
    # Depth-first search: opt[g] is the option taken at group g (a candidate, or -2: none),
    # -1 before the first; total[g] the weight taken before group g.
    opt = np.full(n_groups + 1, -1, np.int64)
    total = np.zeros(n_groups + 1)
    nodes = 0
    g = 0
    while g >= 0:
        if g == n_groups:
            if total[g] > best_total + 1e-9:
                best_total = total[g]
                n_best = 0
                for h in range(n_groups):
                    if opt[h] >= 0:
                        best[n_best] = opt[h]
                        n_best += 1
            g -= 1
            if g >= 0 and opt[g] >= 0:
                _take(opt[g], -1, used, out_ptr, outs, skips, left)
            continue
        if opt[g] == -1:
            nodes += 1
            if nodes > node_limit:
                return False, best[:0]
            if total[g] + bound[g] <= best_total + 1e-9:
                g -= 1
                if g >= 0 and opt[g] >= 0:
                    _take(opt[g], -1, used, out_ptr, outs, skips, left)
                continue
        # The next option at group g: a later candidate that fits, then none, then back up.
        start = (
            group_ptr[g] if opt[g] == -1 else (opt[g] + 1 if opt[g] >= 0 else group_ptr[g + 1] + 1)
        )
        nxt = -3
        for c in range(start, group_ptr[g + 1]):
            if _fits(c, used, out_ptr, outs, skips, left):
                nxt = c
                break
        if nxt == -3 and opt[g] != -2:
            nxt = -2
        if nxt == -3:
            opt[g] = -1
            g -= 1
            if g >= 0 and opt[g] >= 0:
                _take(opt[g], -1, used, out_ptr, outs, skips, left)
            continue
        opt[g] = nxt
        if nxt >= 0:
            _take(nxt, 1, used, out_ptr, outs, skips, left)
            total[g + 1] = total[g] + w[nxt]
        else:
            total[g + 1] = total[g]
        g += 1
        opt[g] = -1
    return True, best[:n_best].copy()


def _greedy(cands: Candidates, members: np.ndarray, quota: np.ndarray) -> np.ndarray:
    taken_in: set[int] = set()
    taken_out: set[int] = set()
    left = quota.astype(np.int64).copy()
    chosen = []
    for c in members[np.argsort(-cands.weight[members], kind="stable")]:
        outs = set(cands.outs(c).tolist())
        sk = cands.skips[c]
        if cands.incoming[c] in taken_in or outs & taken_out or np.any(sk > left):
            continue
        chosen.append(c)
        taken_in.add(int(cands.incoming[c]))
        taken_out |= outs
        left -= sk
    return np.array(chosen, dtype=np.int64)
