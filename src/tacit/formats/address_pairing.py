"""RPCs whose trace context did not cross, paired by the server end both sides name: the batch
commands' counterpart of the address book of ``tacit serve``
(:mod:`tacit.reconstruct.stream_context`), with the same keys and rules.

A client span that no server span names as its parent, and a server span without a parent, are
the two sides of a call whose context was lost (a propagator that carries nothing, a proxy that
drops the headers). Both name the server end and the request target
(:mod:`.rpc_endpoints`): a request is paired with a call to the same end and target that
encloses it in time, the pairs of least slack first (:func:`.rpc_pairing.pair_rpcs`, as an eBPF
agent's spans are); a queue's consumer with the oldest producer of the same queue and message
that started before it (a queue is first in, first out).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tacit.formats.rpc_endpoints import QUEUE, rpc_endpoint, rpc_target
from tacit.formats.rpc_pairing import pair_rpcs
from tacit.model.span_details import NO_DETAIL
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable

ADDRESS_PAIRS = "RPCs paired by the server end both sides name"
"""The accounting entry of :func:`pair_by_address`."""


def pair_by_address(spans: SpanTable) -> int:
    """Link, in place, the client and server spans of ``spans`` that no context paired and
    whose attributes pair them (module docstring); returns the number of pairs."""
    if spans.details is None or not len(spans):
        return 0
    named_parent = np.zeros(len(spans), dtype=bool)
    has_parent = spans.parent != NONE
    named_parent[spans.parent[has_parent & (spans.kind == SERVER)]] = True
    open_call = (spans.kind == CLIENT) & ~named_parent & (spans.link == NONE)
    open_request = (spans.kind == SERVER) & ~has_parent & (spans.link == NONE)
    if not open_call.any() or not open_request.any():
        return 0
    rows = np.flatnonzero(open_call | open_request)
    ends = np.empty(len(rows), dtype=object)
    targets = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows.tolist()):
        attributes = (spans.details[row] or NO_DETAIL).attributes
        ends[i] = rpc_endpoint(int(spans.kind[row]), attributes)
        targets[i] = rpc_target(int(spans.kind[row]), attributes)
    queued = np.array([e is not None and e.startswith(QUEUE) for e in ends], dtype=bool)
    pairs = _queue_pairs(spans, rows[queued], ends[queued], targets[queued])
    rpc, sub = rows[~queued], spans.take(rows[~queued])
    paths = [None if t is None else t.partition("?")[0] for t in targets[~queued]]
    pair_rpcs(sub, list(ends[~queued]), [paths, [_query(t) for t in targets[~queued]]])
    clients = np.flatnonzero((sub.kind == CLIENT) & (sub.link != NONE))
    pairs += zip(rpc[clients].tolist(), rpc[sub.link[clients]].tolist(), strict=True)
    for call, request in pairs:
        spans.link[call], spans.link[request] = request, call
    return len(pairs)


def _query(target: str | None) -> str | None:
    """The query of a target, None where it names none (a side that recorded only the path
    constrains nothing: :func:`.rpc_endpoints.same_target`)."""
    if target is None or "?" not in target:
        return None
    return target.partition("?")[2]


def _queue_pairs(
    spans: SpanTable, rows: np.ndarray, ends: np.ndarray, messages: np.ndarray
) -> list[tuple[int, int]]:
    """(producer, consumer) rows: per queue and message, each consumer, in start order, takes
    the oldest producer not taken that started before it."""
    producers: dict[tuple, list[int]] = defaultdict(list)
    consumers: dict[tuple, list[int]] = defaultdict(list)
    for row, end, message in zip(rows.tolist(), ends.tolist(), messages.tolist(), strict=True):
        side = producers if spans.kind[row] == CLIENT else consumers
        side[(end, message)].append(row)
    pairs = []
    for key, waiting in consumers.items():
        queue = sorted(producers.get(key, ()), key=lambda r: spans.start[r])
        for consumer in sorted(waiting, key=lambda r: spans.start[r]):
            if queue and spans.start[queue[0]] <= spans.start[consumer]:
                pairs.append((queue.pop(0), consumer))
    return pairs
