"""Critical paths of traces and each service's contribution to end-to-end latency.

YTrace (Kanuparthy et al., §4 localization; the paper's text could not be retrieved here, this
follows the issue's description): on a trace's execution graph
(:mod:`tacit.diagnosis.execution_graph`) the critical path is the causal round-trip path with
the largest total latency, and a service's contribution is the sum of its computation latencies
on that path; the top contributors, with their share of the end-to-end latency, localize a slow
request.

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

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tacit.diagnosis.execution_graph import ExecutionGraph, GraphParams, build_graph
from tacit.model.spans import CLIENT, NONE, SpanTable

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
        return spans.strings[code] if code != NONE else f"record-{int(spans.record[self.root[i]])}"

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
    spans: SpanTable | ExecutionGraph, params: GraphParams | None = None
) -> CriticalPaths:
    """The critical path and per-service contributions of every trace of ``spans``.

    ``spans`` need ``parent`` rows (ground truth, or reconstructed ones from
    :func:`tacit.model.traces.assemble`); an already built :class:`ExecutionGraph` is reused.
    """
    graph = spans if isinstance(spans, ExecutionGraph) else build_graph(spans, params)
    table = graph.spans
    roots = graph.trace_roots
    self_ns, on_path = _sweep(
        roots, graph.child_ptr, graph.children, graph.start, graph.end, graph.blocking
    )

    # Who each span's critical self time belongs to (string codes; -2 is the network).
    who = table.service.astype(np.int64)
    is_client = table.kind == CLIENT
    has_rpc_child = np.zeros(len(table), dtype=bool)
    rpc_rows = np.flatnonzero(graph.rpc)
    has_rpc_child[table.parent[rpc_rows]] = True
    callee_untraced = is_client & ~has_rpc_child & (table.peer != NONE)
    who[callee_untraced] = table.peer[callee_untraced]
    who[is_client & has_rpc_child] = -2

    rows = np.flatnonzero(on_path)
    codes, col = np.unique(who[rows], return_inverse=True)
    names = [NETWORK if c == -2 else table.strings[int(c)] or "?" for c in codes.tolist()]
    trace_of = np.full(len(table), NONE, dtype=np.int64)
    trace_of[roots] = np.arange(len(roots))
    t = trace_of[graph.root[rows]]
    flat = np.bincount(
        t * len(codes) + col,
        weights=self_ns[rows].astype(np.float64),
        minlength=len(roots) * len(codes),
    )
    contribution = np.rint(flat).astype(np.int64).reshape(len(roots), len(codes))
    return CriticalPaths(
        graph=graph,
        trace=table.trace[roots].astype(np.int64),
        root=roots,
        start=graph.start[roots],
        latency=graph.end[roots] - graph.start[roots],
        services=names,
        contribution=contribution,
        on_path=on_path,
        self_ns=self_ns,
        warnings=dict(graph.warnings),
    )


@njit(cache=True)
def _sweep(
    roots: np.ndarray,
    ptr: np.ndarray,
    kids: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    blocking: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per span: its computation time on its trace's critical path, and whether it is on it.

    ``kids`` lists each span's children in order of end (``ptr`` delimits them); a span is
    walked over its window [lo, hi] backwards from hi (see the module docstring). Only calls
    whose response the parent waited for (``blocking``) can be on the path.
    """
    n = len(start)
    self_ns = np.zeros(n, np.int64)
    on = np.zeros(n, np.bool_)
    st_x = np.empty(n + 1, np.int64)
    st_lo = np.empty(n + 1, np.int64)
    st_hi = np.empty(n + 1, np.int64)
    for r in roots:
        top = 0
        st_x[0], st_lo[0], st_hi[0] = r, start[r], end[r]
        top = 1
        while top > 0:
            top -= 1
            x, lo, hi = st_x[top], st_lo[top], st_hi[top]
            on[x] = True
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
    return self_ns, on
