"""The senders' context resolved chunk by chunk, in the orders exporters send spans."""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER
from tacit.reconstruct.stream_context import LATER, StreamContext

T = "t" * 32


def _add(ctx: StreamContext, spans: list[tuple], first: int):
    """Spans as (kind, service, span id, parent id); positions from ``first`` for RPC spans."""
    kind = np.array([s[0] for s in spans], dtype=np.int8)
    rpc = (kind == SERVER) | (kind == CLIENT)
    position = np.full(len(spans), NONE, dtype=np.int64)
    position[rpc] = np.arange(first, first + int(rpc.sum()))
    return ctx.add(
        kind,
        np.arange(len(spans), dtype=np.int64),
        [s[1] for s in spans],
        [T] * len(spans),
        [s[2] for s in spans],
        [s[3] for s in spans],
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
