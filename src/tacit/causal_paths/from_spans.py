"""Message traces from request traces: each RPC becomes a request and a response message.

What WAP5 (Reynolds et al., WWW '06, §2) sees of an RPC-based application is the messages on
its connections. Traced requests (or blind spans) give them directly: a client span at caller P
paired with the callee's server span at Q is a request message P→Q (sent at the client span's
start on P's clock, received at the server span's start on Q's clock) and a response Q→P (sent
at the server span's end, received at the client span's end). A callee without a server span (a
database, a cache) is an untraced node: its ends of the messages are :data:`MISSING`; so is the
caller of a root request.

With ground truth (the spans' causal parents), each message's true parent is the latest message
of the same request that its sender received before (or at) sending it (:class:`MessageTruth`).
Each node is a host; :func:`shift_clocks` moves every host's clock by a random offset, as the
wide-area setting of WAP5 has it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.model.messages import MISSING, MessageTable, MessageTruth
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, StringPool
from tacit.runs import distinct

CLIENTS = "clients"
"""The node sending root requests: the untraced clients, aggregated (WAP5 §2.5.1)."""


@dataclass
class DerivedMessages:
    """Messages derived from spans, with ground truth when the spans had it."""

    messages: MessageTable
    truth: MessageTruth | None


def messages_from_spans(spans: SpanTable, with_truth: bool = True) -> DerivedMessages:
    """Turn server/client spans (roles decided, RPC sides linked) into messages; see module doc.

    ``spans`` is what :func:`tacit.model.roles.infer_roles` returns (``Observed.spans``): in it
    ``parent`` is the causal truth (client span → the server span that made the call).
    """
    kind, link = spans.kind, spans.link
    pool = StringPool()
    names = spans.strings.values
    # A node is a process (service instance), a host is the instance's host: Kubernetes pods
    # carry the service in their name; elsewhere several services may share one host.
    node_name, host_name = [], []
    for sv, inst in zip(spans.service.tolist(), spans.instance.tolist(), strict=True):
        host = names[inst] if inst >= 0 else names[sv]
        node_name.append(host if host.startswith(names[sv]) else f"{names[sv]}@{host}")
        host_name.append(host)
    node = np.array([pool.code(n) for n in node_name], dtype=np.int32)
    host = np.array([pool.code(h) for h in host_name], dtype=np.int32)
    endpoint = np.array(
        [pool.code(names[e]) if e >= 0 else NONE for e in spans.endpoint.tolist()], np.int32
    )
    clients = pool.code(CLIENTS)

    client_rows = np.flatnonzero(kind == CLIENT)
    callee = link[client_rows]
    # Untraced callee: a node named after the peer service or, failing that, the endpoint.
    untraced = callee == NONE
    callee_node = np.where(untraced, NONE, node[np.maximum(callee, 0)])
    for j in np.flatnonzero(untraced).tolist():
        c = int(client_rows[j])
        peer = spans.peer[c]
        callee_node[j] = pool.code(
            names[peer] if peer >= 0 else f"untraced:{names[spans.endpoint[c]]}"
        )
    root_rows = np.flatnonzero((kind == SERVER) & (link == NONE))

    n_rpc = len(client_rows) + len(root_rows)
    caller = np.concatenate([node[client_rows], np.full(len(root_rows), clients, np.int32)])
    callee_all = np.concatenate([callee_node, node[root_rows]]).astype(np.int32)
    # Untraced nodes (clients, databases) are hosts of their own.
    callee_host = np.where(untraced, callee_node, host[np.maximum(callee, 0)])
    caller_host = np.concatenate([host[client_rows], np.full(len(root_rows), clients, np.int32)])
    callee_host = np.concatenate([callee_host, host[root_rows]]).astype(np.int32)
    server_row = np.concatenate([callee, root_rows])
    client_row = np.concatenate([client_rows, np.full(len(root_rows), NONE)])
    has_server = server_row != NONE
    has_client = client_row != NONE
    sr, cr = np.maximum(server_row, 0), np.maximum(client_row, 0)
    c_start = np.where(has_client, spans.start[cr], MISSING)
    c_end = np.where(has_client, spans.end[cr], MISSING)
    s_start = np.where(has_server, spans.start[sr], MISSING)
    s_end = np.where(has_server, spans.end[sr], MISSING)
    ep = np.where(has_client, endpoint[cr], endpoint[sr])

    # Rows 0..n_rpc-1 are requests, n_rpc..2n_rpc-1 their responses.
    src = np.concatenate([caller, callee_all])
    dst = np.concatenate([callee_all, caller])
    msgs = MessageTable(
        pool,
        src=src,
        dst=dst,
        src_host=np.concatenate([caller_host, callee_host]),
        dst_host=np.concatenate([callee_host, caller_host]),
        src_endpoint=np.concatenate([np.full(n_rpc, NONE), ep]),
        dst_endpoint=np.concatenate([ep, np.full(n_rpc, NONE)]),
        send=np.concatenate([c_start, s_end]),
        recv=np.concatenate([s_start, c_end]),
        size=np.full(2 * n_rpc, -1),
        flow=np.tile(np.arange(n_rpc), 2),
        record=np.tile(np.where(has_client, spans.record[cr], spans.record[sr]), 2),
        sources=spans.sources,
    )
    truth = None
    if with_truth:
        trace = np.where(has_client, spans.trace[cr], spans.trace[sr]).astype(np.int64)
        request = np.tile(trace, 2)
        truth = MessageTruth(parent=latest_received(msgs, request), request=request)
    return DerivedMessages(msgs, truth)


def latest_received(messages: MessageTable, request: np.ndarray) -> np.ndarray:
    """Per message: the latest message of the same request received by its sender at or before
    its send time (sender's clock), -1 when there is none or the sender is untraced."""
    n = len(messages)
    parent = np.full(n, NONE, dtype=np.int64)
    got = np.flatnonzero(messages.recv != MISSING)
    sent = np.flatnonzero(messages.send != MISSING)
    if not len(got) or not len(sent):
        return parent
    # Group key: (request, node); receive events keyed by receiver, sends by sender. In the
    # events sorted by (group, time, receive before send), each send's parent is the last
    # receive before it, if that receive is in the same group.
    group = np.concatenate(
        [
            (request[got] << 32) | messages.dst[got].astype(np.int64),
            (request[sent] << 32) | messages.src[sent].astype(np.int64),
        ]
    )
    time = np.concatenate([messages.recv[got], messages.send[sent]])
    is_send = np.concatenate([np.zeros(len(got), bool), np.ones(len(sent), bool)])
    row = np.concatenate([got, sent])
    order = np.lexsort((is_send, time, group))
    group, is_send, row = group[order], is_send[order], row[order]
    last = np.maximum.accumulate(np.where(is_send, -1, np.arange(len(order))))
    at = np.flatnonzero(is_send)
    p = last[at]
    ok = p >= 0
    ok[ok] = group[p[ok]] == group[at[ok]]
    parent[row[at[ok]]] = row[p[ok]]
    return parent


def shift_clocks(
    messages: MessageTable, max_offset_ns: int, seed: int = 0
) -> tuple[MessageTable, dict[str, int]]:
    """Move each host's clock by a uniform random offset in ``[-max, max]`` (the first host, in
    name order, stays put as the reference); returns the shifted table and the offsets."""
    rng = np.random.default_rng(seed)
    hosts = distinct(np.concatenate([messages.src_host, messages.dst_host]))
    hosts = hosts[hosts >= 0]
    names = sorted(messages.strings.values[h] for h in hosts.tolist())
    offsets = {
        h: 0 if i == 0 else int(rng.integers(-max_offset_ns, max_offset_ns + 1))
        for i, h in enumerate(names)
    }
    table = np.zeros(len(messages.strings), dtype=np.int64)
    for h, off in offsets.items():
        table[messages.strings.find(h)] = off
    cols = messages.columns()
    for t, host in (("send", "src_host"), ("recv", "dst_host")):
        v = cols[t]
        cols[t] = np.where(v != MISSING, v + table[np.maximum(cols[host], 0)], MISSING)
    return MessageTable(messages.strings, **cols, sources=messages.sources), offsets
