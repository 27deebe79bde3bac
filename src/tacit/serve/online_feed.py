"""Spans of OTLP requests, in the order they were acknowledged, fed to online TraceWeaver.

What the senders' context gives is kept, and only what it lost is inferred
(:mod:`tacit.reconstruct.stream_context`): a server span names the client span of its caller by
its parent span id, which pairs the two sides of an RPC and names the client span's callee; a
client span whose parent chain reaches a server span of its own trace keeps that parent. The
client side of an RPC may come before or after the server side, and a client span before the
request that made it (TraceWeaver §5.3; the stream positions of
:mod:`tacit.reconstruct.online`), so each waits for the other in maps bounded by time.

The online algorithm may draw spans for a service that sent none between two that do
(:mod:`tacit.reconstruct.hops`); they are numbered here with the sequence number of the span each
was drawn from, and stored marked as drawn.

Spans that cannot take part are finished alone, each with its reason: spans of other kinds
(internal, producer, consumer, unknown), spans that arrived later than the lateness allows
after a span that ended later (their window may already be final), and spans that end further
in the future of when they were received than clocks can disagree (one span ending in 2200
would otherwise move the stream's clock past every span to come). A span that came before
(the same trace and span id: an exporter resent it) is counted as a duplicate and not stored
again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tacit.formats.capture_spans import ServiceMap
from tacit.formats.rpc_endpoints import QUEUE, rpc_endpoint, rpc_target
from tacit.model.spans import CLIENT, KIND_NAMES, NONE, SERVER, SpanTable
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.online import Finished, OnlineParams, OnlineTraceWeaver, RoundSolver
from tacit.reconstruct.stream_context import StreamContext

LATE = "arrived later than the lateness allows; not reconstructed"
FUTURE = "ends further after it was received than max_future_s allows; not reconstructed"
NOT_RPC = "not an RPC span"


@dataclass
class Given:
    """What the senders said of spans, a column each: trace ids, span ids and parent span ids
    (None for none)."""

    trace_id: np.ndarray
    span_id: np.ndarray
    parent_id: np.ndarray

    @classmethod
    def of(cls, spans: SpanTable, parent_ids: np.ndarray) -> Given:
        """The ids of ``spans`` as their sender gave them (``parent_ids``: codes of
        ``spans.strings``)."""
        return cls(*spans.strings.objects(spans.trace, spans.span_id, parent_ids))

    def take(self, rows: np.ndarray) -> Given:
        return Given(*(c[rows] for c in self.columns()))

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.trace_id, self.span_id, self.parent_id


@dataclass
class Alone:
    """Spans finished without reconstruction: rows of ``spans`` with their reasons."""

    spans: SpanTable
    seq: np.ndarray
    given: Given
    reason: list[str]


@dataclass
class Fed:
    """What pushes made final: traces from the online algorithm, and spans alone."""

    finished: list[Finished] = field(default_factory=list)
    alone: list[Alone] = field(default_factory=list)
    duplicates: int = 0

    def add(self, other: Fed) -> None:
        """Take in what another push made final."""
        self.finished += other.finished
        self.alone += other.alone
        self.duplicates += other.duplicates


class _Pending:
    """The sequence number and given ids of each stream position from :attr:`base` on, as
    columns, and whether the position is still in the online algorithm. Positions come in
    order and leave in finished batches; the columns grow by doubling, dropping the positions
    below the lowest one still here (a dict entry per span costs more than the column entries
    it replaces)."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.size = 0  # positions base .. base + size - 1 have come
        self.count = 0  # of them, still here
        self.lowest = 0  # no position below base + lowest is still here
        self.seq = np.empty(0, dtype=np.int64)
        self.given = Given(*(np.empty(0, dtype=object) for _ in range(3)))
        self.here = np.empty(0, dtype=bool)

    def add(self, seq: np.ndarray, given: Given) -> None:
        n = len(seq)
        if self.size + n > len(self.seq):
            self._make_room(n)
        at = slice(self.size, self.size + n)
        self.seq[at] = seq
        for mine, new in zip(self.given.columns(), given.columns(), strict=True):
            mine[at] = new
        self.here[at] = True
        self.size += n
        self.count += n

    def add_drawn(self, sources: np.ndarray) -> None:
        """The next positions are spans drawn from those at ``sources`` (still here): they take
        their sequence numbers, and nothing a sender gave."""
        none = np.full(len(sources), None, dtype=object)
        self.add(self.seq[sources - self.base], Given(none, none.copy(), none.copy()))

    def take(self, positions: np.ndarray) -> tuple[np.ndarray, Given]:
        """The sequence numbers and given ids at ``positions``, which leave."""
        at = positions - self.base
        out = self.seq[at], self.given.take(at)
        self.here[at] = False
        for column in self.given.columns():
            column[at] = None  # the strings are not kept for positions gone
        self.count -= len(at)
        return out

    def lowest_seq(self) -> int | None:
        """The sequence number of the lowest position still here; None when none is."""
        rest = self.here[self.lowest : self.size]
        self.lowest += int(rest.argmax()) if rest.any() else len(rest)
        return int(self.seq[self.lowest]) if self.lowest < self.size else None

    def _make_room(self, n: int) -> None:
        self.lowest_seq()
        keep = slice(self.lowest, self.size)
        live = self.size - self.lowest
        capacity = max(2 * (live + n), 1024)

        def moved(column: np.ndarray) -> np.ndarray:
            out = np.empty(capacity, dtype=column.dtype)
            out[:live] = column[keep]
            return out

        self.seq, self.here = moved(self.seq), moved(self.here)
        self.given = Given(*(moved(c) for c in self.given.columns()))
        self.base += self.lowest
        self.size, self.lowest = live, 0


