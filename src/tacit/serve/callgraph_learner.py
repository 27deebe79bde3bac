"""The call graph ``tacit serve`` learns from the spans it stored, when it was given none.

Started without a call graph, the service stores what its senders' context gives (every link
kept, :mod:`tacit.reconstruct.stream_context`) and leaves the calls whose context was lost
unmapped, with the reason :data:`LEARNING` (``learning`` on ``/metrics``). Every
:data:`LEARN_EVERY_S` it reads back the spans it stored in the last :data:`HORIZON_S`, at most
:data:`MAX_SPANS` (their RPC sides, and the parents their senders gave) and learns the call
graph from the requests whose calls were told apart at their instance or that kept their context
(:mod:`tacit.reconstruct.blind_callgraph`, TraceWeaver §5.2.2); the parents it inferred count
only where the order of calls is read from a reconstruction. An endpoint enters the call graph
once :data:`MIN_SUPPORT` such requests show it; the calls of the others stay unmapped until
then. Each call graph that differs from the one in use (in its calls, paths or, by
:data:`SHARE_SHIFT`, their shares) takes effect at the next round, and is kept in the store
with the time it did (``callgraphs``), so a restart goes on with the latest; a deployment's new
calls and paths, and the shares that shift, are learned the same way, from the requests after
it.
"""

from __future__ import annotations

import time

import numpy as np
import orjson

from tacit.formats.common import thread_id
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, SpanTableBuilder
from tacit.reconstruct.blind_callgraph import Support, learn_blind
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.traceweaver import NOT_IN_CALLGRAPH
from tacit.serve.store import Store

LEARNING = (
    "the call graph learned so far has no entry of this service that makes this call: an "
    "endpoint enters it once enough of its requests had their calls told apart or kept their "
    "context"
)
"""Why a call is left unmapped while the call graph is learned (in place of
:data:`tacit.reconstruct.traceweaver.NOT_IN_CALLGRAPH`)."""
MIN_SUPPORT = 20
"""Known requests of an endpoint before it enters the call graph: enough for its paths'
frequencies and delay tolerances to rest on more than a few requests."""
LEARN_EVERY_S = 30.0
HORIZON_S = 600.0
MAX_SPANS = 100_000
"""How far back the spans learned from go: stored span time, and spans (the latest)."""
SHARE_SHIFT = 0.1
"""A move of a path's share of its endpoint's requests that makes a call graph learned again
new: its frequencies are the paths' priors (TraceWeaver §5.2.2)."""


