"""What the senders' trace context says of a span stream, resolved as the spans arrive.

A receiver gets spans in the order their services export them, not in causal order: a
client span usually comes before the server span of the handler that made it (the handler
ends later), and the server span of its callee may come before or after it (another process
exports it). What the context gives is kept; only what it lost is left to infer (TraceWeaver,
SIGCOMM '24, §5.3 for the stream):

* **RPC sides**: a server span names the client span of its caller by its parent span id (the
  id the caller's side put in the request headers). The client span then calls the server
  span's service: its callee is known even when its sender named no ``peer.service``. Where no
  context crossed (a propagator that carries nothing, a proxy that drops the headers), a server
  span without a caller is paired with a call that named its server end
  (:mod:`tacit.formats.rpc_endpoints`) and encloses it in time, and a queue's consumer with the
  producer that named its queue and message.
* **Callees by address**: a call that no server span answers (its callee's span was lost, or
  never sent) is named by the server end it names, where the server spans of a service were
  seen last (:attr:`Resolved.named`); a sender's ``peer.service`` comes first. Each
  service's first server spans, and then one in :data:`LEARN_EVERY`, tell where it serves, so
  that a replica that comes later is learned too, at a cost per span that stays small.
* **Given parents**: a client span whose parent span id names a server span of its own trace,
  directly or through in-process (internal) spans, was caused by that request. A client span
  with no parent, or whose chain of parents ends at an in-process root or never arrives, lost
  its context (a thread pool, an async task, a mismatched propagator): its parent is inferred.
* **Duplicates**: a span whose trace and span id came before (an exporter that resent a batch
  it timed out on) is the same span, counted once.

Each map keeps its entries for ``horizon_ns`` of span time past their end, the longest a
partner may still come (a request's longest duration and the lateness): memory is bounded by
the spans of that much traffic.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from tacit.formats.rpc_endpoints import QUEUE, same_target
from tacit.model.spans import CLIENT, NONE, SERVER

LATER = np.iinfo(np.int64).max
"""The position of a partner or given parent still to come (:mod:`.online`)."""

LEARN_FIRST = 16
LEARN_EVERY = 64
"""Server spans of a service whose server end is read to learn where it serves: its first
:data:`LEARN_FIRST`, then one in this many."""
MAX_ENDS = 65_536
"""Server ends remembered, the most recently seen kept."""

Key = tuple[str | None, str | None]
"""A span's identity as its sender gave it: trace id and span id."""
_Address = Callable[[int], tuple[str | None, str | None]]


@dataclass
class Resolved:
    """What the context says of one chunk of spans, and what it now says of earlier ones.

    Per row of the chunk: ``link``, the RPC partner's position (NONE: none, LATER: to come);
    ``parent``, a client span's given parent's position (NONE: none given, LATER: to come);
    ``peer``, the callee service of a client span whose server span came before (None: not
    known yet); ``named``, that of a client span that no server span answered yet, as its
    server end names it (None: not named; a sender's ``peer.service`` comes first). For spans
    pushed earlier: ``peers`` (position -> callee service) and ``parents`` (client positions
    and their given parents' positions, NONE where the context turned out lost)."""

    link: np.ndarray
    parent: np.ndarray
    peer: list[str | None]
    named: list[str | None]
    peers: dict[int, str] = field(default_factory=dict)
    parents: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))


