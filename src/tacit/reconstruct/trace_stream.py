"""Spans with trace context read as a stream, observed trace by trace (TraceWeaver §5.3).

The batch path infers every span's role and pairs the two sides of each RPC from whole traces
(:func:`tacit.model.roles.infer_roles`): whether a span without a recorded kind (all of a CSV
span table's) is a server span, a client span or in-process work depends on its parent and its
children, and a server span whose caller recorded no client span gets one synthesized. A stream
can do the same trace by trace, because a trace is bounded in time: every span of a request ends
within ``max_request_ns`` of its start, and spans arrive in order of end, late by at most
``lateness_ns`` (:class:`~.online.OnlineParams`, the online algorithm's own assumptions). So a
trace is held from its first span until the stream has moved ``max_request_ns`` past that span's
end, beyond the lateness: no span of it can arrive any more. Then it is observed as the batch
path observes it, with :func:`~tacit.model.roles.infer_roles` itself: one pairing logic for both.

Observed spans are handed on in the batch online mode's order (end, then start, a synthesized
client span after the server span it was made for, then input record:
:func:`.online.stream_chunks` of the batch observation) once no span still held or still to
come can precede them, in chunks of ``chunk_size``, ``link`` holding stream positions (the
earlier side of an RPC handed on before its partner gets :data:`~tacit.formats.blind.LATER`).
The chunks are therefore those the batch online mode cuts from the whole input, and the
reconstruction the same. Memory holds about ``max_request_ns + lateness_ns`` of traffic (twice
that while handed-on spans wait for their held neighbours), whatever the stream's length.

An input whose spans are not in order of end within the lateness is no stream: the first span
that ends more than ``lateness_ns`` before one read earlier raises :class:`NotInStreamOrder`
(an :class:`~tacit.errors.InputError` naming it), for the caller to read the input whole
instead. A request longer than ``max_request_ns`` is observed in pieces (a span of it arriving
after its trace was observed starts a trace of its own), where the batch path sees it whole; the
online algorithm gives up such a request's calls at that age either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tacit.errors import InputError
from tacit.formats.blind import LATER
from tacit.model.roles import infer_roles
from tacit.model.spans import NONE, SpanTable, SpanTableBuilder, concat
from tacit.reconstruct.online import CHUNK_SIZE, NS, OnlineParams


class NotInStreamOrder(InputError):
    """A span that ends earlier than the lateness allows after one read before it."""


@dataclass
class SpanStream:
    """Blind chunks of a stream for :func:`.online.reconstruct_online` (``link``: stream
    positions), and what became of the records read so far, counted as the chunks are read
    (:attr:`tacit.model.roles.Observed.accounting`)."""

    chunks: Iterator[SpanTable]
    accounting: Counter[str] = field(default_factory=Counter)


def observe_stream(
    spans: Iterable[dict[str, Any]],
    source: str,
    online: OnlineParams | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> SpanStream:
    """The blind stream of ``spans`` (one input's, in the order read, as
    :meth:`~tacit.model.spans.SpanTableBuilder.add` takes them; ``source`` names the input),
    observed trace by trace (see the module docstring) with the windows of ``online``."""
    stream = SpanStream(iter(()))
    stream.chunks = _observe(spans, source, online or OnlineParams(), chunk_size, stream.accounting)
    return stream


@dataclass
class _Trace:
    """The spans of one trace read so far, the end of the first and the earliest end."""

    first_end: int
    min_end: int
    spans: list[dict[str, Any]] = field(default_factory=list)


def _observe(
    spans: Iterable[dict[str, Any]],
    source: str,
    online: OnlineParams,
    chunk_size: int,
    accounting: Counter[str],
) -> Iterator[SpanTable]:
    held: dict[Any, _Trace] = {}
    ready = _Ready()
    chunks = _Chunker(chunk_size)
    latest = None
    for n, span in enumerate(spans, start=1):
        end = span["end"]
        if latest is not None and end < latest - online.lateness_ns:
            raise NotInStreamOrder(
                f"ends {(latest - end) / NS:.3f} s before a span read earlier, more than the "
                f"lateness of {online.lateness_ns / NS:g} s: not in stream order (by span end)",
                path=source,
                record=span["record"],
            )
        latest = end if latest is None else max(latest, end)
        trace = held.get(span["trace"])
        if trace is None:
            trace = held[span["trace"]] = _Trace(end, end)
        trace.min_end = min(trace.min_end, end)
        trace.spans.append(span)
        if n % chunk_size == 0:
            horizon = latest - online.lateness_ns
            closed = [k for k, t in held.items() if t.first_end + online.max_request_ns < horizon]
            ready.add(_observed([held.pop(k).spans for k in closed], source, accounting))
            bound = min([horizon, *(t.min_end for t in held.values())])
            chunks.add(*ready.hand_on(bound))
            yield from chunks.full()
    ready.add(_observed([t.spans for t in held.values()], source, accounting))
    chunks.add(*ready.hand_on(None))
    yield from chunks.full(flush=True)


def _observed(
    traces: list[list[dict[str, Any]]], source: str, accounting: Counter[str]
) -> tuple[SpanTable, np.ndarray]:
    """The blind view of whole ``traces`` and which of its spans were synthesized, as the batch
    path observes them, their records counted into ``accounting``."""
    builder = SpanTableBuilder(source)
    if not traces:
        return builder.build(), np.zeros(0, dtype=bool)
    for span in sorted((s for t in traces for s in t), key=lambda s: s["record"]):
        builder.add(**span)
    observed = infer_roles(builder.build())
    accounting.update(observed.accounting)
    return observed.without_truth(), observed.synthesized


class _Ready:
    """Observed spans not handed on yet; ``partner``: the stream position of an RPC partner
    already handed on (NONE otherwise)."""

    def __init__(self) -> None:
        self.spans = SpanTable.empty()
        self.synthesized = np.zeros(0, dtype=bool)
        self.partner = np.zeros(0, dtype=np.int64)
        self.position = 0

    def add(self, observed: tuple[SpanTable, np.ndarray]) -> None:
        spans, synthesized = observed
        if len(spans):
            self.spans = concat([self.spans, spans])
            self.synthesized = np.concatenate([self.synthesized, synthesized])
            self.partner = np.concatenate([self.partner, np.full(len(spans), NONE)])

    def hand_on(self, bound: int | None) -> tuple[SpanTable, np.ndarray]:
        """The spans ending before ``bound`` (all with None) in stream order, and the stream
        position of each one's RPC partner (:data:`LATER` while it is still to come)."""
        s = self.spans
        rows = np.flatnonzero(s.end < bound) if bound is not None else np.arange(len(s))
        rows = rows[
            np.lexsort((s.record[rows], self.synthesized[rows], s.start[rows], s.end[rows]))
        ]
        position = np.full(len(s), NONE, dtype=np.int64)
        position[rows] = np.arange(self.position, self.position + len(rows))
        self.position += len(rows)
        paired = s.link != NONE
        partner_now = np.where(paired, position[np.maximum(s.link, 0)], NONE)
        link = np.where(
            self.partner[rows] != NONE,
            self.partner[rows],
            np.where(
                ~paired[rows], NONE, np.where(partner_now[rows] != NONE, partner_now[rows], LATER)
            ),
        )
        keep = position == NONE
        learns = keep & (partner_now != NONE)
        self.partner[learns] = partner_now[learns]
        out = s.take(rows)
        self.spans = s.take(keep)
        self.synthesized = self.synthesized[keep]
        self.partner = self.partner[keep]
        out.link = np.full(len(out), NONE, dtype=np.int64)  # positions ride beside the table
        return out, link


class _Chunker:
    """Cuts spans handed on into chunks of exactly ``size`` (the last one shorter)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.tables: list[SpanTable] = []
        self.links: list[np.ndarray] = []
        self.count = 0

    def add(self, spans: SpanTable, link: np.ndarray) -> None:
        if len(spans):
            self.tables.append(spans)
            self.links.append(link)
            self.count += len(spans)

    def full(self, flush: bool = False) -> Iterator[SpanTable]:
        """The chunks now complete; with ``flush`` the rest too."""
        if self.count < self.size and not (flush and self.count):
            return
        spans, link = concat(self.tables), np.concatenate(self.links)
        whole = len(spans) if flush else len(spans) - len(spans) % self.size
        for a in range(0, whole, self.size):
            chunk = spans.take(np.arange(a, min(a + self.size, whole)))
            chunk.link = link[a : a + len(chunk)]
            yield chunk
        rest = np.arange(whole, len(spans))
        self.tables = [spans.take(rest)] if len(rest) else []
        self.links = [link[whole:]] if len(rest) else []
        self.count = len(rest)
