"""Baselines that TraceWeaver is compared with (SIGCOMM '24, §6), implemented faithfully.

All three see the same blind spans and call graph as TraceWeaver and map each outgoing span of
an instance to one of its incoming spans:

* **FCFS** — first come, first served: outgoing spans in start order go to the earliest-arrived
  incoming span that is still open (it started before and ends after the call, within the call
  graph's learned tolerances) and still owes a call to that backend according to its call graph.
* **WAP5** — nearest parent (Aguilera et al. / WAP5, WWW '06 §5.1 as the TraceWeaver artifact
  applies it): an exponential delay model; each outgoing span is linked to the most recent
  not-yet-linked incoming span before it, unless that gap exceeds 4x the mean delay, in which
  case it is left spontaneous (unmapped).
* **vPath** (and DeepFlow) — thread-based: an outgoing request belongs to the request the same
  thread is currently serving, i.e. the latest incoming request on that thread that is still
  open. Without thread ids every instance is one thread.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from tacit.model.roles import process_key
from tacit.model.spans import NONE, SpanTable
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.candidates import call_keys, callee_key
from tacit.reconstruct.result import Reconstruction, open_problem
from tacit.runs import distinct

WAP5_CUTOFF = 4.0
"""WAP5's spontaneous alternative: a gap beyond this many mean delays is not causal (§5.1)."""


def owed_calls(
    spans: SpanTable, incoming: np.ndarray, callgraph: CallGraph
) -> tuple[list[dict[int, int]], list[dict[int, tuple[int, int]]]]:
    """Calls each incoming span owes per callee key, from its endpoint's call graph, and how
    early and late (ns) around the span such a call may start and end (the learned
    tolerances of :class:`~.callgraph.Slot`, which every algorithm gets alike)."""
    s = spans.strings
    owed_all, tolerance_all = [], []
    cache: dict[tuple[int, int], tuple[dict[int, int], dict[int, tuple[int, int]]]] = {}
    for r in incoming:
        key = (int(spans.service[r]), int(spans.endpoint[r]))
        if key not in cache:
            g = callgraph.get(s[key[0]] or "", s[key[1]] or "")
            owed: dict[int, int] = {}
            tolerance: dict[int, tuple[int, int]] = {}
            for sl in g.slots if g else []:
                k = callee_key(s, *sl.callee)
                owed[k] = owed.get(k, 0) + 1
                early, late = tolerance.get(k, (0, 0))
                tolerance[k] = (max(early, sl.early_ns), max(late, sl.late_ns))
            cache[key] = (owed, tolerance)
        owed, tolerance = cache[key]
        owed_all.append(dict(owed))
        tolerance_all.append(tolerance)
    return owed_all, tolerance_all


def per_instance(
    spans: SpanTable,
    algorithm: str,
    assign: Callable[[np.ndarray, np.ndarray, Reconstruction], None],
) -> Reconstruction:
    """A reconstruction by ``algorithm`` whose ``assign`` maps, one instance at a time, the
    instance's open outgoing spans to its open incoming spans (both in start order)."""
    result = Reconstruction.start(algorithm, spans)
    proc = process_key(spans)
    for key in distinct(proc):
        rows = np.flatnonzero(proc == key)
        incoming, outgoing = open_problem(spans, rows)
        incoming = incoming[np.lexsort((spans.end[incoming], spans.start[incoming]))]
        outgoing = outgoing[np.lexsort((spans.end[outgoing], spans.start[outgoing]))]
        if len(outgoing):
            assign(incoming, outgoing, result)
    return result


def reconstruct_fcfs(spans: SpanTable, callgraph: CallGraph) -> Reconstruction:
    """First come, first served (see module docstring)."""

    def assign(incoming: np.ndarray, outgoing: np.ndarray, result: Reconstruction) -> None:
        owed, tolerance = owed_calls(spans, incoming, callgraph)
        queues: dict[int, list[int]] = {}  # callee key -> incoming indices owing it, by arrival
        for idx, d in enumerate(owed):
            for k in d:
                queues.setdefault(k, []).append(idx)
        heads = dict.fromkeys(queues, 0)
        start_in, end_in = spans.start[incoming], spans.end[incoming]
        for o, k in zip(outgoing, call_keys(spans, outgoing), strict=True):
            q = queues.get(int(k))
            if q is None:
                continue
            h = heads[k]
            # Spans that are served, or ended before this call began, never take a later call.
            while h < len(q) and (
                owed[q[h]][k] == 0 or end_in[q[h]] + tolerance[q[h]][k][1] < spans.start[o]
            ):
                h += 1
            heads[k] = h
            for idx in q[h:]:
                early, late = tolerance[idx][k]
                if start_in[idx] > spans.start[o] + early:
                    break
                if owed[idx][k] > 0 and end_in[idx] + late >= spans.end[o]:
                    owed[idx][k] -= 1
                    result.parent[o] = incoming[idx]
                    break

    result = per_instance(spans, "fcfs", assign)
    result.finish_unmapped(spans, "no open incoming span owes this call")
    return result


