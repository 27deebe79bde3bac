"""A call graph learned from production's own spans, without a test environment.

TraceWeaver learns call graphs from test traces: production requests replayed one at a time,
"so that the ensuing spans can be easily weaved together ... due to the lack of competing
candidates" (SIGCOMM '24, §5.2.1). Production traffic gives the same wherever a request ran
alone at its instance, the unit TraceWeaver maps (§4): with no other request in flight there,
every call the instance made while it was served is its own. And spans whose context was not
lost are ground truth as they are. Per instance, the incoming spans fall into clusters, each
overlapping no other's; a cluster's calls are the outgoing spans that overlap it (overlap, not
lie within, as a client span made from its server span's times carries the callee's clock) or
start after it, within as long again as its last request lasted (a continuation that outlives
the response, or a start rounded past it), and none of them whose context was lost may reach
into the next cluster. An incoming span is *known* when

* every call of its cluster is told apart: by the parent its sender gave, or by overlapping
  only one of the cluster's requests, as it must have been made while its request was served
  (or, started after all, by the last to end). Its calls are those told apart as its own
  (*alone*, the cluster a lone request or the requests' calls apart in time; *given* where its
  sender named it among others); or
* no outgoing span of the instance starts while it is served: it made none (*alone*); or
* every outgoing span of the instance that starts while it is served carries the parent its
  sender gave: its calls are those that name it (*given*; no call whose context was lost can be
  one of them); or
* the requests around it are *explained* (:func:`_explain_rest`): a first reconstruction with
  the call graph the others gave maps their calls onto one of their endpoint's paths, each
  link likely; and no other call that overlaps it overlaps another request not explained. With
  its competitors set aside, it has no competing candidate, as a lone request has (§5.2.1):
  the calls left that overlap it are its own, unless they break the dependency order of the
  path its endpoint's lone requests showed with the same calls (:func:`_keeps_order`: then they
  are likely another's). Where traffic is heavy, long requests and those of rare paths (a
  checkout among page views) never run alone, so their paths would be missing, and TraceWeaver
  maps a request only onto a path it knows (§5.2.2). This is done in rounds
  (:data:`EXPLAIN_ROUNDS`): the paths one round adds explain requests around the next (two
  requests of new paths that overlap each other are known one after the other).

The call graph, dependency orders and paths are learned from the known requests alone
(:func:`.callgraph.learn_callgraph`, §5.2.2), the paths' frequencies from every request
(:func:`_learn_frequencies`: requests run alone the more often the shorter they are);
:class:`Support` says how many requests of each endpoint were seen and how many it rests on,
by how they are known (each endpoint's ``support`` in the YAML), and which endpoints no known
request showed (left out, so a reconstruction leaves their calls unmapped, with that reason). A
call that reaches into the next cluster makes the cluster not known, rather than learned without
that call. Joins (several requests of one end-to-end request at one service, only one calling
onward: :class:`.callgraph.Join`) are learned from the known requests whose known links reach
one top span (:func:`_tops`): the trace the test traces would give them. A join's requests
arrive together, so they are known as a cluster, not alone.

How early a call may start before its request and how late end after it (each slot's
tolerances) is read from every call, known or not, as a bound (:func:`_widen_tolerances`).

Whether an endpoint's calls leave in their triggers' order (:func:`.callgraph.reorders`) is a
matter of concurrency, which requests that ran alone never show. It is read from a first
reconstruction of every request with the call graph the known ones gave: TraceWeaver's
arrival-order term is one score term among others, so where an endpoint's calls do leave out of
order the mapping shows it.

Requests run alone often when traffic is light (nights, a quiet service, the start of a burst):
at a rate of λ requests per second at an instance, each lasting d seconds, a share of about
exp(-2λd) of them.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from tacit.model.roles import process_key
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.callgraph import (
    THREAD_AGREEMENT,
    TOLERANCE_MARGIN,
    CallGraph,
    CallPath,
    learn_callgraph,
    reorders,
)
from tacit.reconstruct.link_probability import link_probability
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.runs import run_bounds

ALONE = "alone"
GIVEN = "given"
EXPLAINED = "explained"
EXPLAINED_PROBABILITY = 0.9
"""Link probability (:mod:`.link_probability`) from which a first reconstruction's mapping
of a request's calls explains that request (:func:`_explain_rest`)."""
EXPLAIN_ROUNDS = 3
"""Most rounds of :func:`_explain_rest`, each a reconstruction with the call graph the requests
known so far gave: the paths a round adds explain requests the round before could not."""
_MIN, _MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
_MAP_ONLY = TraceWeaverParams(marginal_samples=0)
THREAD_MIN_CALLS = 20
"""Fewest calls of an instance from which it is seen to serve a request per thread."""


