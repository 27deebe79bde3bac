"""Online reconstruction over an unbounded span stream (TraceWeaver, SIGCOMM '24, §5.3).

A collector hands spans over as they end, so a stream arrives roughly in order of span end,
late by at most ``lateness_ns``. The stream is cut into windows of ``window_ns``. When the
watermark (latest end seen minus the lateness) passes a window's boundary B by ``lookahead_ns``,
every span not yet final that ended by B + ``lookahead_ns`` is reconstructed with the offline
algorithm (the later spans, up to the lateness beyond, wait for the next round: they would be
reconstructed again anyway, and the lookahead is the context a round's final spans get), and
then

* every incoming span that ended by B is final, with the outgoing spans chosen for it: a span
  that ends later has not arrived or arrived after B, and the lookahead gives the joint
  assignment the spans just after B as context;
* an outgoing span still without parent that started before B - ``max_request_ns`` is final and
  unmapped (with its reason): no request longer than ``max_request_ns`` could still claim it.

Spans that are not final are reconstructed again with the next window. A trace is emitted once
its root and every span under it are final (no later span can change it), and then forgotten,
so memory is bounded by the spans of about ``window_ns + lookahead_ns + max_request_ns`` of
traffic, whatever the length of the stream.

Input chunks are :class:`~tacit.model.spans.SpanTable` slices of the stream (a blind view:
kinds, no parents) whose ``link`` column holds *stream positions* (the n-th span pushed is
position n), so that an RPC's two sides may arrive in different chunks. A reader that cannot
know the position of a partner still to come gives any position not pushed yet (such as the
largest int64): the span waits for the partner, which names it by its position when it arrives.
A partner that never arrives is taken as unobserved when the stream closes, or once the span
ended ``max_request_ns`` before the boundary (a partner that late would be past the lateness).

Links the senders gave are kept, not inferred again. A client span whose ``parent`` column
holds a stream position (its sender's context named the server span that caused it; any
position not pushed yet while that span is still to come, as for ``link``) is *given*: final at
once, with that parent. It still takes part in the rounds as context: the request it belongs to
is a candidate for the calls whose context was lost (a handler that called one service directly
and fanned out to another through a thread pool), and no other request can take it
(:func:`~tacit.reconstruct.result.mapping_problem`). A given parent that has not arrived once the
span ended ``max_request_ns`` before the boundary was lost after all: the span is then inferred
like any other. A client span's callee is the service of the server span it is linked to
(:meth:`OnlineTraceWeaver.name_peers`), which a sender need not name (``peer.service``).

A trace whose senders gave it whole is emitted without waiting for its window, since nothing in
it is left to infer: its root is a server span with no caller, of a service that the call graph
knows no call to (an entry point); each of its client spans has its given parent and its server
span, unless its callee is a service the call graph knows no requests of (a database); and no
client span without a given parent has arrived from the process of one of its requests within
that request's time (a call that lost its context, which may be this request's). An SDK exports
a process's spans in the order they end, and a request ends after its calls, so its lost calls
have arrived by the time it has.

With ``draw_hops`` (``tacit serve``), a service that sends no spans between two that do is drawn
in each round where its neighbours show it (:mod:`.hops`): spans of its own, at new positions,
that the round then maps as any other (:attr:`OnlineTraceWeaver.drawn` lists them).

A long-running receiver (``tacit serve``) numbers its stream from where the previous run left
off (``first_position``), so that positions, and the ids derived from them, never repeat; and
when nothing arrives it moves the stream's clock on by the time that passed (:meth:`advance`),
so that the last traces before a pause finish without waiting for the next span.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.model.growing import GrowingColumns
from tacit.model.roles import process_key
from tacit.model.span_details import SpanDetail
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, concat
from tacit.model.traces import roots
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.call_names import CallNames
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.hops import Hops
from tacit.reconstruct.result import NOT_SAMPLED, ROOT_CALL, Reconstruction
from tacit.reconstruct.shared_values import SharedValues
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.runs import contained, find_sorted

NS = 1_000_000_000
NO_CAUSE = "no incoming span at this instance can have caused it"
"""Why a call given up unmapped has no parent, when no round said more."""
CHUNK_SIZE = 1000
"""Spans per chunk when a table is streamed (:func:`reconstruct_streamed`)."""
_ROW_STATE = {
    "position": np.int64,
    "link": np.int64,
    "final": np.bool_,
    "parent": np.int64,
    "score": np.float64,
    "probability": np.float64,
    "samples": np.uint64,
    "kind": SpanTable.COLUMNS["kind"],
    "given": np.bool_,
    "virtual": np.bool_,
}
"""What :class:`OnlineTraceWeaver` keeps per pending span besides the span (its properties)."""
_POOL_SLACK = 8
"""The pending spans' string pool is compacted once it holds more than this many strings per
pending span (each span brings about two of its own, its trace and span ids): memory stays
proportional to what is pending, and each string is interned about once."""


@dataclass(frozen=True)
class OnlineParams:
    """Windowing of the stream; times in nanoseconds."""

    window_ns: int = 10 * NS
    """How far the final boundary advances per reconstruction round."""
    lookahead_ns: int = 10 * NS
    """Spans after the boundary reconstructed with it as context but not yet final."""
    max_request_ns: int = 10 * NS
    """The longest a request may take: an unclaimed outgoing span older than this is final."""
    lateness_ns: int = 1 * NS
    """How late a span may arrive after the span that ended last before it."""
    given_every_ns: int = NS // 2
    """How often (stream time) traces that the senders gave whole are looked for, to be
    emitted without waiting for their window (each look joins the pending spans)."""

    def __post_init__(self) -> None:
        for name in ("window_ns", "lookahead_ns", "max_request_ns"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.lateness_ns < 0:
            raise ConfigError(f"lateness_ns cannot be negative, got {self.lateness_ns}")


@dataclass
class Finished:
    """Traces that no later span can change: their spans, with a parent for each.

    ``position[r]``: the stream position of row ``r``; ``parent[r]``: the position of its parent
    (-1 for a root); ``score``, ``probability``, ``samples``, ``alternatives`` (calls and
    candidate parents by position) and ``unmapped`` (position -> reason) as in
    :class:`~tacit.reconstruct.result.Reconstruction`.
    ``named``: the details (original span ids) of the candidate parents in ``alternatives``
    that are in other batches and had them, by position, to be named as those are written.
    ``given[r]``: whether row ``r`` is a client span whose parent its sender gave (kept);
    ``virtual[r]``: whether it was drawn for a service that sent no spans (:mod:`.hops`).
    """

    spans: SpanTable
    position: np.ndarray
    parent: np.ndarray
    score: np.ndarray
    alternatives: Alternatives = field(default_factory=Alternatives.empty)
    unmapped: dict[int, str] = field(default_factory=dict)
    named: dict[int, SpanDetail] = field(default_factory=dict)
    given: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    virtual: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    probability: np.ndarray = field(default_factory=lambda: np.zeros(0))
    samples: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))


RoundSolver = Callable[
    [SpanTable, CallGraph, TraceWeaverParams | None, Mapping[int, set[str]] | None],
    Reconstruction,
]
"""The offline step of a round: the round's spans, the call graph, the parameters and the
values below calls outside the round (:mod:`.shared_values`) to their reconstruction."""


def solve_here(
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None,
    below: Mapping[int, set[str]] | None,
) -> Reconstruction:
    """A round's offline step in this process (without the ranked candidates, which a round
    has no use for)."""
    return reconstruct_traceweaver(spans, callgraph, params, candidates=False, below=below)


class OnlineTraceWeaver:
    """Feed chunks with :meth:`push`, then :meth:`close`; both return the finished traces.
    ``solve`` is each round's offline step (:func:`solve_here`, or on a Dask cluster
    :class:`.scaleout.DaskRounds`, which gives the same result)."""

    def __init__(
        self,
        callgraph: CallGraph,
        params: TraceWeaverParams | None = None,
        online: OnlineParams | None = None,
        first_position: int = 0,
        draw_hops: bool = False,
        solve: RoundSolver | None = None,
    ) -> None:
        self._drawing = draw_hops
        self.solve = solve or solve_here
        self._hops: Hops | None = None
        self.set_callgraph(callgraph)
        self.drawn: list[tuple[int, int]] = []
        """The spans drawn for services that sent none (``draw_hops``), as (their position,
        the position of the span they were drawn from), until the caller takes them."""
        self.params = params
        self.online = online or OnlineParams()
        self._spans = SpanTable.empty()
        self._staged: list[SpanTable] = []  # chunks pushed since the pending spans were read
        self._rows = GrowingColumns(_ROW_STATE)
        self._alternatives = Alternatives.empty()  # of the final calls not yet emitted
        self._named: dict[int, SpanDetail] = {}  # emitted spans that _alternatives names
        self._peers: dict[int, str] = {}  # position -> callee service, for the next join
        self.unmapped: dict[int, str] = {}
        self._why: dict[int, str] = {}  # position -> why a call not yet final was left unmapped
        self.pushed = first_position
        self.latest_end = -math.inf
        """The stream's clock: the latest span end pushed, or later once moved on."""
        self.arrived_end = -math.inf
        """The latest span end pushed."""
        self.boundary: float | None = None
        self._next_given = -math.inf  # the stream time of the next look for given traces
        self.rounds = 0
        self.peak_pending = 0

    def set_callgraph(self, callgraph: CallGraph) -> None:
        """Map with ``callgraph`` from the next round on (a call graph learned anew, or
        reloaded); the services seen serving so far stay seen."""
        self.callgraph = callgraph
        before = self._hops
        self._hops = Hops(callgraph) if self._drawing else None
        if self._hops is not None and before is not None:
            self._hops.saw(before.seen)
        self._call_names = CallNames(callgraph)
        slots = [sl for g in callgraph.endpoints.values() for sl in g.slots]
        self._called = {sl.service for sl in slots}
        self._serving = {svc for svc, _ in callgraph.endpoints}

    # -- pending spans ------------------------------------------------------------------------
    @property
    def spans(self) -> SpanTable:
        """The pending spans, in stream order. The chunks pushed since this was last read are
        joined on here, once a round rather than at every push: a join copies every pending
        span, and with ``tacit serve``'s lateness hundreds of thousands are pending, so a join
        at every push would copy them all again for each small chunk."""
        if self._staged:
            # The pool is extended, not rebuilt, but for a compaction once it holds far more
            # strings than the pending rows use: each string is interned about once.
            compact = len(self._spans.strings) > _POOL_SLACK * len(self._rows) + 4096
            self._spans = concat([self._spans, *self._staged], into_first=not compact)
            self._staged = []
        if self._peers:
            rows = self._rows_of(np.fromiter(self._peers, np.int64, len(self._peers)))
            code = self._spans.strings.code
            for r, name in zip(rows.tolist(), self._peers.values(), strict=True):
                if r != NONE:
                    self._spans.peer[r] = code(name)
            self._peers = {}
        return self._spans

    @property
    def position(self) -> np.ndarray:
        """Per pending span, its stream position (ascending)."""
        return self._rows["position"]

    @property
    def link(self) -> np.ndarray:
        """Per pending span, the stream position of its RPC's other side (NONE: none)."""
        return self._rows["link"]

    @property
    def final(self) -> np.ndarray:
        """Per pending span, whether its parent can no longer change."""
        return self._rows["final"]

    @property
    def parent(self) -> np.ndarray:
        """Per pending span, its parent's stream position (for a client span, once final)."""
        return self._rows["parent"]

    @property
    def given(self) -> np.ndarray:
        """Per pending span, whether it is a client span whose parent its sender gave."""
        return self._rows["given"]

    @property
    def virtual(self) -> np.ndarray:
        """Per pending span, whether it was drawn for a service that sent none."""
        return self._rows["virtual"]

    @property
    def score(self) -> np.ndarray:
        """Per pending span, the score of its parent link (NaN: none yet)."""
        return self._rows["score"]

    @property
    def probability(self) -> np.ndarray:
        """Per pending span, the probability of its parent link that the algorithm measured
        (NaN: none)."""
        return self._rows["probability"]

    @property
    def samples(self) -> np.ndarray:
        """Per pending span, which sampled mappings made its parent link
        (:attr:`~.result.Reconstruction.samples`)."""
        return self._rows["samples"]

    # -- input ------------------------------------------------------------------------------
    def name_peers(self, peers: dict[int, str]) -> None:
        """The callee service of client spans already pushed (position -> service), learned
        from the server span linked to them: set before their next round."""
        self._peers.update(peers)

    def give_parents(self, children: np.ndarray, parents: np.ndarray) -> None:
        """The given parents (positions) of client spans pushed while their parent was to come,
        NONE where the context turned out lost (the span is then inferred); pending spans only
        (a child already gone is left as it is)."""
        rows = self._rows_of(children)
        here = rows != NONE
        rows, parents = rows[here], parents[here]
        self.parent[rows] = parents
        lost = rows[parents == NONE]
        self.given[lost] = False
        self.final[lost] = False

    def push(self, chunk: SpanTable) -> list[Finished]:
        """Add the next spans of the stream; returns the traces this made final.

        ``chunk.link``: the RPC partner's stream position; ``chunk.parent``: for a client span
        whose sender gave its parent, that server span's position (see the module docstring);
        NONE otherwise."""
        if not len(chunk):
            return []
        bad = np.flatnonzero((chunk.kind != SERVER) & (chunk.kind != CLIENT))
        if len(bad):
            raise InputError(
                "online reconstruction needs server or client spans, got "
                + chunk.describe(int(bad[0])),
                path=chunk.sources[0] if chunk.sources else None,
                record=int(chunk.record[bad[0]]),
            )
        o = self.online
        last_allowed = self.latest_end - o.lateness_ns
        late = np.flatnonzero(chunk.end < last_allowed)
        if len(late):
            raise InputError(
                f"span ends {(last_allowed - chunk.end[late[0]]) / NS:.3f} s later than the "
                f"allowed lateness ({o.lateness_ns / NS:g} s): raise lateness_ns",
                path=chunk.sources[0] if chunk.sources else None,
                record=int(chunk.record[late[0]]),
            )
        if self._hops is not None:
            self._hops.saw(chunk.strings.names(np.unique(chunk.service[chunk.kind == SERVER])))
        self._add(chunk, virtual=False)
        self.arrived_end = max(self.arrived_end, float(chunk.end.max()))
        self.latest_end = max(self.latest_end, self.arrived_end)
        if self.boundary is None:
            self.boundary = float(chunk.start.min()) + o.window_ns
        self.peak_pending = max(self.peak_pending, len(self._rows))
        return self._rounds() + self._given_whole()

    def _add(self, chunk: SpanTable, virtual: bool) -> np.ndarray:
        """Append ``chunk`` to the pending spans; returns its positions."""
        n = len(chunk)
        positions = np.arange(self.pushed, self.pushed + n)
        self.pushed += n
        cols = chunk.columns() | {"link": np.full(n, NONE), "parent": np.full(n, NONE)}
        self._staged.append(
            SpanTable(chunk.strings, **cols, sources=chunk.sources, details=chunk.details)
        )
        partner = chunk.link.astype(np.int64)
        given = (chunk.kind == CLIENT) & (chunk.parent != NONE)
        self._rows.extend(
            position=positions,
            link=partner,
            final=given,
            parent=np.where(chunk.kind == SERVER, partner, np.where(given, chunk.parent, NONE)),
            score=np.full(n, np.nan),
            probability=np.full(n, np.nan),
            samples=np.full(n, NOT_SAMPLED, dtype=np.uint64),
            kind=chunk.kind,
            given=given,
            virtual=np.full(n, virtual),
        )
        # The RPC's other side arrived earlier: it learns this span's position too.
        back = np.flatnonzero((partner > NONE) & (partner < positions))
        rows = self._rows_of(partner[back])
        pending = rows != NONE
        rows, p = rows[pending], positions[back[pending]]
        self.link[rows] = p
        server = self._rows["kind"][rows] == SERVER
        self.parent[rows[server]] = p[server]
        return positions

    def advance(self, end: float) -> list[Finished]:
        """The stream's clock reached ``end`` (ns) with no span ending later: run the rounds
        this makes due; returns the traces they made final."""
        if self.boundary is None or end <= self.latest_end:
            return []
        self.latest_end = end
        return self._rounds() + self._given_whole()

    def close_oldest(self) -> list[Finished]:
        """Make the oldest window final now, as if its lateness had passed, if its lookahead
        has arrived; returns the traces this made final (none when it has not).

        For a receiver that holds its senders back once too many spans wait: the spans they
        hold would come after the latest seen, so waiting out the lateness for them only keeps
        the room they need taken. The clock moves to the least time at which the round is due,
        so a span ending before the window's lookahead counts as late from then on."""
        o = self.online
        if self.boundary is None or self.boundary + o.lookahead_ns > self.arrived_end:
            return []
        return self.advance(self.boundary + o.lookahead_ns + o.lateness_ns)

    def _rounds(self) -> list[Finished]:
        assert self.boundary is not None
        o = self.online
        done: list[Finished] = []
        watermark = self.latest_end - o.lateness_ns
        self._skip_idle(watermark)
        while watermark >= self.boundary + o.lookahead_ns:
            done.extend(self._round(self.boundary))
            self.boundary += o.window_ns
            self._skip_idle(watermark)
        return done

    def _skip_idle(self, watermark: float) -> None:
        """Move the boundary over the windows whose round would find nothing to do: no
        pending span that is not final ends by their lookahead, so none is due, none is given
        up and nothing new can be emitted. Their number has no bound: a stream whose times
        jump (a first span from 1970, then today's; an idle night; one span ending in 2200,
        whose trace waits for it) would otherwise walk every window between, one round
        each."""
        o = self.online
        assert self.boundary is not None
        last = watermark - o.lookahead_ns  # the rounds run while the boundary is at most this
        if not last >= self.boundary:  # no round is due (or no span has come: -inf)
            return
        skip = math.floor((last - self.boundary) / o.window_ns) + 1
        if len(self._rows):  # what is joined and what is staged, without joining it
            ends = np.concatenate([t.end for t in (self._spans, *self._staged) if len(t)])
            final = self.final
            # a span not yet final is reconstructed by the round it is due in; a final one
            # waits for nothing a round does (but the spans of its trace) until its partners
            # are given up, once: a span ending in 2200 holds its trace, not the rounds
            events = ends[final] + o.max_request_ns
            events = events[events >= self.boundary - o.window_ns]
            if (~final).any():
                events = np.append(events, ends[~final].min() - o.lookahead_ns)
            if len(events):
                next_event = float(events.min())
                skip = min(skip, math.ceil((next_event - self.boundary) / o.window_ns))
        if skip > 0:
            self.boundary += skip * o.window_ns

    def _given_whole(self) -> list[Finished]:
        """The traces the senders gave whole (see the module docstring), made final and
        emitted; looked for every ``given_every_ns`` of stream time."""
        if self.latest_end < self._next_given or not self.given.any():
            return []  # a trace given whole has given calls (one without calls waits)
        self._next_given = self.latest_end + self.online.given_every_ns
        spans = self.spans
        s = spans.strings
        entry = np.array([n not in self._called for n in s.values], dtype=bool)
        serving = np.array([n in self._serving for n in s.values], dtype=bool)
        kind, service = spans.kind, spans.service
        up = self._rows_of(self.parent)
        root = roots(up)
        client, server = kind == CLIENT, kind == SERVER
        bad = (self.parent != NONE) & (up == NONE)  # a parent named, not here (yet)
        bad |= (up == NONE) & ~(server & (self.link == NONE) & entry[service])
        bad |= client & ~self.given
        peer = spans.peer
        callee_serves = np.where(peer != NONE, serving[np.maximum(peer, 0)], True)
        bad |= client & (self._rows_of(self.link) == NONE) & callee_serves
        bad |= server & _lost_call_within(spans, client & ~self.given)
        blocked = np.zeros(len(spans), dtype=bool)
        blocked[root[bad]] = True
        whole = ~blocked[root] & ~self.final
        if not whole.any():
            return []
        self.final[whole] = True
        return self._emit()

    def close(self) -> list[Finished]:
        """End of stream: everything left becomes final; an RPC partner announced but never
        pushed was not observed."""
        if self.boundary is None:
            return []
        return self._round(math.inf)

    def _give_up_partners(self, rows: np.ndarray) -> None:
        """The RPC partners announced for ``rows`` (a mask) but not pushed were not observed;
        nor were the given parents still to come, whose calls are inferred instead. So are the
        calls whose given parent left in a trace emitted before they came (a trace that looked
        whole while spans of it were still on their way): else they would wait for it for
        ever."""
        never = rows & (self.link >= self.pushed)
        self.link[never] = NONE
        self.parent[never & (self.spans.kind == SERVER)] = NONE
        left = (
            (self.parent != NONE)
            & (self.parent < self.pushed)
            & (self._rows_of(self.parent) == NONE)
        )
        lost = rows & self.given & ((self.parent >= self.pushed) | left)
        self.parent[lost] = NONE
        self.given[lost] = False
        self.final[lost] = False

    # -- one round ----------------------------------------------------------------------------
    def _round(self, boundary: float) -> list[Finished]:
        self.rounds += 1
        self._give_up_partners(self.spans.end < boundary - self.online.max_request_ns)
        if self._hops is not None:
            self._draw_hops(boundary)
        due = self.spans.end <= boundary + self.online.lookahead_ns
        if (~self.final & due).any():
            # the given calls of the requests in the work go with them, as context
            work = ~self.final & due
            parent_row = self._rows_of(self.parent)
            with_parent = self.given & (parent_row != NONE)
            work[with_parent] |= work[parent_row[with_parent]]
            self._reconstruct(np.flatnonzero(work), boundary)
        return self._emit()

    def _draw_hops(self, boundary: float) -> None:
        """Draw the services that sent no spans (:mod:`.hops`) where the spans of this round
        show them: calls that no server span answered, and requests that no call made. All
        that ends by the round's lookahead has arrived (the lateness), so what has no partner
        now will have none."""
        assert self._hops is not None
        if not self._hops.silent():
            return
        spans = self.spans
        names = spans.strings.values
        due = (spans.end <= boundary + self.online.lookahead_ns) & ~self.virtual
        alone = due & (self.link == NONE)
        calls = []
        up = self._rows_of(self.parent)
        for c in np.flatnonzero(alone & (spans.kind == CLIENT)).tolist():
            p, peer = int(up[c]), int(spans.peer[c])
            if p == NONE and peer == NONE:
                continue
            service, endpoint = (spans.service[p], spans.endpoint[p]) if p != NONE else (-1, -1)
            hop = self._hops.called(
                names[service] if service != NONE else "",
                names[endpoint] if endpoint != NONE else "",
                names[peer] if peer != NONE else None,
            )
            if hop is not None:
                calls.append((c, hop))
        requests = []
        for q in np.flatnonzero(alone & (spans.kind == SERVER) & (self.parent == NONE)).tolist():
            hop = self._hops.caller(names[int(spans.service[q])])
            if hop is not None:
                requests.append((q, hop))
        if not calls and not requests:
            return
        drawn = self._add(self._hops.draw(spans, calls, requests, self.position), virtual=True)
        sources = self.position[[r for r, _ in calls] + [r for r, _ in requests]]
        self.name_peers({int(p): h for p, (_, h) in zip(sources, calls, strict=False)})
        self.drawn.extend(zip(drawn.tolist(), sources.tolist(), strict=True))

    def _reconstruct(self, work: np.ndarray, boundary: float) -> None:
        spans = self.spans.take(work)
        given = self.given[work]
        spans.parent[given] = find_sorted(self.position[work], self.parent[work[given]])
        self._call_names.name(spans)
        below = self._values_below(work)
        params = self.params
        if below is None:  # no span of the work names a value: the solver need not look again
            params = replace(params or TraceWeaverParams(), shared_values=False)
        rec = self.solve(spans, self.callgraph, params, below)
        kind = spans.kind
        final_in = (kind == SERVER) & (spans.end <= boundary)
        chosen = (kind == CLIENT) & (rec.parent != NONE) & ~given
        chosen[chosen] = final_in[rec.parent[chosen]]
        given_up = (kind == CLIENT) & ~chosen & ~given
        given_up &= spans.start < boundary - self.online.max_request_ns
        rows = work[final_in | chosen | given_up]
        self.final[rows] = True
        picked = np.flatnonzero(chosen)
        at = self.position[work]  # the stream position of each row of the work
        self.parent[work[picked]] = at[rec.parent[picked]]
        self.score[work[picked]] = rec.score[picked]
        if rec.probability is not None:
            self.probability[work[picked]] = rec.probability[picked]
        if rec.samples is not None:
            self.samples[work[picked]] = rec.samples[picked]
        alternatives = Alternatives.of(rec.alternatives)
        self._alternatives = Alternatives.merged(
            [self._alternatives, alternatives.where(chosen[alternatives.owner]).renumbered(at)]
        )
        _forget(self._why, at[picked], among=True)
        at_list = at.tolist()  # read one by one below, which numpy scalars make slow
        # Why a call is unmapped is told by the round that still had its instance's incoming
        # spans: by the time it is given up they may all be final, and out of the work.
        for r in np.flatnonzero((kind == CLIENT) & ~chosen & ~given).tolist():
            why = rec.unmapped.get(r)
            if why is not None and why != ROOT_CALL:
                self._why[at_list[r]] = why
        for r in np.flatnonzero(given_up).tolist():
            p = at_list[r]
            self.unmapped[p] = self._why.pop(p, rec.unmapped.get(r, NO_CAUSE))

    def _values_below(self, work: np.ndarray) -> dict[int, set[str]] | None:
        """Per call of ``work`` (by its row in the work), the values of the pending spans below
        it, which the work need not hold (:mod:`.shared_values`); None where no span of the
        work names a value."""
        pending = self.spans
        if not (self.params or TraceWeaverParams()).shared_values or pending.details is None:
            return None
        given = self.given
        view = replace(
            pending,
            link=self._rows_of(self.link),
            parent=np.where(given, self._rows_of(np.where(given, self.parent, NONE)), NONE),
        )
        values = SharedValues(view, work)
        if not values:
            return None
        calls = np.flatnonzero(pending.kind[work] == CLIENT)
        return {i: values.below(int(work[i])) for i in calls.tolist()}

    def _rows_of(self, positions: np.ndarray) -> np.ndarray:
        """The row of each of ``positions`` among the pending spans (NONE where none is):
        found by bisection, as :attr:`position` is in stream order."""
        return find_sorted(self.position, positions)

    def _emit(self) -> list[Finished]:
        """Finish the traces whose spans are all final; forget them."""
        n = len(self.spans)
        up = self._rows_of(self.parent)
        # A span is held back while a parent or RPC partner it names has not arrived yet.
        waiting = ((self.parent != NONE) & (up == NONE)) | ~self.final
        partner_missing = (self.link != NONE) & (self._rows_of(self.link) == NONE)
        waiting |= partner_missing & (self.link >= self.pushed)
        root = roots(up)
        blocked = np.zeros(n, dtype=bool)
        blocked[root[waiting]] = True
        done = ~blocked[root]
        if not done.any():
            return []
        rows = np.flatnonzero(done)
        positions = self.position[rows]
        done_at = positions.tolist()
        alternatives, named = self._emit_alternatives(positions)
        finished = Finished(
            self.spans.take(rows),
            positions,
            self.parent[rows].copy(),
            self.score[rows].copy(),
            alternatives,
            {p: self.unmapped.pop(p) for p in done_at if p in self.unmapped},
            named,
            self.given[rows].copy(),
            self.virtual[rows].copy(),
            self.probability[rows].copy(),
            self.samples[rows].copy(),
        )
        keep = ~done
        self._spans = self.spans.take(keep)
        self._rows.keep(keep)
        return [finished]

    def _emit_alternatives(
        self, positions: np.ndarray
    ) -> tuple[Alternatives, dict[int, SpanDetail]]:
        """The alternatives of the calls at ``positions`` (leaving now), and the details of
        their candidate parents in other batches; the details of the leaving spans that calls
        still pending name are kept for when those leave."""
        pending = self._alternatives
        leaving = find_sorted(positions, pending.owner) >= 0
        out, self._alternatives = pending.where(leaving), pending.where(~leaving)
        details = self.spans.details
        if details is None:
            return out, {}
        elsewhere = out.parents(positions, among=False)
        rows = self._rows_of(elsewhere)
        here = rows != NONE
        named = dict(zip(elsewhere[here].tolist(), details[rows[here]].tolist(), strict=True))
        named.update((q, self._named[q]) for q in elsewhere[~here].tolist() if q in self._named)
        named = {q: d for q, d in named.items() if d is not None}
        still = self._alternatives.parents(positions, among=True)
        self._named.update(zip(still.tolist(), details[self._rows_of(still)].tolist(), strict=True))
        _forget(self._named, self._alternatives.parent, among=False)
        return out, named


