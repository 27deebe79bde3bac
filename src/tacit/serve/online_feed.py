"""Spans of OTLP requests, in the order they were acknowledged, fed to online TraceWeaver.

What a receiver knows of each span is what a sidecar or an eBPF probe would record: its
service, instance, operation, kind and times, and which client span of the caller a server span
answers (the two sides of one RPC). A server span names its client span by its parent span id
(OTLP ``parentSpanId``: the id the caller's side put in the request headers); nothing else of
the sender's trace context is used. The client side of an RPC may come before or after the
server side (TraceWeaver §5.3; the stream positions of :mod:`tacit.reconstruct.online`), so
each side waits for the other in a map bounded by time.

Spans that cannot take part are finished alone, each with its reason: spans of other kinds
(internal, producer, consumer, unknown), and spans that arrived later than the lateness allows
after a span that ended later (their window may already be final).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tacit.model.spans import CLIENT, KIND_NAMES, NONE, SERVER, SpanTable
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.online import Finished, OnlineParams, OnlineTraceWeaver

LATER = np.iinfo(np.int64).max
"""The position of an RPC partner still to come (see :mod:`tacit.reconstruct.online`)."""
LATE = "arrived later than the lateness allows; not reconstructed"


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
    """What one push made final: traces from the online algorithm, and spans alone."""

    finished: list[Finished] = field(default_factory=list)
    alone: list[Alone] = field(default_factory=list)


class _Pending:
    """The sequence number and given ids of each stream position from :attr:`base` on, as
    columns, and whether the position is still in the online algorithm. Positions come in
    order and leave in finished batches; the columns grow by doubling, dropping the positions
    below the lowest one still here (a dict entry per span had cost 1-2 µs a span)."""

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

    def __init__(self, callgraph: CallGraph, online: OnlineParams, first_position: int = 0) -> None:
        self.online = online
        self.tw = OnlineTraceWeaver(callgraph, None, online, first_position)
        self._pending = _Pending(first_position)
        self._clients: dict[tuple[str | None, str], tuple[int, int]] = {}  # -> (position, end)
        self._waiting: dict[tuple[str | None, str], tuple[int, int]] = {}

    @property
    def pending(self) -> int:
        """Spans in the online algorithm, not yet in a finished trace."""
        return self._pending.count

    def low_water(self, next_seq: int) -> int:
        """The lowest sequence number not yet in a finished trace (``next_seq`` when none).

        Positions are given in the order of sequence numbers, so it is that of the lowest
        position still here: found by a cursor that only moves up (a minimum over every
        pending span, at each store, cost 2 µs a span with 100,000 of them pending)."""
        lowest = self._pending.lowest_seq()
        return next_seq if lowest is None else lowest

    def push(self, spans: SpanTable, parent_ids: np.ndarray, seq: np.ndarray) -> Fed:
        """Feed the spans of one request (``parent_ids``: the parent span id each named, codes
        of ``spans.strings``; ``seq``: their sequence numbers)."""
        fed = Fed()
        given = Given.of(spans, parent_ids)
        rpc = (spans.kind == SERVER) | (spans.kind == CLIENT)
        late = rpc & (spans.end < self.tw.latest_end - self.online.lateness_ns)
        alone = np.flatnonzero(~rpc | late)
        if len(alone):
            reasons = [
                LATE if late[r] else f"not an RPC span ({KIND_NAMES[int(spans.kind[r])]})"
                for r in alone.tolist()
            ]
            fed.alone.append(Alone(spans.take(alone), seq[alone], given.take(alone), reasons))
        rows = np.flatnonzero(rpc & ~late)
        if not len(rows):
            return fed
        chunk = spans.take(rows)
        # Blind, as TraceWeaver is: what the sender said is in :attr:`given`. Without their ids,
        # the pending spans' pool takes a few strings a request, not two new ones a span
        # (interning those had been a tenth of the online algorithm's time).
        chunk.trace[:] = NONE
        chunk.span_id[:] = NONE
        kept = given.take(rows)
        chunk.link = self._links(chunk, kept)
        self._pending.add(seq[rows], kept)
        fed.finished = self.tw.push(chunk)
        self._forget_old()
        return fed

    def advance(self, end: float) -> list[Finished]:
        """Move the stream's clock to ``end`` (ns) when nothing has arrived."""
        return self.tw.advance(end)

    def close_oldest(self) -> list[Finished]:
        """Make the oldest window final before its lateness has passed (senders held back;
        :meth:`tacit.reconstruct.online.OnlineTraceWeaver.close_oldest`)."""
        return self.tw.close_oldest()

    def release(self, f: Finished) -> tuple[np.ndarray, Given]:
        """The sequence numbers and given ids of a finished batch's spans, forgotten here."""
        return self._pending.take(f.position)

    def _links(self, chunk: SpanTable, given: Given) -> np.ndarray:
        """Each span's RPC partner as a stream position (:data:`LATER` while to come)."""
        link = np.full(len(chunk), NONE, dtype=np.int64)
        first = self.tw.pushed
        for k, (kind, end, trace_id, span_id, parent_id) in enumerate(
            zip(
                chunk.kind.tolist(),
                chunk.end.tolist(),
                *(c.tolist() for c in given.columns()),
                strict=True,
            )
        ):
            position = first + k
            if kind == SERVER and parent_id:
                key = (trace_id, parent_id)
                if key in self._clients:
                    link[k] = self._clients.pop(key)[0]
                else:
                    self._waiting[key] = (position, end)
                    link[k] = LATER
            elif kind == CLIENT and span_id:
                key = (trace_id, span_id)
                if key in self._waiting:
                    link[k] = self._waiting.pop(key)[0]
                else:
                    self._clients[key] = (position, end)
        return link

    def _forget_old(self) -> None:
        """Drop unpaired sides that ended so long ago that their partner cannot come any more
        (the online algorithm gives them up at the same age)."""
        horizon = self.tw.latest_end - self.online.max_request_ns - self.online.lateness_ns
        for waiting in (self._clients, self._waiting):
            while waiting:
                key = next(iter(waiting))
                if waiting[key][1] >= horizon:
                    break
                del waiting[key]