@dataclass
class Support:
    """Per (service, endpoint): requests ``seen`` in the input, and of them those the call graph
    was learned from, known ``alone``, by their ``given`` context, or once the requests around
    them were ``explained``."""

    seen: dict[tuple[str, str], int] = field(default_factory=dict)
    alone: dict[tuple[str, str], int] = field(default_factory=dict)
    given: dict[tuple[str, str], int] = field(default_factory=dict)
    explained: dict[tuple[str, str], int] = field(default_factory=dict)
    """Known once the requests around them were explained (:func:`_explain_rest`)."""

    def known(self, key: tuple[str, str]) -> int:
        return sum(self.counts(key).values())

    def counts(self, key: tuple[str, str]) -> dict[str, int]:
        """The requests of ``key`` the call graph rests on, by how they are known."""
        return {
            ALONE: self.alone.get(key, 0),
            GIVEN: self.given.get(key, 0),
            EXPLAINED: self.explained.get(key, 0),
        }

    def left_out(self) -> dict[tuple[str, str], int]:
        """The endpoints no known request showed, with the requests seen of each."""
        return {k: n for k, n in sorted(self.seen.items()) if not self.known(k)}

    def as_dict(self) -> dict[str, object]:
        """JSON: per ``service endpoint``, seen, alone and given; and the endpoints left out."""
        return {
            "endpoints": {
                f"{svc} {ep}": {"seen": n, **self.counts((svc, ep))}
                for (svc, ep), n in sorted(self.seen.items())
            },
            "left_out": {f"{svc} {ep}": n for (svc, ep), n in self.left_out().items()},
        }


def learn_blind(spans: SpanTable, mapping: np.ndarray | None = None) -> tuple[CallGraph, Support]:
    """The call graph of the known requests of ``spans`` (observed spans: RPC sides linked, a
    client span's ``parent`` the request its sender gave it, or NONE where the context was lost)
    and what it rests on (see the module docstring). ``mapping``: each row's parent in a
    reconstruction of ``spans`` (NONE: none), which the order of the calls is read from; None:
    reconstructed here."""
    calls: dict[int, list[int]] = {}
    how: dict[int, str] = {}
    for rows in _groups(_units(spans), spans.start):
        kind = spans.kind[rows]
        _known_at_instance(spans, rows[kind == SERVER], rows[kind == CLIENT], calls, how)
    requests = _requests(spans)
    graph, support = _learn(spans, requests, calls, how)
    for _ in range(EXPLAIN_ROUNDS):
        if not _explain_rest(spans, graph, calls, how):
            break
        graph, support = _learn(spans, requests, calls, how)
    if mapping is None:  # only the parents: no link probabilities
        mapping = reconstruct_traceweaver(spans, graph, _MAP_ONLY, candidates=False).parent
    children = _children(spans, np.where(spans.parent != NONE, spans.parent, mapping))
    _learn_order(spans, graph, requests, children)
    _learn_frequencies(spans, graph, requests, children)
    return graph, support


def _groups(key: np.ndarray, *by: np.ndarray) -> Iterator[np.ndarray]:
    """The rows of each value of ``key``, each group sorted by ``by`` (the last the most
    significant, as :func:`numpy.lexsort` takes them)."""
    order = np.lexsort((*by, key))
    heads, lengths = run_bounds(key[order])
    for a, n in zip(heads.tolist(), lengths.tolist(), strict=True):
        yield order[a : a + n]