def wap5_parents(
    spans: SpanTable, incoming: np.ndarray, outgoing: np.ndarray, callgraph: CallGraph
) -> np.ndarray:
    """WAP5's parent (a row of ``incoming``, or -1) for each of ``outgoing``, both of one
    instance sorted by start (see the module docstring)."""
    parent = np.full(len(outgoing), NONE, dtype=np.int64)
    owed, _ = owed_calls(spans, incoming, callgraph)
    keys = call_keys(spans, outgoing).tolist()
    start_in = spans.start[incoming]
    # Mean causal delay: from the latest preceding incoming span to each outgoing span.
    hi = np.searchsorted(start_in, spans.start[outgoing], "right")
    ok = hi > 0
    gaps = spans.start[outgoing[ok]] - start_in[hi[ok] - 1]
    cutoff = WAP5_CUTOFF * (float(gaps.mean()) if len(gaps) else 0.0)
    # Lists: the loop reads values one by one, which numpy scalars make slow.
    began, rows = start_in.tolist(), incoming.tolist()
    for n, (start, k, h) in enumerate(
        zip(spans.start[outgoing].tolist(), keys, hi.tolist(), strict=True)
    ):
        for idx in range(h - 1, -1, -1):
            if start - began[idx] > cutoff:
                break
            if owed[idx].get(k, 0) > 0:
                owed[idx][k] -= 1
                parent[n] = rows[idx]
                break
    return parent


def reconstruct_wap5(spans: SpanTable, callgraph: CallGraph) -> Reconstruction:
    """WAP5-style nearest unlinked parent with the spontaneous cutoff (see module docstring)."""

    def assign(incoming: np.ndarray, outgoing: np.ndarray, result: Reconstruction) -> None:
        result.parent[outgoing] = wap5_parents(spans, incoming, outgoing, callgraph)

    result = per_instance(spans, "wap5", assign)
    result.finish_unmapped(spans, "spontaneous: no unlinked incoming span within 4x the mean delay")
    return result


def reconstruct_vpath(spans: SpanTable, callgraph: CallGraph | None = None) -> Reconstruction:
    """Thread-based mapping (vPath/DeepFlow); one thread per instance without thread ids."""

    def assign(incoming: np.ndarray, outgoing: np.ndarray, result: Reconstruction) -> None:
        thread_in = spans.thread[incoming]
        thread_out = spans.thread[outgoing]
        # Events in time order: incoming request (0), outgoing request (1), incoming response (2).
        events: list[tuple[int, int, int]] = []
        events += [(int(spans.start[r]), 0, i) for i, r in enumerate(incoming)]
        events += [(int(spans.start[r]), 1, i) for i, r in enumerate(outgoing)]
        events += [(int(spans.end[r]), 2, i) for i, r in enumerate(incoming)]
        events.sort()
        current: dict[int, list[tuple[int, int]]] = {}  # thread -> heap of (-start, incoming idx)
        done = np.zeros(len(incoming), dtype=bool)
        for _, kind, i in events:
            if kind == 0:
                heapq.heappush(current.setdefault(int(thread_in[i]), []), (-i, i))
            elif kind == 2:
                done[i] = True
            else:
                heap = current.get(int(thread_out[i]), [])
                while heap and done[heap[0][1]]:
                    heapq.heappop(heap)
                if heap:
                    result.parent[outgoing[i]] = incoming[heap[0][1]]

    result = per_instance(spans, "vpath", assign)
    result.finish_unmapped(spans, "its thread was serving no request when it was sent")
    return result


ALGORITHMS = {"fcfs": reconstruct_fcfs, "wap5": reconstruct_wap5, "vpath": reconstruct_vpath}
"""Baselines by name; every one takes (spans, callgraph)."""
