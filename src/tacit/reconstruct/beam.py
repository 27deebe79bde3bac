"""Candidate mappings by beam search over a call path, scored as they are built.

TraceWeaver (SIGCOMM '24, §4.1, steps 1 and 4) lists every timing-consistent mapping of an
incoming span and ranks them by the likelihood of their gaps, keeping the top K. Listing them all
is exponential in the number of calls: a front end that makes twenty calls in sequence while ten
other requests are in flight (Nezha's OnlineBoutique) has more consistent mappings than can be
enumerated, and a cap on the enumeration keeps an arbitrary subset that rarely holds the true
one. The beam search here builds each mapping slot by slot in the path's topological order,
extending every partial mapping with each call that satisfies the constraints, scoring the
extension by the gap model at once, and keeping the ``beam_width`` best partial mappings after
every slot. With a beam as wide as the number of consistent mappings it is the paper's exhaustive
ranking (the tests compare it against one); with a narrower beam it keeps the mappings the model
finds likely, which is what the top K are drawn from anyway.

Constraints (§4.1, with the learned tolerances of :mod:`.callgraph`), and the thread where the
spans record one and the endpoint is thread-per-request: a call of slot ``j`` starts
no earlier than its trigger (the end of its predecessors in the path, or the request's arrival
minus the slot's ``early`` tolerance) and ends no later than the response plus the slot's
``late`` tolerance; two slots never take the same call, and two unordered slots calling the same
backend take their calls in the order of their occurrence numbers, which count calls in start
order (:func:`.callgraph.learn_callgraph`), so that no mapping is listed twice. A call whose
parent its sender gave (``owner``) is taken by that request alone.

A slot's gap is measured from its trigger, or, where the call graph gives the slot an anchor
(a sibling launched with it, or whose span closes as it opens: :func:`.callgraph._anchors`),
from the start or the end of the anchor's call.

The kernel is compiled (numba); :func:`search` is the Python wrapper that lays the paths and
pools out as arrays for it, and the tests compare it with an exhaustive enumeration.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.model.spans import SpanTable
from tacit.reconstruct.callgraph import CallPath
from tacit.reconstruct.candidates import SKIP, CallPools, CandidateSet

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class ModelTable:
    """Gap models flattened for the kernel: model ``m`` has ``nwin[m]`` windows starting at
    ``win_ptr[m]``; window ``w`` has components ``comp_ptr[w]:comp_ptr[w+1]`` with log weight,
    mean, 1/std and log normaliser. A model id of -1 scores every gap 0."""

    win_ptr: np.ndarray
    nwin: np.ndarray
    comp_ptr: np.ndarray
    logw: np.ndarray
    mean: np.ndarray
    inv_std: np.ndarray
    lognorm: np.ndarray
    peak: np.ndarray
    """Per model, its largest component mean: beyond it the density only falls."""

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays :func:`_logpdf` reads, as one argument for the kernels."""
        return (
            self.win_ptr,
            self.nwin,
            self.comp_ptr,
            self.logw,
            self.mean,
            self.inv_std,
            self.lognorm,
        )


def model_table(models: list) -> ModelTable:
    """Flatten :class:`~.delays.Gaussian` (one component per window) and
    :class:`~.delays.Mixture` (one window) models, in list order."""
    win_ptr, nwin, comp_ptr = [], [], [0]
    logw, mean, std = [], [], []
    for m in models:
        win_ptr.append(len(comp_ptr) - 1)
        if hasattr(m, "weight"):  # a mixture: one window of several components
            nwin.append(1)
            logw.extend(np.log(m.weight).tolist())
            mean.extend(m.mean.tolist())
            std.extend(m.std.tolist())
            comp_ptr.append(comp_ptr[-1] + len(m.mean))
        else:  # a Gaussian per window
            nwin.append(len(m.mean))
            for mu, sd in zip(m.mean.tolist(), m.std.tolist(), strict=True):
                logw.append(0.0)
                mean.append(mu)
                std.append(sd)
                comp_ptr.append(comp_ptr[-1] + 1)
    sd = np.array(std, dtype=np.float64)
    peak = [float(np.max(m.mean)) for m in models]
    return ModelTable(
        np.array(win_ptr, dtype=np.int64),
        np.array(nwin, dtype=np.int64),
        np.array(comp_ptr, dtype=np.int64),
        np.array(logw, dtype=np.float64),
        np.array(mean, dtype=np.float64),
        1.0 / sd,
        -np.log(sd) - _LOG_SQRT_2PI,
        np.array(peak, dtype=np.float64),
    )