def _requests(spans: SpanTable) -> dict[tuple[str, str], list[int]]:
    """The rows of the incoming spans of each (service, endpoint)."""
    s = spans.strings
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    servers = np.flatnonzero(spans.kind == SERVER)
    for r, svc, ep in zip(
        servers.tolist(), spans.service[servers].tolist(), spans.endpoint[servers].tolist(),
        strict=True,
    ):  # fmt: skip
        out[(s[svc] or "?", s[ep] or "?")].append(r)
    return out


def _units(spans: SpanTable) -> np.ndarray:
    """Per row, the unit whose requests are told apart: its instance, or its thread there
    where the instance serves each request on one thread and makes its calls on it."""
    proc = process_key(spans)
    per_thread = np.zeros(len(spans), dtype=bool)
    for rows in _groups(proc, spans.start, spans.thread):
        per_thread[rows] = _thread_per_request(spans, rows)
    thread = np.where(per_thread, spans.thread, NONE)
    return np.unique(np.stack([proc, thread]), axis=1, return_inverse=True)[1].ravel()


def _thread_per_request(spans: SpanTable, rows: np.ndarray) -> bool:
    """Whether one instance's spans (``rows``, sorted by thread, then start) show a thread per
    request: every span carries its thread, a thread's requests never overlap, and
    :data:`.callgraph.THREAD_AGREEMENT` of at least :data:`THREAD_MIN_CALLS` calls overlap a
    request of their own thread, as a worker that blocks on its calls makes them."""
    thread = spans.thread[rows]
    incoming, outgoing = spans.kind[rows] == SERVER, spans.kind[rows] == CLIENT
    if (thread == NONE).any() or outgoing.sum() < THREAD_MIN_CALLS:
        return False
    start, end = spans.start[rows], spans.end[rows]
    served = 0
    for t in np.unique(thread).tolist():
        mine = thread == t
        s_in, e_in = start[mine & incoming], end[mine & incoming]
        if (s_in[1:] < e_in[:-1]).any():
            return False
        at = np.searchsorted(s_in, end[mine & outgoing], "right") - 1
        ok = at >= 0
        served += int((e_in[at[ok]] >= start[mine & outgoing][ok]).sum())
    return served >= THREAD_AGREEMENT * outgoing.sum()


def _children(spans: SpanTable, parent: np.ndarray) -> dict[int, list[int]]:
    """The calls ``parent`` gives each request, in the order they start (then end)."""
    clients = np.flatnonzero((spans.kind == CLIENT) & (parent >= 0))
    clients = clients[np.lexsort((spans.end[clients], spans.start[clients]))]
    children: dict[int, list[int]] = defaultdict(list)
    for c, p in zip(clients.tolist(), parent[clients].tolist(), strict=True):
        children[p].append(c)
    return children


def _callees(spans: SpanTable, calls: list[int]) -> list[tuple[str, str]]:
    """The (service, endpoint) each of ``calls`` reached."""
    s = spans.strings
    return [(s[int(spans.peer[c])] or "?", s[int(spans.endpoint[c])] or "?") for c in calls]


def _learn_order(
    spans: SpanTable,
    graph: CallGraph,
    requests: dict[tuple[str, str], list[int]],
    children: dict[int, list[int]],
) -> None:
    """Set each endpoint's ``reorders`` from the calls its ``requests`` made
    (``children``)."""
    for key, g in graph.endpoints.items():
        g.reorders = reorders(spans, requests.get(key, []), children, g)