class OnlineFeed:
    """Feeds acknowledged spans to :class:`OnlineTraceWeaver`; remembers, for each span still
    in it, its sequence number and what the sender gave."""

    def __init__(
        self,
        callgraph: CallGraph,
        online: OnlineParams,
        first_position: int = 0,
        services: ServiceMap | None = None,
        solve: RoundSolver | None = None,
    ) -> None:
        self.online = online
        self.tw = OnlineTraceWeaver(
            callgraph, None, online, first_position, draw_hops=True, solve=solve
        )
        self._pending = _Pending(first_position)
        self.context = StreamContext(online.max_request_ns + online.lateness_ns)
        self.services = services
        """Service names of addresses: a span's server end is its service where this names it,
        so that a caller that names a host and a server that names its own address meet."""

    @property
    def pending(self) -> int:
        """Spans in the online algorithm, not yet in a finished trace."""
        return self._pending.count

    def low_water(self, next_seq: int) -> int:
        """The lowest sequence number not yet in a finished trace (``next_seq`` when none).

        Positions are given in the order of sequence numbers, so it is that of the lowest
        position still here: found by a cursor that only moves up, not by a minimum over every
        pending span at each store."""
        lowest = self._pending.lowest_seq()
        return next_seq if lowest is None else lowest

    def push(
        self, spans: SpanTable, parent_ids: np.ndarray, seq: np.ndarray, ends_by: float
    ) -> Fed:
        """Feed the spans of one request (``parent_ids``: the parent span id each named, codes
        of ``spans.strings``; ``seq``: their sequence numbers). A span that ends after
        ``ends_by`` (ns: when the request came, and the clock skew allowed) is finished
        alone: its end would move the stream's clock on, and every span after it would be
        late."""
        given = Given.of(spans, parent_ids)
        fed = Fed()
        future = spans.end > ends_by
        if future.any():
            rows = np.flatnonzero(future)
            reasons = [FUTURE] * len(rows)
            fed.alone.append(Alone(spans.take(rows), seq[rows], given.take(rows), reasons))
            keep = np.flatnonzero(~future)
            spans, seq, given = spans.take(keep), seq[keep], given.take(keep)
        new = self.context.fresh(given.trace_id.tolist(), given.span_id.tolist(), spans.end)
        fed.duplicates = int((~new).sum())
        if not new.all():
            keep = np.flatnonzero(new)
            spans, seq, given = spans.take(keep), seq[keep], given.take(keep)
        rpc = (spans.kind == SERVER) | (spans.kind == CLIENT)
        late = rpc & (spans.end < self.tw.latest_end - self.online.lateness_ns)
        alone = np.flatnonzero(~rpc | late)
        if len(alone):
            reasons = [
                LATE if late[r] else f"{NOT_RPC} ({KIND_NAMES[int(spans.kind[r])]})"
                for r in alone.tolist()
            ]
            fed.alone.append(Alone(spans.take(alone), seq[alone], given.take(alone), reasons))
        streamed = rpc & ~late
        rows = np.flatnonzero(streamed)
        position = np.full(len(spans), NONE, dtype=np.int64)
        position[rows] = np.arange(self.tw.pushed, self.tw.pushed + len(rows))
        context = self.context.add(
            np.where(late, NONE, spans.kind),
            spans.start,
            spans.end,
            spans.strings.names(spans.service),
            (given.trace_id.tolist(), given.span_id.tolist(), given.parent_id.tolist()),
            _Addresses(spans, self.services),
            position,
        )
        if not len(rows):
            return fed
        chunk = spans.take(rows)
        # Blind, as TraceWeaver is: what the sender said is in :attr:`given`. Without their ids,
        # the pending spans' pool takes a few strings a request, not two new ones a span to
        # intern.
        chunk.trace[:] = NONE
        chunk.span_id[:] = NONE
        chunk.link = context.link[rows]
        chunk.parent = context.parent[rows]
        code = chunk.strings.code
        for k, r in enumerate(rows.tolist()):
            if context.peer[r] is not None:
                chunk.peer[k] = code(context.peer[r])
            elif context.named[r] is not None and chunk.peer[k] == NONE:
                chunk.peer[k] = code(context.named[r])
        first = self.tw.pushed
        earlier = {p: svc for p, svc in context.peers.items() if p < first}
        for p, svc in context.peers.items():
            if p >= first:
                chunk.peer[p - first] = code(svc)
        children, parents = (np.array(c, dtype=np.int64) for c in context.parents)
        now = children >= first
        chunk.parent[children[now] - first] = parents[now]
        self.tw.name_peers(earlier)
        self.tw.give_parents(children[~now], parents[~now])
        self._pending.add(seq[rows], given.take(rows))
        fed.finished = self._drawn(self.tw.push(chunk))
        return fed

    def advance(self, end: float) -> list[Finished]:
        """Move the stream's clock to ``end`` (ns) when nothing has arrived."""
        return self._drawn(self.tw.advance(end))

    def close_oldest(self) -> list[Finished]:
        """Make the oldest window final before its lateness has passed (senders held back;
        :meth:`tacit.reconstruct.online.OnlineTraceWeaver.close_oldest`)."""
        return self._drawn(self.tw.close_oldest())

    def _drawn(self, finished: list[Finished]) -> list[Finished]:
        """``finished``, once the spans the online algorithm drew for services that sent none
        (:mod:`tacit.reconstruct.hops`) are numbered here like the spans they were drawn from."""
        if self.tw.drawn:
            positions, sources = np.array(self.tw.drawn, dtype=np.int64).T
            assert positions[0] == self._pending.base + self._pending.size
            self._pending.add_drawn(sources)
            self.tw.drawn.clear()
        return finished

    def release(self, f: Finished) -> tuple[np.ndarray, Given]:
        """The sequence numbers and given ids of a finished batch's spans, forgotten here."""
        return self._pending.take(f.position)


