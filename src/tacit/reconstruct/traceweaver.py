"""TraceWeaver: request trace reconstruction from timing alone (SIGCOMM '24, §4 and Appendix A).

For every service instance, each incoming span is mapped to the outgoing spans it caused:

1. candidates along the call paths of its endpoint (:mod:`.callgraph`, §4.1 and §5.2.2), built
   by a beam search that scores each extension with the gap models (:mod:`.beam`);
2. gap models seeded from differences of means where the event series pair up one to one (§4.1),
   otherwise from the gaps of WAP5's nearest-parent mapping (§4.2), then refit as BIC-chosen
   Gaussian mixtures on the previous mapping (:mod:`.delays`, §4.1);
3. the top K candidates of every incoming span jointly assigned in batches at perfect cuts, each
   a maximum-weight independent set (:mod:`.assign`, Appendix A);
4. 1-3 repeated until the mapping stops changing;
5. a per-service confidence score (§6.3.2): the share of incoming spans whose chosen mapping is
   their own best-scored candidate.

Three settings select between the paper's formulation and tacit's extensions of it:

* ``call_paths`` (on by default): each endpoint has the distinct paths its test requests took,
  each with its own dependency order and prior probability, and the joint assignment maximises
  first the number of outgoing spans given a cause, then the likelihood. Off gives the paper's
  §4.2: one call graph per endpoint whose missing calls are "skip" spans, their number per
  callee bounded by the discrepancy between expected and observed calls and water-filled over
  the batches.
* ``sibling_gaps`` (on by default): a call that the test traces show launched together with a
  sibling (an asynchronous fan-out), or opened as a sibling's span closes, has its gap measured
  from the sibling's start, or end, instead of from its trigger. Off measures every gap from its
  trigger, as the paper does.
* ``arrival_order`` (on by default): from the second iteration each call's rank displacement
  (:mod:`.order`) is scored with the gaps, so that in-order services are not out-scored by
  swapped mappings; only at endpoints whose test requests kept their calls in trigger order.
  Off gives the paper's scoring.
* ``shared_values`` (on by default): from the second iteration a call sharing a value of its
  request target with a candidate request is scored by how often the previous mapping's calls
  along the same edge did (:mod:`.shared_values`, DeepTrace's transaction fields). Off gives
  the paper's timing-only scoring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tacit.errors import ConfigError
from tacit.model.messages import MISSING
from tacit.model.roles import process_key
from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.assign import (
    Batches,
    Candidates,
    SolveStats,
    batches,
    mapping_key,
    ranges,
    solve_all,
    water_fill,
)
from tacit.reconstruct.baselines import wap5_parents
from tacit.reconstruct.beam import PathSpec, model_table, search
from tacit.reconstruct.callgraph import CallGraph, CallPath, EndpointGraph
from tacit.reconstruct.candidates import CallPools, CandidateSet, call_keys
from tacit.reconstruct.delays import (
    GapModel,
    Gaussian,
    candidate_gaps,
    fit_mixture,
    gap_floor,
    log_densities,
    log_likelihood,
    moment_gaussian,
    seed_gaussian,
    slot_ready,
)
from tacit.reconstruct.fallback import fill_unmapped
from tacit.reconstruct.link_probability import (
    link_probability,
    sample_mask,
    service_confidence,
)
from tacit.reconstruct.order import RANK_MIN_STD, ArrivalOrder
from tacit.reconstruct.result import (
    NOT_SAMPLED,
    SAMPLE_BITS,
    Reconstruction,
    mapping_problem,
)
from tacit.reconstruct.shared_values import SharedValues, ShareModel
from tacit.runs import contained, distinct, run_bounds, run_heads, run_positions, split_at


@dataclass(frozen=True)
class TraceWeaverParams:
    """Parameters. The defaults are tacit's: the paper's values (the artifact's where the paper
    gives none) with tacit's extensions on; :meth:`published` turns the extensions off, for the
    algorithm as the paper gives it."""

    top_k: int = 5
    """Candidates kept per incoming span after scoring (§4.1 Table 1, K = 5)."""
    max_batch: int = 30
    """Largest MWIS batch in incoming spans (Table 1, B = 30)."""
    seed_window: int = 100
    """Requests per window of the seed distributions (§4.1; artifact ``batch_size = 100``)."""
    seed_buckets: int = 10
    """Buckets per seed window whose means give the variance (§4.1, R = 10)."""
    max_components: int = 5
    """Largest Gaussian mixture tried under BIC (Table 1, C = 5)."""
    max_iterations: int = 10
    """Cap on score-assign-refit rounds; the loop stops earlier once the mapping repeats an
    earlier one (stable, or a cycle that further rounds would only go round)."""
    patience: int = 1
    """Rounds without a better mapping (more calls explained, then a higher likelihood under
    the models it was chosen with) after which the loop stops; the best mapping is kept. One,
    as hard EM stops once its objective stops improving."""
    beam_width: int = 16
    """Partial mappings kept per slot by the candidate search (:mod:`.beam`; tacit's bound on
    the paper's exhaustive enumeration)."""
    max_branch: int = 16
    """Calls tried per partial mapping and slot, in start order after its trigger."""
    rerank: int = 4
    """Candidates per incoming span handed from the search to the order term, in multiples of
    ``top_k``."""
    residual_passes: int = 3
    """Searches of the spans a joint assignment left unmapped among the calls it left without a
    cause (:meth:`_Instance._map`)."""
    max_fit_samples: int = 1000
    """Gaps per mixture fit (a seeded subsample beyond this)."""
    solver_time_limit: float = 5.0
    """Seconds HiGHS may spend on one batch before the greedy fallback."""
    call_paths: bool = True
    """Candidates along each learned path of an endpoint, coverage first in the assignment (a
    tacit extension); off reproduces the paper's one call graph with skip spans (§4.2)."""
    fallback: bool = True
    """Give a call left unmapped the one request that could have made it, if there is only one,
    marked as a fallback (:mod:`.fallback`; a tacit extension, off leaves it unmapped as the
    paper does)."""
    joins: bool = True
    """At a join (:class:`~.callgraph.Join`), group the incoming spans by the request their
    callers' mapping gives them and let each group call onward once (a tacit extension: the
    paper reconstructs every service on its own)."""
    sibling_gaps: bool = True
    """Measure the gap of a call launched together with a sibling, or as a sibling's span
    closes, from the sibling's start or end, where the call graph learned that this varies less
    (:func:`.callgraph._anchors`; a tacit extension, off measures every gap from its trigger as
    the paper does)."""
    arrival_order: bool = True
    """Also score the rank displacement of each call of the endpoints whose test requests kept
    their calls in trigger order (:attr:`.callgraph.EndpointGraph.reorders`; a tacit extension,
    off reproduces the paper's scoring)."""
    shared_values: bool = True
    """Also score the values a call's request target shares with its candidate request's, as
    often as the previous mapping showed them shared along the edge (:mod:`.shared_values`; a
    tacit extension, off reproduces the paper's timing-only scoring)."""
    seed: int = 0
    marginal_samples: int = 20
    """Perturbed joint assignments from which each link's probability is read: every
    candidate mapping's log-likelihood plus standard Gumbel noise, the assignment solved again,
    and the link's probability the share of those assignments that make it (perturb-and-MAP,
    Papandreou and Yuille, ICCV 2011: the perturbed optimum samples the mappings about as the
    likelihoods weigh them, with the joint assignment's constraints; a tacit extension). A
    call whose best-scored parent was given a mapping without it keeps the parent the
    assignment chose about as often as the constraints force it, where its share of its own
    alternatives says it never would. The perturbed likelihoods count evidence that repeats
    itself once: a request's calls arrive early or late together, so the rank displacements of
    its calls weigh as much as their mean; and where the gaps along a path move together (a
    service slowed for some requests), their sum weighs as much as its effective number of
    independent gaps (:meth:`_Instance._repeated_evidence`). Counted n times, such evidence
    makes the samples agree more often than the mappings are right. At most
    :data:`~.result.SAMPLE_BITS`; 0: no samples (each link's probability is then its share of
    its alternatives, :mod:`.link_probability`)."""

    @classmethod
    def published(cls, **overrides: Any) -> TraceWeaverParams:
        """The paper's algorithm: one call graph with skip spans (§4.2), gaps from the trigger,
        timing-only scores, every service reconstructed on its own, a call left unmapped where
        the assignment leaves it (each extension's field says what it adds)."""
        off = ("call_paths", "fallback", "joins", "sibling_gaps", "arrival_order", "shared_values")
        return cls(**{**dict.fromkeys(off, False), **overrides})


Progress = Callable[[int], None]


NOT_IN_CALLGRAPH = "no call graph entry of this service makes this call"
TAKEN = "every candidate parent was given another span in the joint assignment"
NO_FIT = "no incoming span satisfies the timing constraints for it"


def reconstruct_traceweaver(
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    progress: Progress | None = None,
    *,
    candidates: bool = True,
    delays_from: np.ndarray | None = None,
    below: Mapping[int, set[str]] | None = None,
) -> Reconstruction:
    """Map every outgoing span of ``spans`` (a blind view: kinds and links, no parents).

    ``below``: per outgoing row, the values of the spans below it
    (:meth:`.shared_values.SharedValues.below`) where they are not all in ``spans`` (the
    online mode maps a window's spans, and the calls' callees may be outside it).

    ``candidates``: whether to keep every incoming span's candidates in rank order
    (:attr:`.result.Reconstruction.top_candidates`, from which top-K accuracy is measured);
    the online mode, which has no use for them, saves time without them.

    ``delays_from``: an analysis, not a mode of use. A mapping (a parent row per row, such as
    the ground truth) whose gaps the delay models are fitted on before the first round, in
    place of the seed (§4.1, §4.2) wherever the mapping shows the edge; with
    ``max_iterations`` 1 they are never refitted, and the mapping shows what timing alone
    tells apart once the delay distributions are known."""
    params = params or TraceWeaverParams()
    if not params.sibling_gaps:
        callgraph = callgraph.without_anchors()
    result = Reconstruction.start("traceweaver", spans)
    if params.marginal_samples:
        if params.marginal_samples > SAMPLE_BITS:
            raise ConfigError(
                f"marginal_samples: at most {SAMPLE_BITS}, got {params.marginal_samples}"
            )
        result.probability = np.full(len(spans), np.nan)
        result.samples = np.full(len(spans), NOT_SAMPLED, dtype=np.uint64)
    stats = SolveStats()
    proc = process_key(spans)
    iterations = []
    alternatives: list[Alternatives] = []
    truncated = 0
    reports: dict[str, dict[str, int]] = {}
    order = np.argsort(proc, kind="stable")
    starts, sizes = run_bounds(proc[order])
    instances = [np.sort(order[a : a + n]) for a, n in zip(starts, sizes, strict=True)]
    rank = _callers_first(callgraph)
    s = spans.strings
    instances.sort(key=lambda rows: rank.get(s[int(spans.service[rows[0]])] or "", len(rank)))
    for rows in instances:
        mapped = result.parent if params.joins else None
        inst = _Instance(spans, rows, callgraph, params, mapped, candidates, below)
        iterations.append(inst.run(result, stats, delays_from))
        alternatives.extend(inst.alternatives)
        truncated += inst.truncated
        svc = spans.strings[int(spans.service[rows[0]])] or "?"
        rep = reports.setdefault(svc, {})
        for k, v in (
            ("incoming", inst.n_incoming),
            ("unassigned", inst.n_incoming - len(inst.assigned)),
            ("not_top_choice", inst.not_top),
        ):
            rep[k] = rep.get(k, 0) + v
        if progress:
            progress(len(rows))
    result.alternatives = Alternatives.merged(alternatives)
    result.finish_unmapped(spans, "no incoming span at this instance can have caused it")
    unmapped = len(result.unmapped)
    filled = fill_unmapped(spans, result, callgraph) if params.fallback else 0
    _report(spans, result, reports)
    result.confidence = service_confidence(spans, link_probability(spans, result))
    result.info = {
        "iterations": max(iterations, default=0),
        "batches": stats.batches,
        "solver_calls": stats.solver_calls,
        "solved_by_relaxation": stats.relaxed,
        "solver_fallbacks": stats.fallbacks,
        "search_branches_cut": truncated,
        "unmapped_by_the_algorithm": unmapped,
        "given_a_fallback_parent": filled,
    }
    return result


def _report(spans: SpanTable, result: Reconstruction, reports: dict[str, dict[str, int]]) -> None:
    """Per service, what lowers its confidence: incoming spans without a mapping or not given
    their best-scored one, and calls left unmapped or given a fallback parent."""
    s = spans.strings
    client = np.flatnonzero(spans.kind == CLIENT)
    for name, key in (("unmapped_calls", result.unmapped), ("fallback_calls", result.fallback)):
        rows = np.array(sorted(key), dtype=np.int64)
        for code, n in zip(*np.unique(spans.service[rows], return_counts=True), strict=True):
            svc = s[int(code)] or "?"
            reports.setdefault(svc, {})[name] = int(n)
    for code, n in zip(*np.unique(spans.service[client], return_counts=True), strict=True):
        reports.setdefault(s[int(code)] or "?", {})["calls"] = int(n)
    result.service_report = {
        svc: {k: r.get(k, 0) for k in _REPORT_KEYS} for svc, r in sorted(reports.items())
    }


_REPORT_KEYS = (
    "incoming",
    "unassigned",
    "not_top_choice",
    "calls",
    "unmapped_calls",
    "fallback_calls",
)


def _callers_first(callgraph: CallGraph) -> dict[str, int]:
    """A rank per service that puts every caller before its callees (those in a call cycle
    after the rest), so that a join sees its callers' mappings (:class:`_Instance`)."""
    callees: dict[str, set[str]] = {}
    for (svc, _), g in callgraph.endpoints.items():
        callees.setdefault(svc, set()).update(sl.service for p in g.call_paths() for sl in p.slots)
    incoming = {svc: 0 for svc in callees}
    for svc, outs in callees.items():
        for t in outs:
            if t != svc:
                incoming[t] = incoming.get(t, 0) + 1
    ready = sorted(svc for svc, n in incoming.items() if n == 0)
    rank: dict[str, int] = {}
    while ready:
        svc = ready.pop(0)
        rank[svc] = len(rank)
        for t in sorted(callees.get(svc, ())):
            if t != svc and t not in rank:
                incoming[t] -= 1
                if incoming[t] == 0:
                    ready.append(t)
    return rank


@dataclass
class _Pass:
    """One search-and-assign pass: candidate sets, their ready times, the flat candidates with
    raw scores and (set, index) origin, and the chosen ones."""

    sets: list[CandidateSet]
    ready: list[np.ndarray]
    cands: Candidates
    raw: np.ndarray
    origin: np.ndarray
    picked: np.ndarray
    sampled: np.ndarray
    """``raw`` with the arrival order's evidence counted once, as the perturbed assignments
    weigh it (:meth:`_Instance._marginals`, which takes the gaps' repeated evidence off too)."""

    def revoke(self, incoming: np.ndarray) -> None:
        """Drop the chosen candidates of ``incoming`` spans (to be searched again)."""
        self.picked = self.picked[~contained(self.cands.incoming[self.picked], incoming)]

    def chosen(self) -> list[np.ndarray]:
        """The chosen candidate indices per set."""
        if not self.sets:
            return []
        of_set, index = self.origin[self.picked, 0], self.origin[self.picked, 1]
        order = np.argsort(of_set, kind="stable")  # within a set, in the order picked
        cuts = np.searchsorted(of_set[order], np.arange(1, len(self.sets)))
        return split_at(index[order].astype(np.int64), cuts)


@dataclass
class _Problem:
    """A joint assignment's parts that its weights do not change (:meth:`_Instance._problem`):
    the candidates, as the solver numbers their owners (``local``), the batches, which of them
    continue a component, and their skip quotas."""

    cands: Candidates
    local: Candidates
    members: Batches
    continued: np.ndarray
    quotas: np.ndarray


NEVER = np.iinfo(np.int64).max
"""A time after every other (the start of a call that was not made)."""
SCORE_RANGE = 1000.0
"""Log-likelihood (nats) below the instance's best candidate beyond which candidates count as
equally unlikely in the joint assignment (:func:`_relative_weight`)."""


def _contested(cands: Candidates, owners: np.ndarray) -> np.ndarray:
    """Per candidate, whether a perturbation can leave it out: its owner or its incoming span
    (a join's trigger path is its group's) has another candidate, one of its calls is another
    candidate's too, or it skips calls (a quota)."""
    out = np.zeros(len(owners), dtype=bool)
    for key in (owners, cands.incoming):
        _, at, per_key = np.unique(key, return_inverse=True, return_counts=True)
        out |= per_key[at] > 1
    _, where, per_call = np.unique(cands.out_rows, return_inverse=True, return_counts=True)
    shared = per_call[where] > 1
    owner_of = np.repeat(np.arange(len(owners)), np.diff(cands.out_ptr))
    out[owner_of[shared]] = True
    if cands.skips.shape[1]:
        out |= cands.skips.any(axis=1)
    return out


def _by_origin(per_set: list[np.ndarray], origin: np.ndarray) -> np.ndarray:
    """Per flat candidate (``origin``: its set and index there), its value in ``per_set``."""
    if not per_set:
        return np.zeros(len(origin))
    start = np.r_[0, np.cumsum([len(v) for v in per_set])]
    return np.concatenate(per_set)[start[origin[:, 0]] + origin[:, 1]]


def _mean_correlation(values: np.ndarray, least: int = 20) -> float:
    """The mean correlation between the columns of ``values`` over its rows without NaN, in
    [0, 0.99]; 0 with fewer than ``least`` such rows or two columns that vary."""
    rows = values[~np.isnan(values).any(axis=1)] if values.ndim == 2 else values[:0]
    if len(rows) < least:
        return 0.0
    rows = rows[:, rows.std(axis=0) > 0]
    k = rows.shape[1]
    if k < 2:
        return 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.corrcoef(rows, rowvar=False)
    mean = (c.sum() - k) / (k * (k - 1))
    return float(np.clip(mean, 0.0, 0.99)) if np.isfinite(mean) else 0.0


def _link_keys(calls: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """One int64 per (call row, parent row) link."""
    return (calls.astype(np.int64) << 32) | parents.astype(np.int64)


def _relative_weight(raw: np.ndarray) -> np.ndarray:
    """Each candidate's weight in (0, 1] for the joint assignment: its log-likelihood above a
    floor :data:`SCORE_RANGE` below the instance's best candidate, scaled to that range.

    Within the range, weights are the paper's log-likelihoods (Appendix A) up to a constant and
    a scale. Scaling by the scores' whole range would let one hopeless candidate set the
    scale: a front end's scores (Nezha OnlineBoutique's) can span far more than the differences
    between competing candidates, which would shrink below the solvers' tolerances, and the
    choice among the mappings of most coverage would depend on which solver ran. With the floor,
    a difference of 0.01 nat still counts.
    """
    if not len(raw):
        return raw
    return (np.maximum(raw - raw.max(), -SCORE_RANGE) + SCORE_RANGE + 1.0) / (SCORE_RANGE + 1.0)


def _edge_key(endpoint: int, path: CallPath, keys: list[int], j: int | None) -> tuple:
    """What a gap model is shared by: the endpoint, the callees that trigger the gap (or the
    anchor whose start or end it is measured from), and the callee it leads to (``j`` None: the
    response, triggered by the path's sinks)."""
    if j is None:
        return (endpoint, "response", tuple(sorted(keys[q] for q in path.sinks())))
    a = path.anchor(j)
    if a is None:
        return (endpoint, tuple(sorted(keys[q] for q in path.preds[j])), keys[j])
    return (endpoint, (path.anchor_event(j), keys[a]), keys[j])


def _gather(values: np.ndarray, bounds: np.ndarray, parts: Batches) -> Batches:
    """Per part, the ``values[bounds[i]:bounds[i + 1]]`` of each ``i`` in it, concatenated:
    gathered for all parts at once, which matters when there are thousands of small ones."""
    owners = parts.members
    per_owner = bounds[owners + 1] - bounds[owners]
    ends = np.r_[0, np.cumsum(per_owner)].astype(np.int64)
    return Batches(values[ranges(bounds[owners], per_owner)], ends[parts.ptr])


class _Instance:
    """The reconstruction problem of one service instance."""

    def __init__(
        self,
        spans: SpanTable,
        rows: np.ndarray,
        callgraph: CallGraph,
        params: TraceWeaverParams,
        mapped: np.ndarray | None = None,
        candidates: bool = True,
        below: Mapping[int, set[str]] | None = None,
    ) -> None:
        self.spans = spans
        self.params = params
        self.candidates = candidates  # keep each incoming span's ranked candidates
        self.callgraph = callgraph
        incoming, self.outgoing = mapping_problem(spans, rows)
        self.serves = len(incoming) > 0
        self.min_std = gap_floor(np.concatenate([spans.start[rows], spans.end[rows]]))
        self.pools = CallPools(spans, self.outgoing)
        self.shared = SharedValues(spans, rows if params.shared_values else rows[:0], below)
        self.owner = spans.parent  # a call's given parent (known_calls), the one that may take it
        if self.shared:
            self.shared.given(self._given_calls())
        self.truncated = 0
        self.not_top = 0  # requests assigned a candidate other than their best-scored one
        self.assigned: set[int] = set()
        self.in_candidates: set[int] = set()
        self.alternatives: list[Alternatives] = []  # per pass recorded, in order
        graphs = self._endpoints(incoming, spans.strings[int(spans.service[rows[0]])] or "")
        self.n_incoming = sum(len(r) for r in self.requests)
        paths = [(e, g.call_paths() if params.call_paths else [g]) for e, g in enumerate(graphs)]
        self.pool_keys = sorted(
            {self.pools.key(*sl.callee) for _, ps in paths for p in ps for sl in p.slots}
        )
        expected, observed = self._skip_budget(graphs)
        self.specs: list[PathSpec] = []
        self.slot_keys: list[list[int]] = []
        self.edges: list[tuple] = []  # model index -> edge key
        self._path_specs(paths, graphs, expected, observed)
        # Every incoming span, its endpoint and its seed window (its rank in time // window).
        self.incoming = np.concatenate(self.requests) if self.requests else np.empty(0, np.int64)
        self.endpoint_of = np.repeat(
            np.arange(len(self.requests)), [len(r) for r in self.requests]
        ).astype(np.int64)
        self.window = np.concatenate(
            [np.arange(len(r)) // params.seed_window for r in self.requests]
            or [np.empty(0, np.int64)]
        ).astype(np.int64)
        self.by_row = np.argsort(self.incoming, kind="stable")
        self.group = self._join_groups(graphs, mapped)
        self.joins = [g.join for g in graphs]
        self.others_end = self._others_end()
        self.in_order = np.array([not g.reorders for g in graphs], dtype=bool)
        self.trigger = np.array([sp.path.role == "trigger" for sp in self.specs], dtype=bool)

    def _endpoints(self, incoming: np.ndarray, service: str) -> list[EndpointGraph]:
        """The call graphs of the endpoints with calls to map; sets :attr:`requests`, their
        incoming spans by start, in the same order."""
        spans, s = self.spans, self.spans.strings
        graphs: list[EndpointGraph] = []
        self.requests: list[np.ndarray] = []
        for ep in distinct(spans.endpoint[incoming]):
            g = self.callgraph.get(service, s[int(ep)] or "")
            if g is not None and any(p.slots for p in g.call_paths()):
                reqs = incoming[spans.endpoint[incoming] == ep]
                graphs.append(g)
                self.requests.append(reqs[np.argsort(spans.start[reqs], kind="stable")])
        return graphs

    def _skip_budget(self, graphs: list[EndpointGraph]) -> tuple[dict[int, int], dict[int, int]]:
        """Dynamism (§4.2): the calls the union graphs expect and those observed, per callee
        key; sets :attr:`budget`, the calls each key may be skipped (none with call paths, which
        say which calls each request makes), and :attr:`skip_keys`."""
        expected: dict[int, int] = {}
        for g, reqs in zip(graphs, self.requests, strict=True):
            for sl in g.slots:
                k = self.pools.key(*sl.callee)
                expected[k] = expected.get(k, 0) + len(reqs)
        observed = {k: len(self.pools.pools.get(k, ())) for k in self.pool_keys}
        self.budget = (
            {}
            if self.params.call_paths
            else {k: expected[k] - observed[k] for k in expected if expected[k] > observed[k]}
        )
        self.skip_keys = sorted(self.budget)
        return expected, observed

    def _path_specs(
        self,
        paths: list[tuple[int, list[Any]]],
        graphs: list[EndpointGraph],
        expected: dict[int, int],
        observed: dict[int, int],
    ) -> None:
        """Each path's search spec (:class:`.beam.PathSpec`): its callees' pools, the gap model
        of each slot and of the response (shared along equal edges, :func:`_edge_key`), the
        §4.2 scores of optional calls, and its prior; appended to :attr:`specs`,
        :attr:`slot_keys` and :attr:`edges`."""
        pool_id = {k: i for i, k in enumerate(self.pool_keys)}
        edges: dict[tuple, int] = {}
        for e, ps in paths:
            total = sum(p.requests for p in ps) or len(ps)
            for p in ps:
                keys = [self.pools.key(*sl.callee) for sl in p.slots]
                model = []
                for j in [*range(len(p.slots)), None]:
                    key = _edge_key(e, p, keys, j)
                    if key not in edges:
                        edges[key] = len(self.edges)
                        self.edges.append(key)
                    model.append(edges[key])
                made = np.zeros(len(keys))
                skip = np.full(len(keys), -np.inf)
                for j, k in enumerate(keys):
                    if k in self.budget:  # the paper's §4.2 scoring of optional calls
                        prob = min(1.0, observed[k] / expected[k]) if expected[k] else 1.0
                        prob = min(max(prob, 1e-3), 1 - 1e-3)
                        made[j] = math.log(prob)
                        skip[j] = math.log(1 - prob)
                prior = (p.requests or 1) / total if self.params.call_paths else 1.0
                self.specs.append(
                    PathSpec(
                        e,
                        p,
                        np.array([pool_id[k] for k in keys], dtype=np.int64),
                        np.array(model[:-1], dtype=np.int64),
                        model[-1],
                        skip,
                        made,
                        math.log(prior),
                        graphs[e].same_thread,
                    )
                )
                self.slot_keys.append(keys)

    def _index(self, rows: np.ndarray) -> np.ndarray:
        """The position in ``self.incoming`` of each of these incoming span rows."""
        return self.by_row[np.searchsorted(self.incoming, rows, sorter=self.by_row)]

    def _join_groups(self, graphs: list, mapped: np.ndarray | None) -> np.ndarray:
        """Per incoming span of a join endpoint, the group of its request (-1: none known).

        The request of an incoming span is the top of its chain of links and parents in
        ``mapped``, the mapping of the services processed so far (its callers, which come first):
        the join's calls from one request share it. A group calls onward once.
        """
        group = np.full(len(self.incoming), NONE, dtype=np.int64)
        joined = np.array([g.join is not None for g in graphs], dtype=bool)
        if mapped is None or not joined.any():
            return group
        member = joined[self.endpoint_of]
        top = roots(mapped)[self.incoming[member]]
        _, gid, size = np.unique(top, return_inverse=True, return_counts=True)
        group[member] = np.where(size[gid] >= 2, gid, NONE)
        return group

    def _others_end(self) -> np.ndarray:
        """Per incoming span in a join's group, the latest end of the group's other members
        (when the rest of the request's calls to the join were answered); MISSING elsewhere."""
        out = np.full(len(self.incoming), MISSING, dtype=np.int64)
        grouped = np.flatnonzero(self.group != NONE)
        if not len(grouped):
            return out
        gid = self.group[grouped]
        ends = self.spans.end[self.incoming[grouped]]
        order = np.lexsort((-ends, gid))
        head = run_heads(gid[order])
        latest = np.full(gid.max() + 1, MISSING)
        second = latest.copy()
        latest[gid[order][head]] = ends[order][head]
        after = np.flatnonzero(~head)
        runner = after[head[after - 1]]  # the second of each group
        second[gid[order][runner]] = ends[order][runner]
        out[grouped] = np.where(ends >= latest[gid], second[gid], latest[gid])
        return out

    def _score_joins(self, sets: list[CandidateSet], scores: list[np.ndarray]) -> None:
        """At a join, a trigger path's calls usually begin after the other calls of its request
        have been answered (learned as :attr:`.callgraph.Join.after_others`): the log of that
        share, or of its complement, is added to the candidate's score."""
        for s, (cs, sc) in enumerate(zip(sets, scores, strict=True)):
            join = self.joins[self.specs[s].endpoint]
            if not self.trigger[s] or join is None or not len(cs):
                continue
            others = self.others_end[self._index(cs.incoming)]
            made = cs.calls >= 0
            first = np.where(made, self.spans.start[np.maximum(cs.calls, 0)], NEVER)
            waits = others <= first.min(axis=1)
            p = min(max(join.after_others, 0.01), 0.99)
            sc += np.where(others == MISSING, 0.0, np.where(waits, math.log(p), math.log(1 - p)))

    # -- distributions -------------------------------------------------------------------------
    def _seed_models(self) -> list[GapModel]:  # noqa: C901, PLR0912
        """§4.1 seed: the difference of means where an edge's event series pair up one to one
        (an endpoint with one path, its callee called by no other slot of the instance);
        otherwise (§4.2) a Gaussian of the gaps of WAP5's nearest-parent mapping."""
        spans, p = self.spans, self.params
        models: list[GapModel | None] = [None] * len(self.edges)
        uses: dict[int, int] = {}
        for keys in self.slot_keys:
            for k in keys:
                uses[k] = uses.get(k, 0) + 1
        n_paths = np.bincount([sp.endpoint for sp in self.specs], minlength=len(self.requests))
        for spec, keys in zip(self.specs, self.slot_keys, strict=True):
            reqs = self.requests[spec.endpoint]
            if n_paths[spec.endpoint] != 1 or len(reqs) < 2:
                continue
            g = spec.path

            def series(j: int, field: str, keys=keys, reqs=reqs) -> np.ndarray | None:
                rows = self.pools.pools.get(keys[j])
                if rows is None or uses[keys[j]] != 1 or len(rows) != len(reqs):
                    return None
                return getattr(spans, field)[rows]

            sinks = g.sinks()
            for j in range(len(g.slots) + 1):
                if j < len(g.slots):
                    t2 = series(j, "start")
                    pr, a = g.preds[j], g.anchor(j)
                    if a is not None:
                        t1 = series(a, g.anchor_event(j))
                    elif not pr:
                        t1 = spans.start[reqs]
                    else:
                        t1 = series(pr[0], "end") if len(pr) == 1 else None
                    m = spec.model[j]
                else:
                    t2 = spans.end[reqs]
                    t1 = series(sinks[0], "end") if len(sinks) == 1 else None
                    m = spec.response_model
                if t1 is not None and t2 is not None:
                    models[m] = seed_gaussian(t1, t2, p.seed_window, p.seed_buckets, self.min_std)
        missing = [m for m, model in enumerate(models) if model is None]
        if missing:
            samples = self._mapping_gaps(self._wap5_parents())
            pooled = np.concatenate(list(samples.values()) or [np.empty(0)])
            # An edge WAP5's mapping never shows takes the gaps of every edge; with none at all,
            # a Gaussian a second wide around 0 ranks nearer calls first, as WAP5 would.
            every_edge = (
                moment_gaussian(pooled, np.ones(len(pooled)), self.min_std)
                if len(pooled)
                else Gaussian(np.zeros(1), np.full(1, 1e6))
            )
            for m in missing:
                v = samples.get(m)
                models[m] = (
                    moment_gaussian(v, np.ones(len(v)), self.min_std)
                    if v is not None and len(v) > 1
                    else every_edge
                )
        return models  # type: ignore[return-value]

    def _wap5_parents(self) -> np.ndarray:
        """WAP5's mapping of this instance (§4.2: it seeds the distributions under dynamism),
        as a parent row per row of the table."""
        spans = self.spans
        incoming = self.incoming[np.lexsort((spans.end[self.incoming], spans.start[self.incoming]))]
        outgoing = self.outgoing[np.lexsort((spans.end[self.outgoing], spans.start[self.outgoing]))]
        parent = np.full(len(spans), NONE, dtype=np.int64)
        parent[outgoing] = wap5_parents(spans, incoming, outgoing, self.callgraph)
        return parent

    def _mapping_gaps(self, parent: np.ndarray) -> dict[int, np.ndarray]:
        """The gaps (µs) of a mapping (``parent`` per row), per model, from the incoming spans
        whose mapped calls form one of their endpoint's paths exactly."""
        spans = self.spans
        # Each incoming span's calls as a run, by callee and then by time: the callees of a
        # run are the sorted keys of the path it forms, and the k-th call to a callee in time
        # fills the path's k-th slot of that callee.
        mapped = self.outgoing[parent[self.outgoing] != NONE]
        up, keys = parent[mapped], call_keys(spans, mapped)
        order = np.lexsort((spans.end[mapped], spans.start[mapped], keys, up))
        mapped, up, keys = mapped[order], up[order], keys[order]
        lo = np.searchsorted(up, self.incoming, "left").tolist()
        hi = np.searchsorted(up, self.incoming, "right").tolist()
        by_signature: dict[tuple[int, tuple], int] = {}
        for i, (spec, slot) in enumerate(zip(self.specs, self.slot_keys, strict=True)):
            by_signature.setdefault((spec.endpoint, tuple(sorted(slot))), i)
        rows_of: dict[int, list[int]] = {}
        first_of: dict[int, list[int]] = {}
        key_list = keys.tolist()
        for r, e, a, b in zip(
            self.incoming.tolist(), self.endpoint_of.tolist(), lo, hi, strict=True
        ):
            path = by_signature.get((e, tuple(key_list[a:b])))
            if path is not None:
                rows_of.setdefault(path, []).append(r)
                first_of.setdefault(path, []).append(a)
        samples: dict[int, list[np.ndarray]] = {}
        for i, rows in rows_of.items():
            spec = self.specs[i]
            # a slot's place among its path's calls sorted by callee (stable: by slot order)
            place = np.empty(len(self.slot_keys[i]), dtype=np.int64)
            place[np.argsort(self.slot_keys[i], kind="stable")] = np.arange(len(place))
            calls = mapped[np.asarray(first_of[i], dtype=np.int64)[:, None] + place[None, :]]
            cs = CandidateSet(spec.path, np.array(rows), calls)
            gaps = candidate_gaps(spans, cs, slot_ready(spans, cs))
            for j, m in enumerate([*spec.model.tolist(), spec.response_model]):
                samples.setdefault(m, []).append(gaps[:, j])
        return {m: np.concatenate(v) for m, v in samples.items()}

    @staticmethod
    def _gap_columns(samples: dict[int, np.ndarray]) -> tuple[list[np.ndarray], list[list[int]]]:
        """Gaps per model (:meth:`_mapping_gaps`) as :meth:`_refit` takes them."""
        return [v[:, None] for v in samples.values()], [[m] for m in samples]

    def _refit(
        self, models: list, values: list[np.ndarray], columns: list[list[int]], min_std: float
    ) -> None:
        """Refit every model on the values of its columns in the chosen candidates (§4.1)."""
        p = self.params
        pooled: dict[int, list[np.ndarray]] = {}
        for vals, cols in zip(values, columns, strict=True):
            for j, m in enumerate(cols):
                pooled.setdefault(m, []).append(vals[:, j])
        for m, parts in pooled.items():
            fit = fit_mixture(
                np.concatenate(parts), p.max_components, p.max_fit_samples, p.seed, min_std
            )
            if fit is not None:
                models[m] = fit

    # -- one round -----------------------------------------------------------------------------
    def _flat(
        self, sets: list[CandidateSet], scores: list[np.ndarray]
    ) -> tuple[Candidates, np.ndarray, np.ndarray]:
        """The top K candidates of every incoming span along every path (``sets[s]``: one
        path) as flat arrays, with their raw scores and their (set, index) in ``sets``.

        K per path, not per span: a path with one call more than another, whose candidates
        score lower (a chain of repeated calls against its shorter subsets), keeps its best
        ones for the joint assignment. The paper has one path per endpoint: its top K.
        """
        k = self.params.top_k
        nk = len(self.skip_keys)
        key_col = {key: i for i, key in enumerate(self.skip_keys)}
        inc, wts, outs, counts, skips, origin = [], [], [], [], [], []
        for s, (cs, sc) in enumerate(zip(sets, scores, strict=True)):
            order = np.lexsort((-sc, cs.incoming))
            keep = order[run_positions(cs.incoming[order]) < k]
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
        raw = np.concatenate(wts)
        n_calls = np.concatenate(counts)
        cands = Candidates(
            np.concatenate(inc),
            self._weights(raw, n_calls),
            np.r_[0, np.cumsum(n_calls)].astype(np.int64),
            np.concatenate(outs).astype(np.int64),
            np.concatenate(skips),
        )
        return cands, raw, np.concatenate(origin)

    def _weights(self, raw: np.ndarray, n_calls: np.ndarray) -> np.ndarray:
        """The joint assignment's weight of candidates of scores ``raw`` that give ``n_calls``
        calls a cause."""
        positive = _relative_weight(raw)
        if self.params.call_paths:
            # Coverage first: any candidate giving one more call a cause outweighs every score
            # difference within a batch (at most max_batch spans of weight <= 1 each).
            return n_calls * (self.params.max_batch + 1.0) + positive
        # The paper: every span assigned if possible, skips bounded by the quotas (§4.2).
        return positive + 1.0

    def _repeated_evidence(self, ps: _Pass, models: list[GapModel]) -> np.ndarray:
        """Per candidate of ``ps``, the part of its gaps' log-likelihood that counts the same
        evidence again: ``(1 - n_eff / n)`` of it, for its ``n`` gaps and ``n_eff = n / (1 +
        (n - 1) ρ)`` (Kish's design effect), ρ the mean correlation between the log densities
        of the chosen candidates' gaps along its path. Where a request's gaps are independent
        (ρ near 0) each is evidence of its own; where they move together (a service slowed
        for some requests and not others: all of a request's gaps are long at once), summing
        them counts one fact ``n`` times and the perturbed assignments agree too often."""
        out = []
        for s, (cs, rd, pick) in enumerate(zip(ps.sets, ps.ready, ps.chosen(), strict=True)):
            spec = self.specs[s]
            cols = [models[m] for m in [*spec.model.tolist(), spec.response_model]]
            window = self.window[self._index(cs.incoming)]
            dens = log_densities(candidate_gaps(self.spans, cs, rd), cols, window)
            dens[~np.isfinite(dens)] = np.nan  # a gap no model admits: left as it is
            n = (~np.isnan(dens)).sum(axis=1)
            rho = _mean_correlation(dens[pick])
            n_eff = n / (1.0 + (n - 1) * rho)
            out.append(np.nansum(dens, axis=1) * (1.0 - n_eff / np.maximum(n, 1)))
        return _by_origin(out, ps.origin)

    def _marginals(
        self, result: Reconstruction, passes: list[_Pass], models: list[GapModel]
    ) -> None:
        """Each link of ``passes``' mapping: the share of perturbed joint assignments that
        make it too, into ``result.probability`` (:attr:`TraceWeaverParams.marginal_samples`).

        A candidate that is its owner's only one, shares no call with another and skips none
        is in every assignment, perturbed or not: its links are 1 without solving, and the
        perturbed problems hold only the other candidates (the settled ones take no skip
        quota, and no other candidate's batch holds them)."""
        samples = self.params.marginal_samples
        # seeded by the instance (its first request's start): the same in a part as in the
        # whole; a start before 1970 is negative, which no seed may be: its two's complement
        first = int(self.spans.start[self.incoming[0]]) % 2**64
        rng = np.random.default_rng([self.params.seed, first])
        stats = SolveStats()  # the perturbed solves are not the mapping's: counted apart
        assert result.probability is not None and result.samples is not None
        for ps in passes:
            if not len(ps.picked):
                continue
            calls, owner = ps.cands.outs_of(ps.picked)
            links = _link_keys(calls, ps.cands.incoming[ps.picked][owner])
            owners = self._owners(ps.cands, ps.origin)
            open_ = _contested(ps.cands, owners)
            result.probability[calls] = 1.0
            if not open_.any():
                continue
            sub = ps.cands.take(np.flatnonzero(open_))
            problem = self._problem(sub, owners[open_])
            n_calls = np.diff(sub.out_ptr)
            raw = (ps.sampled - self._repeated_evidence(ps, models))[open_]
            made = np.zeros(len(links), dtype=np.uint64)
            for k in range(samples):
                weight = self._weights(raw + rng.gumbel(size=len(raw)), n_calls)
                picked = self._solve(problem, weight, stats)
                again, by = sub.outs_of(picked)
                hit = contained(links, _link_keys(again, sub.incoming[picked][by]))
                made |= hit.astype(np.uint64) << np.uint64(k)
            won = contained(owner, np.flatnonzero(open_[ps.picked]))
            result.samples[calls[won]] = sample_mask(made[won], samples)
            result.probability[calls[won]] = np.bitwise_count(made[won]) / samples

    def _owners(self, cands: Candidates, origin: np.ndarray) -> np.ndarray:
        """Who each candidate excludes in the joint assignment: its incoming span (a row), or,
        for a join's trigger path, the request's group (-2 - group), so that one request's
        group calls onward once."""
        owner = cands.incoming.copy()
        group = self.group[self._index(cands.incoming)]
        grouped = self.trigger[origin[:, 0]] & (group != NONE)
        owner[grouped] = -2 - group[grouped]
        return owner

    def _assign(self, cands: Candidates, owner: np.ndarray, stats: SolveStats) -> np.ndarray:
        """The chosen candidates: at most one per owner (:meth:`_owners`), no outgoing span
        twice; an incoming span that won a join's trigger path keeps no other candidate."""
        return self._solve(self._problem(cands, owner), cands.weight, stats)

    def _problem(self, cands: Candidates, owner: np.ndarray) -> _Problem:
        """What the joint assignment of ``cands`` is, whatever their weights: its batches and
        their skip quotas."""
        # Owners are rows or groups; batches need a dense index, ordered by start.
        uniq, dense = np.unique(owner, return_inverse=True)
        first = np.full(len(uniq), NEVER)
        np.minimum.at(first, dense, self.spans.start[cands.incoming])
        local = Candidates(dense, cands.weight, cands.out_ptr, cands.out_rows, cands.skips)
        parts, continued = batches(local, first, self.params.max_batch)
        by_in = np.argsort(dense, kind="stable")
        bounds = np.searchsorted(dense[by_in], np.arange(len(uniq) + 1))
        members = _gather(by_in, bounds, parts)
        return _Problem(cands, local, members, continued, self._quotas(local, members))

    def _solve(self, problem: _Problem, weight: np.ndarray, stats: SolveStats) -> np.ndarray:
        """The chosen candidates of ``problem`` weighed ``weight`` (:meth:`_assign`)."""
        cands = problem.cands
        local = replace(problem.local, weight=weight)
        limit = self.params.solver_time_limit
        picked = solve_all(local, problem.members, problem.continued, problem.quotas, limit, stats)
        # Of two candidates won by one incoming span (its own, and its group's trigger path),
        # the one with the calls stands.
        n_calls = np.diff(cands.out_ptr)[picked]
        best = np.lexsort((-n_calls, cands.incoming[picked]))
        keep = best[run_heads(cands.incoming[picked][best])]
        return np.sort(picked[keep])

    def _quotas(self, cands: Candidates, members: Batches) -> np.ndarray:
        """Skips each batch may use per callee key: the budget water-filled over batches (§4.2)
        by the calls each batch already has and the room it has for more."""
        nb, nk = len(members), len(self.skip_keys)
        quota = np.zeros((nb, nk), dtype=np.int64)
        if not nk or not nb:
            return quota
        flat, label = members.members, members.label
        # Each incoming span is in one batch; an outgoing span may be a candidate in several.
        first = np.unique(cands.incoming[flat], return_index=True)[1]
        n_in = np.bincount(label[first], minlength=nb)
        outs, owner = cands.outs_of(flat)
        base = int(outs.max(initial=0)) + 1
        pair = distinct(label[owner] * base + outs)
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
        return max((keys.count(key) for keys in self.slot_keys), default=1)

    def _search(
        self, models: list[GapModel], which: np.ndarray, pools: CallPools
    ) -> tuple[list[CandidateSet], list[np.ndarray]]:
        """Candidates of the incoming spans ``self.incoming[which]`` from the calls in ``pools``."""
        p = self.params
        res = search(
            self.spans,
            self.incoming[which],
            self.endpoint_of[which],
            self.window[which],
            self.specs,
            pools,
            self.pool_keys,
            model_table(models),
            beam_width=p.beam_width,
            max_branch=p.max_branch,
            keep=p.top_k * (p.rerank if p.arrival_order else 1),
            owner=self.owner,
        )
        self.truncated += res.truncated
        return res.sets, res.scores

    def _map(
        self,
        models: list[GapModel],
        rank_models: list[GapModel | None],
        order: ArrivalOrder | None,
        share_model: ShareModel | None,
        stats: SolveStats,
    ) -> list[_Pass]:
        """One mapping of the instance: search, score, assign; then the residual passes.

        A span whose true candidate was pruned from its own top K (its gaps were unusual) and
        whose calls went to nobody would stay unmapped. After the joint assignment, the incoming
        spans it left without a mapping are searched again among the calls it left without a
        cause, as the paper removes the outgoing spans each batch took before the next (§4.1,
        step 5), until a pass assigns nothing more.
        """
        which = np.arange(len(self.incoming))
        left = self.outgoing
        pools = self.pools
        passes: list[_Pass] = []
        for _ in range(self.params.residual_passes + 1):
            sets, scores = self._search(models, which, pools)
            ready = [slot_ready(self.spans, cs) for cs in sets]
            self._score_joins(sets, scores)
            repeated = [np.zeros(len(sc)) for sc in scores]  # order evidence counted again
            if rank_models and order is not None:  # from the second iteration on
                d_all = order.displacements(sets, ready)
                for s, (cs, sc, d) in enumerate(zip(sets, scores, d_all, strict=True)):
                    if not self.in_order[self.specs[s].endpoint]:
                        continue
                    rank = [rank_models[m] for m in self.specs[s].model]
                    term = log_likelihood(d, rank, np.zeros(len(cs), np.int64))
                    sc += term
                    repeated[s] = term - term / np.maximum((~np.isnan(d)).sum(axis=1), 1)
            if share_model is not None:
                for s, (cs, sc) in enumerate(zip(sets, scores, strict=True)):
                    sc += share_model.score(self.shared.shares(cs), cs.calls, self.specs[s].model)
            cands, raw, origin = self._flat(sets, scores)
            picked = self._assign(cands, self._owners(cands, origin), stats)
            sampled = raw - _by_origin(repeated, origin)
            passes.append(_Pass(sets, ready, cands, raw, origin, picked, sampled))
            taken = cands.outs_of(picked)[0]
            if not len(taken):
                break
            left = left[~contained(left, taken)]
            done = contained(self.incoming[which], cands.incoming[picked])
            # A join's group that did not call onward is searched again, its members with it.
            won = picked[self.trigger[origin[picked, 0]]]
            triggered = self.group[self._index(cands.incoming[won])]
            waiting = (self.group[which] != NONE) & ~contained(self.group[which], triggered)
            for ps in passes:
                ps.revoke(self.incoming[which[done & waiting]])
            which = which[~done | waiting]
            if not len(which) or not len(left):
                break
            pools = CallPools(self.spans, left)
        return passes

    def run(  # noqa: C901
        self, result: Reconstruction, stats: SolveStats, delays_from: np.ndarray | None = None
    ) -> int:
        if not self.n_incoming:
            if self.serves:  # no endpoint it serves is in the call graph
                self._record_unmapped(result)
            return 0
        p = self.params
        models = self._seed_models()
        if delays_from is not None:  # an analysis: the delay models of a given mapping
            self._refit(models, *self._gap_columns(self._mapping_gaps(delays_from)), self.min_std)
        order = ArrivalOrder(self.pools) if p.arrival_order and self.in_order.any() else None
        rank_models: list[GapModel | None] = []
        share_model: ShareModel | None = None
        seen: set[bytes] = set()
        best: tuple[tuple[int, float], list[_Pass]] | None = None
        best_models = list(models)  # the models the best mapping was chosen with
        since_best = 0
        it = 0
        for it in range(1, p.max_iterations + 1):
            passes = self._map(models, rank_models, order, share_model, stats)
            explained, state = mapping_key([(ps.cands, ps.picked) for ps in passes])
            # Hard EM: a mapping is as good as the calls it explains, then its likelihood under
            # the models it was chosen with; keep the best, stop when it stops improving.
            quality = (explained, sum(float(ps.raw[ps.picked].sum()) for ps in passes))
            if best is None or quality > best[0]:
                best, since_best = (quality, passes), 0
                best_models = list(models)
            else:
                since_best += 1
            forced = all(
                len(ps.cands.incoming) == len(distinct(ps.cands.incoming)) for ps in passes
            )  # no span had a second candidate: no model can change the mapping
            if forced or state in seen or it == p.max_iterations or since_best >= p.patience:
                break  # forced, stable, cycling, or no longer improving
            seen.add(state)
            sets = [cs for ps in passes for cs in ps.sets]
            ready = [rd for ps in passes for rd in ps.ready]
            chosen = [pick for ps in passes for pick in ps.chosen()]
            columns = [[*sp.model.tolist(), sp.response_model] for sp in self.specs] * len(passes)
            gaps = [
                candidate_gaps(self.spans, cs, rd)[pick]
                for cs, rd, pick in zip(sets, ready, chosen, strict=True)
            ]
            self._refit(models, gaps, columns, self.min_std)
            if order is not None:
                order.observe(sets, ready, chosen)
                ranks = [
                    d[pick]
                    for d, pick in zip(order.displacements(sets, ready), chosen, strict=True)
                ]
                rank_models = [None] * len(self.edges)
                slots = [sp.model.tolist() for sp in self.specs] * len(passes)
                self._refit(rank_models, ranks, slots, RANK_MIN_STD)
            if self.shared:
                share_model = ShareModel.fit(
                    len(self.edges),
                    [self.shared.shares(cs) for cs in sets],
                    [cs.calls for cs in sets],
                    [sp.model for sp in self.specs] * len(passes),
                    chosen,
                )
        final = best[1] if best else passes
        for ps in final:
            self._record(result, ps.cands, ps.raw, ps.picked)
        if p.marginal_samples:
            self._marginals(result, final, best_models)
        self._record_unmapped(result)
        return it

    def _given_calls(self) -> dict[int, list[int]]:
        """Per incoming span, the calls its sender gave it."""
        made: dict[int, list[int]] = {}
        given = self.outgoing[self.owner[self.outgoing] != NONE]
        for call, request in zip(given.tolist(), self.owner[given].tolist(), strict=True):
            made.setdefault(request, []).append(call)
        return made

    def _record(
        self, result: Reconstruction, cands: Candidates, raw: np.ndarray, picked: np.ndarray
    ) -> None:
        """Write the mapping, scores and top-K alternatives into ``result``; count the requests
        not given their top choice.

        A request's candidates rank as the joint assignment weighs them: with ``call_paths``,
        by the calls they give a cause first and by score second. Ranking by score alone would
        count every request whose longest path scored below a shorter one as not given its top
        choice, though the assignment never prefers the shorter one, and a service's confidence
        would then fall far below its accuracy.
        """
        k = self.params.top_k
        if not len(raw):
            self._count(result, cands, raw, picked, {})
            return
        coverage = np.diff(cands.out_ptr) if self.params.call_paths else np.zeros(len(raw))
        by_rank = np.lexsort((np.arange(len(raw)), -raw, -coverage, cands.incoming))
        first = run_heads(cands.incoming[by_rank])
        best = dict(
            zip(cands.incoming[by_rank[first]].tolist(), by_rank[first].tolist(), strict=True)
        )
        outs, owner = cands.outs_of(by_rank)
        if self.candidates:  # each span's candidates in rank order, as sets of calls
            cut = np.searchsorted(owner, np.arange(1, len(by_rank)))
            ranked: dict[int, list[frozenset[int]]] = {}
            pieces = split_at(outs.tolist(), cut)
            for i, calls in zip(cands.incoming[by_rank].tolist(), pieces, strict=True):
                ranked.setdefault(i, []).append(frozenset(calls))
            result.top_candidates.update(ranked)
        # Each call's best K incoming spans, best first, one entry per span.
        inc, score = cands.incoming[by_rank][owner], raw[by_rank][owner]
        order = np.lexsort((np.arange(len(outs)), -score, inc, outs))
        once = order[run_heads(outs[order], inc[order])]
        once = once[np.lexsort((np.arange(len(once)), -score[once], outs[once]))]
        top = once[run_positions(outs[once]) < k]
        self.alternatives.append(Alternatives(outs[top], inc[top], score[top]))
        self._count(result, cands, raw, picked, best)

    def _count(
        self,
        result: Reconstruction,
        cands: Candidates,
        raw: np.ndarray,
        picked: np.ndarray,
        best: dict[int, int],
    ) -> None:
        """Write the chosen mapping into ``result``; count the spans not given their best."""
        picked = np.asarray(picked, dtype=np.int64)
        incoming = cands.incoming[picked]
        outs, owner = cands.outs_of(picked)  # no call is in two picked candidates
        result.parent[outs] = incoming[owner]
        result.score[outs] = raw[picked][owner]
        chosen = zip(incoming.tolist(), picked.tolist(), strict=True)
        self.not_top += sum(best.get(i) != c for i, c in chosen)
        self.assigned |= set(incoming.tolist())
        self.in_candidates |= set(cands.out_rows.tolist())

    def _record_unmapped(self, result: Reconstruction) -> None:
        """Say why each call left without a cause has none."""
        callee_keys = set(self.pool_keys)
        for o in self.outgoing:
            if result.parent[o] != NONE:
                continue
            key = int(call_keys(self.spans, o))
            if key not in callee_keys:
                reason = NOT_IN_CALLGRAPH
            elif int(o) in self.in_candidates:
                reason = TAKEN
            else:
                reason = NO_FIT
            result.unmapped[int(o)] = reason
