"""The senders' context resolved chunk by chunk, in the orders exporters send spans."""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER
from tacit.reconstruct.stream_context import LATER, StreamContext

T = "t" * 32


def _add(ctx: StreamContext, spans: list[tuple], first: int):
    """Spans as (kind, service, span id, parent id), with the server end they name and their
    start and end where given (default: none, and each in its own interval); positions from
    ``first`` for RPC spans."""
    rows = [(*s, None, 10 * i, 10 * i + 1)[:7] if len(s) == 4 else s for i, s in enumerate(spans)]
    kind = np.array([s[0] for s in rows], dtype=np.int8)
    rpc = (kind == SERVER) | (kind == CLIENT)
    position = np.full(len(rows), NONE, dtype=np.int64)
    position[rpc] = np.arange(first, first + int(rpc.sum()))
    return ctx.add(
        kind,
        np.array([s[5] for s in rows], dtype=np.int64),
        np.array([s[6] for s in rows], dtype=np.int64),
        [s[1] for s in rows],
        ([T] * len(rows), [s[2] for s in rows], [s[3] for s in rows]),
        lambda r: (rows[r][4], None),
        position,
    )


def test_a_call_before_its_callee_and_its_request_learns_both_when_they_come():
    ctx = StreamContext(horizon_ns=10**9)
    call = _add(ctx, [(CLIENT, "front", "c1", "s0")], first=0)
    assert call.link.tolist() == [NONE] and call.parent.tolist() == [LATER]
    callee = _add(ctx, [(SERVER, "geo", "s1", "c1")], first=1)
    assert callee.link.tolist() == [0] and callee.peers == {0: "geo"}
    request = _add(ctx, [(SERVER, "front", "s0", None)], first=2)
    assert request.parents == ([0], [2])


def test_a_callee_before_its_call_names_it_at_once():
    ctx = StreamContext(horizon_ns=10**9)
    _add(ctx, [(SERVER, "front", "s0", None), (SERVER, "geo", "s1", "c1")], first=0)
    call = _add(ctx, [(CLIENT, "front", "c1", "s0")], first=2)
    assert call.link.tolist() == [1] and call.peer == ["geo"] and call.parent.tolist() == [0]


def test_a_given_parent_through_in_process_spans_is_the_request_above_them():
    ctx = StreamContext(horizon_ns=10**9)
    first = _add(ctx, [(CLIENT, "front", "c1", "i2"), (INTERNAL, "front", "i2", "i1")], first=0)
    assert first.parent.tolist() == [LATER, NONE]
    after = _add(ctx, [(INTERNAL, "front", "i1", "s0"), (SERVER, "front", "s0", None)], first=1)
    assert after.parents == ([0], [1])


def test_a_chain_that_ends_in_process_lost_the_request_and_a_call_without_parent_is_lost():
    ctx = StreamContext(horizon_ns=10**9)
    out = _add(ctx, [(CLIENT, "job", "c1", "i1"), (CLIENT, "front", "c2", None)], first=0)
    assert out.parent.tolist() == [LATER, NONE]
    root = _add(ctx, [(INTERNAL, "job", "i1", None)], first=2)
    assert root.parents == ([0], [NONE])


def test_a_span_sent_again_is_not_new_and_old_spans_are_forgotten():
    ctx = StreamContext(horizon_ns=5)
    ids = ["a", "b", None]
    assert ctx.fresh([T] * 3, ids, np.array([1, 2, 3])).tolist() == [True, True, True]
    assert ctx.fresh([T] * 2, ["b", "c"], np.array([4, 5])).tolist() == [False, True]
    _add(ctx, [(SERVER, "front", "s0", None)], first=0)
    ctx.latest_end = 100
    _add(ctx, [(CLIENT, "front", "late", "s0")], first=1)  # s0 ended long before: forgotten
    assert ctx.fresh([T], ["a"], np.array([100])).tolist() == [True]


def test_without_context_a_request_pairs_with_the_call_to_its_address_that_encloses_it():
    ctx = StreamContext(horizon_ns=10**9)
    calls = _add(
        ctx,
        [
            (CLIENT, "front", "c1", "s0", "geo:80", 100, 200),
            (CLIENT, "front", "c2", "s0", "geo:80", 150, 400),
            (CLIENT, "front", "c3", "s0", "rate:80", 100, 400),
        ],
        first=0,
    )
    assert calls.link.tolist() == [NONE] * 3
    requests = _add(
        ctx,
        [
            (SERVER, "geo", "g1", None, "geo:80", 160, 390),  # only c2 encloses it
            (SERVER, "geo", "g2", None, "geo:80", 110, 190),  # c1 only, c2 taken
            (SERVER, "geo", "g3", None, "geo:80", 120, 180),  # none left
        ],
        first=3,
    )
    assert requests.link.tolist() == [1, 0, NONE]
    assert requests.peers == {1: "geo", 0: "geo"}
    late = _add(ctx, [(CLIENT, "front", "c4", "s0", "geo:80", 115, 185)], first=6)
    assert late.link.tolist() == [5] and late.peer == ["geo"]


def test_a_call_paired_by_its_context_is_not_paired_by_its_address():
    ctx = StreamContext(horizon_ns=10**9)
    _add(ctx, [(CLIENT, "front", "c1", "s0", "geo:80", 100, 200)], first=0)
    named = _add(ctx, [(SERVER, "geo", "g1", "c1", "geo:80", 110, 190)], first=1)
    orphan = _add(ctx, [(SERVER, "geo", "g2", None, "geo:80", 120, 180)], first=2)
    assert named.link.tolist() == [0] and orphan.link.tolist() == [NONE]


def test_calls_to_one_address_at_once_are_told_apart_by_their_targets():
    ctx = StreamContext(horizon_ns=10**9)
    kind = np.array([CLIENT, CLIENT, SERVER, SERVER], dtype=np.int8)
    out = ctx.add(
        kind,
        np.array([100, 100, 110, 120]),
        np.array([300, 300, 290, 200]),
        ["front", "front", "profile", "profile"],
        ([T] * 4, ["c1", "c2", "p1", "p2"], ["s0", "s0", None, None]),
        lambda r: ("profile:80", ["/profile?id=1", "/profile?id=2", "/profile?id=2", None][r]),
        np.arange(4),
    )
    # p1 names c2's target; p2 names none and takes the call left
    assert out.link.tolist() == [NONE, NONE, 1, 0]


def test_a_call_no_server_span_answers_is_named_where_a_service_was_seen_serving():
    ctx = StreamContext(horizon_ns=10**9)
    _add(ctx, [(SERVER, "cart", "k1", "c0", "cart:80", 10, 20)], first=0)
    call = _add(ctx, [(CLIENT, "front", "c1", None, "cart:80", 100, 200)], first=1)
    assert call.link.tolist() == [NONE] and call.peer == [None] and call.named == ["cart"]
    unknown = _add(ctx, [(CLIENT, "front", "c2", None, "db:5432", 100, 200)], first=2)
    assert unknown.named == [None]
    _add(ctx, [(SERVER, "cart-v2", "k2", "c9", "cart:80", 300, 310)], first=3)  # took it over
    later = _add(ctx, [(CLIENT, "front", "c3", None, "cart:80", 400, 500)], first=4)
    assert later.named == ["cart-v2"]