def _learn_frequencies(
    spans: SpanTable,
    graph: CallGraph,
    requests: dict[tuple[str, str], list[int]],
    children: dict[int, list[int]],
) -> None:
    """Count each endpoint's paths over all its ``requests``, by the calls they made
    (``children``), where it has more than one.

    Requests run alone the more often the shorter they are (each a share of about exp(-2λd)),
    so the known ones overstate the short paths: the path that makes no call, a cache hit. A
    path's frequency is its prior (§5.2.2), so it is read from every request whose mapped calls
    make one of the learned paths; those that make none (a call lost, or a path never known)
    count for none."""
    for key, g in graph.endpoints.items():
        if len(g.paths) < 2:
            continue
        index = {_signature(p): i for i, p in enumerate(g.paths)}
        counts = np.zeros(len(g.paths), dtype=np.int64)
        for r in requests.get(key, []):
            i = index.get(tuple(sorted(_callees(spans, children.get(r, [])))))
            if i is not None:
                counts[i] += 1
        if counts.sum():
            for p, n in zip(g.paths, counts.tolist(), strict=True):
                p.requests = n


def _known_at_instance(  # noqa: C901
    spans: SpanTable,
    incoming: np.ndarray,
    outgoing: np.ndarray,
    calls: dict[int, list[int]],
    how: dict[int, str],
) -> None:
    """Add the known incoming spans of one instance (each row list sorted by start) to
    ``calls`` (their calls) and ``how`` (how they are known)."""
    if not len(incoming):
        return
    start, end = spans.start[incoming], spans.end[incoming]
    ended_before = np.maximum.accumulate(np.r_[_MIN, end[:-1]])
    heads = np.flatnonzero(ended_before <= start)  # the first request of each cluster
    bounds = np.r_[heads, len(incoming)].tolist()
    next_start = np.r_[start[heads[1:]], _MAX]
    out_start, out_end = spans.start[outgoing], spans.end[outgoing]
    out_parent = spans.parent[outgoing]
    lost = np.where(out_parent == NONE, out_end, _MIN)
    lost_ended = np.maximum.accumulate(lost) if len(outgoing) else lost
    gap = np.searchsorted(out_start, ended_before[heads], "left")  # calls after the last cluster
    last = _latest(end)[np.r_[heads[1:], len(incoming)] - 1]  # each cluster's last to end
    until = np.minimum(end[last] + (end[last] - start[last]), next_start - 1)
    hi = np.searchsorted(out_start, until, "right")
    lo_each = np.searchsorted(out_start, start, "left")
    hi_each = np.searchsorted(out_start, end, "right")
    given_to: dict[int, list[int]] = defaultdict(list)
    for c, p in zip(outgoing.tolist(), out_parent.tolist(), strict=True):
        if p != NONE:
            given_to[p].append(c)
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        # The calls of the cluster: those that overlap it, however their clocks put them (a
        # client span made from its server span's times has the callee's clock), and those
        # that start after it, within as long again as its last request lasted (continuations
        # that outlive the response, or a start rounded past it); none whose context was lost
        # may reach into another cluster.
        window = np.arange(gap[k], hi[k])
        window = window[out_end[window] > start[a]]
        straddling = gap[k] > 0 and lost_ended[gap[k] - 1] > start[a]
        if not straddling and (out_end[window] <= next_start[k]).all():
            owner = _owners(
                incoming[a:b], start[a:b], end[a:b],
                out_parent[window], out_start[window], out_end[window],
            )  # fmt: skip
            if owner is not None:
                made, named = outgoing[window], out_parent[window] != NONE
                for i, p in enumerate(incoming[a:b].tolist()):
                    calls[p] = made[owner == i].tolist()
                    how[p] = GIVEN if b - a > 1 and named[owner == i].any() else ALONE
                continue
        for i, p in zip(range(a, b), incoming[a:b].tolist(), strict=True):
            lo, up = lo_each[i], hi_each[i]
            if lo == up and b - a > 1:  # no call started while it was served
                calls[p], how[p] = [], ALONE
            elif lo < up and (out_parent[lo:up] != NONE).all():
                calls[p], how[p] = given_to.get(p, []), GIVEN


