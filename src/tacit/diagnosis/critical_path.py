"""Critical paths of traces and each service's contribution to end-to-end latency.

YTrace (Kanuparthy et al., §Service localization): on a trace's execution graph
(:mod:`tacit.diagnosis.execution_graph`) the critical path is "the causal round trip path in the
graph with the largest total (service and network) latency"; a service's contribution is "the
sum of computation latencies for all incoming-causal outgoing edge pairs", and YTrace reports
"the top service contributors, and their fraction of end-to-end ... latency" on the critical
path. The network latency of an RPC edge is its time between the caller's send and the callee's
receipt (the paper: the edge's (de)serialization time at the caller).

On spans the longest causal path is found backwards from the root's end: the call that returned
last before the current instant, among those the parent waited for (the execution graph's
happens-before), is on the path, the time between
its return and the current instant is the parent's own computation, and the walk continues inside
that call and then, in the parent, before the call was made. Calls that returned after the parent
went on (the late answers of a redundant k-of-n fan-out, asynchronous calls) are never on it, and
of a parallel fan-out only the last response is. Every instant of the root's span is attributed
to exactly one span on the path, so the contributions add up to the end-to-end latency. The
self time of a client span whose callee is traced is network transit (the RPC's request and
response edges) and is counted as :data:`NETWORK`; that of a client span whose callee is not
traced (a database, a cache) is the callee's, named by its ``peer`` when known.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from numba import njit

from tacit.diagnosis.execution_graph import ExecutionGraph, GraphParams, build_graph
from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.result import Reconstruction
from tacit.runs import contained, distinct

NETWORK = "(network)"
"""The pseudo-service that RPC transit time on the critical path is counted under."""


@dataclass
class CriticalPaths:
    """The critical path of every trace, as columns.

    Per trace (one row per root in ``graph.trace_roots``): ``trace`` (the trace id's string
    code, -1 when none), ``root`` (span row), ``start`` and ``latency`` (end-to-end, ns), and
    ``contribution[t, j]``: the ns of trace ``t``'s critical path spent in ``services[j]``
    (:data:`NETWORK` included), each row summing to ``latency``. Per span: ``on_path`` and
    ``self_ns`` (its computation time on the critical path).
    """

    graph: ExecutionGraph
    trace: np.ndarray
    root: np.ndarray
    start: np.ndarray
    latency: np.ndarray
    services: list[str]
    contribution: np.ndarray
    on_path: np.ndarray
    self_ns: np.ndarray
    warnings: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.root)

    def trace_name(self, i: int) -> str:
        """Trace ``i``'s id, or its root span's record when it has none."""
        code = int(self.trace[i])
        spans = self.graph.spans
        name = spans.strings[code] if code != NONE else None
        return name or f"record-{int(spans.record[self.root[i]])}"

    def shares(self) -> np.ndarray:
        """``contribution`` as fractions of each trace's latency (0 for zero-length traces)."""
        lat = np.maximum(self.latency, 1).astype(np.float64)
        return self.contribution / lat[:, None]

    def top(self, i: int, n: int = 3) -> list[tuple[str, int, float]]:
        """Trace ``i``'s ``n`` largest contributors: (service, ns, share of end-to-end)."""
        row = self.contribution[i]
        best = np.argsort(-row, kind="stable")[:n]
        lat = max(int(self.latency[i]), 1)
        return [(self.services[j], int(row[j]), int(row[j]) / lat) for j in best if row[j] > 0]

    def path_rows(self, i: int) -> np.ndarray:
        """The span rows of trace ``i``'s critical path, in order of (aligned) start."""
        rows = np.flatnonzero(self.on_path & (self.graph.root == self.root[i]))
        return rows[np.lexsort((-self.graph.end[rows], self.graph.start[rows]))]