@dataclass
class PathSpec:
    """One call path of one endpoint as the search needs it.

    ``pools[j]``: the pool id (index into the instance's callee keys) of slot ``j``'s callee,
    -1 when this instance never calls it; ``model[j]``: the gap model of slot ``j``;
    ``response_model``: the model of the gap from the last call to the response; ``skip_logp[j]``
    and ``made_logp[j]``: the score of skipping (``-inf``: never) and of making slot ``j``;
    ``log_prior``: the log probability of the path.
    """

    endpoint: int
    path: CallPath
    pools: np.ndarray
    model: np.ndarray
    response_model: int
    skip_logp: np.ndarray
    made_logp: np.ndarray
    log_prior: float
    same_thread: bool = False
    """Its calls are made on the request's thread (:attr:`.callgraph.EndpointGraph.same_thread`)."""


@dataclass
class SearchResult:
    """Per path, the candidates kept and their scores (log-likelihood of the gaps, the call
    probabilities and the path's prior), best first per incoming span; and how many partial
    mappings had calls left untried at ``max_branch``."""

    sets: list[CandidateSet]
    scores: list[np.ndarray]
    truncated: int


def search(
    spans: SpanTable,
    incoming: np.ndarray,
    endpoint_of: np.ndarray,
    window: np.ndarray,
    paths: list[PathSpec],
    pools: CallPools,
    pool_keys: list[int],
    models: ModelTable,
    *,
    beam_width: int,
    max_branch: int,
    keep: int,
    owner: np.ndarray | None = None,
) -> SearchResult:
    """The best ``keep`` candidates along each path of its endpoint for each incoming span
    (rows ``incoming`` of ``spans``, of endpoint ``endpoint_of`` and seed window ``window``).
    ``owner[r]``: the incoming row that alone may take call ``r`` (-1: any; None: all any)."""
    max_slots = max((len(p.path.slots) for p in paths), default=0)
    # Paths per endpoint (CSR).
    ep_ids = np.array([p.endpoint for p in paths], dtype=np.int64)
    n_ep = int(max(endpoint_of.max(initial=-1), ep_ids.max(initial=-1))) + 1
    order = np.argsort(ep_ids, kind="stable")
    ep_ptr = np.searchsorted(ep_ids[order], np.arange(n_ep + 1)).astype(np.int64)
    slot_ptr, slot_cols, dep_cols, need_cols = _slot_layout(paths)
    pool_ptr = [0]
    pool_call = []
    for k in pool_keys:
        pool_call.extend(pools.pools.get(k, np.empty(0, np.int64)).tolist())
        pool_ptr.append(len(pool_call))
    call_rows = np.array(pool_call, dtype=np.int64)
    # No partial mapping can branch more often than the largest pool has calls.
    max_branch = max(1, min(max_branch, int(np.diff(pool_ptr).max(initial=0))))
    i64, f64 = np.int64, np.float64
    # The kernel's arguments, grouped as it reads them (:func:`_beam`).
    in_cols = (
        spans.start[incoming],
        spans.end[incoming],
        window,
        endpoint_of,
        spans.thread[incoming],
        incoming,
    )
    path_cols = (
        ep_ptr,
        order.astype(i64),
        slot_ptr,
        np.array([p.response_model for p in paths], dtype=i64),
        np.array([p.log_prior for p in paths], dtype=f64),
        np.array([p.same_thread for p in paths], dtype=np.bool_),
    )
    call_owner = np.full(len(call_rows), -1, i64) if owner is None else owner[call_rows]
    call_cols = (spans.start[call_rows], spans.end[call_rows], spans.thread[call_rows], call_owner)
    out = _beam(
        tuple(a.astype(i64) for a in in_cols),
        path_cols,
        slot_cols,
        dep_cols,
        need_cols,
        (np.array(pool_ptr, dtype=i64), *(a.astype(i64) for a in call_cols)),
        (models.arrays(), models.peak),
        (beam_width, max_branch, keep, max(max_slots, 1)),
    )
    out_in, out_path, out_calls, out_score, truncated = out
    sets, scores = [], []
    for pi, p in enumerate(paths):
        m = out_path == pi
        n_slots = len(p.path.slots)
        local = out_calls[m, :n_slots]
        calls = np.where(local >= 0, call_rows[np.maximum(local, 0)], local)
        sets.append(CandidateSet(p.path, incoming[out_in[m]], calls.astype(np.int64)))
        scores.append(out_score[m])
    return SearchResult(sets, scores, int(truncated))