def _owners(
    members: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    call_start: np.ndarray,
    call_end: np.ndarray,
) -> np.ndarray | None:
    """Per call of a cluster of requests (``members``, sorted by start), the index of the
    member that made it: the one its sender named, else the one member it overlaps, or the last
    to end where it started after all had. None when a call names a request outside the
    cluster or overlaps several members."""
    lost = parent == NONE
    named = np.searchsorted(members, parent, sorter=np.argsort(members))
    at = np.argsort(members)[np.minimum(named, len(members) - 1)]
    if (members[at][~lost] != parent[~lost]).any():
        return None
    begun = np.searchsorted(start, call_end, "right")  # members started by the call's end
    ended = np.searchsorted(np.sort(end), call_start, "left")  # ended before it started
    after = ended == len(members)
    if not ((begun - ended == 1) | after)[lost].all():
        return None
    # The one member begun and not ended is the one of the latest end among those begun.
    return np.where(lost, _latest(end)[np.maximum(begun - 1, 0)], at)


def _latest(end: np.ndarray) -> np.ndarray:
    """Per position, the position of the latest of ``end[: position + 1]``."""
    n = np.arange(len(end))
    return np.maximum.accumulate(np.where(end == np.maximum.accumulate(end), n, 0))


def _learn(
    spans: SpanTable,
    seen: dict[tuple[str, str], list[int]],
    calls: dict[int, list[int]],
    how: dict[int, str],
) -> tuple[CallGraph, Support]:
    """The call graph of the known requests (``calls``: each one's calls) and its support
    (``seen``: each endpoint's requests)."""
    s = spans.strings
    support = Support(seen={key: len(rows) for key, rows in seen.items()})
    for p, kind in how.items():
        key = (s[int(spans.service[p])] or "?", s[int(spans.endpoint[p])] or "?")
        counts = {ALONE: support.alone, GIVEN: support.given, EXPLAINED: support.explained}[kind]
        counts[key] = counts.get(key, 0) + 1
    requests = np.array(sorted(calls), dtype=np.int64)
    children = [np.array(calls[p], dtype=np.int64) for p in requests.tolist()]
    rows = np.concatenate([requests, *children]) if len(requests) else requests
    table = spans.take(rows)
    at = {int(r): i for i, r in enumerate(requests.tolist())}
    parent = np.full(len(rows), NONE, dtype=np.int64)
    k = len(requests)
    for p, kids in zip(requests.tolist(), children, strict=True):
        parent[k : k + len(kids)] = at[p]
        k += len(kids)
    table.parent = parent
    table.trace[: len(requests)] = _tops(spans, calls)[requests]
    graph = learn_callgraph(table)
    _widen_tolerances(spans, graph)
    for key, g in graph.endpoints.items():
        g.support = {"seen": support.seen[key], **support.counts(key)}
    return graph, support


def _tops(spans: SpanTable, calls: dict[int, list[int]]) -> np.ndarray:
    """Per row, the topmost span its known links reach: a client span's request (``calls``,
    or the parent its sender gave), a server span's caller. Requests that reach one top are
    of one end-to-end request, as a join's are (:func:`.callgraph.learn_callgraph`)."""
    parent = np.where(spans.kind == SERVER, spans.link, spans.parent)
    for p, made in calls.items():
        parent[made] = p
    return roots(parent)