def critical_paths(
    spans: SpanTable | ExecutionGraph,
    params: GraphParams | None = None,
    rec: Reconstruction | None = None,
) -> CriticalPaths:
    """The critical path and per-service contributions of every trace of ``spans``.

    ``spans`` need ``parent`` rows (ground truth, or reconstructed ones from
    :func:`tacit.reconstruct.assemble.assemble`); an already built :class:`ExecutionGraph` is
    reused.
    With ``rec`` (the reconstruction the parents come from), ``contribution`` is the expected
    one over the alternatives of uncertain links (:func:`weigh_uncertain_links`); ``on_path``
    and ``self_ns`` stay those of the most likely traces.
    """
    graph = spans if isinstance(spans, ExecutionGraph) else build_graph(spans, params)
    table = graph.spans
    roots = graph.trace_roots
    no_cut = np.zeros(len(table), dtype=bool)
    self_ns, on_path, owner, _ = _sweep(
        roots, graph.child_ptr, graph.children, graph.start, graph.end, graph.blocking, no_cut
    )
    who = _attribution(graph)
    codes = distinct(who[on_path])
    contribution = np.rint(_by_owner(who, codes, self_ns, owner, len(roots))).astype(np.int64)
    cp = CriticalPaths(
        graph=graph,
        trace=table.trace[roots].astype(np.int64),
        root=roots,
        start=graph.start[roots],
        latency=graph.end[roots] - graph.start[roots],
        services=_names(table, codes),
        contribution=contribution,
        on_path=on_path,
        self_ns=self_ns,
        warnings=dict(graph.warnings),
    )
    return cp if rec is None else weigh_uncertain_links(cp, rec)