def _lost_call_within(spans: SpanTable, lost: np.ndarray) -> np.ndarray:
    """Per span, whether a ``lost`` span (a mask: calls without a given parent) of its process
    started within its time."""
    out = np.zeros(len(spans), dtype=bool)
    if not lost.any():
        return out
    proc = process_key(spans)
    calls = np.flatnonzero(lost)
    for p in np.unique(proc[calls]).tolist():
        starts = np.sort(spans.start[calls[proc[calls] == p]])
        mine = np.flatnonzero(proc == p)
        first = np.searchsorted(starts, spans.start[mine], "left")
        out[mine] = (first < len(starts)) & (
            starts[np.minimum(first, len(starts) - 1)] <= spans.end[mine]
        )
    return out


def _forget(by_position: dict[int, Any], positions: np.ndarray, among: bool) -> None:
    """Delete the entries of ``by_position`` whose positions are (``among``) or are not among
    ``positions``: found for all of them at once, not one look-up each."""
    if by_position:
        known = np.fromiter(by_position, np.int64, len(by_position))
        for p in known[contained(known, positions) == among].tolist():
            del by_position[p]


def stream_chunks(spans: SpanTable, chunk_size: int) -> Iterator[SpanTable]:
    """Slices of ``spans`` in order of span end, as a collector would hand them over, with
    ``link`` and the given parents of client spans rewritten to stream positions (see the
    module docstring)."""
    order = np.argsort(spans.end, kind="stable")
    position = np.empty(len(spans), dtype=np.int64)
    position[order] = np.arange(len(spans))
    for a in range(0, len(spans), chunk_size):
        rows = order[a : a + chunk_size]
        chunk = spans.take(rows)
        chunk.link = np.where(spans.link[rows] >= 0, position[spans.link[rows]], NONE)
        given = (spans.kind[rows] == CLIENT) & (spans.parent[rows] >= 0)
        chunk.parent = np.where(given, position[spans.parent[rows]], NONE)
        yield chunk