class CallGraphLearner:
    """Learns the call graph from ``store`` (module docstring)."""

    def __init__(self, store: Store, min_support: int = MIN_SUPPORT) -> None:
        self.store = store
        self.min_support = min_support
        self.support = Support()
        self.learned_ns: int | None = None
        latest = store.latest_callgraph()
        self.callgraph = CallGraph({}) if latest is None else latest[1]
        if latest is not None:
            self.learned_ns = latest[0]

    def learn(self) -> CallGraph | None:
        """The call graph of the stored spans, if it differs from the one in use
        (:func:`_differs`; it then becomes the one in use, kept in the store); else None."""
        table, mapping = self._stored_spans()
        graph, self.support = learn_blind(table, mapping)
        graph = CallGraph(
            {
                key: g
                for key, g in graph.endpoints.items()
                if self.support.known(key) >= self.min_support
            }
        )
        if not _differs(graph, self.callgraph):
            return None
        self.callgraph = graph
        self.learned_ns = time.time_ns()
        self.store.add_callgraph(self.learned_ns, graph.to_yaml())
        return graph

    @staticmethod
    def explain(unmapped: dict[int, str]) -> None:
        """Say, in place, of the calls ``unmapped`` left for want of a call graph entry that
        the call graph is still being learned."""
        for p, why in unmapped.items():
            if why == NOT_IN_CALLGRAPH:
                unmapped[p] = LEARNING

    def status(self) -> dict[str, object]:
        """Where the call graph stands: per endpoint seen, its support and whether it is in."""
        sup = self.support
        return {
            "source": "learned",
            "count": len(self.callgraph.endpoints),
            "learned_ns": self.learned_ns,
            "min_support": self.min_support,
            "endpoints": {
                f"{svc} {ep}": {
                    "seen": n,
                    "alone": sup.alone.get((svc, ep), 0),
                    "given": sup.given.get((svc, ep), 0),
                    "learned": (svc, ep) in self.callgraph.endpoints,
                }
                for (svc, ep), n in sorted(sup.seen.items())
            },
        }

    def _stored_spans(self) -> tuple[SpanTable, np.ndarray]:
        """The stored spans of the last :data:`HORIZON_S` as observed spans: RPC sides linked,
        each client span's parent the request its sender gave it (through in-process spans),
        none where it was inferred; and each row's parent as stored, given or inferred (NONE:
        none), the service's own reconstruction."""
        rows = self.store.learning_spans(round(HORIZON_S * 1e9), MAX_SPANS)
        b = SpanTableBuilder("store")
        index: dict[str, int] = {}
        parent_of: dict[str, str | None] = {}
        given: dict[str, bool] = {}
        kinds: dict[str, str] = {}
        for span_id, parent, service, instance, operation, kind, start, duration, by, tags in rows:
            parent_of[span_id], given[span_id], kinds[span_id] = parent, by, kind
            if kind not in ("server", "client"):
                continue
            index[span_id] = len(b)
            b.add(service, instance, operation, SERVER if kind == "server" else CLIENT,
                  start, start + duration, len(b), thread=_thread(tags))  # fmt: skip
        table = b.build()
        mapping = np.full(len(table), NONE, dtype=np.int64)
        for span_id, r in index.items():
            up = parent_of.get(span_id)
            if table.kind[r] == SERVER:
                if up in index and table.kind[index[up]] == CLIENT:
                    table.link[r], table.link[index[up]] = index[up], r
                    table.peer[index[up]] = table.service[r]
                continue
            seen = set()
            while up is not None and up not in seen and kinds.get(up) not in (None, "server"):
                seen.add(up)
                up = parent_of.get(up)
            if up in index and kinds[up] == "server":
                mapping[r] = index[up]
                table.parent[r] = index[up] if given[span_id] else NONE
        known_callee = (table.kind == SERVER) | (table.peer != NONE)
        keep = np.flatnonzero(known_callee)
        new_row = np.full(len(table), NONE, dtype=np.int64)
        new_row[keep] = np.arange(len(keep))
        mapped = mapping[keep]
        return table.take(keep), np.where(mapped >= 0, new_row[np.maximum(mapped, 0)], NONE)


def _thread(tags: str | None) -> int:
    """The thread id stored tags (Jaeger's, as JSON) name, or NONE."""
    if tags is None:
        return NONE
    named = {t["key"]: t["value"] for t in orjson.loads(tags)}
    return thread_id(named)


def _differs(new: CallGraph, old: CallGraph) -> bool:
    """Whether a call graph learned again says something else of an endpoint's calls than the
    one in use: its endpoints, calls or paths differ, or a path's share of its endpoint's
    requests moved by :data:`SHARE_SHIFT` or more (a count that changes with every request
    does not make it new)."""
    shape_new, shape_old = _shape(new), _shape(old)
    if shape_new.keys() != shape_old.keys() or any(
        sorted(shape_new[k]) != sorted(shape_old[k]) for k in shape_new
    ):
        return True
    return any(
        abs(share - shape_old[key][path]) >= SHARE_SHIFT
        for key, paths in shape_new.items()
        for path, share in paths.items()
    )


def _shape(graph: CallGraph) -> dict[tuple[str, str], dict[tuple, float]]:
    """Per endpoint, each path (its role at a join, its calls and their order) with its share
    of the endpoint's requests."""
    out = {}
    for key, g in graph.endpoints.items():
        paths = g.call_paths()
        total = sum(p.requests for p in paths) or 1
        out[key] = {
            (p.role or "", tuple((sl.service, sl.endpoint, sl.occurrence) for sl in p.slots),
             str(p.preds)):
            p.requests / total
            for p in paths
        }  # fmt: skip
    return out