def _slot_layout(paths: list[PathSpec]) -> tuple[np.ndarray, tuple, tuple, tuple]:
    """The slots of every path in topological order, as the kernel reads them (:func:`_beam`):
    their pointers per path, their columns, their dependencies (predecessors, and the earlier
    slots calling the same backend) and the calls each path cannot do without."""
    slot_ptr = [0]
    slot_index, slot_pool, slot_model, slot_early, slot_late = [], [], [], [], []
    slot_anchor: list[int] = []
    slot_from_end: list[bool] = []
    slot_made: list[float] = []
    slot_skip: list[float] = []
    pred_ptr, preds = [0], list[int]()
    twin_ptr, twins, twin_after = [0], [], []
    need_ptr, need_pool, need_count, need_early, need_late = [0], [], [], [], []
    for p in paths:
        # Calls the path cannot do without, per pool, and how far around the request they lie.
        need: dict[int, list[int]] = {}
        for j, sl in enumerate(p.path.slots):
            if p.skip_logp[j] == -np.inf:
                n, e, la = need.get(int(p.pools[j]), [0, 0, 0])
                need[int(p.pools[j])] = [n + 1, max(e, sl.early_ns), max(la, sl.late_ns)]
        for pool, (n, e, la) in sorted(need.items()):
            need_pool.append(pool)
            need_count.append(n)
            need_early.append(e)
            need_late.append(la)
        need_ptr.append(len(need_pool))
        topo = p.path.order
        pos = {j: i for i, j in enumerate(topo)}
        placed: dict[tuple[str, str], list[tuple[int, int]]] = {}  # callee -> (occurrence, j)
        for j in topo:
            sl = p.path.slots[j]
            slot_index.append(j)
            slot_pool.append(int(p.pools[j]))
            slot_model.append(int(p.model[j]))
            slot_early.append(sl.early_ns)
            slot_late.append(sl.late_ns)
            a = p.path.anchor(j)
            slot_anchor.append(-1 if a is None else pos[a])
            slot_from_end.append(p.path.anchor_event(j) == "end")
            slot_made.append(float(p.made_logp[j]))
            slot_skip.append(float(p.skip_logp[j]))
            preds.extend(pos[q] for q in p.path.preds[j])
            pred_ptr.append(len(preds))
            # Earlier-placed slots calling the same backend, nearest occurrence first on each
            # side: the first one not skipped bounds this slot's call from below (or above).
            for q, after in _twins(placed.setdefault(sl.callee, []), sl.occurrence, p.skip_logp):
                twins.append(pos[q])
                twin_after.append(after)
            twin_ptr.append(len(twins))
            bisect.insort(placed[sl.callee], (sl.occurrence, j))
        slot_ptr.append(len(slot_index))
    i64, f64 = np.int64, np.float64
    slot_ints = (slot_index, slot_pool, slot_model, slot_early, slot_late, slot_anchor)
    slot_cols = (
        *(np.array(a, dtype=i64) for a in slot_ints),
        np.array(slot_made, dtype=f64),
        np.array(slot_skip, dtype=f64),
        np.array(slot_from_end, dtype=np.bool_),
    )
    dep_cols = (
        *(np.array(a, dtype=i64) for a in (pred_ptr, preds, twin_ptr, twins)),
        np.array(twin_after, dtype=np.bool_),
    )
    need_cols = (need_ptr, need_pool, need_count, need_early, need_late)
    need_arrays = tuple(np.array(a, dtype=i64) for a in need_cols)
    return np.array(slot_ptr, dtype=i64), slot_cols, dep_cols, need_arrays


