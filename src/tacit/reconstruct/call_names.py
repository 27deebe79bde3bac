"""Calls named as the call graph names them.

A call's name depends on who recorded it: an HTTP client span is named by its method alone
(``GET``: the OpenTelemetry semantic conventions' name for a client span, which knows no route),
an eBPF agent's reader names it by the route its server span answered (``GET /cart/{id}``), and
the call graph knows calls by the name its test traces gave them. A call named by its method
alone, which the call graph does not know by that name, takes the name of its server span's
endpoint where the call graph knows that one, else the one name the call graph knows for the
caller's calls to that callee (as :mod:`.hops` names the calls to a service that sends no
spans). Any other name is the call's own: a call the call graph does not know (a new endpoint,
a new call after a deployment) stays unknown rather than taken for another.
"""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.callgraph import CallGraph

METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "HTTP")
)
"""HTTP methods, and ``HTTP``, which the conventions name a request of an unknown method by."""


class CallNames:
    """The endpoints each service calls of each other (:meth:`name`)."""

    def __init__(self, callgraph: CallGraph) -> None:
        self._names: dict[tuple[str, str], set[str]] = {}
        for (svc, _), g in callgraph.endpoints.items():
            for path in g.call_paths():
                for sl in path.slots:
                    self._names.setdefault((svc, sl.service), set()).add(sl.endpoint)

    def name(self, spans: SpanTable) -> None:
        """Rename, in place, the client spans of ``spans`` named by their method alone whose
        callee is known, where the call graph knows their call by another name (module
        docstring)."""
        s = spans.strings
        methods = [code for m in METHODS if (code := s.find(m)) != NONE]
        rows = np.flatnonzero(
            (spans.kind == CLIENT) & (spans.peer != NONE) & np.isin(spans.endpoint, methods)
        )
        for r in rows.tolist():
            known = self._names.get(
                (s[int(spans.service[r])] or "", s[int(spans.peer[r])] or ""), set()
            )
            if not known or s[int(spans.endpoint[r])] in known:
                continue
            server = int(spans.link[r])
            answered = s[int(spans.endpoint[server])] if server != NONE else None
            if answered in known:
                spans.endpoint[r] = spans.endpoint[server]
            elif len(known) == 1:
                spans.endpoint[r] = s.code(next(iter(known)))
