"""Services that send no spans, drawn where their neighbours show them: an uninstrumented hop.

A service without instrumentation (or whose agent is off) drops the trace context of the
requests it passes on, and records nothing. It still shows: its callers' client spans have no
server span, and the server spans of the services it calls have no caller. The call graph
(learned where the service was instrumented) names it: a call without a server span, made by a
request whose endpoint calls exactly one service that has sent no spans, is a call to that
service; a request without a caller, of a service that exactly one such silent service calls,
was made by it.

The hop is drawn as the spans it would have sent (TraceWeaver, SIGCOMM '24, §3: a service is
its incoming and outgoing spans): a server span for each call to it, with that call's times,
and a client span for each request it made, with that request's times, at one instance of the
service, :data:`VIRTUAL_INSTANCE`. Which of its requests made which call is then what
TraceWeaver infers at any instance (§4), from the service's call graph. Each drawn span names the
request target of the span it was drawn from (the request the hop received, or sent), since
that is what the hop passed on (:mod:`.shared_values`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tacit.model.columns import StringPool
from tacit.model.span_details import SpanDetail, detail_column
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.shared_values import TARGET_PATH, TARGET_QUERY, request_target

VIRTUAL_INSTANCE = "(not instrumented)"
"""The instance of the spans drawn for a service that sent none."""


class Hops:
    """What the call graph says of services that may send no spans, and which have sent some
    (:meth:`saw`)."""

    def __init__(self, callgraph: CallGraph) -> None:
        self._serving = {svc for svc, _ in callgraph.endpoints}
        self._callers: dict[str, set[str]] = {}
        self._callees: dict[tuple[str, str], set[str]] = {}
        self._call_name: dict[tuple[str, str], str] = {}
        busiest: dict[str, tuple[int, str]] = {}
        for (svc, ep), g in callgraph.endpoints.items():
            self._callees[(svc, ep)] = {sl.service for sl in g.slots}
            for sl in g.slots:
                self._callers.setdefault(sl.service, set()).add(svc)
                self._call_name.setdefault((svc, sl.service), sl.endpoint)
            if g.requests > busiest.get(svc, (-1, ""))[0]:
                busiest[svc] = (g.requests, ep)
        self._endpoint = {svc: ep for svc, (_, ep) in busiest.items()}
        self._seen: set[str] = set()

    def saw(self, services: Iterable[str | None]) -> None:
        """Services that sent a server span."""
        self._seen.update(s for s in services if s is not None)

    @property
    def seen(self) -> frozenset[str]:
        """The services that sent a server span."""
        return frozenset(self._seen)

    def silent(self) -> set[str]:
        """Services of the call graph that have sent no server span yet."""
        return self._serving - self._seen

    def called(self, service: str, endpoint: str, peer: str | None) -> str | None:
        """The silent service a call without a server span went to, made by a request of
        ``service``'s ``endpoint`` (None: not one silent service)."""
        silent = self.silent()
        if peer is not None:
            return peer if peer in silent else None
        return _one(self._callees.get((service, endpoint), set()) & silent)

    def caller(self, service: str) -> str | None:
        """The silent service that made a request of ``service`` without a caller (None: not
        one silent service)."""
        return _one(self._callers.get(service, set()) & self.silent())

    def draw(
        self,
        spans: SpanTable,
        calls: list[tuple[int, str]],
        requests: list[tuple[int, str]],
        position: np.ndarray,
    ) -> SpanTable:
        """The spans of the hops: per (row, hop) of ``calls`` a server span of the hop, per
        (row, hop) of ``requests`` a client span of the hop, with the times of the row and
        ``link`` the row's stream position (``position``) and its request target."""
        names = spans.strings.values
        pool = StringPool()
        rows = [r for r, _ in calls] + [r for r, _ in requests]
        hop = [h for _, h in calls] + [h for _, h in requests]
        n = len(rows)
        endpoint = [self._endpoint[h] for _, h in calls] + [
            self._call_name.get((h, names[int(spans.service[r])] or ""), "") for r, h in requests
        ]
        peer = [names[int(spans.service[r])] for r, _ in calls] + [
            names[int(spans.service[r])] for r, _ in requests
        ]
        return SpanTable(
            pool,
            service=np.array(pool.codes(hop), dtype=np.int32),
            instance=np.full(n, pool.code(VIRTUAL_INSTANCE), dtype=np.int32),
            endpoint=np.array(pool.codes(endpoint), dtype=np.int32),
            kind=np.array([SERVER] * len(calls) + [CLIENT] * len(requests), dtype=np.int8),
            start=spans.start[rows],
            end=spans.end[rows],
            peer=np.array(pool.codes(peer), dtype=np.int32),
            thread=np.full(n, NONE, dtype=np.int64),
            trace=np.full(n, NONE, dtype=np.int32),
            span_id=np.full(n, NONE, dtype=np.int32),
            parent=np.full(n, NONE, dtype=np.int64),
            link=position[rows].astype(np.int64),
            record=spans.record[rows],
            sources=spans.sources,
            details=_targets(spans, rows),
        )


def _targets(spans: SpanTable, rows: list[int]) -> np.ndarray | None:
    """A detail per row naming the request target of the span at ``rows``, if it names one."""
    if spans.details is None:
        return None
    out: list[SpanDetail | None] = []
    for row in rows:
        detail = spans.details[row]
        target = None if detail is None else request_target(detail.attributes)
        out.append(
            None
            if target is None
            else SpanDetail(attributes={TARGET_PATH: target[0], TARGET_QUERY: target[1]})
        )
    return detail_column(out)


def _one(names: set[str]) -> str | None:
    return next(iter(names)) if len(names) == 1 else None
