"""The execution graph of traces: RPC edges, clock alignment and happens-before between siblings.

YTrace ("End-to-end Performance Diagnosis in Large Cloud and Content Providers", Kanuparthy et
al., §4 localization) localizes a slow session on its *execution graph*: nodes are the events of
the request (a request's first byte leaving the caller, reaching the callee, the response's last
byte leaving the callee, reaching the caller) and edges are either network transit (request and
response edges of an RPC) or computation inside one process, with happens-before edges between
the calls a process makes. The paper infers causality between sibling RPC edges from
happens-before, for its two fan-out patterns: non-parallelism (a call follows another when it
is sent after that one's response arrived) and redundancy (the reply to the caller follows the
first k responses of a fan-out of n). The stages below are tacit's way of finding both from
spans.

From spans, the events are the start and end of each span: for an RPC, the client span's start
and end are the caller's first byte out and last byte in, and the server span's start and end
the callee's first byte in and last byte out. The two sides are on different clocks (in real
exports such as HotelReservation's, many a span is not nested in its parent), so every server span
is moved, with its process's whole subtree, by the smallest shift that nests it in its client
span (a span longer than its caller is centred and clamped): afterwards the request edge is
``server.start - client.start`` and the response edge ``client.end - server.end``, both ≥ 0.

Siblings (the calls one span makes) are grouped into *stages*: a call joins the current stage when
it is issued before any call of that stage has returned (a fan-out), and starts a new stage
otherwise. The parent continues at the first call of the next stage (or its own end); the calls
of a stage that returned by then were awaited (``k`` of the stage's ``n``):

- SERIAL: a stage of one awaited call;
- PARALLEL: ``n > 1`` calls, all awaited (the parent continues after the last response);
- REDUNDANT: ``0 < k < n``: the parent continued after the first ``k`` responses;
- ASYNC: no call of the stage was awaited (fire and forget).

Everything is computed over all traces at once on numpy columns; the per-parent loops are numba.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tacit.errors import InputError
from tacit.model.parents import climb
from tacit.model.roles import process_key
from tacit.model.spans import NONE, SpanTable
from tacit.runs import contained

SERIAL = 0
PARALLEL = 1
REDUNDANT = 2
ASYNC = 3

W_SHIFTED = "server spans moved into their caller's span (clocks not aligned)"
W_CLAMPED = "server spans longer than their caller's span (clamped to it)"
W_FRAGMENT = "spans in fragments whose parent is missing (left out of their trace)"


@dataclass(frozen=True)
class GraphParams:
    """How the execution graph is built.

    ``align_clocks``: move each callee's spans into its caller's span (above); off, spans keep
    their recorded times (for inputs known to share one clock).
    """

    align_clocks: bool = True


@dataclass
class ExecutionGraph:
    """The execution graph of every trace of ``spans``, as per-span columns.

    ``start``/``end`` are the aligned times (``offset`` added, clamped when ``clamped``);
    ``root`` is each span's topmost ancestor and ``trace_roots`` the root chosen for each trace
    (one per trace id; fragments under a missing parent are left out, see ``in_trace``).
    ``child_ptr``/``children``: the children of span ``i`` are
    ``children[child_ptr[i]:child_ptr[i + 1]]``, in order of aligned end. ``rpc`` marks spans
    that are the callee side of an RPC (a child in another process) with their ``request_ns``
    and ``response_ns`` edges. Per child span: its ``stage`` among its siblings, the stage's
    ``fanout`` (n), ``awaited`` (k) and ``pattern``, and ``blocking`` (its response was
    awaited). ``warnings`` counts every repair made to the input.
    """

    spans: SpanTable
    start: np.ndarray
    end: np.ndarray
    offset: np.ndarray
    clamped: np.ndarray
    depth: np.ndarray
    root: np.ndarray
    trace_roots: np.ndarray
    in_trace: np.ndarray
    child_ptr: np.ndarray
    children: np.ndarray
    rpc: np.ndarray
    request_ns: np.ndarray
    response_ns: np.ndarray
    stage: np.ndarray
    fanout: np.ndarray
    awaited: np.ndarray
    pattern: np.ndarray
    blocking: np.ndarray
    warnings: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.start)

    def children_of(self, row: int) -> np.ndarray:
        return self.children[self.child_ptr[row] : self.child_ptr[row + 1]]


def trace_roots(spans: SpanTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """Per span its depth and topmost ancestor, the root row of each trace, and warnings.

    A trace is a trace id (or, for spans without one, a root's subtree). When a trace has several
    parentless spans (a parent is missing), the longest is its root and the others' subtrees are
    counted as fragments. A cycle of parent links raises :class:`InputError` naming the trace.
    """
    depth, root, cycle = climb(spans.parent)
    if cycle >= 0:
        raise InputError(
            f"trace {spans.name('trace', cycle) or '(no id)'}: parent links form a cycle "
            f"through {spans.describe(cycle)}",
            path=", ".join(spans.sources) or None,
            record=int(spans.record[cycle]),
        )
    heads = np.flatnonzero(spans.parent == NONE)
    ident = np.where(spans.trace[heads] != NONE, spans.trace[heads].astype(np.int64), -1 - heads)
    dur = spans.end[heads] - spans.start[heads]
    order = np.lexsort((-dur, ident))  # longest first within a trace id
    first = np.ones(len(order), dtype=bool)
    first[1:] = ident[order][1:] != ident[order][:-1]
    chosen = np.sort(heads[order[first]])
    main = np.zeros(len(spans), dtype=bool)
    main[chosen] = True
    fragments = int((~main[root]).sum()) if len(spans) else 0
    return depth, root, chosen, {W_FRAGMENT: fragments} if fragments else {}


def build_graph(spans: SpanTable, params: GraphParams | None = None) -> ExecutionGraph:
    """The execution graph of every trace in ``spans`` (parents as rows); see the module doc."""
    params = params or GraphParams()
    n = len(spans)
    depth, root, roots, warnings = trace_roots(spans)
    parent = spans.parent
    has_parent = parent != NONE
    proc = process_key(spans)
    rpc = np.zeros(n, dtype=bool)
    rpc[has_parent] = proc[parent[has_parent]] != proc[has_parent]

    start = spans.start.copy()
    end = spans.end.copy()
    offset = np.zeros(n, dtype=np.int64)
    clamped = np.zeros(n, dtype=bool)
    if params.align_clocks and n:
        by_depth = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[by_depth], np.arange(1, depth.max() + 2))
        for lo, hi in itertools.pairwise(bounds):
            rows = by_depth[lo:hi]
            p = parent[rows]
            off = offset[p].copy()
            x = rpc[rows]
            r, pr = rows[x], p[x]
            s, e = spans.start[r] + off[x], spans.end[r] + off[x]
            ps, pe = start[pr], end[pr]
            longer = (e - s) > (pe - ps)
            fit = np.where(s < ps, ps - s, np.where(e > pe, pe - e, 0))
            centre = (ps + pe) // 2 - (s + e) // 2
            off[x] += np.where(longer, centre, fit)
            offset[rows] = off
            start[rows] = spans.start[rows] + off
            end[rows] = spans.end[rows] + off
            start[r[longer]] = ps[longer]
            end[r[longer]] = pe[longer]
            clamped[r[longer]] = True
            shifted = int((fit[~longer] != 0).sum())
            if shifted:
                warnings[W_SHIFTED] = warnings.get(W_SHIFTED, 0) + shifted
        if clamped.any():
            warnings[W_CLAMPED] = int(clamped.sum())

    kids = np.flatnonzero(has_parent)
    by_end = kids[np.lexsort((end[kids], parent[kids]))]
    child_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(parent[kids], minlength=n), out=child_ptr[1:])
    by_start = kids[np.lexsort((start[kids], parent[kids]))]
    stage, fanout, awaited, blocking = _stages(child_ptr, by_start, start, end)
    pattern = np.full(n, NONE, dtype=np.int8)
    pattern[has_parent] = np.select(
        [
            awaited[has_parent] == 0,
            fanout[has_parent] == 1,
            awaited[has_parent] == fanout[has_parent],
        ],
        [ASYNC, SERIAL, PARALLEL],
        REDUNDANT,
    )
    request = np.zeros(n, dtype=np.int64)
    response = np.zeros(n, dtype=np.int64)
    request[rpc] = start[rpc] - start[parent[rpc]]
    response[rpc] = end[parent[rpc]] - end[rpc]
    return ExecutionGraph(
        spans=spans,
        start=start,
        end=end,
        offset=offset,
        clamped=clamped,
        depth=depth,
        root=root,
        trace_roots=roots,
        in_trace=contained(root, roots),
        child_ptr=child_ptr,
        children=by_end,
        rpc=rpc,
        request_ns=request,
        response_ns=response,
        stage=stage,
        fanout=fanout,
        awaited=awaited,
        pattern=pattern,
        blocking=blocking,
        warnings=warnings,
    )


@njit(cache=True)
def _stages(
    ptr: np.ndarray, kids: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per child row (``kids`` grouped by parent, in order of start): its stage index, the
    stage's size n, how many of its calls returned before the parent went on (k: at the next
    stage's first call, or the parent's end) and whether its own response did."""
    n = len(start)
    stage = np.full(n, -1, np.int64)
    fanout = np.zeros(n, np.int64)
    awaited = np.zeros(n, np.int64)
    blocking = np.zeros(n, np.bool_)
    for p in range(n):
        lo, hi = ptr[p], ptr[p + 1]
        if lo == hi:
            continue
        s = 0
        first_return = end[kids[lo]]
        stage[kids[lo]] = 0
        for j in range(lo + 1, hi):
            c = kids[j]
            if start[c] >= first_return:
                s += 1
                first_return = end[c]
            else:
                first_return = min(first_return, end[c])
            stage[c] = s
        j = lo
        while j < hi:
            k = j
            while k < hi and stage[kids[k]] == stage[kids[j]]:
                k += 1
            go_on = start[kids[k]] if k < hi else end[p]
            done = 0
            for m in range(j, k):
                blocking[kids[m]] = end[kids[m]] <= go_on
                done += blocking[kids[m]]
            for m in range(j, k):
                fanout[kids[m]] = k - j
                awaited[kids[m]] = done
            j = k
    return stage, fanout, awaited, blocking