def transit_by_edge(cp: CriticalPaths) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The :data:`NETWORK` part of each trace's critical path split by RPC edge: ``(edges,
    ns)``, ``edges[j]`` a (caller service, callee service) pair and ``ns[t, j]`` the transit
    time of trace ``t``'s critical path on calls of that edge (the self time of the client
    spans whose callee is traced). Each row sums to the trace's network contribution, before
    any weighing of uncertain links (:func:`weigh_uncertain_links`)."""
    g = cp.graph
    table = g.spans
    rpc = np.flatnonzero(g.rpc)
    callee = np.full(len(table), NONE, dtype=np.int64)
    callee[table.parent[rpc]] = table.service[rpc]
    rows = np.flatnonzero(cp.on_path & (table.kind == CLIENT) & (callee != NONE))
    trace_of = np.full(len(table), -1, dtype=np.int64)
    trace_of[cp.root] = np.arange(len(cp))
    pairs, edge = np.unique(
        np.stack([table.service[rows].astype(np.int64), callee[rows]], axis=1),
        axis=0,
        return_inverse=True,
    )
    ns = np.zeros((len(cp), len(pairs)), dtype=np.int64)
    np.add.at(ns, (trace_of[g.root[rows]], edge.ravel()), cp.self_ns[rows])
    names = table.strings
    return [(names[int(a)] or "?", names[int(b)] or "?") for a, b in pairs.tolist()], ns


def weigh_uncertain_links(cp: CriticalPaths, rec: Reconstruction) -> CriticalPaths:
    """``cp`` with each trace's contributions replaced by their expectation over the
    alternatives of its uncertain links (reconstructed traces: "links are uncertain").

    A link is uncertain when the chosen parent of a client span has probability below 1 among
    its alternatives (:func:`tacit.diagnosis.tail.link_probabilities`: the softmax of their
    log-likelihood scores). Where the critical path of a trace reaches an uncertain client span
    ``c`` of parent ``p``, the time the path spends in ``c`` (its *slot*) is not given to
    ``c``'s subtree alone but shared among the calls that could fill that slot: every client
    span making the same call (endpoint and peer) that has ``p`` among its alternatives, ``c``
    included, weighted by its probability of belonging to ``p`` (normalized over them), each
    contributing its own subtree's critical-path shares. This is a first-order approximation of
    the full expectation, which would re-walk the path for every joint choice of alternatives
    (exponentially many): the path above the slot and the slot's length are those of the most
    likely trace, and the links inside a candidate's subtree are taken as chosen (one level of
    uncertainty per slot; the outermost uncertain call on the path is the slot). Each slot is
    filled to its length, so every trace's contributions still add up to its end-to-end
    latency (fractions rounded by largest remainder).
    """
    from tacit.diagnosis.tail import link_probabilities

    graph, table = cp.graph, cp.graph.spans
    child, parent, prob = link_probabilities(table, rec)
    chosen = parent == table.parent[child]
    uncertain = np.zeros(len(table), dtype=bool)
    uncertain[child[chosen & (prob < 1 - _CERTAIN)]] = True
    warnings = dict(cp.warnings)
    if not uncertain.any():
        return cp
    roots = cp.root
    self_ns, _, owner, slot = _sweep(
        roots, graph.child_ptr, graph.children, graph.start, graph.end, graph.blocking, uncertain
    )
    slots = np.flatnonzero(slot >= 0)
    # The candidates of each slot: alternatives to the same parent making the same call.
    key = (table.endpoint.astype(np.int64) << 32) | (table.peer.astype(np.int64) & 0xFFFFFFFF)
    alt = contained(child, np.fromiter(rec.alternatives, np.int64, len(rec.alternatives)))
    a_child, a_parent, a_prob = child[alt], parent[alt], prob[alt]
    order = np.lexsort((key[a_child], a_parent))
    a_child, a_parent, a_prob = a_child[order], a_parent[order], a_prob[order]
    pairs = np.stack([a_parent, key[a_child]], axis=1)
    want = np.stack([table.parent[slots], key[slots]], axis=1)
    lo = _search(pairs, want, "left")
    hi = _search(pairs, want, "right")
    slot_of = np.repeat(np.arange(len(slots)), hi - lo)
    cand_at = np.repeat(lo - np.cumsum(hi - lo) + (hi - lo), hi - lo) + np.arange(len(slot_of))
    cand, w = a_child[cand_at], a_prob[cand_at]
    # The slot is its own call's with that call's probability q; the rest, 1 - q, is shared
    # among the other candidates by their probability of belonging to the same parent.
    own = cand == slots[slot_of]
    q = np.zeros(len(slots))
    q[slot_of[own]] = w[own]
    others = np.bincount(slot_of[~own], w[~own], len(slots))
    alone = others[slot_of] == 0
    w = np.where(
        own, np.where(alone, 1.0, w), (1 - q[slot_of]) * w / np.where(alone, 1, others[slot_of])
    )

    # Each candidate's own subtree critical path, one sweep per depth (disjoint subtrees).
    who = _attribution(graph)
    codes = distinct(np.append(who, _NETWORK_CODE))
    base = _by_owner(who, codes, self_ns, owner, len(roots))
    subs = distinct(cand)
    sub = np.zeros((len(subs), len(codes)))
    no_cut = np.zeros(len(table), dtype=bool)
    for d in distinct(graph.depth[subs]):
        at = np.flatnonzero(graph.depth[subs] == d)
        s_ns, _, s_owner, _ = _sweep(
            subs[at],
            graph.child_ptr,
            graph.children,
            graph.start,
            graph.end,
            graph.blocking,
            no_cut,
        )
        hit = s_owner >= 0
        s_owner[hit] = at[s_owner[hit]]
        sub += _by_owner(who, codes, s_ns, s_owner, len(subs))
    length = sub.sum(axis=1)
    share = np.divide(sub, length[:, None], out=np.zeros_like(sub), where=length[:, None] > 0)
    share[length == 0, np.searchsorted(codes, _NETWORK_CODE)] = 1.0  # a zero-length call
    mix = share[np.searchsorted(subs, cand)] * w[:, None]
    fill = np.zeros((len(slots), len(codes)))
    np.add.at(fill, slot_of, mix)
    np.add.at(base, owner[slots], fill * slot[slots][:, None].astype(np.float64))
    warnings[W_WEIGHED] = len(slots)
    return replace(
        cp,
        services=_names(table, codes),
        contribution=_round_rows(base, cp.latency),
        warnings=warnings,
    )


_CERTAIN = 1e-9
_NETWORK_CODE = -2
W_WEIGHED = "uncertain calls on critical paths weighed over their alternatives"


def _attribution(graph: ExecutionGraph) -> np.ndarray:
    """Who each span's critical self time belongs to (string codes; -2 is the network)."""
    table = graph.spans
    who = table.service.astype(np.int64)
    is_client = table.kind == CLIENT
    has_rpc_child = np.zeros(len(table), dtype=bool)
    has_rpc_child[table.parent[np.flatnonzero(graph.rpc)]] = True
    callee_untraced = is_client & ~has_rpc_child & (table.peer != NONE)
    who[callee_untraced] = table.peer[callee_untraced]
    who[is_client & has_rpc_child] = _NETWORK_CODE
    return who


