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
from typing import NamedTuple

import numpy as np

from tacit.model.spans import CLIENT, KIND_NAMES, NONE, SERVER, SpanTable
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.online import Finished, OnlineParams, OnlineTraceWeaver

LATER = np.iinfo(np.int64).max
"""The position of an RPC partner still to come (see :mod:`tacit.reconstruct.online`)."""
LATE = "arrived later than the lateness allows; not reconstructed"


class Given(NamedTuple):
    """What the sender said of a span: its trace id, span id and parent span id (None for
    none)."""

    trace_id: str | None
    span_id: str | None
    parent_id: str | None


@dataclass
class Alone:
    """Spans finished without reconstruction: rows of ``spans`` with their reasons."""

    spans: SpanTable
    seq: np.ndarray
    given: list[Given]
    reason: list[str]


@dataclass
class Fed:
    """What one push made final: traces from the online algorithm, and spans alone."""

    finished: list[Finished] = field(default_factory=list)
    alone: list[Alone] = field(default_factory=list)


class OnlineFeed:
    """Feeds acknowledged spans to :class:`OnlineTraceWeaver`; remembers, for each span still
    in it, its sequence number and what the sender gave (:attr:`seq_of`, :attr:`given`)."""

    def __init__(self, callgraph: CallGraph, online: OnlineParams, first_position: int = 0) -> None:
        self.online = online
        self.tw = OnlineTraceWeaver(callgraph, None, online, first_position)
        self.seq_of: dict[int, int] = {}
        self.given: dict[int, Given] = {}
        self._lowest = first_position  # no position below it is still in :attr:`seq_of`
        self._clients: dict[tuple[str | None, str], tuple[int, int]] = {}  # -> (position, end)
        self._waiting: dict[tuple[str | None, str], tuple[int, int]] = {}

    @property
    def pending(self) -> int:
        """Spans in the online algorithm, not yet in a finished trace."""
        return len(self.seq_of)

    def low_water(self, next_seq: int) -> int:
        """The lowest sequence number not yet in a finished trace (``next_seq`` when none).

        Positions are given in the order of sequence numbers, so it is that of the lowest
        position still here: found by a cursor that only moves up (a minimum over every
        pending span, at each store, cost 2 µs a span with 100,000 of them pending)."""
        while self._lowest < self.tw.pushed and self._lowest not in self.seq_of:
            self._lowest += 1
        return self.seq_of.get(self._lowest, next_seq)

    def push(self, spans: SpanTable, parent_ids: np.ndarray, seq: np.ndarray) -> Fed:
        """Feed the spans of one request (``parent_ids``: the parent span id each named, codes
        of ``spans.strings``; ``seq``: their sequence numbers)."""
        fed = Fed()
        s = spans.strings
        given = list(map(Given, s.names(spans.trace), s.names(spans.span_id), s.names(parent_ids)))
        rpc = (spans.kind == SERVER) | (spans.kind == CLIENT)
        late = rpc & (spans.end < self.tw.latest_end - self.online.lateness_ns)
        alone = np.flatnonzero(~rpc | late)
        if len(alone):
            reasons = [
                LATE if late[r] else f"not an RPC span ({KIND_NAMES[int(spans.kind[r])]})"
                for r in alone.tolist()
            ]
            fed.alone.append(
                Alone(spans.take(alone), seq[alone], [given[r] for r in alone], reasons)
            )
        rows = np.flatnonzero(rpc & ~late)
        if not len(rows):
            return fed
        chunk = spans.take(rows)
        # Blind, as TraceWeaver is: what the sender said is in :attr:`given`. Without their ids,
        # the pending spans' pool takes a few strings a request, not two new ones a span
        # (interning those had been a tenth of the online algorithm's time).
        chunk.trace[:] = NONE
        chunk.span_id[:] = NONE
        kept = [given[r] for r in rows.tolist()]
        chunk.link = self._links(chunk, kept)
        positions = range(self.tw.pushed, self.tw.pushed + len(rows))
        self.seq_of.update(zip(positions, seq[rows].tolist(), strict=True))
        self.given.update(zip(positions, kept, strict=True))
        fed.finished = self.tw.push(chunk)
        self._forget_old()
        return fed

    def advance(self, end: float) -> list[Finished]:
        """Move the stream's clock to ``end`` (ns) when nothing has arrived."""
        return self.tw.advance(end)

    def release(self, f: Finished) -> tuple[np.ndarray, list[Given]]:
        """The sequence numbers and given ids of a finished batch's spans, forgotten here."""
        positions = f.position.tolist()
        return (
            np.array([self.seq_of.pop(p) for p in positions], dtype=np.int64),
            [self.given.pop(p) for p in positions],
        )

    def _links(self, chunk: SpanTable, given: list[Given]) -> np.ndarray:
        """Each span's RPC partner as a stream position (:data:`LATER` while to come)."""
        link = np.full(len(chunk), NONE, dtype=np.int64)
        first = self.tw.pushed
        for k, (kind, end, g) in enumerate(
            zip(chunk.kind.tolist(), chunk.end.tolist(), given, strict=True)
        ):
            position = first + k
            if kind == SERVER and g.parent_id:
                key = (g.trace_id, g.parent_id)
                if key in self._clients:
                    link[k] = self._clients.pop(key)[0]
                else:
                    self._waiting[key] = (position, end)
                    link[k] = LATER
            elif kind == CLIENT and g.span_id:
                key = (g.trace_id, g.span_id)
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
