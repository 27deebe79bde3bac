"""The two sides of one RPC, as two agents saw them: pairing client spans with server spans.

An eBPF agent or a sidecar in each service records every request it sends (a *client* span)
and every request it serves (a *server* span), each on its own: nothing in a span names the
span of the same request at the other end. The two ends of one connection do share what the
wire shows: the server's address and port, the client's address and port when recorded, a
request identifier the proxy itself put on the request. TraceWeaver (SIGCOMM '24, §3 and §5.1)
takes this caller-callee hop as known from the connection; :func:`pair_rpcs` recovers it.

A client span and a server span are candidates for one RPC when they share a *key* (the
identity of the connection or request both ends record: the server endpoint, a request id),
agree on every further identifier both of them recorded (an identifier one of them lacks
constrains nothing), belong to different processes, and nest in time: the request leaves the
client before it reaches the server, and the response reaches the client after the server sent
it, so the server span lies within the client span, up to ``tolerance_ns`` (the coarseness of
the recorded times, or the clock offset between the two hosts). Among the candidates, the pairs
of least *slack* (the time the client span spends outside the server span: network and proxy
time) are taken first, each span at most once.

Every span is accounted for: paired, or unpaired for one of the reasons below. A server span
called by something without an agent (the load generator in front of an application) or a
client span to a backend without one (a database) is unpaired by nature.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tacit.model.roles import process_key
from tacit.model.spans import CLIENT, KIND_NAMES, NONE, SERVER, SpanTable
from tacit.runs import contained, distinct

NO_KEY = "the agent recorded nothing that identifies its connection"
NOTHING_OPPOSITE = "no span on the other side of its connection"
NONE_WITHIN = "no span on the other side of its connection within its time"
TAKEN = "every span on the other side within its time paired with a closer one"


@dataclass
class AgentSpans:
    """Blind spans from per-service agents, their RPCs paired (``link``), and what became of
    every input record: ``accounting`` counts records read, left out by reason, spans by kind,
    RPCs paired (:func:`pair_rpcs`) and spans unpaired by kind and reason."""

    spans: SpanTable
    accounting: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PairingParams:
    """How strictly the server span must nest within its client span.

    ``tolerance_ns``: how far the server span may start before the client span, or end after
    it. 0 (the default) for times from one clock at microsecond resolution or better; times
    rounded to a millisecond need 1 ms (:mod:`tacit.formats.envoy_access_log`); agents on
    different hosts need the clock offset between the hosts as well.
    """

    tolerance_ns: int = 0


def pair_rpcs(
    spans: SpanTable,
    key: Sequence[str | None],
    agree: Sequence[Sequence[str | None]] = (),
    params: PairingParams | None = None,
) -> dict[str, int]:
    """Pair the client and server spans of ``spans`` in place (see the module docstring) and
    return the accounting: client and server spans, pairs, and unpaired spans by kind and
    reason.

    ``key``: per span, the identity both ends of its RPC record (None: not recorded).
    ``agree``: further identifiers per span (each a sequence like ``key``) that must be equal
    when both spans recorded them. A paired span's ``link`` is its partner's row and its
    ``peer`` the partner's service; a paired client span takes the endpoint its server span
    names (the callee knows its own route or method; the caller may only know a raw path).
    """
    params = params or PairingParams()
    if params.tolerance_ns < 0:
        raise ValueError(f"tolerance_ns must be >= 0, got {params.tolerance_ns}")
    n = len(spans)
    if len(key) != n or any(len(a) != n for a in agree):
        raise ValueError("key and agree need one value per span")
    codes = _codes([key, *agree])
    c, s = _candidates(spans, codes[0], codes[1:], params.tolerance_ns)
    slack = np.abs(spans.start[s] - spans.start[c]) + np.abs(spans.end[c] - spans.end[s])
    order = np.lexsort((s, c, slack))
    link = _take_greedily(c[order], s[order], n)
    had_candidate = np.zeros(n, dtype=bool)
    had_candidate[c] = had_candidate[s] = True
    accounting = _accounting(spans, codes[0], link, had_candidate)
    paired = np.flatnonzero(link != NONE)
    spans.link[:] = link
    spans.peer[paired] = spans.service[link[paired]]
    clients = paired[spans.kind[paired] == CLIENT]
    spans.endpoint[clients] = spans.endpoint[link[clients]]
    return accounting


def _codes(columns: Sequence[Sequence[str | None]]) -> list[np.ndarray]:
    """Each column as int64 codes, equal strings equal codes, None as NONE."""
    pool: dict[str, int] = {}
    return [
        np.array(
            [NONE if v is None else pool.setdefault(v, len(pool)) for v in col], dtype=np.int64
        )
        for col in columns
    ]


def _candidates(
    spans: SpanTable, key: np.ndarray, agree: list[np.ndarray], tolerance: int
) -> tuple[np.ndarray, np.ndarray]:
    """(client rows, server rows) of every candidate pair.

    Servers are searched by (key, start) with one sorted array: keys and times are replaced by
    their ranks, so that ``key rank * times + time rank`` orders by key, then time, exactly.
    """
    known = key != NONE
    clients = np.flatnonzero((spans.kind == CLIENT) & known)
    servers = np.flatnonzero((spans.kind == SERVER) & known)
    empty = np.zeros(0, np.int64)
    if not len(clients) or not len(servers):
        return empty, empty
    _, key_rank = np.unique(key, return_inverse=True)
    times = np.concatenate(
        [
            spans.start[servers],
            spans.start[clients] - tolerance,
            spans.end[clients] + tolerance,
        ]
    )
    _, time_rank = np.unique(times, return_inverse=True)
    width = np.int64(time_rank.max() + 1)
    ns, nc = len(servers), len(clients)
    server_pos = key_rank[servers] * width + time_rank[:ns]
    order = np.argsort(server_pos, kind="stable")
    sorted_pos = server_pos[order]
    base = key_rank[clients] * width
    lo = np.searchsorted(sorted_pos, base + time_rank[ns : ns + nc], "left")
    hi = np.searchsorted(sorted_pos, base + time_rank[ns + nc :], "right")
    counts = hi - lo
    c = np.repeat(clients, counts)
    first = np.repeat(lo - np.cumsum(counts) + counts, counts)
    s = servers[order[np.arange(len(c)) + first]]
    ok = spans.end[s] <= spans.end[c] + tolerance
    proc = process_key(spans)
    ok &= proc[s] != proc[c]
    for a in agree:
        ok &= (a[c] == NONE) | (a[s] == NONE) | (a[c] == a[s])
    return c[ok], s[ok]


@njit(cache=True)
def _take_greedily(
    client: np.ndarray, server: np.ndarray, n: int
) -> np.ndarray:  # pragma: no cover - compiled
    """Take the candidate pairs in order, each span at most once; per span, its partner."""
    link = np.full(n, -1, np.int64)
    for i in range(len(client)):
        c, s = client[i], server[i]
        if link[c] < 0 and link[s] < 0:
            link[c] = s
            link[s] = c
    return link


def _accounting(
    spans: SpanTable, key: np.ndarray, link: np.ndarray, had_candidate: np.ndarray
) -> dict[str, int]:
    """Spans by kind, pairs, and unpaired spans by kind and reason (``had_candidate``: per
    span, whether any span of the other side qualified)."""
    out = {
        "client_spans": int((spans.kind == CLIENT).sum()),
        "server_spans": int((spans.kind == SERVER).sum()),
        "rpcs_paired": int((link[spans.kind == CLIENT] != NONE).sum()),
    }
    for kind, other in ((CLIENT, SERVER), (SERVER, CLIENT)):
        rows = np.flatnonzero((spans.kind == kind) & (link == NONE))
        if not len(rows):
            continue
        no_key = key[rows] == NONE
        opposite = _has_opposite(rows, key, spans.kind == other, process_key(spans))
        within = had_candidate[rows]
        for reason, mask in (
            (NO_KEY, no_key),
            (NOTHING_OPPOSITE, ~no_key & ~opposite),
            (NONE_WITHIN, ~no_key & opposite & ~within),
            (TAKEN, ~no_key & opposite & within),
        ):
            if mask.any():
                out[f"{KIND_NAMES[kind]} spans unpaired: {reason}"] = int(mask.sum())
    return out


def _has_opposite(
    rows: np.ndarray, key: np.ndarray, other: np.ndarray, proc: np.ndarray
) -> np.ndarray:
    """Per span at ``rows``: whether a span of the ``other`` side in another process shares its
    key (a request id an application propagates puts its own calls beside it)."""
    _, process = np.unique(proc, return_inverse=True)
    width = np.int64(process.max() + 1)
    theirs = np.flatnonzero(other & (key != NONE))
    pairs = distinct(key[theirs] * width + process[theirs])
    keys, processes = np.unique(pairs // width, return_counts=True)
    if not len(keys):
        return np.zeros(len(rows), dtype=bool)
    at = np.minimum(np.searchsorted(keys, key[rows]), len(keys) - 1)
    own = contained(key[rows] * width + process[rows], pairs)
    return (keys[at] == key[rows]) & (processes[at] > own)