class _Addresses:
    """The server end and the target a span names in its attributes (None: none), by row, read
    once per attribute set: the spans of a request share one object for each set they carry
    (:data:`tacit.formats.otlp_request._known_attributes`), most spans one of a few."""

    def __init__(self, spans: SpanTable, services: ServiceMap | None) -> None:
        self._kind = spans.kind
        self._details = spans.details
        self._services = services
        self._read: dict[tuple[int, int], tuple[str | None, str | None]] = {}

    def __call__(self, row: int) -> tuple[str | None, str | None]:
        detail = None if self._details is None else self._details[row]
        if detail is None:
            return None, None
        kind = int(self._kind[row])
        key = (kind, id(detail.attributes))
        made = self._read.get(key)
        if made is None:
            attributes = detail.attributes
            end = rpc_endpoint(kind, attributes)
            if end is not None and self._services is not None:
                end = _named(self._services, end)
            made = self._read[key] = end, rpc_target(kind, attributes)
        return made


def _named(services: ServiceMap, end: str) -> str:
    """``end`` (``HOST:PORT``) as the service the map names it, or as it is."""
    if end.startswith(QUEUE):
        return end
    address, _, port = end.rpartition(":")
    name = (
        services.endpoints.get(end)
        or services.addresses.get(address)
        or services.ports.get(int(port))
    )
    return end if name is None else f"service {name}"