class StreamContext:
    """Resolves the senders' context of a span stream chunk by chunk (see the module
    docstring)."""

    def __init__(self, horizon_ns: int) -> None:
        self.horizon_ns = horizon_ns
        self.latest_end = -np.inf
        # Ordered dicts, oldest first: a plain dict's first key takes longer to find the more
        # keys were deleted before it, and these lose their oldest keys all the time.
        self._seen: OrderedDict[Key, int] = OrderedDict()  # every span -> its end
        # server spans -> (position, end, service)
        self._servers: OrderedDict[Key, tuple[int, int, str]] = OrderedDict()
        # in-process spans -> (parent span id, end)
        self._internal: OrderedDict[Key, tuple[str | None, int]] = OrderedDict()
        self._clients: OrderedDict[Key, tuple[int, int]] = OrderedDict()  # by their own key
        self._callees: OrderedDict[Key, tuple[int, int, str]] = OrderedDict()  # by the caller's
        self._children: OrderedDict[Key, list[tuple[int, int]]] = OrderedDict()  # parent to come
        self._address = _AddressBook()
        self._served: OrderedDict[str, str] = OrderedDict()  # end -> the service seen there last
        self._learned: dict[str, int] = {}  # server spans seen per service

    def remember(self, spans: list[tuple[str, str, int]]) -> None:
        """Know these spans (trace id, span id, end; oldest end first) as having come, as
        :meth:`fresh` knows those it was given: what a restart takes from the store."""
        for trace, span, end in spans:
            self._seen[(trace, span)] = end
        if spans:
            self.latest_end = max(self.latest_end, spans[-1][2])

    def fresh(
        self, trace_id: list[str | None], span_id: list[str | None], end: np.ndarray
    ) -> np.ndarray:
        """Whether each span is new, not one that came before (by trace and span id, within
        the horizon); the new ones are remembered."""
        new = np.ones(len(end), dtype=bool)
        keys = zip(trace_id, span_id, strict=True)
        for r, (key, e) in enumerate(zip(keys, end.tolist(), strict=True)):
            if key[1] is None:
                continue
            if key in self._seen:
                new[r] = False
            else:
                self._seen[key] = e
        return new

    def add(
        self,
        kind: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        service: list[str | None],
        ids: tuple[list[str | None], list[str | None], list[str | None]],
        address: Callable[[int], tuple[str | None, str | None]],
        position: np.ndarray,
    ) -> Resolved:
        """Resolve one chunk: each span's kind (negative: left out), times, service, given ids
        (trace, span and parent span ids), a function of its row giving the server end and the
        target it names (:mod:`tacit.formats.rpc_endpoints`; asked only of spans that their
        context did not pair) and its stream position (NONE for spans that do not enter the
        stream, such as in-process ones)."""
        n = len(kind)
        out = Resolved(
            np.full(n, NONE, np.int64), np.full(n, NONE, np.int64), [None] * n, [None] * n
        )
        rows = zip(
            kind.tolist(),
            start.tolist(),
            end.tolist(),
            service,
            *ids,
            position.tolist(),
            strict=True,
        )
        for r in np.flatnonzero(kind == SERVER).tolist():  # before the calls it may name
            self._learn(service[r], ids[2][r] is None, address, r)
        for r, row in enumerate(rows):
            span = _Span(*row)
            if span.kind == SERVER:
                self._server(out, r, span, address)
            elif span.kind == CLIENT:
                self._client(out, r, span, address)
            elif span.kind >= 0 and span.span_id is not None:
                key = (span.trace, span.span_id)
                self._internal[key] = (span.parent_id, span.end)
                self._reparent(out, key, span.parent_id)
        if n:
            self.latest_end = max(self.latest_end, float(end.max()))
            self._forget_old()
        return out

    def _server(self, out: Resolved, r: int, span: _Span, address: _Address) -> None:
        svc, p = span.service or "", span.position
        if span.parent_id is not None:
            caller = (span.trace, span.parent_id)
            if caller in self._clients:
                c = self._clients.pop(caller)[0]
                self._address.forget(c)
                out.link[r] = c
                out.peers[c] = svc
            else:
                self._callees[caller] = (p, span.end, svc)
                out.link[r] = LATER
        else:
            span = span._replace(address=address(r))
            call = self._address.call_of(span)
            if call is not None:
                out.link[r] = call.position
                out.peers[call.position] = svc
        if span.span_id is not None:
            key = (span.trace, span.span_id)
            self._servers[key] = (p, span.end, svc)
            for child, _ in self._children.pop(key, ()):
                out.parents[0].append(child)
                out.parents[1].append(p)

    def _client(self, out: Resolved, r: int, span: _Span, address: _Address) -> None:
        key = (span.trace, span.span_id)
        if span.span_id is not None and key in self._callees:
            callee, _, svc = self._callees.pop(key)
            out.link[r] = callee
            out.peer[r] = svc
        else:
            span = span._replace(address=address(r))
            found = self._address.request_of(span)
            if found is not None:
                out.link[r] = found.position
                out.peer[r] = found.service
            else:
                if span.endpoint is not None:
                    out.named[r] = self._served.get(span.endpoint)
                if span.span_id is not None:
                    self._clients[key] = (span.position, span.end)
        if span.parent_id is not None:
            out.parent[r] = self._resolve(span.trace, span.parent_id, span.position, span.end)

    def _learn(self, service: str | None, orphan: bool, address: _Address, r: int) -> None:
        """Where ``service`` serves, from some of its server spans (module docstring), and from
        every one without a caller (its server end is read to pair it anyway)."""
        seen = self._learned.get(service or "", 0)
        self._learned[service or ""] = seen + 1
        if seen >= LEARN_FIRST and seen % LEARN_EVERY and not orphan:
            return
        at = address(r)[0]
        if service is None or at is None or at.startswith(QUEUE):
            return
        self._served.pop(at, None)
        self._served[at] = service  # the latest: an address a new pod took over
        if len(self._served) > MAX_ENDS:
            self._served.popitem(last=False)

    def _resolve(self, trace: str | None, q: str | None, child: int, end: int) -> int:
        """The given parent of ``child`` whose parent span id is ``q``: a server span's
        position, LATER while a span of the chain is to come, NONE where the chain ends at an
        in-process root."""
        seen: set[str] = set()
        while q is not None and q not in seen:
            seen.add(q)
            key = (trace, q)
            if key in self._servers:
                return self._servers[key][0]
            if key not in self._internal:
                self._children.setdefault(key, []).append((child, end))
                return LATER
            q = self._internal[key][0]
        return NONE

    def _reparent(self, out: Resolved, key: Key, q: str | None) -> None:
        """An in-process span arrived: the children waiting for it go on to its parent."""
        for child, end in self._children.pop(key, ()):
            parent = self._resolve(key[0], q, child, end)
            if parent != LATER:
                out.parents[0].append(child)
                out.parents[1].append(parent)

    def _forget_old(self) -> None:
        """Drop what ended so long ago that nothing can still name it."""
        horizon = self.latest_end - self.horizon_ns
        self._address.forget_before(horizon)
        for d in (self._seen, self._servers, self._internal, self._clients, self._callees):
            while d:
                key = next(iter(d))
                value = d[key]
                if (value if isinstance(value, int) else value[1]) >= horizon:
                    break
                del d[key]
        while self._children:
            key = next(iter(self._children))
            if max(e for _, e in self._children[key]) >= horizon:
                break
            del self._children[key]


