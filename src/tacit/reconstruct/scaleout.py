"""TraceWeaver scaled out: independent parts of the spans reconstructed on a Dask cluster.

TraceWeaver maps the calls of a container from the requests of that container only, because a
request arriving at one container makes no call from another (SIGCOMM '24, §6.6), and several
instances of it can work on disjoint sets of spans in parallel, "instance A handles t=0 to 1s, B
handles t=1 to 2s" (§6.5). :func:`partition` cuts a blind table into such parts and
:func:`merge` puts their reconstructions together; :func:`reconstruct_dask` runs the parts on
an existing Dask cluster, never on a scheduler of tacit's own.

By instance, the merge is exactly :func:`.traceweaver.reconstruct_traceweaver` of the whole
table: it reconstructs one instance at a time, from that instance's spans alone, and adds up
the per-service counts. The one exception is a join (``TraceWeaverParams.joins``): its instance
groups incoming spans by the request its callers' mapping gives them, so it shares a part with
every instance upstream of it. By time window (``window_ns``) each window learns its own gap
models, as a separate TraceWeaver instance of §6.5 would, so the mapping may differ from one
run over all the spans; the cuts fall where no incoming span of the part is open, so no request
is split.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import breadth_first_order, connected_components

from tacit.errors import ConfigError, TacitError
from tacit.extras import require_extra
from tacit.model.roles import process_key
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.link_probability import link_probability, service_confidence
from tacit.reconstruct.result import NOT_SAMPLED, Reconstruction
from tacit.reconstruct.shared_values import SharedValues
from tacit.reconstruct.traceweaver import Progress, TraceWeaverParams, reconstruct_traceweaver
from tacit.runs import contained, split_at

if TYPE_CHECKING:
    import distributed

log = logging.getLogger("tacit.reconstruct")

ATTEMPTS = 3
"""How many times a round's parts go to the cluster. A worker that dies takes with it the
tables it was sent (data sent to a cluster, not computed there, has nothing to be computed
again from), and the tasks that needed them are cancelled: those parts are sent again, to the
workers left; what they give is the same."""


def partition(
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    window_ns: int | None = None,
) -> list[np.ndarray]:
    """The rows of ``spans`` in parts that TraceWeaver reconstructs independently, largest first:
    each a sorted array of rows, together every row once.

    A part is an instance (service, instance) with all its spans; an instance with a join
    endpoint (with ``params.joins``) shares one with every instance whose requests reach it.
    With ``window_ns``, a part is further cut at the first point at least ``window_ns`` after
    the previous cut at which none of its incoming spans is open; each span goes to the window
    in which it starts.
    """
    params = params or TraceWeaverParams()
    check_window(window_ns)
    if not len(spans):
        return []
    keys, instance = np.unique(process_key(spans), return_inverse=True)
    n = len(keys)
    joined = np.zeros(n, dtype=bool)
    if params.joins:
        s = spans.strings
        joins = [s.find(svc) for (svc, _), g in callgraph.endpoints.items() if g.join is not None]
        joined[instance[contained(spans.service, joins)]] = True
    group = _groups(spans, instance, joined)
    order = np.argsort(group, kind="stable")
    cut = np.flatnonzero(np.diff(group[order])) + 1
    parts = [
        w for rows in split_at(order, cut) if len(rows) for w in _windows(spans, rows, window_ns)
    ]
    parts.sort(key=len, reverse=True)
    return parts


def check_window(window_ns: int | None) -> None:
    """Raise :class:`ConfigError` unless ``window_ns`` is None or positive."""
    if window_ns is not None and window_ns <= 0:
        raise ConfigError(f"a window must be longer than 0, got {window_ns} ns")


def _groups(spans: SpanTable, instance: np.ndarray, joined: np.ndarray) -> np.ndarray:
    """A group per row: its instance's, where joins are joined with their upstream instances.

    Upstream of an instance is every instance from which a chain of calls reaches it: the caller
    of each of its incoming spans (the span's ``link``), their callers, and so on.
    """
    n = len(joined)
    server = np.flatnonzero((spans.kind == SERVER) & (spans.link != NONE))
    caller, callee = instance[spans.link[server]], instance[server]
    # callee -> caller edges: following them from a join visits everything upstream of it.
    upward = coo_matrix((np.ones(len(server)), (callee, caller)), shape=(n, n)).tocsr()
    a, b = [np.arange(n)], [np.arange(n)]
    for j in np.flatnonzero(joined):
        up = breadth_first_order(upward, j, directed=True, return_predecessors=False)
        a.append(np.full(len(up), j))
        b.append(up)
    ones = np.ones(sum(len(x) for x in a))
    together = coo_matrix((ones, (np.concatenate(a), np.concatenate(b))), shape=(n, n))
    _, label = connected_components(together, directed=False)
    return label[instance]


def _windows(spans: SpanTable, rows: np.ndarray, window_ns: int | None) -> list[np.ndarray]:
    """``rows`` cut into windows of at least ``window_ns`` at points where none of their
    incoming spans is open (at the start of an incoming span after which all earlier ones have
    ended); one window when ``window_ns`` is None or there is no such point."""
    server = rows[spans.kind[rows] == SERVER]
    if window_ns is None or len(server) < 2:
        return [rows]
    by_start = np.argsort(spans.start[server], kind="stable")
    start = spans.start[server][by_start]
    ended = np.maximum.accumulate(spans.end[server][by_start])
    quiet = start[1:][ended[:-1] <= start[1:]]
    cuts: list[int] = []
    t = int(start[0])
    while (k := int(np.searchsorted(quiet, t + window_ns))) < len(quiet):
        t = int(quiet[k])
        cuts.append(t)
    window = np.searchsorted(np.array(cuts, dtype=np.int64), spans.start[rows], side="right")
    return [rows[window == w] for w in range(len(cuts) + 1)]


def merge(
    spans: SpanTable, parts: list[np.ndarray], results: list[Reconstruction]
) -> Reconstruction:
    """One reconstruction of ``spans`` from those of its ``parts`` (``results[i]`` of
    ``spans.take(parts[i])``): rows mapped back, per-service counts added up, the confidence
    computed from the links' probabilities, iterations the most any part took and the other
    counts summed."""
    rec = Reconstruction.start("traceweaver", spans)
    reports: dict[str, dict[str, int]] = {}
    info: dict[str, int] = {}
    alternatives = []
    for rows, part in zip(parts, results, strict=True):
        client = spans.kind[rows] == CLIENT
        mapped = part.parent[client]
        rec.parent[rows[client]] = np.where(mapped != NONE, rows[mapped], NONE)
        rec.score[rows] = part.score
        if part.probability is not None:
            if rec.probability is None:
                rec.probability = np.full(len(spans), np.nan)
            rec.probability[rows] = part.probability
        if part.samples is not None:
            if rec.samples is None:
                rec.samples = np.full(len(spans), NOT_SAMPLED, dtype=np.uint64)
            rec.samples[rows] = part.samples
        back = rows.tolist()
        rec.unmapped.update({back[r]: why for r, why in part.unmapped.items()})
        rec.fallback.update({back[r]: why for r, why in part.fallback.items()})
        alternatives.append(Alternatives.of(part.alternatives).renumbered(rows))
        rec.top_candidates.update(
            {
                back[i]: [frozenset(back[k] for k in kids) for kids in cands]
                for i, cands in part.top_candidates.items()
            }
        )
        for svc, counts in part.service_report.items():
            mine = reports.setdefault(svc, dict.fromkeys(counts, 0))
            for k, n in counts.items():
                mine[k] += n
        for k, v in part.info.items():
            assert isinstance(v, int)  # every count of reconstruct_traceweaver's info
            info[k] = max(info.get(k, 0), v) if k == "iterations" else info.get(k, 0) + v
    rec.alternatives = Alternatives.merged(alternatives)
    rec.service_report = dict(sorted(reports.items()))
    rec.confidence = service_confidence(spans, link_probability(spans, rec))
    rec.info = dict(info)
    return rec


def reconstruct_dask(
    spans: SpanTable,
    callgraph: CallGraph,
    scheduler: str | distributed.Client,
    params: TraceWeaverParams | None = None,
    window_ns: int | None = None,
    progress: Progress | None = None,
) -> Reconstruction:
    """:func:`.traceweaver.reconstruct_traceweaver` of ``spans``, its :func:`partition` run on
    the Dask cluster of ``scheduler`` (an address, or a connected ``distributed.Client``) and
    merged. The workers need tacit installed; each part goes to one of them, and the call graph
    to each once.
    ``progress`` gets the span count of each part as it comes back. Dask's own settings apply
    (the connection timeout is ``distributed.comm.timeouts.connect``)."""
    parts = partition(spans, callgraph, params, window_ns)
    client = connect(scheduler) if isinstance(scheduler, str) else scheduler
    try:
        return solve_parts(client, spans, callgraph, params, parts=parts, progress=progress)
    finally:
        if client is not scheduler:
            client.close()


def connect(scheduler: str) -> distributed.Client:
    """A client of the Dask scheduler at ``scheduler`` (``tcp://HOST:PORT``, or ``inproc://``
    of this process); a bad address or one out of reach is a :class:`ConfigError`. Dask's own
    settings apply (the connection timeout is ``distributed.comm.timeouts.connect``)."""
    require_extra("dask", "reconstruction on a Dask cluster")
    import distributed
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(scheduler, strict=False)
        if scheme == "tcp":
            parse_host_port(location)
        elif scheme != "inproc":
            raise ValueError(f"{scheme}:// is not tcp:// (nor inproc:// of this process)")
    except ValueError as e:
        raise ConfigError(f"bad Dask scheduler address {scheduler!r}: {e}") from None
    try:
        return distributed.Client(scheduler, set_as_default=False)
    except OSError as e:
        raise ConfigError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None


def solve_parts(
    client: distributed.Client,
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    *,
    scattered: distributed.Future | None = None,
    parts: list[np.ndarray] | None = None,
    candidates: bool = True,
    below: Mapping[int, set[str]] | None = None,
    progress: Progress | None = None,
    meanwhile: Callable[[], bool] | None = None,
) -> Reconstruction:
    """:func:`.traceweaver.reconstruct_traceweaver` of ``spans`` (with ``candidates`` and
    ``below`` as it takes them), the instances of :func:`partition` (or ``parts``) solved on
    the cluster of ``client`` and merged: the same result.

    Each part goes to one worker, as a table of its own with the strings it uses alone
    (:meth:`~tacit.model.spans.SpanTable.compacted`; the strings keep their order, so the part
    is solved as its rows of the whole table are): what is sent is the table once, however
    many workers there are. A part's calls reach into other parts for the values of their
    transaction fields (:mod:`.shared_values`: the spans below a call are the callee's), so
    those are found here, over the whole table, and sent with each part; the details of the
    spans go only where they name such values. ``scattered``: the call graph, already on the
    cluster. ``meanwhile`` is called while the parts are solved, until it says it has nothing
    more to do (False) or they are all done: the caller's own work, which the round's result
    does not change."""
    import distributed

    if parts is None:
        parts = partition(spans, callgraph, params)
    found = _values_below(spans, parts, params, below)
    belows = found or [None] * len(parts)
    sent = spans if found else replace(spans, details=None)
    tables = [sent.take(rows).compacted() for rows in parts]
    results: dict[int, Reconstruction] = {}
    todo = list(range(len(parts)))
    graph = scattered
    for _ in range(ATTEMPTS):
        if graph is None or graph.status != "finished":  # lost with the workers holding it
            graph = client.scatter(callgraph, broadcast=True)
        futures = client.map(
            _reconstruct_part,
            client.scatter([tables[i] for i in todo], hash=False),
            [belows[i] for i in todo],
            callgraph=graph,
            params=params,
            candidates=candidates,
            pure=False,
        )
        if meanwhile is not None:
            while not all(f.done() for f in futures) and meanwhile():
                pass
        index = {f.key: i for i, f in zip(todo, futures, strict=True)}
        lost: list[int] = []
        why = None
        for future, result in distributed.as_completed(futures, client.loop, with_results=True):
            i = index[future.key]
            if isinstance(result, CancelledError):  # its worker died with what it was sent
                lost.append(i)
                why = result
                continue
            results[i] = result
            if progress is not None:
                progress(len(parts[i]))
        if not lost:
            return merge(spans, parts, [results[i] for i in range(len(parts))])
        log.warning(
            "dask: %d of %d parts lost (%s); sending them again", len(lost), len(parts), why
        )
        todo = sorted(lost)
    raise TacitError(f"dask: parts of a round lost with a worker {ATTEMPTS} times over")


class DaskRounds:
    """The offline step of each round of online TraceWeaver (:data:`.online.RoundSolver`) on
    the Dask cluster of ``client``, by instance (:func:`solve_parts`): the rounds stay in
    order, one after another, and each round's instances run at once on the workers. The call
    graph goes to the workers once, and again when it is replaced. ``meanwhile``: as
    :func:`solve_parts` takes it, for every round."""

    def __init__(
        self, client: distributed.Client, meanwhile: Callable[[], bool] | None = None
    ) -> None:
        self.client = client
        self.meanwhile = meanwhile
        self._graph: tuple[CallGraph, distributed.Future] | None = None

    def __call__(
        self,
        spans: SpanTable,
        callgraph: CallGraph,
        params: TraceWeaverParams | None,
        below: Mapping[int, set[str]] | None,
    ) -> Reconstruction:
        if (
            self._graph is None
            or self._graph[0] is not callgraph
            or self._graph[1].status != "finished"
        ):
            self._graph = callgraph, self.client.scatter(callgraph, broadcast=True)
        return solve_parts(
            self.client,
            spans,
            callgraph,
            params,
            scattered=self._graph[1],
            candidates=False,
            below=below,
            meanwhile=self.meanwhile,
        )


def _values_below(
    spans: SpanTable,
    parts: list[np.ndarray],
    params: TraceWeaverParams | None,
    below: Mapping[int, set[str]] | None,
) -> list[dict[int, set[str]] | None] | None:
    """Per part, by its own row, the values below each of its calls (what
    :class:`.shared_values.SharedValues` finds over the whole table, ``below`` included);
    None when no span names a value, or shared values are off. A ``below`` that has every
    call already (an online round's: :meth:`.online.OnlineTraceWeaver._values_below`) is
    taken as it is, rather than the table's values read again."""
    if not (params or TraceWeaverParams()).shared_values or spans.details is None:
        return None
    client = spans.kind == CLIENT
    calls = np.flatnonzero(client).tolist()
    if below is None or not below.keys() >= set(calls):
        values = SharedValues(spans, np.arange(len(spans)), below)
        if not values:
            return None
        below = {r: values.below(r) for r in calls}
    return [{i: below[r] for i, r in enumerate(rows.tolist()) if client[r]} for rows in parts]


def _reconstruct_part(
    spans: SpanTable,
    below: dict[int, set[str]] | None,
    callgraph: CallGraph,
    params: TraceWeaverParams | None,
    candidates: bool,
) -> Reconstruction:
    """One part of :func:`partition`, reconstructed on a worker."""
    return reconstruct_traceweaver(spans, callgraph, params, candidates=candidates, below=below)