def _widen_tolerances(spans: SpanTable, graph: CallGraph) -> None:
    """Widen each slot's tolerances (:class:`.callgraph.Slot`) to what every call of its
    caller's service to its callee shows at least, times :data:`.callgraph.TOLERANCE_MARGIN`.

    A call that started while requests were in flight, or soon after the last ended (as
    :func:`_known_at_instance` takes it), ended after its own request by at least its end less
    the latest of theirs; one that started with none in flight began before its request by at
    least the time to the next arrival. The known requests are few where traffic
    is heavy, and the largest overshoot of few is short of what all calls show.
    """
    s = spans.strings
    widest: dict[tuple[str, str, str], tuple[int, int]] = {}
    for rows in _groups(process_key(spans), spans.start):
        incoming = rows[spans.kind[rows] == SERVER]
        calls = rows[(spans.kind[rows] == CLIENT) & (spans.peer[rows] != NONE)]
        if not len(incoming) or not len(calls):
            continue
        start, end = spans.start[incoming], spans.end[incoming]
        c_start, c_end = spans.start[calls], spans.end[calls]
        k = np.searchsorted(start, c_start, "right")
        last = _latest(end)[np.maximum(k - 1, 0)]
        ended, lasted = end[last], end[last] - start[last]
        after = (k > 0) & (c_start - ended <= lasted)  # in flight, or its continuation
        late = np.where(after, np.maximum(c_end - ended, 0), 0)
        arrival = start[np.minimum(k, len(start) - 1)]
        early = np.where(~after & (k < len(start)) & (arrival <= c_end), arrival - c_start, 0)
        for c, e, la in zip(calls.tolist(), early.tolist(), late.tolist(), strict=True):
            key = (s[int(spans.service[c])] or "?", s[int(spans.peer[c])] or "?",
                   s[int(spans.endpoint[c])] or "?")  # fmt: skip
            e0, l0 = widest.get(key, (0, 0))
            widest[key] = (max(e0, e), max(l0, la))
    for (svc, _), g in graph.endpoints.items():
        for path in (g, *g.paths):
            path.slots = [
                replace(
                    x,
                    early_ns=max(x.early_ns, round(TOLERANCE_MARGIN * e)),
                    late_ns=max(x.late_ns, round(TOLERANCE_MARGIN * la)),
                )
                for x in path.slots
                for e, la in [widest.get((svc, x.service, x.endpoint), (0, 0))]
            ]


def _explain_rest(
    spans: SpanTable, graph: CallGraph, calls: dict[int, list[int]], how: dict[int, str]
) -> bool:
    """Add to ``calls`` and ``how`` the requests known once the others are explained (see the
    module docstring); whether there were any.

    A first reconstruction with ``graph`` explains a request when its calls there make one of
    its endpoint's learned paths, each call's link at least :data:`EXPLAINED_PROBABILITY`
    likely. Those calls are taken as the explained requests' own. The request that is the only
    unexplained one every other call it overlaps could belong to has, as a lone request has
    (§5.2.1), no competing candidate: those calls are its own. A join's requests are left to
    the clusters (:func:`_at_join`).
    """
    first = reconstruct_traceweaver(spans, graph, candidates=False)
    parent = np.where(spans.parent != NONE, spans.parent, first.parent)
    sure = link_probability(spans, first) >= EXPLAINED_PROBABILITY
    explained = _explained(spans, graph, parent, sure, calls)
    joined = _at_join(spans, graph)
    found = False
    for rows in _groups(_units(spans), spans.start):
        incoming = rows[(spans.kind[rows] == SERVER) & ~explained[rows]]
        outgoing = rows[spans.kind[rows] == CLIENT]
        settled = sure[outgoing] & (parent[outgoing] >= 0)
        settled[settled] = explained[parent[outgoing[settled]]]
        for p, made in _sole_candidates(spans, incoming, outgoing[~settled]).items():
            if not joined[p] and _keeps_order(spans, graph, p, made):
                calls[p], how[p] = made, EXPLAINED
                found = True
    return found


def _keeps_order(spans: SpanTable, graph: CallGraph, request: int, made: list[int]) -> bool:
    """Whether the calls ``made`` keep the dependency order of the path of ``request``'s
    endpoint that makes the same calls, where the requests known so far showed one: calls
    another request made, taken for its own, would break an order its lone requests keep."""
    s = spans.strings
    g = graph.get(s[int(spans.service[request])] or "?", s[int(spans.endpoint[request])] or "?")
    callees = _callees(spans, made)
    signature = tuple(sorted(callees))
    path = next((q for q in g.call_paths() if _signature(q) == signature), None) if g else None
    if path is None:
        return True
    slot = {(x.service, x.endpoint, x.occurrence): j for j, x in enumerate(path.slots)}
    call = {}
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for c, callee in sorted(zip(made, callees, strict=True), key=lambda m: spans.start[m[0]]):
        call[slot[(*callee, seen[callee])]] = c
        seen[callee] += 1
    return all(
        spans.end[call[a]] <= spans.start[call[b]]
        for b, before in enumerate(path.preds)
        for a in before
    )