@njit(cache=True, inline="always")
def _logpdf(m, window, x, model):  # pragma: no cover - compiled
    """Log density of gap ``x`` (µs) under model ``m`` in seed ``window`` (0 for m = -1);
    ``model`` is :meth:`ModelTable.arrays`."""
    if m < 0:
        return 0.0
    win_ptr, nwin, comp_ptr, logw, mean, inv_std, lognorm = model
    w = window if window < nwin[m] else nwin[m] - 1
    wi = win_ptr[m] + w
    a = comp_ptr[wi]
    b = comp_ptr[wi + 1]
    if b - a == 1:
        z = (x - mean[a]) * inv_std[a]
        return logw[a] - 0.5 * z * z + lognorm[a]
    top = -np.inf
    for c in range(a, b):
        z = (x - mean[c]) * inv_std[c]
        v = logw[c] - 0.5 * z * z + lognorm[c]
        if v > top:
            top = v
    total = 0.0
    for c in range(a, b):
        z = (x - mean[c]) * inv_std[c]
        total += np.exp(logw[c] - 0.5 * z * z + lognorm[c] - top)
    return top + np.log(total)


@njit(cache=True, inline="always")
def _first_at_or_after(times, a, b, t):  # pragma: no cover - compiled
    """The first index in [a, b) of sorted ``times`` whose value is >= t (b if none)."""
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) // 2
        if times[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _feasible(p, r0, r1, need, pool_ptr, call_start):  # pragma: no cover - compiled
    """Whether every pool holds as many calls starting around the request as path ``p``
    cannot do without (a count, so a necessary condition only); ``need`` holds, per path, the
    pools it needs with how many calls and how early and late around the request."""
    need_ptr, need_pool, need_count, need_early, need_late = need
    for q in range(need_ptr[p], need_ptr[p + 1]):
        pool = need_pool[q]
        if pool < 0:
            return False
        a = pool_ptr[pool]
        b = pool_ptr[pool + 1]
        lo = _first_at_or_after(call_start, a, b, r0 - need_early[q])
        hi = _first_at_or_after(call_start, a, b, r1 + need_late[q] + 1)
        if hi - lo < need_count[q]:
            return False
    return True


@njit(cache=True)
def _top(score, n, width):  # pragma: no cover - compiled
    """Indices of the ``width`` highest of ``score[:n]`` (all when n <= width), ties in index
    order, in no particular order otherwise."""
    if n <= width:
        return np.arange(n)
    cut = _kth_highest(score, n, width)
    out = np.empty(width, np.int64)
    k = 0
    for x in range(n):
        if score[x] > cut:
            out[k] = x
            k += 1
    for x in range(n):
        if k == width:
            break
        if score[x] == cut:
            out[k] = x
            k += 1
    return out


@njit(cache=True)
def _kth_highest(values, n, k):  # pragma: no cover - compiled
    """The ``k``-th highest of ``values[:n]``, 1 <= k <= n (what
    ``-np.partition(-values[:n], k - 1)[k - 1]`` gives), by Hoare's selection on a copy: numba's
    ``np.partition`` is generic over its ``kth`` argument, and compiling it would be the largest
    part of compiling the beam search."""
    a = values[:n].copy()
    target, lo, hi = k - 1, 0, n - 1
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:  # highest first: a[lo:i] >= pivot >= a[j + 1:hi + 1]
            while a[i] > pivot:
                i += 1
            while a[j] < pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:  # between the two parts: equal to the pivot
            return a[target]
    return a[target]


@njit(cache=True, inline="always")
def _ancestor(par, depth, e, target):  # pragma: no cover - compiled
    """The index at depth ``target`` of the ancestor of entry ``e`` at ``depth``."""
    for d in range(depth, target, -1):
        e = par[d, e]
    return e


# Rows of the per-entry bounds of one depth: the trigger, the earliest a call may start, the
# origin of its gap, and the pool positions its call must lie strictly between.
_TRIGGER, _EARLIEST, _ORIGIN, _ABOVE, _BELOW = range(5)


@njit(cache=True)
def _beam(incoming, paths, slots, deps, need, calls, gaps, limits):  # pragma: no cover - compiled
    """The best ``keep`` candidates along each feasible path of every incoming span's endpoint,
    best first: their incoming span, path, each slot's pool position (SKIP: skipped; -1 past the
    path's slots) and score; and how many partial mappings had calls left untried at
    ``max_branch``. The arguments are the tuples :func:`search` lays out.

    The helpers called inside the loops neither allocate nor raise, so that numba drops the
    reference counting of the arrays they are given, which would cost more than their work;
    what allocates (the beam's selection, the ranking, growing the output) is done here."""
    in_start, in_end, _, in_ep, in_thread, _ = incoming
    ep_ptr, ep_paths, slot_ptr, _, _, same_thread = paths
    _, slot_pool, _, slot_early, _, slot_anchor, _, _, slot_from_end = slots
    pred_ptr, preds, twin_ptr, twins, twin_after = deps
    pool_ptr, call_start, call_end = calls[0], calls[1], calls[2]
    beam_width, max_branch, keep, max_slots = limits
    out = _outputs(len(in_start) * keep, max_slots)
    tree, nxt = _scratch(beam_width, max_branch, max_slots)
    best_score = np.empty(beam_width, np.float64)  # complete candidates' scores
    n_out = 0
    truncated = 0
    for i in range(len(in_start)):
        for pp in range(ep_ptr[in_ep[i]], ep_ptr[in_ep[i] + 1]):
            p = ep_paths[pp]
            if not _feasible(p, in_start[i], in_end[i], need, pool_ptr, call_start):
                continue
            # Where the endpoint is thread-per-request, the thread its calls must be on.
            thread = in_thread[i] if same_thread[p] else -1
            nb = 1
            tree[3][0] = 0.0
            # Slot by slot in topological order: every partial mapping extended, the
            # beam_width best kept.
            for d in range(slot_ptr[p + 1] - slot_ptr[p]):
                s = slot_ptr[p] + d
                _triggers(s, d, nb, in_start[i], slot_early[s], pred_ptr, preds, tree)
                if slot_pool[s] >= 0:
                    origin = call_end if slot_from_end[s] else call_start
                    _origins(slot_anchor[s], d, nb, origin, tree)
                    _twin_bounds(twin_ptr[s], twin_ptr[s + 1], d, nb, twins, twin_after, tree)
                n_next, cut = _extend(
                    i, s, nb, thread, incoming, slots, calls, gaps, tree, nxt, limits
                )
                truncated += cut
                if n_next == 0:
                    nb = 0
                    break
                nb = _keep(d, _top(nxt[3], n_next, beam_width), tree, nxt)
            _complete(i, p, nb, incoming, paths, gaps[0], tree, best_score)
            ranked = np.argsort(-best_score[:nb], kind="mergesort")[:keep]
            if n_out + len(ranked) > len(out[0]):
                out = _grown(out, 2 * (n_out + len(ranked)), n_out)
            n_out = _emit(out, n_out, i, p, ranked, best_score, slot_ptr, slots[0], tree)
    return out[0][:n_out], out[1][:n_out], out[2][:n_out], out[3][:n_out], truncated


def _twins(
    placed: list[tuple[int, int]], occurrence: int, skip_logp: np.ndarray
) -> Iterator[tuple[int, bool]]:
    """The twins of a slot of ``occurrence`` among the ``placed`` slots calling its backend
    (``(occurrence, slot)`` in order): ``(slot, whether it comes before)``, nearest first on
    each side, each side ending at its first slot that is never skipped (the search looks no
    further than that one), so that a path of n calls to one backend has O(n) twins, not n²."""
    k = bisect.bisect_left(placed, (occurrence, -1))
    for side in (range(k - 1, -1, -1), range(k, len(placed))):
        for occ, q in (placed[x] for x in side):
            yield q, occ < occurrence
            if skip_logp[q] == -np.inf:
                break


@njit(cache=True)
def _outputs(cap, max_slots):  # pragma: no cover - compiled
    """Room for ``cap`` candidates: incoming span, path, pool positions (-1) and score."""
    return (
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.full((cap, max_slots), -1, np.int64),
        np.empty(cap, np.float64),
    )


@njit(cache=True)
def _grown(out, cap, n):  # pragma: no cover - compiled
    """:func:`_outputs` of ``cap`` rows holding the first ``n`` rows of ``out``."""
    grown = _outputs(cap, out[2].shape[1])
    grown[0][:n] = out[0][:n]
    grown[1][:n] = out[1][:n]
    grown[2][:n] = out[2][:n]
    grown[3][:n] = out[3][:n]
    return grown


@njit(cache=True)
def _scratch(beam_width, max_branch, max_slots):  # pragma: no cover - compiled
    """The beam and the extensions of one depth.

    The beam is a tree: entry e at depth d placed slot position d at pool position pos[d, e]
    (SKIP: skipped), done at done[d, e], extending entry par[d, e] of depth d - 1; score[e] is
    the score of entry e at the last depth, bounds[:, e] its bounds for the next slot. An
    extension is a parent entry, pool position, done and score; the last array is room for
    :func:`_kth_best`."""
    tree = (
        np.empty((max_slots, beam_width), np.int64),  # pos
        np.empty((max_slots, beam_width), np.int64),  # done
        np.empty((max_slots, beam_width), np.int64),  # par
        np.empty(beam_width, np.float64),  # score
        np.empty((5, beam_width), np.int64),  # bounds
    )
    wide = beam_width * (max_branch + 1)
    nxt = (
        np.empty(wide, np.int64),
        np.empty(wide, np.int64),
        np.empty(wide, np.int64),
        np.empty(wide, np.float64),
        np.empty(wide, np.float64),
    )
    return tree, nxt


@njit(cache=True, inline="always")
def _triggers(s, d, nb, r0, early, pred_ptr, preds, tree):  # pragma: no cover - compiled
    """For each of the ``nb`` entries of depth ``d - 1``: slot ``s``'s trigger (gaps are
    measured from it), the end of its predecessors or the request's arrival ``r0``; and the
    earliest its call may start, the trigger, or for a slot with no predecessor ``early``
    before the arrival."""
    done, par, bounds = tree[1], tree[2], tree[4]
    for e in range(nb):
        t = r0
        if pred_ptr[s + 1] > pred_ptr[s]:
            for q in range(pred_ptr[s], pred_ptr[s + 1]):
                x = _ancestor(par, d - 1, e, preds[q])
                if done[preds[q], x] > t:
                    t = done[preds[q], x]
            bounds[_EARLIEST, e] = t
        else:
            bounds[_EARLIEST, e] = r0 - early
        bounds[_TRIGGER, e] = t


@njit(cache=True, inline="always")
def _origins(anchor, d, nb, event, tree):  # pragma: no cover - compiled
    """For each of the ``nb`` entries of depth ``d - 1``, the origin of the slot's gap: the
    ``event`` (the start or end per pool position) of the call of its ``anchor`` (a slot
    position, -1: none) where that made one, else its trigger."""
    pos, par, bounds = tree[0], tree[2], tree[4]
    for e in range(nb):
        bounds[_ORIGIN, e] = bounds[_TRIGGER, e]
        if anchor >= 0:
            x = _ancestor(par, d - 1, e, anchor)
            if pos[anchor, x] >= 0:
                bounds[_ORIGIN, e] = event[pos[anchor, x]]


@njit(cache=True, inline="always")
def _twin_bounds(a, b, d, nb, twins, twin_after, tree):  # pragma: no cover - compiled
    """For each of the ``nb`` entries of depth ``d - 1``, the pool positions the slot's call
    must lie strictly between, as calls to one backend go to its slots in occurrence order:
    those of the nearest earlier-placed, not skipped, slots calling the same backend before
    and after it (its twins ``a:b``, nearest first)."""
    pos, par, bounds = tree[0], tree[2], tree[4]
    for e in range(nb):
        above = -1
        below = 2**62
        seen_after = False
        seen_before = False
        for tw in range(a, b):
            if (twin_after[tw] and seen_after) or (not twin_after[tw] and seen_before):
                continue
            q = twins[tw]
            x = _ancestor(par, d - 1, e, q)
            other = pos[q, x]
            if other < 0:
                continue
            if twin_after[tw]:
                above = other
                seen_after = True
            else:
                below = other
                seen_before = True
        bounds[_ABOVE, e] = above
        bounds[_BELOW, e] = below


@njit(cache=True, inline="always")
def _extend(i, s, nb, thread, incoming, slots, calls, gaps, tree, nxt, limits):  # pragma: no cover
    """Every extension of the ``nb`` entries by slot ``s`` within their bounds: with each call
    that ends by the response plus the slot's ``late`` tolerance, where ``thread`` >= 0 runs on
    that thread, and has no owner but this request, scored by its gap; and with a skip where the
    slot may be skipped.
    Returns how many it put in ``nxt``, and how many entries ``max_branch`` cut short."""
    r1, win, me = incoming[1][i], incoming[2][i], incoming[5][i]
    _, slot_pool, slot_model, _, slot_late, _, slot_made, slot_skip, _ = slots
    pool_ptr, call_start, call_end, call_thread, call_owner = calls
    model, peak = gaps
    beam_width, max_branch = limits[0], limits[1]
    nxt_parent, nxt_pos, nxt_done, nxt_score, _ = nxt
    score, bounds = tree[3], tree[4]
    pool = slot_pool[s]
    m = slot_model[s]
    latest = r1 + slot_late[s]
    n_next = 0
    truncated = 0
    # The beam_width-th best extension so far: a call whose gap is past the model's peak and
    # scores below it is not kept, and no later call would be.
    floor = -np.inf
    check = 2 * beam_width
    for e in range(nb):
        if pool >= 0:
            b = pool_ptr[pool + 1]
            k = _first_at_or_after(call_start, pool_ptr[pool], b, bounds[_EARLIEST, e])
            k = max(k, bounds[_ABOVE, e] + 1)
            end = min(b, bounds[_BELOW, e])
            branches = 0
            while k < end and call_start[k] <= latest:
                if (
                    call_end[k] <= latest
                    and (thread < 0 or call_thread[k] < 0 or call_thread[k] == thread)
                    and (call_owner[k] < 0 or call_owner[k] == me)
                ):
                    if branches == max_branch:
                        truncated += 1
                        break
                    gap = (call_start[k] - bounds[_ORIGIN, e]) / 1000.0
                    sc = score[e] + slot_made[s] + _logpdf(m, win, gap, model)
                    if sc < floor and m >= 0 and gap > peak[m]:
                        break
                    nxt_parent[n_next] = e
                    nxt_pos[n_next] = k
                    nxt_done[n_next] = call_end[k]
                    nxt_score[n_next] = sc
                    n_next += 1
                    branches += 1
                    if n_next >= check:
                        floor = _kth_best(nxt_score, n_next, beam_width, nxt[4])
                        check += beam_width
                k += 1
        if slot_skip[s] > -np.inf:
            nxt_parent[n_next] = e
            nxt_pos[n_next] = SKIP
            nxt_done[n_next] = bounds[_TRIGGER, e]
            nxt_score[n_next] = score[e] + slot_skip[s]
            n_next += 1
    return n_next, truncated


@njit(cache=True, inline="always")
def _keep(d, chosen, tree, nxt):  # pragma: no cover - compiled
    """Depth ``d`` of the beam: the extensions ``chosen`` in ``nxt``. Returns how many."""
    pos, done, par, score, _ = tree
    nxt_parent, nxt_pos, nxt_done, nxt_score, _ = nxt
    for c in range(len(chosen)):
        x = chosen[c]
        pos[d, c] = nxt_pos[x]
        done[d, c] = nxt_done[x]
        par[d, c] = nxt_parent[x]
        score[c] = nxt_score[x]
    return len(chosen)


@njit(cache=True, inline="always")
def _complete(i, p, nb, incoming, paths, model, tree, best_score):  # pragma: no cover - compiled
    """The scores of the ``nb`` complete mappings of path ``p`` for incoming span ``i``, in
    ``best_score``: their gaps, the response gap from the last call's end and the path's
    prior."""
    r0, r1, win = incoming[0][i], incoming[1][i], incoming[2][i]
    path_slot_ptr, path_resp_model, path_logprior = paths[2], paths[3], paths[4]
    done, par, score = tree[1], tree[2], tree[3]
    ns = path_slot_ptr[p + 1] - path_slot_ptr[p]
    for e in range(nb):
        last = r0
        x = e
        for d in range(ns - 1, -1, -1):
            if done[d, x] > last:
                last = done[d, x]
            x = par[d, x]
        gap = (r1 - last) / 1000.0
        best_score[e] = score[e] + path_logprior[p] + _logpdf(path_resp_model[p], win, gap, model)


@njit(cache=True, inline="always")
def _emit(
    out, n_out, i, p, ranked, best_score, path_slot_ptr, slot_index, tree
):  # pragma: no cover
    """Write the mappings ``ranked`` of path ``p`` for incoming span ``i`` into ``out`` from row
    ``n_out`` on, each slot's pool position at its slot index; returns the rows now used."""
    out_in, out_path, out_calls, out_score = out
    pos, par = tree[0], tree[2]
    s0 = path_slot_ptr[p]
    for c in range(len(ranked)):
        e = ranked[c]
        out_in[n_out] = i
        out_path[n_out] = p
        out_score[n_out] = best_score[e]
        x = e
        for d in range(path_slot_ptr[p + 1] - s0 - 1, -1, -1):
            out_calls[n_out, slot_index[s0 + d]] = pos[d, x]
            x = par[d, x]
        n_out += 1
    return n_out


@njit(cache=True, inline="always")
def _kth_best(values, n, k, scratch):  # pragma: no cover - compiled
    """The ``k``-th highest of ``values[:n]`` (what ``-np.partition(-values[:n], k - 1)[k - 1]``
    gives), found in ``scratch`` without allocating."""
    for x in range(n):
        scratch[x] = values[x]
    for j in range(k):  # scratch[:j] holds the j highest, highest first
        top = j
        for x in range(j + 1, n):
            if scratch[x] > scratch[top]:
                top = x
        scratch[j], scratch[top] = scratch[top], scratch[j]
    return scratch[k - 1]
