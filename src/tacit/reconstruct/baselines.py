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
from numba import njit

from tacit.model.roles import process_key
from tacit.model.spans import NONE, SpanTable
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.candidates import call_keys, callee_key
from tacit.reconstruct.result import Reconstruction, open_problem
from tacit.runs import distinct, find_sorted

WAP5_CUTOFF = 4.0
"""WAP5's spontaneous alternative: a gap beyond this many mean delays is not causal (§5.1)."""


def _endpoint_calls(
    spans: SpanTable, service: int, endpoint: int, callgraph: CallGraph
) -> tuple[dict[int, int], dict[int, tuple[int, int]]]:
    """The calls a request of ``service``'s ``endpoint`` (codes) owes per callee key, from its
    call graph, and how early and late (ns) around it such a call may start and end."""
    s = spans.strings
    g = callgraph.get(s[service] or "", s[endpoint] or "")
    owed: dict[int, int] = {}
    tolerance: dict[int, tuple[int, int]] = {}
    for sl in g.slots if g else []:
        k = callee_key(s, *sl.callee)
        owed[k] = owed.get(k, 0) + 1
        early, late = tolerance.get(k, (0, 0))
        tolerance[k] = (max(early, sl.early_ns), max(late, sl.late_ns))
    return owed, tolerance


def _calls_by_endpoint(
    spans: SpanTable, incoming: np.ndarray, callgraph: CallGraph
) -> tuple[list[tuple[dict[int, int], dict[int, tuple[int, int]]]], list[int]]:
    """:func:`_endpoint_calls` of each distinct (service, endpoint) of ``incoming`` (either
    :data:`NONE`), and the index among them of each incoming span's."""
    pair = ((spans.service[incoming].astype(np.int64) + 1) << 32) | (spans.endpoint[incoming] + 1)
    found = distinct(pair)
    made = [
        _endpoint_calls(spans, (p >> 32) - 1, (p & 0xFFFFFFFF) - 1, callgraph)
        for p in found.tolist()
    ]
    return made, np.searchsorted(found, pair).tolist()


def owed_calls(
    spans: SpanTable, incoming: np.ndarray, callgraph: CallGraph
) -> tuple[list[dict[int, int]], list[dict[int, tuple[int, int]]]]:
    """Calls each incoming span owes per callee key, from its endpoint's call graph, and how
    early and late (ns) around the span such a call may start and end (the learned
    tolerances of :class:`~.callgraph.Slot`, which every algorithm gets alike)."""
    made, of = _calls_by_endpoint(spans, incoming, callgraph)
    return [dict(made[i][0]) for i in of], [made[i][1] for i in of]


def owed_counts(
    spans: SpanTable, incoming: np.ndarray, callgraph: CallGraph
) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`owed_calls` owes, as arrays: the callee keys any incoming span owes (sorted)
    and the calls each owes to each, an (incoming x keys) matrix."""
    made, of = _calls_by_endpoint(spans, incoming, callgraph)
    keys = distinct(np.array([k for owed, _ in made for k in owed], dtype=np.int64))
    counts = np.zeros((len(made), len(keys)), dtype=np.int64)
    for i, (owed, _) in enumerate(made):
        counts[i, np.searchsorted(keys, list(owed))] = list(owed.values())
    return keys, counts[of]


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
    keys, owed = owed_counts(spans, incoming, callgraph)
    start_in, start_out = spans.start[incoming], spans.start[outgoing]
    # Mean causal delay: from the latest preceding incoming span to each outgoing span.
    latest = np.searchsorted(start_in, start_out, "right")
    ok = latest > 0
    gaps = start_out[ok] - start_in[latest[ok] - 1]
    cutoff = WAP5_CUTOFF * (float(gaps.mean()) if len(gaps) else 0.0)
    key = find_sorted(keys, call_keys(spans, outgoing))
    chosen = _nearest_owing(start_in, start_out, latest, key, owed, cutoff)
    parent = np.full(len(outgoing), NONE, dtype=np.int64)
    parent[chosen >= 0] = incoming[chosen[chosen >= 0]]
    return parent


@njit(cache=True)
def _nearest_owing(start_in, start_out, latest, key, owed, cutoff):  # pragma: no cover - compiled
    """The loop of :func:`wap5_parents`, compiled: for each outgoing span in start order, the
    most recent incoming span before it (index below ``latest``) within ``cutoff`` ns that
    still owes a call to its callee (``key``: a column of ``owed``, -1 when none owes it),
    which then owes one fewer; -1 for none."""
    chosen = np.full(len(start_out), -1, dtype=np.int64)
    for n in range(len(start_out)):
        k = key[n]
        if k < 0:
            continue
        for i in range(latest[n] - 1, -1, -1):
            if start_out[n] - start_in[i] > cutoff:
                break
            if owed[i, k] > 0:
                owed[i, k] -= 1
                chosen[n] = i
                break
    return chosen


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
