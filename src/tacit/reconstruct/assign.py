"""Joint assignment of candidate mappings: batching and maximum-weight independent set.

TraceWeaver (SIGCOMM '24, §4.1 and Appendix A): candidates conflict when they belong to the
same incoming span or share an outgoing span; the best consistent mapping of a batch is a
maximum-weight independent set of that conflict graph. We solve it exactly as the equivalent
integer program (one binary per candidate; at most one per incoming span; at most one per
outgoing span; skipped calls within the batch's quota). Small batches are solved exactly in
process by branch and bound; a batch whose search passes :data:`BRANCH_AND_BOUND_NODES` goes to
HiGHS through ``scipy.optimize.milp`` under a time budget: its linear relaxation first, whose
solution, when integral, is optimal; the integer program otherwise. When HiGHS finds no
feasible point in time, a greedy pass by weight is the documented fallback.

Batches follow Appendix A.2: a *perfect cut* separates incoming spans whose candidates share no
outgoing span, so batches are the connected components of the incoming/outgoing sharing graph,
taken in time order. A component larger than the maximum batch size is cut into chunks of that
size in time order, solved one after the other, each chunk's chosen spans removed from the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components

from tacit.runs import distinct, run_bounds, run_heads, split_at


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

    def take(self, members: np.ndarray) -> Candidates:
        """The candidates ``members``, in that order."""
        outs, _ = self.outs_of(members)
        per = np.diff(self.out_ptr)[members]
        return Candidates(
            self.incoming[members],
            self.weight[members],
            np.r_[0, np.cumsum(per)].astype(np.int64),
            outs,
            self.skips[members],
        )

    def outs_of(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The outgoing spans of all ``members`` at once, and the position in ``members`` of
        the candidate each belongs to."""
        members = np.asarray(members, dtype=np.int64)
        per = np.diff(self.out_ptr)[members]
        index = ranges(self.out_ptr[members], per)
        return self.out_rows[index], np.repeat(np.arange(len(members)), per)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``starts[i], starts[i] + 1, ... starts[i] + lengths[i] - 1`` for every ``i``, in one
    array: the rows of many slices of one array, gathered without a loop over the slices."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if len(ends) else 0)


def mapping_key(chosen: list[tuple[Candidates, np.ndarray]]) -> tuple[int, bytes]:
    """The mapping that the picked candidates of several passes make together (each incoming
    span picked in at most one of them): the number of outgoing spans it gives a cause, and an
    exact key, equal for two mappings exactly when each incoming span has the same outgoing
    spans in the same slots, whichever pass picked it.

    The key is, for each incoming span in order, the span, its number of outgoing spans and
    those spans: made by array operations rather than a set of per-candidate tuples, since
    hard EM compares every iteration's mapping (§4.1) and a tuple per candidate costs a Python
    object each time."""
    parts = [
        (cands.incoming[picked], np.diff(cands.out_ptr)[picked], cands.outs_of(picked)[0])
        for cands, picked in chosen
    ]
    incoming, per, rows = (
        np.concatenate([np.zeros(0, np.int64)] + [p[i] for p in parts]).astype(np.int64)
        for i in range(3)
    )
    order = np.argsort(incoming, kind="stable")
    first = (np.cumsum(per) - per)[order]
    incoming, per = incoming[order], per[order]
    size = per + 2
    start = np.cumsum(size) - size
    key = np.empty(int(size.sum()), dtype=np.int64)
    key[start] = incoming
    key[start + 1] = per
    key[ranges(start + 2, per)] = rows[ranges(first, per)]
    return len(rows), key.tobytes()


BRANCH_AND_BOUND_NODES = 20_000
"""Search nodes the in-process branch and bound may visit before a batch goes to HiGHS."""


INTEGRAL_TOL = 1e-7
"""How far from 0 or 1 a relaxed solution's values may be for it to count as integral."""


@dataclass
class SolveStats:
    batches: int = 0
    solver_calls: int = 0
    """Batches given to HiGHS."""
    relaxed: int = 0
    """Of them, those its linear relaxation solved integrally."""
    fallbacks: int = 0


