"""TraceWeaver: request trace reconstruction from timing alone (SIGCOMM '24, §4 and Appendix A).

For every service instance, each incoming span is mapped to the outgoing spans it caused:

1. candidates from the call graph's timing constraints (:mod:`.candidates`, §4.1);
2. gap distributions seeded from differences of means, then refit as BIC-chosen Gaussian
   mixtures from the previous mapping (:mod:`.delays`, §4.1);
3. candidates scored by log-likelihood, the top K kept (§4.1);
4. batches at perfect cuts, each solved as a maximum-weight independent set (:mod:`.assign`,
   Appendix A);
5. dynamism (§4.2): when an instance makes fewer calls than its call graph predicts, the
   difference is a skip budget spread over batches by water-filling;
6. 2-5 repeated until the mapping stops changing;
7. a per-service confidence score (§6.3.2): the share of incoming spans whose chosen mapping is
   their own best-scored candidate.

Beyond the paper, from the second iteration each call's rank displacement (:mod:`.order`) is
scored with the gaps, so that in-order services are not out-scored by swapped mappings
(``arrival_order``; off gives the paper's scoring).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tacit.model.roles import process_key
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.assign import Candidates, SolveStats, batches, solve_all, water_fill
from tacit.reconstruct.callgraph import CallGraph, EndpointGraph
from tacit.reconstruct.candidates import (
    CallPools,
    CandidateSet,
    call_keys,
    enumerate_candidates,
)
from tacit.reconstruct.delays import (
    GapModel,
    candidate_gaps,
    fit_mixture,
    gap_floor,
    log_likelihood,
    moment_gaussian,
    score_candidates,
    seed_gaussian,
    slot_ready,
)
from tacit.reconstruct.order import RANK_MIN_STD, ArrivalOrder
from tacit.reconstruct.result import Reconstruction
from tacit.runs import run_bounds


@dataclass
class TraceWeaverParams:
    """Parameters; defaults are the paper's (the artifact's where the paper gives none)."""

    top_k: int = 5
    """Candidates kept per incoming span after scoring (§4.1; artifact ``topK = 5``)."""
    max_batch: int = 30
    """Largest MWIS batch in incoming spans (Appendix A.2; artifact ``batch_size_mis = 30``)."""
    seed_window: int = 100
    """Requests per window of the seed distributions (§4.1; artifact ``batch_size = 100``)."""
    seed_buckets: int = 10
    """Buckets per seed window whose means give the variance (artifact ``nbatches = 10``)."""
    max_components: int = 5
    """Largest Gaussian mixture tried under BIC (artifact: up to 5)."""
    max_iterations: int = 10
    """Cap on score-assign-refit rounds; the loop stops earlier once the mapping repeats an
    earlier one (stable, or a cycle that further rounds would only go round)."""
    max_candidates: int = 2000
    """Cap on enumerated candidates per incoming span (guards against combinatorial blow-up)."""
    max_fit_samples: int = 4000
    """Gaps per mixture fit (a seeded subsample beyond this)."""
    solver_time_limit: float = 5.0
    """Seconds HiGHS may spend on one batch before the greedy fallback."""
    arrival_order: bool = True
    """Also score the rank displacement of each call (:mod:`.order`; a tacit extension, off
    reproduces the paper's scoring)."""
    seed: int = 0


Progress = Callable[[int], None]


def reconstruct_traceweaver(
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    progress: Progress | None = None,
) -> Reconstruction:
    """Map every outgoing span of ``spans`` (a blind view: kinds and links, no parents)."""
    params = params or TraceWeaverParams()
    result = Reconstruction.start("traceweaver", spans)
    stats = SolveStats()
    proc = process_key(spans)
    iterations = []
    not_best: dict[str, list[int]] = {}
    for key in np.unique(proc):
        rows = np.flatnonzero(proc == key)
        inst = _Instance(spans, rows, callgraph, params)
        iterations.append(inst.run(result, stats))
        svc = spans.strings[int(spans.service[rows[0]])] or "?"
        nb = not_best.setdefault(svc, [0, 0])
        nb[0] += inst.not_best
        nb[1] += inst.n_incoming
        if progress:
            progress(len(rows))
    result.confidence = {s: 100.0 * (1 - a / b) for s, (a, b) in not_best.items() if b}
    result.info = {
        "iterations": max(iterations, default=0),
        "batches": stats.batches,
        "solver_calls": stats.solver_calls,
        "solver_fallbacks": stats.fallbacks,
    }
    result.finish_unmapped(spans, "no incoming span at this instance can have caused it")
    return result


class _Instance:
    """The reconstruction problem of one service instance."""

    def __init__(
        self, spans: SpanTable, rows: np.ndarray, callgraph: CallGraph, params: TraceWeaverParams
    ) -> None:
        self.spans = spans
        self.params = params
        s = spans.strings
        incoming = rows[spans.kind[rows] == SERVER]
        self.outgoing = rows[spans.kind[rows] == CLIENT]
        self.min_std = gap_floor(np.concatenate([spans.start[rows], spans.end[rows]]))
        self.pools = CallPools(spans, self.outgoing)
        svc = s[int(spans.service[rows[0]])] or ""
        self.graphs: list[EndpointGraph] = []
        self.requests: list[np.ndarray] = []  # per graph, its incoming spans by start
        for ep in np.unique(spans.endpoint[incoming]):
            g = callgraph.get(svc, s[int(ep)] or "")
            if g is not None and g.slots:
                reqs = incoming[spans.endpoint[incoming] == ep]
                self.graphs.append(g)
                self.requests.append(reqs[np.argsort(spans.start[reqs], kind="stable")])
        self.slot_keys = [[self.pools.key(*sl.callee) for sl in g.slots] for g in self.graphs]
        self.n_incoming = sum(len(r) for r in self.requests)
        self.not_best = 0
        # Dynamism (§4.2): calls expected by the call graphs versus calls observed.
        expected: dict[int, int] = {}
        for keys, reqs in zip(self.slot_keys, self.requests, strict=True):
            for k in keys:
                expected[k] = expected.get(k, 0) + len(reqs)
        self.expected = expected
        observed = {k: len(self.pools.pools.get(k, ())) for k in expected}
        self.budget = {k: expected[k] - observed[k] for k in expected if expected[k] > observed[k]}
        self.skip_keys = sorted(self.budget)
        self.sets: list[CandidateSet] = []
        self.slot_prob: list[np.ndarray] = []
        for g, keys, reqs in zip(self.graphs, self.slot_keys, self.requests, strict=True):
            allow = np.array([k in self.budget for k in keys])
            self.sets.append(
                enumerate_candidates(
                    spans,
                    reqs,
                    g,
                    self.pools,
                    allow_skip=allow,
                    max_candidates=params.max_candidates,
                )
            )
            self.slot_prob.append(
                np.array(
                    [min(1.0, observed[k] / expected[k]) if expected[k] else 1.0 for k in keys]
                )
            )
        self.ready = [slot_ready(spans, cs) for cs in self.sets]
        self.gaps = [
            candidate_gaps(spans, cs, r) for cs, r in zip(self.sets, self.ready, strict=True)
        ]
        self.windows = []  # seed window of each candidate: its request's rank in time
        for cs, reqs in zip(self.sets, self.requests, strict=True):
            by_row = np.argsort(reqs)
            rank = by_row[np.searchsorted(reqs, cs.incoming, sorter=by_row)]
            self.windows.append(rank // params.seed_window)

    # -- distributions -------------------------------------------------------------------------
    def _seed_models(self) -> list[list[GapModel]]:
        """§4.1 seed: difference of means where the event series pair up one to one, otherwise
        the moments of all candidate gaps, each candidate weighted 1/(candidates of its span)."""
        spans, p = self.spans, self.params
        uses: dict[int, int] = {}
        for keys in self.slot_keys:
            for k in keys:
                uses[k] = uses.get(k, 0) + 1
        models = []
        for g, keys, reqs, cs, gaps in zip(
            self.graphs, self.slot_keys, self.requests, self.sets, self.gaps, strict=True
        ):

            def series(j: int, field: str, keys=keys, reqs=reqs) -> np.ndarray | None:
                k = keys[j]
                rows = self.pools.pools.get(k)
                if rows is None or uses[k] != 1 or len(rows) != len(reqs):
                    return None
                return getattr(spans, field)[rows]

            _, per_span, counts = np.unique(cs.incoming, return_inverse=True, return_counts=True)
            weight = 1.0 / counts[per_span]
            per_col: list[GapModel] = []
            sinks = [j for j in range(len(g.slots)) if not any(j in q for q in g.preds)]
            for j in range(len(g.slots) + 1):
                if j < len(g.slots):
                    t2 = series(j, "start")
                    pr = g.preds[j]
                    t1 = (
                        spans.start[reqs]
                        if not pr
                        else (series(pr[-1], "end") if len(pr) == 1 else None)
                    )
                else:
                    t2 = spans.end[reqs]
                    t1 = series(sinks[0], "end") if len(sinks) == 1 else None
                if t1 is not None and t2 is not None and len(t1) > 1:
                    per_col.append(
                        seed_gaussian(t1, t2, p.seed_window, p.seed_buckets, self.min_std)
                    )
                else:
                    per_col.append(moment_gaussian(gaps[:, j], weight, self.min_std))
            models.append(per_col)
        return models

    def _refit(
        self,
        models: list[list[GapModel | None]],
        values: list[np.ndarray],
        chosen: list[np.ndarray],
        min_std: float,
    ) -> None:
        """Refit every column's model on the values of the chosen candidates (§4.1)."""
        p = self.params
        for s, (vals, pick) in enumerate(zip(values, chosen, strict=True)):
            for j in range(vals.shape[1]):
                m = fit_mixture(vals[pick, j], p.max_components, p.max_fit_samples, p.seed, min_std)
                if m is not None:
                    models[s][j] = m

    # -- one round -----------------------------------------------------------------------------
    def _flat(self, scores: list[np.ndarray]) -> tuple[Candidates, np.ndarray, np.ndarray]:
        """Top-K candidates of every incoming span as flat arrays, with their raw scores and
        their (set, index) in rows."""
        k = self.params.top_k
        nk = len(self.skip_keys)
        key_col = {key: i for i, key in enumerate(self.skip_keys)}
        inc, wts, outs, counts, skips, origin = [], [], [], [], [], []
        for s, (cs, sc) in enumerate(zip(self.sets, scores, strict=True)):
            order = np.lexsort((-sc, cs.incoming))
            grp = cs.incoming[order]
            first, size = run_bounds(grp)
            rank = np.arange(len(order)) - np.repeat(first, size)
            keep = order[rank < k]
            calls = cs.calls[keep]
            made = calls >= 0
            outs.append(calls[made])  # row-major: each candidate's calls in slot order
            counts.append(made.sum(axis=1))
            sk = np.zeros((len(keep), nk), dtype=np.int64)
            for j, key in enumerate(self.slot_keys[s]):
                if key in key_col:
                    sk[:, key_col[key]] += ~made[:, j]
            skips.append(sk)
            inc.append(cs.incoming[keep])
            wts.append(sc[keep])
            origin.append(np.stack([np.full(len(keep), s), keep], axis=1))
        wts = np.concatenate(wts)
        # Weights must be positive and favour assigning one more span over any score gain.
        w = wts - (wts.min() if len(wts) else 0.0) + 1.0
        w += w.max(initial=0.0)
        cands = Candidates(
            np.concatenate(inc),
            w,
            np.r_[0, np.cumsum(np.concatenate(counts))].astype(np.int64),
            np.concatenate(outs).astype(np.int64),
            np.concatenate(skips),
        )
        return cands, wts, np.concatenate(origin)

    def _assign(self, cands: Candidates, stats: SolveStats) -> np.ndarray:
        spans = self.spans
        # Incoming spans are addressed by row; batches need a dense index.
        uniq, dense = np.unique(cands.incoming, return_inverse=True)
        local = Candidates(dense, cands.weight, cands.out_ptr, cands.out_rows, cands.skips)
        parts, continued = batches(local, spans.start[uniq], self.params.max_batch)
        by_in = np.argsort(dense, kind="stable")
        bounds = np.searchsorted(dense[by_in], np.arange(len(uniq) + 1))
        members = [
            np.concatenate([by_in[bounds[i] : bounds[i + 1]] for i in part]) for part in parts
        ]
        quotas = self._quotas(local, members)
        return solve_all(local, members, continued, quotas, self.params.solver_time_limit, stats)

    def _quotas(self, cands: Candidates, members: list[np.ndarray]) -> np.ndarray:
        """Skips each batch may use per callee key: the budget water-filled over batches (§4.2)
        by the calls each batch already has and the room it has for more."""
        nb, nk = len(members), len(self.skip_keys)
        quota = np.zeros((nb, nk), dtype=np.int64)
        if not nk or not nb:
            return quota
        flat = np.concatenate(members)
        label = np.repeat(np.arange(nb), [len(m) for m in members])
        # Each incoming span is in one batch; an outgoing span may be a candidate in several.
        first = np.unique(cands.incoming[flat], return_index=True)[1]
        n_in = np.bincount(label[first], minlength=nb)
        outs, owner = cands.outs_of(flat)
        base = int(outs.max(initial=0)) + 1
        pair = np.unique(label[owner] * base + outs)
        out_batch, out_key = pair // base, call_keys(self.spans, pair % base)
        for q, key in enumerate(self.skip_keys):
            existing = np.bincount(out_batch[out_key == key], minlength=nb)
            most = np.zeros(nb, dtype=np.int64)
            np.maximum.at(most, label, cands.skips[flat, q])
            room = n_in * self._per_request(key) - existing
            capacity = np.maximum(0, np.minimum(most * n_in, room))
            quota[:, q] = water_fill(existing, capacity, self.budget[key])
        return quota

    def _per_request(self, key: int) -> int:
        return max(
            (keys.count(key) for keys in self.slot_keys),
            default=1,
        )

    def run(self, result: Reconstruction, stats: SolveStats) -> int:
        if not self.sets:
            return 0
        p = self.params
        models = self._seed_models()
        order = (
            ArrivalOrder(self.spans, self.sets, self.slot_keys, self.pools, self.ready)
            if p.arrival_order
            else None
        )
        ranks: list[np.ndarray] = []
        rank_models: list[list[GapModel | None]] = []
        seen: set[frozenset] = set()
        it = 0
        for it in range(1, p.max_iterations + 1):
            scores = [
                score_candidates(gaps, mdl, win, prob)
                for gaps, mdl, win, prob in zip(
                    self.gaps, models, self.windows, self.slot_prob, strict=True
                )
            ]
            if ranks:  # from the second iteration on
                for sc, d, mdl, win in zip(scores, ranks, rank_models, self.windows, strict=True):
                    sc += log_likelihood(d, mdl, win)
            cands, raw, origin = self._flat(scores)
            picked = self._assign(cands, stats)
            mapping = {int(cands.incoming[c]): tuple(origin[c].tolist()) for c in picked}
            state = frozenset(mapping.items())
            if state in seen:  # stable, or cycling: further rounds only repeat earlier ones
                break
            seen.add(state)
            chosen = [[] for _ in self.sets]
            for s, c in mapping.values():
                chosen[s].append(c)
            chosen = [np.array(c, dtype=np.int64) for c in chosen]
            if it < p.max_iterations:
                self._refit(models, self.gaps, chosen, self.min_std)
                if order is not None:
                    ranks = order.displacement(chosen)
                    rank_models = [[None] * d.shape[1] for d in ranks]
                    self._refit(rank_models, ranks, chosen, RANK_MIN_STD)
        self._record(result, cands, raw, picked)
        return it

    def _record(
        self, result: Reconstruction, cands: Candidates, raw: np.ndarray, picked: np.ndarray
    ) -> None:
        """Write the mapping, scores, top-K alternatives and confidence counts into ``result``."""
        best: dict[int, int] = {}
        for c in np.argsort(-raw, kind="stable"):
            best.setdefault(int(cands.incoming[c]), int(c))
        top: dict[int, list[frozenset[int]]] = {}
        alts: dict[int, list[tuple[int, float]]] = {}
        for c in np.argsort(-raw, kind="stable"):
            i = int(cands.incoming[c])
            outs = cands.outs(c)
            top.setdefault(i, []).append(frozenset(int(o) for o in outs))
            for o in outs:
                lst = alts.setdefault(int(o), [])
                if all(p != i for p, _ in lst) and len(lst) < self.params.top_k:
                    lst.append((i, float(raw[c])))
        result.top_candidates.update(top)
        result.alternatives.update(alts)
        assigned = set()
        for c in picked:
            i = int(cands.incoming[c])
            assigned.add(i)
            if best.get(i) != int(c):
                self.not_best += 1
            for o in cands.outs(c):
                result.parent[o] = i
                result.score[o] = raw[c]
        self.not_best += self.n_incoming - len(assigned)
        in_candidates = set(cands.out_rows.tolist())
        callee_keys = set(self.expected)
        for o in self.outgoing:
            if result.parent[o] != NONE:
                continue
            key = int(call_keys(self.spans, o))
            if key not in callee_keys:
                reason = "no call graph entry of this service makes this call"
            elif int(o) in in_candidates:
                reason = "every candidate parent was given another span in the joint assignment"
            else:
                reason = "no incoming span satisfies the timing constraints for it"
            result.unmapped[int(o)] = reason
