"""From traced spans to what a collector at each service instance observes.

Real exports are messy: ``span.kind`` may be missing, spans may be in-process children, some RPCs
have only the callee's server span (no client span at the caller), and calls to databases and
caches appear as leaf spans. This module decides every span's role and pairs the two sides of
each RPC, so that reconstruction algorithms see the same thing a sidecar or eBPF probe would:
per instance, incoming (server) and outgoing (client) spans, each outgoing span linked to the
callee's incoming span when the callee is traced.

The ground truth that reconstruction is scored against is the *causal parent* of every outgoing
span: the incoming span of the same instance on whose behalf it was made (in-process spans in
between are skipped). TraceWeaver (SIGCOMM '24, §3) frames reconstruction the same way: the
caller-callee hop is known from the connection, the mapping inside a service is not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tacit.model.span_details import concat_details
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTable
from tacit.runs import contained

DATABASE_NAME = re.compile(
    r"^(sql\.|select\b|insert\b|update\b|delete\b|redis|memcache|mongo|mysql|postgres|"
    r"cassandra|hget|hset|db\.)",
    re.IGNORECASE,
)
"""Operation names of leaf spans that are calls to an untraced database or cache."""


@dataclass
class Observed:
    """Spans as a collector sees them, with the ground truth kept aside.

    ``spans`` holds only server and client spans. In it, ``link`` pairs the two sides of an RPC,
    and ``parent`` is the ground truth: for a client span, the server span of the same instance
    that caused it; for a server span, the caller's client span (its link). ``synthesized`` marks
    client spans made for RPCs whose caller recorded none (timestamps copied from the callee).
    ``accounting`` counts every input span by what became of it.
    """

    spans: SpanTable
    synthesized: np.ndarray
    accounting: dict[str, int] = field(default_factory=dict)

    def without_truth(self, instrumented: Sequence[str] = (), given: bool = False) -> SpanTable:
        """The blind view: the same spans with every trace, span and parent identifier removed,
        but for the calls made by the ``instrumented`` services, which propagate context: their
        parents stay known (a hybrid deployment, where reconstruction fills in the rest). With
        ``given``, every call whose parent the input gives keeps it: only the calls whose
        context was lost (each the root of a trace of its own) are left to reconstruct."""
        t = self.spans.take(np.arange(len(self.spans)))
        known = (t.kind == CLIENT) & contained(t.service, [t.strings.find(s) for s in instrumented])
        if given:
            known = t.kind == CLIENT
        t.trace[:] = NONE
        t.span_id[:] = NONE
        t.parent[:] = np.where(known, self.spans.parent, NONE)
        return t


def process_key(spans: SpanTable) -> np.ndarray:
    """One int64 per span naming its (service, instance) process."""
    return (spans.service.astype(np.int64) << 32) | spans.instance.astype(np.int64)


def infer_roles(spans: SpanTable) -> Observed:  # noqa: PLR0915
    """Decide roles, pair RPC sides and resolve causal parents; see the module docstring.

    Rules, in order, for a span whose kind is not recorded: a root, or a span whose parent is in
    another process, is a server span; a span whose parent is in the same process and whose
    children are all in one other service (one RPC, perhaps retried) is a client span; a leaf
    whose name is a database or cache operation is a client span to that (untraced) backend;
    anything else is in-process work. An in-process span with children in other services (an
    OpenTracing-era handler span such as Media Microservices' ``ComposeReview``, parent of calls
    to four services) is therefore not taken for the client span of one of them: each of those
    calls gets its own synthesized client span.
    """
    n = len(spans)
    proc = process_key(spans)
    parent = spans.parent
    has_parent = parent != NONE
    cross = np.zeros(n, dtype=bool)
    cross[has_parent] = proc[parent[has_parent]] != proc[has_parent]
    has_cross_child = np.zeros(n, dtype=bool)
    has_cross_child[parent[cross]] = True
    has_child = np.zeros(n, dtype=bool)
    has_child[parent[has_parent]] = True
    wraps_one_rpc = _wraps_one_rpc(spans.service, parent, cross, has_parent)

    kind = spans.kind.copy()
    unknown = kind == UNKNOWN
    kind[unknown & (~has_parent | cross)] = SERVER
    kind[unknown & has_parent & ~cross & has_cross_child & wraps_one_rpc] = CLIENT
    leaf = unknown & has_parent & ~cross & ~has_child
    names = spans.strings.values
    db = np.array([bool(DATABASE_NAME.match(names[e])) for e in spans.endpoint[leaf]], dtype=bool)
    leaf_rows = np.flatnonzero(leaf)
    kind[leaf_rows[db]] = CLIENT
    kind[kind == UNKNOWN] = INTERNAL

    # Pair server spans with the caller's client span, or synthesize one.
    link = np.full(n, NONE, dtype=np.int64)
    server_rows = np.flatnonzero((kind == SERVER) & has_parent & cross)
    caller = parent[server_rows]
    by_client = kind[caller] == CLIENT
    linked = server_rows[by_client]
    # A client span with several server children (retries) links to the first only.
    _, first = np.unique(caller[by_client], return_index=True)
    link[linked[first]] = caller[by_client][first]
    link[caller[by_client][first]] = linked[first]
    needs_client = np.setdiff1d(server_rows, linked[first], assume_unique=True)
    # Links the input already has (blind spans: the collector's RPC pairing) are kept.
    link = np.where(link == NONE, spans.link, link)

    # Causal parent of a client span: nearest server ancestor in the same process.
    cause = np.full(n, NONE, dtype=np.int64)
    client_rows = np.flatnonzero(kind == CLIENT)
    cause[client_rows] = _nearest_server(parent[client_rows], proc[client_rows], parent, proc, kind)
    # Causal parent of a synthesized client span: the caller's nearest server span.
    caller = parent[needs_client]
    synth_cause = _nearest_server(caller, proc[caller], parent, proc, kind)

    keep = np.flatnonzero((kind == SERVER) | (kind == CLIENT))
    m = len(keep)
    k = len(needs_client)
    cols = {
        name: np.concatenate([col[keep], col[needs_client]])
        for name, col in spans.columns().items()
    }
    out_kind = np.concatenate([kind[keep], np.full(k, CLIENT, dtype=np.int8)])
    pos = np.full(n, NONE, dtype=np.int64)
    pos[keep] = np.arange(m)

    def rows(x: np.ndarray) -> np.ndarray:
        return np.where(x != NONE, pos[np.maximum(x, 0)], NONE)

    synth_rows = np.arange(m, m + k)
    out_link = np.concatenate([rows(link[keep]), pos[needs_client]])
    out_link[pos[needs_client]] = synth_rows
    out_parent = np.concatenate([rows(cause[keep]), rows(synth_cause)])
    is_server = out_kind == SERVER
    out_parent[is_server] = out_link[is_server]
    # The synthesized caller side: the caller's process, the callee as peer.
    caller_of = np.where(synth_cause != NONE, synth_cause, parent[needs_client])
    cols["service"][m:] = spans.service[caller_of]
    cols["instance"][m:] = spans.instance[caller_of]
    cols["peer"][m:] = spans.service[needs_client]
    cols["span_id"][m:] = NONE
    cols["thread"][m:] = spans.thread[caller_of]
    # Peer of a client span with a traced callee: the callee's service; of a server span: caller.
    has_link = out_link != NONE
    cols["peer"][has_link] = np.where(
        cols["peer"][has_link] == NONE, cols["service"][out_link[has_link]], cols["peer"][has_link]
    )
    cols.update(kind=out_kind, link=out_link, parent=out_parent)
    details = concat_details(
        [(m, None if spans.details is None else spans.details[keep]), (k, None)]
    )
    table = SpanTable(spans.strings, **cols, sources=spans.sources, details=details)
    order = np.lexsort((table.end, table.start))
    table = table.take(order)
    synthesized = np.concatenate([np.zeros(m, bool), np.ones(k, bool)])[order]
    return Observed(table, synthesized, span_accounting(kind, k))


def span_accounting(kind: np.ndarray, synthesized: int) -> dict[str, int]:
    """What became of input spans whose roles are ``kind``, with ``synthesized`` client spans
    made for RPCs the caller did not record (:attr:`Observed.accounting`)."""
    return {
        "input": len(kind),
        "server": int((kind == SERVER).sum()),
        "client": int((kind == CLIENT).sum()),
        "internal": int((kind == INTERNAL).sum()),
        "client_synthesized": synthesized,
    }


def _wraps_one_rpc(
    service: np.ndarray, parent: np.ndarray, cross: np.ndarray, has_parent: np.ndarray
) -> np.ndarray:
    """Per span: all its children are in other processes, and all in one service."""
    n = len(parent)
    kids = np.flatnonzero(has_parent)
    up = parent[kids]
    ok = np.ones(n, dtype=bool)
    ok[up[~cross[kids]]] = False  # an in-process child: this span is work, not a wire call
    first = np.full(n, NONE, dtype=np.int64)
    first[up[::-1]] = service[kids[::-1]]  # the service of (some) child, per parent
    ok[up[service[kids] != first[up]]] = False  # children in two services: not one RPC
    return ok


def _nearest_server(
    start: np.ndarray, process: np.ndarray, parent: np.ndarray, proc: np.ndarray, kind: np.ndarray
) -> np.ndarray:
    """Per start row: the first server span on its way up the parent chain (itself included)
    while the chain stays in ``process``; -1 when it leaves the process or ends first."""
    found = np.full(len(start), NONE, dtype=np.int64)
    cur = start.copy()
    open_ = cur != NONE
    while open_.any():
        idx = np.flatnonzero(open_)
        anc = cur[idx]
        inside = proc[anc] == process[idx]
        server = inside & (kind[anc] == SERVER)
        found[idx[server]] = anc[server]
        cur[idx] = np.where(inside & ~server, parent[anc], NONE)
        open_ = cur != NONE
    return found