def _at_join(spans: SpanTable, graph: CallGraph) -> np.ndarray:
    """Per row, whether it is an incoming span of an endpoint ``graph`` learned as a join's
    (:class:`.callgraph.Join`): its requests are known together, as a group whose trigger
    calls on behalf of all, never one at a time."""
    s = spans.strings
    out = np.zeros(len(spans), dtype=bool)
    for r in np.flatnonzero(spans.kind == SERVER).tolist():
        g = graph.get(s[int(spans.service[r])] or "?", s[int(spans.endpoint[r])] or "?")
        out[r] = g is not None and g.join is not None
    return out


def _explained(
    spans: SpanTable,
    graph: CallGraph,
    parent: np.ndarray,
    sure: np.ndarray,
    calls: dict[int, list[int]],
) -> np.ndarray:
    """Per row, whether it is an incoming span explained by ``parent`` (:func:`_explain_rest`),
    or known already (``calls``). A request given no call is not explained while a call left
    unmapped overlaps it: that call may be its own, on a path not learned yet (TraceWeaver maps
    a request only onto a known path, §5.2.2), and set aside as explained it could never be
    known."""
    s = spans.strings
    made = _children(spans, parent)
    learned = {key: {_signature(p) for p in g.call_paths()} for key, g in graph.endpoints.items()}
    unmapped = _overlapped(spans, (spans.kind == CLIENT) & (parent < 0))
    out = np.zeros(len(spans), dtype=bool)
    for r in np.flatnonzero(spans.kind == SERVER).tolist():
        kids = made.get(r, [])
        key = (s[int(spans.service[r])] or "?", s[int(spans.endpoint[r])] or "?")
        out[r] = r in calls or (
            bool(sure[kids].all())
            and (bool(kids) or not unmapped[r])
            and tuple(sorted(_callees(spans, kids))) in learned.get(key, ())
        )
    return out


def _overlapped(spans: SpanTable, chosen: np.ndarray) -> np.ndarray:
    """Per row, whether one of the ``chosen`` rows of its unit (:func:`_units`) overlaps it."""
    out = np.zeros(len(spans), dtype=bool)
    for rows in _groups(_units(spans), spans.start):
        picked = rows[chosen[rows]]
        if not len(picked):
            continue
        out[rows] = _overlapping(spans.start[picked], spans.end[picked], spans, rows) > 0
    return out


def _overlapping(
    starts: np.ndarray, ends: np.ndarray, spans: SpanTable, rows: np.ndarray
) -> np.ndarray:
    """Per row of ``rows``, how many of the intervals (``starts``, ``ends``) overlap it: begun
    before it ends, not ended by its start."""
    begun = np.searchsorted(np.sort(starts), spans.end[rows], "left")
    return begun - np.searchsorted(np.sort(ends), spans.start[rows], "right")


def _signature(path: CallPath) -> tuple[tuple[str, str], ...]:
    """The callees of a path's calls, sorted: which backends it calls, how often each."""
    return tuple(sorted(x.callee for x in path.slots))


def _sole_candidates(
    spans: SpanTable, incoming: np.ndarray, outgoing: np.ndarray
) -> dict[int, list[int]]:
    """The calls of each incoming span (``incoming``, sorted by start) that some of ``outgoing``
    overlap and none that overlaps it overlaps another of ``incoming``: the calls that overlap
    it."""
    if not len(incoming) or not len(outgoing):
        return {}
    start, end = spans.start[incoming], spans.end[incoming]
    c_start, c_end = spans.start[outgoing], spans.end[outgoing]
    begun = np.searchsorted(start, c_end, "left")  # started before the call ended
    ended = np.searchsorted(np.sort(end), c_start, "right")  # ended by its start
    overlaps = begun - ended
    shared = overlaps >= 2
    crowded = _overlapping(c_start[shared], c_end[shared], spans, incoming)
    owner = _latest(end)[np.maximum(begun - 1, 0)]
    out: dict[int, list[int]] = {}
    for i in np.flatnonzero(crowded == 0).tolist():
        made = outgoing[(overlaps == 1) & (owner == i)]
        if len(made):
            out[int(incoming[i])] = made.tolist()
    return out
