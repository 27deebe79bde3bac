"""Calls named as the call graph names them.

A call's name depends on who recorded it: an OpenTelemetry SDK names a client span by its method
(``GET``), an eBPF agent's reader by the route its server span answered (``GET /cart/{id}``),
and the call graph knows calls by the name its test traces gave them. A call whose name the
call graph does not know, from a service that the call graph shows calling the callee at one
endpoint only, is that call (as :mod:`.hops` names the calls to a service that sends no spans);
where the caller calls several endpoints of the callee, the name cannot be told and stays.
"""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.callgraph import CallGraph


class CallNames:
    """The endpoints each service calls of each other (:meth:`name`)."""

    def __init__(self, callgraph: CallGraph) -> None:
        self._names: dict[tuple[str, str], set[str]] = {}
        for (svc, _), g in callgraph.endpoints.items():
            for path in g.call_paths():
                for sl in path.slots:
                    self._names.setdefault((svc, sl.service), set()).add(sl.endpoint)

    def name(self, spans: SpanTable) -> None:
        """Rename, in place, the client spans of ``spans`` whose callee is known and whose name
        the call graph does not know, where it knows one (module docstring)."""
        rows = np.flatnonzero((spans.kind == CLIENT) & (spans.peer != NONE))
        if not len(rows):
            return
        s = spans.strings
        triples = np.stack([spans.service[rows], spans.peer[rows], spans.endpoint[rows]], axis=1)
        unique, inverse = np.unique(triples, axis=0, return_inverse=True)
        renamed = unique[:, 2].copy()
        for i, (svc, peer, endpoint) in enumerate(unique.tolist()):
            known = self._names.get((s[svc] or "", s[peer] or ""), set())
            if len(known) == 1 and s[endpoint] not in known:
                renamed[i] = s.code(next(iter(known)))
        spans.endpoint[rows] = renamed[inverse.ravel()]