@dataclass
class Batches:
    """Batches of indices as one array of them all, batch by batch, and where each batch
    begins: ``members[ptr[b]:ptr[b + 1]]`` is batch ``b``. A round has thousands of batches,
    most of one incoming span, which as a list of arrays cost a slice each to make and a
    concatenation to use."""

    members: np.ndarray
    ptr: np.ndarray

    @classmethod
    def cut(cls, members: np.ndarray, heads: np.ndarray) -> Batches:
        """``members`` cut before each of the positions ``heads`` (sorted, the first 0)."""
        return cls(members, np.append(heads, len(members)).astype(np.int64))

    def __len__(self) -> int:
        return len(self.ptr) - 1

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(split_at(self.members, self.ptr[1:-1]))

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.ptr)

    @property
    def label(self) -> np.ndarray:
        """The batch of each of :attr:`members`."""
        return np.repeat(np.arange(len(self)), self.sizes)

    def take(self, which: np.ndarray) -> Batches:
        """The batches ``which``, in that order."""
        sizes = self.sizes[which]
        return Batches(
            self.members[ranges(self.ptr[which], sizes)],
            np.r_[0, np.cumsum(sizes)].astype(np.int64),
        )


def batches(cands: Candidates, order_key: np.ndarray, max_batch: int) -> tuple[Batches, np.ndarray]:
    """Incoming indices per batch: connected components, cut into chunks of ``max_batch``.

    ``order_key[i]`` orders incoming spans in time (their start). Also returns, per batch,
    whether it continues the component of the batch before it (a later chunk).
    """
    n_in = len(order_key)
    if len(cands.incoming) == 0:
        return Batches.cut(np.zeros(0, np.int64), np.zeros(0, np.int64)), np.zeros(0, dtype=bool)
    uniq, out_idx = np.unique(cands.out_rows, return_inverse=True)
    per_cand = np.diff(cands.out_ptr)
    rows = np.repeat(cands.incoming, per_cand)
    graph = coo_matrix(
        (np.ones(len(rows)), (rows, n_in + out_idx)), shape=(n_in + len(uniq), n_in + len(uniq))
    )
    _, label = connected_components(graph, directed=False)
    present = distinct(cands.incoming)
    lab = label[present]
    order = np.lexsort((order_key[present], lab))
    present, lab = present[order], lab[order]
    # Components in the order of their first span, each cut every max_batch spans; by arrays,
    # as components are thousands a round and most hold one span.
    starts, sizes = run_bounds(lab)
    by_first = np.argsort(order_key[present[starts]], kind="stable")
    starts, sizes = starts[by_first], sizes[by_first]
    offset = np.arange(len(present)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    present = present[np.repeat(starts, sizes) + offset]
    head = offset % max_batch == 0
    return Batches.cut(present, np.flatnonzero(head)), offset[head] > 0


def solve_all(
    cands: Candidates,
    members: Batches,
    continued: np.ndarray,
    quotas: np.ndarray,
    time_limit: float,
    stats: SolveStats,
) -> np.ndarray:
    """The chosen candidates of every batch (``members``: candidate indices; ``quotas[b]``:
    its skip quota per key), batches solved in time order.

    A chunk that continues a component loses the candidates using spans the chunks before it
    took. Every other batch whose incoming spans' best candidates share no outgoing span and
    stay within the quota is solved by them (that choice is optimal); this is checked for all
    batches at once. The rest are solved in one compiled loop, each by branch and bound, and
    those it gives up on by HiGHS.
    """
    nb = len(members)
    if nb == 0:
        return np.empty(0, dtype=np.int64)
    flat, label = members.members, members.label
    order = np.lexsort((-cands.weight[flat], cands.incoming[flat]))
    first = run_heads(cands.incoming[flat[order]])
    best, best_label = flat[order[first]], label[order[first]]
    outs, owner = cands.outs_of(best)
    _, inverse, counts = np.unique(outs, return_inverse=True, return_counts=True)
    out_label = best_label[owner]
    hard = continued.copy()
    hard[out_label[counts[inverse] > 1]] = True
    if cands.skips.shape[1]:
        skipped = np.zeros((nb, cands.skips.shape[1]), dtype=np.int64)
        np.add.at(skipped, best_label, cands.skips[best])
        hard |= np.any(skipped > quotas, axis=1)
    stats.batches += nb
    chosen = [best[~hard[best_label]]]
    hard_ids = np.flatnonzero(hard)
    if not len(hard_ids):
        return np.concatenate(chosen).astype(np.int64)
    lay = _Layout(cands, members.take(hard_ids), quotas[hard_ids])
    # Spans taken so far: a continued chunk must not take what the chunks before it took;
    # batches of different components share no span, so one mask serves them all.
    used = np.zeros(lay.n_out, dtype=np.bool_)
    used[lay.dense(outs[~hard[out_label]])] = True
    at = 0
    while at < len(hard_ids):
        picks, stop = _solve_in_order(*lay.kernel_args(), at, BRANCH_AND_BOUND_NODES, used)
        chosen.append(lay.order[picks])
        if stop < 0:
            break
        # The branch and bound gave up on batch `stop`: HiGHS gets its candidates still free.
        m = lay.order[lay.free_candidates_of(stop, used)]
        pick = _solve_milp(cands, m, quotas[hard_ids[stop]], time_limit, stats)
        used[lay.dense(cands.outs_of(pick)[0])] = True
        chosen.append(pick)
        at = stop + 1
    return np.concatenate(chosen).astype(np.int64)


class _Layout:
    """Batches laid out for the compiled search: candidates ordered by batch, then by group (one
    incoming span, groups in order of their best candidate), then by weight, best first;
    outgoing spans renumbered densely."""

    def __init__(self, cands: Candidates, members: Batches, quotas: np.ndarray) -> None:
        flat, batch = members.members, members.label
        w, inc = cands.weight[flat], cands.incoming[flat]
        # Groups: (batch, incoming); each ranked within its batch by its best weight.
        by = np.lexsort((np.arange(len(flat)), -w, inc, batch))
        head = run_heads(batch[by], inc[by])
        group = np.cumsum(head) - 1
        group_of = np.empty(len(flat), np.int64)
        group_of[by] = group
        best_w = w[by][head]
        group_batch = batch[by][head]
        group_order = np.lexsort((np.arange(len(best_w)), -best_w, group_batch))
        rank = np.empty(len(best_w), np.int64)
        rank[group_order] = np.arange(len(best_w))
        final = np.lexsort((np.arange(len(flat)), -w, rank[group_of]))
        self.order = flat[final]
        self.group_ptr = np.r_[0, np.cumsum(np.bincount(rank[group_of[final]]))].astype(np.int64)
        groups_per_batch = np.bincount(group_batch, minlength=len(members))
        self.batch_ptr = np.r_[0, np.cumsum(groups_per_batch)].astype(np.int64)
        outs, owner = cands.outs_of(self.order)
        self.out_ids, local = np.unique(outs, return_inverse=True)
        self.n_out = len(self.out_ids)
        self.out_ptr = np.r_[0, np.cumsum(np.bincount(owner, minlength=len(self.order)))].astype(
            np.int64
        )
        self.outs = local.astype(np.int64)
        self.weight = cands.weight[self.order].astype(np.float64)
        self.skips = cands.skips[self.order].astype(np.int64)
        self.quotas = quotas.astype(np.int64)

    @classmethod
    def one(cls, cands: Candidates, members: np.ndarray, quota: np.ndarray) -> _Layout:
        """The layout of one batch, ``members`` with its skip ``quota`` per key."""
        return cls(cands, Batches.cut(members, np.zeros(1, np.int64)), quota[None, :])

    def dense(self, rows: np.ndarray) -> np.ndarray:
        """The dense ids of those outgoing span ``rows`` that some candidate here uses."""
        at = np.searchsorted(self.out_ids, rows)
        ok = at < self.n_out
        ok[ok] = self.out_ids[at[ok]] == rows[ok]
        return at[ok]

    def free_candidates_of(self, b: int, used: np.ndarray) -> np.ndarray:
        """Batch ``b``'s candidates (layout positions) that use no span marked in ``used``."""
        a, z = self.group_ptr[self.batch_ptr[b]], self.group_ptr[self.batch_ptr[b + 1]]
        taken = np.r_[0, np.cumsum(used[self.outs[self.out_ptr[a] : self.out_ptr[z]]])]
        bounds = self.out_ptr[a : z + 1] - self.out_ptr[a]
        return np.arange(a, z)[taken[bounds[1:]] == taken[bounds[:-1]]]

    def kernel_args(self) -> tuple:
        return (
            self.batch_ptr,
            self.group_ptr,
            self.weight,
            self.out_ptr,
            self.outs,
            self.skips,
            self.quotas,
        )


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
    lay = _Layout.one(cands, members, quota)
    picks, stop = _solve_in_order(
        *lay.kernel_args(), 0, node_limit, np.zeros(lay.n_out, dtype=np.bool_)
    )
    if stop < 0:
        return np.sort(lay.order[picks])
    return _solve_milp(cands, members, quota, time_limit, stats)


def _solve_milp(
    cands: Candidates, members: np.ndarray, quota: np.ndarray, time_limit: float, stats: SolveStats
) -> np.ndarray:
    """The batch as an integer program for HiGHS; the greedy choice if it finds none in time."""
    if len(members) == 0:
        return members
    stats.solver_calls += 1
    n = len(members)
    inc = cands.incoming[members]
    _, in_idx = np.unique(inc, return_inverse=True)
    per = np.diff(cands.out_ptr)[members]
    outs = cands.outs_of(members)[0]
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
    problem = {
        "c": -cands.weight[members],
        "constraints": LinearConstraint(a, -np.inf, ub),
        "bounds": Bounds(0, 1),
        "options": {"time_limit": time_limit},
    }
    # The linear relaxation first: a packing of overlapping requests' candidates is mostly
    # solved integrally by it, in a fraction of the integer program's time; an integral
    # optimum of the relaxation is an optimum of the integer program.
    relaxed = milp(integrality=np.zeros(n), **problem)
    if relaxed.x is not None and np.all(np.abs(relaxed.x - np.round(relaxed.x)) < INTEGRAL_TOL):
        stats.relaxed += 1
        return members[relaxed.x > 0.5]
    problem["options"] |= {"mip_rel_gap": 1e-9}
    res = milp(integrality=np.ones(n), **problem)
    if res.x is not None:
        return members[res.x > 0.5]
    stats.fallbacks += 1
    return _greedy(cands, members, quota)


@njit(cache=True)
def _free(c, used, out_ptr, outs):  # pragma: no cover - compiled
    """Whether candidate ``c`` uses no span marked in ``used``."""
    for q in range(out_ptr[c], out_ptr[c + 1]):  # noqa: SIM110 - compiled: a loop, not a generator
        if used[outs[q]]:
            return False
    return True


@njit(cache=True)
def _fits(c, used, out_ptr, outs, skips, left):  # pragma: no cover - compiled
    """Whether candidate ``c`` uses no span marked in ``used`` and no more skips than ``left``."""
    if not _free(c, used, out_ptr, outs):
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
def _back(g, opt, used, out_ptr, outs, skips, left):  # pragma: no cover - compiled
    """Back up from group ``g`` of :func:`_bnb` to ``g - 1``, releasing the candidate it took."""
    g -= 1
    if g >= 0 and opt[g] >= 0:
        _take(opt[g], -1, used, out_ptr, outs, skips, left)
    return g


@njit(cache=True)
def _bnb(group_ptr, g0, g1, w, out_ptr, outs, used, skips, quota, node_limit):  # pragma: no cover  # noqa: C901, PLR0912, PLR0915
    """Exact maximum-weight choice for the groups ``g0:g1`` by depth-first branch and bound:
    each group (an incoming span) takes one of its candidates, best first, or none; a branch is
    cut when its weight plus every remaining group's best weight cannot beat the incumbent,
    which starts as the greedy choice. Candidates using a span marked in ``used`` never fit;
    ``used`` is left as it was. Returns (found within ``node_limit`` nodes, chosen candidates).
    """
    n_groups = g1 - g0
    left = quota.copy()
    best = np.empty(n_groups, np.int64)
    picks = _greedy_choice(group_ptr, g0, g1, w, out_ptr, outs, used, skips, left)
    n_best = len(picks)
    best[:n_best] = picks
    best_total = 0.0
    for c in picks:
        best_total += w[c]
    bound = np.zeros(n_groups + 1)
    for g in range(n_groups - 1, -1, -1):
        bound[g] = bound[g + 1] + w[group_ptr[g0 + g]]
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
            g = _back(g, opt, used, out_ptr, outs, skips, left)
            continue
        if opt[g] == -1:
            nodes += 1
            if nodes > node_limit:
                # Give up: undo what the current branch holds.
                for h in range(g):
                    if opt[h] >= 0:
                        _take(opt[h], -1, used, out_ptr, outs, skips, left)
                return False, best[:0].copy()
            if total[g] + bound[g] <= best_total + 1e-9 or (
                total[g] + _fitting_bound(group_ptr, g0 + g, g1, w, out_ptr, outs, used)
                <= best_total + 1e-9
            ):
                g = _back(g, opt, used, out_ptr, outs, skips, left)
                continue
        # The next option at group g: a later candidate that fits, then none, then back up.
        lo, hi = group_ptr[g0 + g], group_ptr[g0 + g + 1]
        start = lo if opt[g] == -1 else (opt[g] + 1 if opt[g] >= 0 else hi)
        nxt = -3
        for c in range(start, hi):
            if _fits(c, used, out_ptr, outs, skips, left):
                nxt = c
                break
        if nxt == -3 and opt[g] != -2:
            nxt = -2
        if nxt == -3:
            opt[g] = -1
            g = _back(g, opt, used, out_ptr, outs, skips, left)
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


@njit(cache=True)
def _greedy_choice(  # pragma: no cover - compiled
    group_ptr, g0, g1, w, out_ptr, outs, used, skips, left
):
    """The candidates of groups ``g0:g1`` taken by weight, best first, whenever their group has
    none yet and they fit; ``used`` and ``left`` are left as they were."""
    a, b = group_ptr[g0], group_ptr[g1]
    group_of = np.empty(b - a, np.int64)
    for g in range(g0, g1):
        group_of[group_ptr[g] - a : group_ptr[g + 1] - a] = g - g0
    group_taken = np.zeros(g1 - g0, np.bool_)
    picks = np.empty(g1 - g0, np.int64)
    n = 0
    for c in a + np.argsort(-w[a:b], kind="mergesort"):
        if not group_taken[group_of[c - a]] and _fits(c, used, out_ptr, outs, skips, left):
            _take(c, 1, used, out_ptr, outs, skips, left)
            group_taken[group_of[c - a]] = True
            picks[n] = c
            n += 1
    for q in range(n):
        _take(picks[q], -1, used, out_ptr, outs, skips, left)
    return picks[:n].copy()


@njit(cache=True)
def _fitting_bound(group_ptr, g_from, g_to, w, out_ptr, outs, used):  # pragma: no cover
    """Σ over groups g_from:g_to of the best weight among candidates whose spans are free: a
    tighter bound than the best weights alone, once spans are taken."""
    total = 0.0
    for g in range(g_from, g_to):
        for c in range(group_ptr[g], group_ptr[g + 1]):  # best first
            if _free(c, used, out_ptr, outs):
                total += w[c]
                break
    return total


@njit(cache=True)
def _solve_in_order(  # pragma: no cover - compiled
    batch_ptr, group_ptr, w, out_ptr, outs, skips, quotas, start, node_limit, used
):
    """Solve batches ``start``, ``start + 1``, ... in order with :func:`_bnb`, marking the spans
    each takes in ``used``; stop at a batch the search gives up on. Returns the chosen
    candidates and that batch (-1: all solved)."""
    chosen = np.empty(len(w), np.int64)
    n = 0
    for b in range(start, len(batch_ptr) - 1):
        left = quotas[b].copy()
        found, picks = _bnb(
            group_ptr,
            batch_ptr[b],
            batch_ptr[b + 1],
            w,
            out_ptr,
            outs,
            used,
            skips,
            left,
            node_limit,
        )
        if not found:
            return chosen[:n], b
        for c in picks:
            _take(c, 1, used, out_ptr, outs, skips, left)
            chosen[n] = c
            n += 1
    return chosen[:n], -1


def _greedy(cands: Candidates, members: np.ndarray, quota: np.ndarray) -> np.ndarray:
    """The greedy choice among ``members`` (what HiGHS falls back on when it finds nothing in
    time): the compiled one the branch and bound starts from."""
    lay = _Layout.one(cands, members, quota)
    picks = _greedy_choice(
        lay.group_ptr,
        0,
        len(lay.group_ptr) - 1,
        lay.weight,
        lay.out_ptr,
        lay.outs,
        np.zeros(lay.n_out, dtype=np.bool_),
        lay.skips,
        lay.quotas[0].copy(),
    )
    return np.sort(lay.order[picks])
