"""The execution graph: RPC edges, clock alignment and sibling happens-before, on constructed
traces whose patterns are known by construction."""

from __future__ import annotations

import numpy as np
import pytest
from constructed_traces import PARALLEL_CALLS, REDUNDANT_CALLS, SERIAL_CALLS, US, trace

from tacit.diagnosis.execution_graph import (
    ASYNC,
    PARALLEL,
    REDUNDANT,
    SERIAL,
    W_FRAGMENT,
    W_SHIFTED,
    build_graph,
)
from tacit.errors import InputError
from tacit.model.spans import SpanTable


def _stage(g, rows, name):
    r = rows[f"{name}:client"]
    return int(g.pattern[r]), int(g.awaited[r]), int(g.fanout[r]), bool(g.blocking[r])


def test_serial_parallel_redundant_patterns():
    t, rows = trace(SERIAL_CALLS)
    g = build_graph(t)
    assert _stage(g, rows, "a") == (SERIAL, 1, 1, True)
    assert _stage(g, rows, "b") == (SERIAL, 1, 1, True)
    assert g.stage[rows["a:client"]] == 0 and g.stage[rows["b:client"]] == 1

    t, rows = trace(PARALLEL_CALLS)
    g = build_graph(t)
    assert _stage(g, rows, "a") == (PARALLEL, 2, 2, True)
    assert _stage(g, rows, "b") == (PARALLEL, 2, 2, True)

    t, rows = trace(REDUNDANT_CALLS)
    g = build_graph(t)
    for name in "ab":
        assert _stage(g, rows, name) == (REDUNDANT, 2, 3, True)
    assert _stage(g, rows, "c") == (REDUNDANT, 2, 3, False)  # the late third answer
    assert _stage(g, rows, "d") == (SERIAL, 1, 1, True)


def test_fire_and_forget_is_async():
    t, rows = trace([("log", None, "L", 10, 120, 12, 118)], root=("frontend", 0, 100))
    g = build_graph(t)
    assert _stage(g, rows, "log") == (ASYNC, 0, 1, False)


def test_rpc_edges_and_clock_alignment():
    # B's clock is 100 µs ahead: its server span lies outside its client span until aligned.
    calls = [("a", None, "A", 10, 40, 15, 35), ("b", None, "B", 50, 90, 155, 185)]
    t, rows = trace(calls)
    g = build_graph(t)
    a, b = rows["a:server"], rows["b:server"]
    assert g.rpc[a] and g.rpc[b] and not g.rpc[rows["a:client"]]
    assert (g.request_ns[a], g.response_ns[a]) == (5 * US, 5 * US)
    assert g.offset[b] == -95 * US  # the smallest shift that nests it
    assert (g.start[b], g.end[b]) == (60 * US, 90 * US)
    assert g.request_ns[b] == 10 * US and g.response_ns[b] == 0
    assert g.warnings[W_SHIFTED] == 1
    assert g.offset[a] == 0 and g.start[a] == t.start[a]


def test_alignment_moves_the_callee_subtree_with_it():
    calls = [("a", None, "A", 10, 90, 110, 180), ("x", "a", "X", 120, 150, 125, 145)]
    t, rows = trace(calls)
    g = build_graph(t)
    shift = g.offset[rows["a:server"]]
    assert shift == -90 * US  # its end onto its caller's end
    # A's own client span moves with A; X's server is then nested in it and stays put relative.
    assert g.offset[rows["x:client"]] == shift
    assert g.start[rows["x:server"]] - g.start[rows["x:client"]] == 5 * US
    for child in ("a:server", "x:client", "x:server"):
        r = rows[child]
        p = t.parent[r]
        assert g.start[p] <= g.start[r] and g.end[r] <= g.end[p]


def test_missing_parent_is_a_counted_fragment():
    t, _ = trace(SERIAL_CALLS)
    cut = t.parent.copy()
    cut[3] = -1  # b's client span loses its parent: b becomes a fragment of trace t1
    t2 = SpanTable(t.strings, **{**t.columns(), "parent": cut}, sources=t.sources)
    g = build_graph(t2)
    assert list(g.trace_roots) == [0]
    assert g.warnings[W_FRAGMENT] == 2
    assert not g.in_trace[3] and not g.in_trace[4] and g.in_trace[1]


def test_cycle_is_an_error_naming_the_trace():
    t, _ = trace(SERIAL_CALLS)
    loop = t.parent.copy()
    loop[1] = 2  # a:client -> a:server -> a:client
    t2 = SpanTable(t.strings, **{**t.columns(), "parent": loop}, sources=t.sources)
    with pytest.raises(InputError, match=r"trace t1: parent links form a cycle") as e:
        build_graph(t2)
    assert e.value.path == "constructed" and e.value.record in (1, 2)


def test_children_are_listed_by_end():
    t, rows = trace(REDUNDANT_CALLS)
    g = build_graph(t)
    kids = g.children_of(rows["root"])
    assert list(kids) == [rows[f"{n}:client"] for n in "abdc"]
    assert np.all(np.diff(g.end[kids]) >= 0)