def _names(table: SpanTable, codes: np.ndarray) -> list[str]:
    return [NETWORK if c == _NETWORK_CODE else table.strings[int(c)] or "?" for c in codes.tolist()]


def _by_owner(
    who: np.ndarray, codes: np.ndarray, self_ns: np.ndarray, owner: np.ndarray, n: int
) -> np.ndarray:
    """Sum ``self_ns`` of the rows with an ``owner`` into an (owner × code) float matrix."""
    rows = np.flatnonzero(owner >= 0)
    col = np.searchsorted(codes, who[rows])
    flat = np.bincount(
        owner[rows] * len(codes) + col,
        weights=self_ns[rows].astype(np.float64),
        minlength=n * len(codes),
    )
    return flat.reshape(n, len(codes))


def _search(
    sorted_pairs: np.ndarray, want: np.ndarray, side: Literal["left", "right"]
) -> np.ndarray:
    """``np.searchsorted`` on rows of two int64 columns sorted lexicographically."""
    view = np.dtype([("a", np.int64), ("b", np.int64)])
    hay = np.ascontiguousarray(sorted_pairs, dtype=np.int64).view(view).ravel()
    needle = np.ascontiguousarray(want, dtype=np.int64).view(view).ravel()
    return np.searchsorted(hay, needle, side=side)


def _round_rows(values: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Integer rows summing exactly to ``totals``: floors, plus one ns for the largest
    remainders (Hamilton's method)."""
    floor = np.floor(values).astype(np.int64)
    missing = totals - floor.sum(axis=1)
    rank = np.argsort(np.argsort(-(values - floor), axis=1, kind="stable"), axis=1)
    return floor + (rank < missing[:, None])


@njit(cache=True)
def _sweep(
    roots: np.ndarray,
    ptr: np.ndarray,
    kids: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    blocking: np.ndarray,
    cut: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per span: its computation time on its root's critical path, whether it is on it, the
    index (into ``roots``) of that root, and for a ``cut`` span reached by the walk the length
    of its window (-1 otherwise).

    ``kids`` lists each span's children in order of end (``ptr`` delimits them); a span is
    walked over its window [lo, hi] backwards from hi (see the module docstring). Only calls
    whose response the parent waited for (``blocking``) can be on the path. The walk does not
    enter a ``cut`` span (its window is left to the caller to attribute). The subtrees of
    ``roots`` must be disjoint.
    """
    n = len(start)
    self_ns = np.zeros(n, np.int64)
    on = np.zeros(n, np.bool_)
    owner = np.full(n, -1, np.int64)
    slot = np.full(n, -1, np.int64)
    st_x = np.empty(n + 1, np.int64)
    st_lo = np.empty(n + 1, np.int64)
    st_hi = np.empty(n + 1, np.int64)
    for i in range(len(roots)):
        r = roots[i]
        st_x[0], st_lo[0], st_hi[0] = r, start[r], end[r]
        top = 1
        while top > 0:
            top -= 1
            x, lo, hi = st_x[top], st_lo[top], st_hi[top]
            on[x] = True
            owner[x] = i
            if cut[x] and x != r:
                slot[x] = hi - lo
                continue
            cur = hi
            for j in range(ptr[x + 1] - 1, ptr[x] - 1, -1):
                c = kids[j]
                e = end[c]
                if e <= lo:
                    break
                if e > cur or not blocking[c]:
                    continue  # returned after the parent went on: not waited for
                s = max(start[c], lo)
                self_ns[x] += cur - e
                st_x[top], st_lo[top], st_hi[top] = c, s, e
                top += 1
                cur = s
            self_ns[x] += cur - lo
    return self_ns, on, owner, slot