class _Span(NamedTuple):
    kind: int
    start: int
    end: int
    service: str | None
    trace: str | None
    span_id: str | None
    parent_id: str | None
    position: int
    address: tuple[str | None, str | None] = (None, None)
    """The server end and the target the span names, read when its context paired nothing."""

    @property
    def endpoint(self) -> str | None:
        return self.address[0]

    @property
    def target(self) -> str | None:
        return self.address[1]


class _AddressBook:
    """Calls and requests that no trace context paired, by the server end they name, until
    one of the other side comes: a request lies within its call (the request reaches the server
    after the call leaves the client, and the response leaves it before it reaches the client),
    and of several, the pair of least slack (the call's time outside the request: the network)
    is taken, each span once (:mod:`tacit.formats.rpc_pairing` pairs a file's spans alike). A
    pair must name the same request target where both name one
    (:func:`~tacit.formats.rpc_endpoints.same_target`). A message's consumer starts after its
    producer did, and takes the oldest message not yet taken (a queue is first in, first
    out)."""

    def __init__(self) -> None:
        self._waiting: tuple[dict[str, dict[int, _Span]], dict[str, dict[int, _Span]]] = ({}, {})
        self._order: OrderedDict[int, tuple[str, int, int]] = OrderedDict()  # -> end, ends, side

    def call_of(self, request: _Span) -> _Span | None:
        """The call that made ``request`` (a server span without a caller), taken; else None,
        and the request waits for it (unless it names no server end)."""
        return self._take(request, _CALLS, lambda c: _rank(c, request))

    def request_of(self, call: _Span) -> _Span | None:
        """The request ``call`` made, taken; else None, and the call waits for it (unless it
        names no server end)."""
        return self._take(call, _REQUESTS, lambda q: _rank(call, q))

    def _take(self, span: _Span, side: int, rank: Callable[[_Span], float | None]) -> _Span | None:
        if span.endpoint is None:
            return None
        others = self._waiting[side].get(span.endpoint, {})
        ranked = [(r, p) for p, o in others.items() if (r := rank(o)) is not None]
        if ranked:
            best = min(ranked)[1]
            del self._order[best]
            return others.pop(best)
        self._waiting[1 - side].setdefault(span.endpoint, {})[span.position] = span
        self._order[span.position] = (span.endpoint, span.end, 1 - side)
        return None

    def forget(self, position: int) -> None:
        """A call paired by its context: no request is to be paired with it by address."""
        entry = self._order.pop(position, None)
        if entry is not None:
            self._waiting[entry[2]][entry[0]].pop(position, None)

    def forget_before(self, horizon: float) -> None:
        while self._order:
            position = next(iter(self._order))
            endpoint, end, side = self._order[position]
            if end >= horizon:
                break
            del self._order[position]
            self._waiting[side][endpoint].pop(position, None)


_CALLS, _REQUESTS = 0, 1


def _rank(call: _Span, request: _Span) -> float | None:
    """How good a pair ``call`` and ``request`` make, the least best (None: they cannot be one):
    the call's slack around the request, or for a message the time it was produced."""
    if not same_target(call.target, request.target):
        return None
    assert call.endpoint is not None
    if call.endpoint.startswith(QUEUE):
        return call.start if call.start <= request.start else None
    if call.start <= request.start and request.end <= call.end:
        return (call.end - call.start) - (request.end - request.start)
    return None