def reconstruct_online(
    chunks: Iterable[SpanTable],
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    online: OnlineParams | None = None,
) -> Iterator[Finished]:
    """Run :class:`OnlineTraceWeaver` over ``chunks``, yielding traces as they finish."""
    tw = OnlineTraceWeaver(callgraph, params, online)
    for chunk in chunks:
        yield from tw.push(chunk)
    yield from tw.close()


def reconstruct_streamed(
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    online: OnlineParams | None = None,
    chunk_size: int = CHUNK_SIZE,
    solve: RoundSolver | None = None,
) -> Reconstruction:
    """Reconstruct a table by streaming it (in order of span end) through the online mode, and
    gather the result as one row-indexed :class:`Reconstruction`, comparable with offline
    (``solve``: each round's offline step, as :class:`OnlineTraceWeaver` takes it)."""
    order = np.argsort(spans.end, kind="stable")
    result = Reconstruction.start("traceweaver-online", spans)
    result.probability = np.full(len(spans), np.nan)
    result.samples = np.full(len(spans), NOT_SAMPLED, dtype=np.uint64)
    tw = OnlineTraceWeaver(callgraph, params, online, solve=solve)
    alternatives = []
    for chunk in [*stream_chunks(spans, chunk_size), None]:
        for f in tw.push(chunk) if chunk is not None else tw.close():
            rows = order[f.position]
            client = f.spans.kind == CLIENT
            mapped = client & (f.parent != NONE)
            result.parent[rows[mapped]] = order[f.parent[mapped]]
            result.score[rows] = f.score
            result.probability[rows] = f.probability
            result.samples[rows] = f.samples
            alternatives.append(f.alternatives.renumbered(order))
            for p, why in f.unmapped.items():
                result.unmapped[int(order[p])] = why
    result.alternatives = Alternatives.merged(alternatives)
    result.info = {"rounds": tw.rounds, "peak_pending_spans": tw.peak_pending}
    result.finish_unmapped(spans, "never final: the stream ended first")
    return result
