"""Candidate enumeration against a brute force over every combination of outgoing spans."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spanrows import table
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.callgraph import EndpointGraph, Slot
from tacit.reconstruct.candidates import SKIP, CallPools, enumerate_candidates

SEQUENTIAL = EndpointGraph(
    "a", "E", [Slot("b", "X", 0), Slot("b", "X", 1), Slot("c", "Y", 0)], [[], [0], [1]]
)
"""a.E -> b.X -> b.X -> c.Y"""
PARALLEL = EndpointGraph(
    "a", "E", [Slot("b", "X", 0), Slot("c", "Y", 0), Slot("d", "Z", 0)], [[], [], [0, 1]]
)
"""a.E -> (b.X || c.Y) -> d.Z"""


def simulate_instance(graph: EndpointGraph, rng: np.random.Generator, n_in: int, noise: int):
    """Incoming spans each making the graph's calls in order, plus ``noise`` stray calls."""
    rows: list[tuple] = []
    truth: dict[int, tuple[int, ...]] = {}
    for _ in range(n_in):
        s = int(rng.integers(0, 400))
        r = len(rows)
        rows.append((SERVER, "E", None, s, 0, NONE))
        ready = {}
        calls = []
        for j in graph.order:
            t = max((ready[p] for p in graph.preds[j]), default=s) + int(rng.integers(0, 20))
            e = t + int(rng.integers(1, 60))
            ready[j] = e
            sl = graph.slots[j]
            calls.append((j, len(rows)))
            rows.append((CLIENT, sl.endpoint, sl.service, t, e, r))
        rows[r] = (SERVER, "E", None, s, max(ready.values()) + int(rng.integers(0, 20)), NONE)
        truth[r] = tuple(row for _, row in sorted(calls))
    callees = sorted({sl.callee for sl in graph.slots})
    for _ in range(noise):
        svc, ep = callees[int(rng.integers(len(callees)))]
        t = int(rng.integers(0, 600))
        rows.append((CLIENT, ep, svc, t, t + int(rng.integers(1, 80)), NONE))
    return table(rows), truth


def brute_force(spans: SpanTable, graph: EndpointGraph, r: int, allow_skip: list[bool]) -> set:
    """Every assignment of outgoing spans (or SKIP) to the slots satisfying the timing rules."""
    out = np.flatnonzero(spans.kind == CLIENT)
    s = spans.strings
    options = []
    for j, sl in enumerate(graph.slots):
        key = (s.find(sl.service), s.find(sl.endpoint))
        opts = [int(o) for o in out if (spans.peer[o], spans.endpoint[o]) == key]
        options.append(opts + ([SKIP] if allow_skip[j] else []))
    lo, hi = int(spans.start[r]), int(spans.end[r])
    found = set()
    for combo in itertools.product(*options):
        real = [o for o in combo if o != SKIP]
        if len(set(real)) != len(real):
            continue
        ready: dict[int, int] = {}
        ok = True
        for j in graph.order:
            t = max((ready[p] for p in graph.preds[j]), default=lo)
            o = combo[j]
            if o == SKIP:
                ready[j] = t
                continue
            if not (spans.start[o] >= t and spans.start[o] >= lo and spans.end[o] <= hi):
                ok = False
                break
            ready[j] = int(spans.end[o])
        if ok:
            found.add(tuple(combo))
    return found


def run(spans: SpanTable, graph: EndpointGraph, allow_skip: list[bool]):
    incoming = np.flatnonzero(spans.kind == SERVER)
    pools = CallPools(spans, np.flatnonzero(spans.kind == CLIENT))
    return enumerate_candidates(
        spans,
        incoming,
        graph,
        pools,
        allow_skip=np.array(allow_skip),
        max_candidates=10**6,
    )


def listed(cs, r: int) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in cs.calls[c]) for c in np.flatnonzero(cs.incoming == r)]


@pytest.mark.parametrize("graph", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
@pytest.mark.parametrize("seed", range(20))
def test_candidates_are_exactly_the_timing_consistent_mappings(graph, seed):
    rng = np.random.default_rng(seed)
    spans, truth = simulate_instance(graph, rng, n_in=int(rng.integers(2, 5)), noise=4)
    cs = run(spans, graph, [False] * 3)
    assert cs.truncated == 0
    assert cs.graph is graph
    assert cs.calls.shape == (len(cs), 3)
    for r, true_calls in truth.items():
        got = listed(cs, r)
        assert len(got) == len(set(got)), "a mapping is listed twice"
        assert set(got) == brute_force(spans, graph, r, [False] * 3)
        assert true_calls in got
        assert all(SKIP not in c and NONE not in c for c in got)


@pytest.mark.parametrize("graph", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
@pytest.mark.parametrize("seed", range(10))
def test_allow_skip_adds_skip_variants(graph, seed):
    rng = np.random.default_rng(100 + seed)
    spans, truth = simulate_instance(graph, rng, n_in=3, noise=3)
    allow = [False, False, True]
    plain = run(spans, graph, [False] * 3)
    skip = run(spans, graph, allow)
    for r, true_calls in truth.items():
        got = listed(skip, r)
        assert len(got) == len(set(got))
        assert set(got) == brute_force(spans, graph, r, allow)
        assert true_calls in got
        without = {c for c in got if SKIP not in c}
        assert without == set(listed(plain, r))
        with_skip = {c for c in got if SKIP in c}
        assert with_skip and all(c[2] == SKIP and c[0] != SKIP and c[1] != SKIP for c in with_skip)
        # Skipping the last slot never makes a prefix infeasible: every full mapping's prefix
        # appears with the last slot skipped.
        assert {c[:2] for c in without} <= {c[:2] for c in with_skip}


def test_skipped_predecessor_passes_its_constraint_on():
    # a.E [0, 100] -> b.X -> b.X -> c.Y with one b.X observed (5-15): whichever X slot it takes,
    # c.Y must start after 15 (only the one at 30); with both X slots skipped, either c.Y fits.
    spans = table(
        [
            (SERVER, "E", None, 0, 100, NONE),
            (CLIENT, "X", "b", 5, 15, 0),
            (CLIENT, "Y", "c", 10, 20, NONE),
            (CLIENT, "Y", "c", 30, 40, 0),
        ]
    )
    cs = run(spans, SEQUENTIAL, [True, True, False])
    assert set(listed(cs, 0)) == {(1, SKIP, 3), (SKIP, 1, 3), (SKIP, SKIP, 2), (SKIP, SKIP, 3)}


def test_calls_outside_the_incoming_span_are_never_candidates():
    spans = table(
        [
            (SERVER, "E", None, 100, 200, NONE),
            (CLIENT, "X", "b", 90, 120, NONE),  # starts before
            (CLIENT, "X", "b", 190, 210, NONE),  # ends after
            (CLIENT, "X", "b", 110, 130, 0),
            (CLIENT, "X", "b", 140, 150, 0),
            (CLIENT, "Y", "c", 160, 200, 0),  # ends exactly at the end: inside
        ]
    )
    cs = run(spans, SEQUENTIAL, [False] * 3)
    assert listed(cs, 0) == [(3, 4, 5)]


def test_max_candidates_truncates():
    rows = [(SERVER, "E", None, 0, 1000, NONE)]
    rows += [(CLIENT, "X", "b", 10 * i, 10 * i + 5, NONE) for i in range(10)]
    rows += [(CLIENT, "Y", "c", 900, 950, NONE)]
    spans = table(rows)
    incoming = np.array([0])
    pools = CallPools(spans, np.arange(1, len(rows)))
    full = enumerate_candidates(
        spans, incoming, SEQUENTIAL, pools, allow_skip=np.zeros(3, bool), max_candidates=10**6
    )
    assert len(full) == 45 and full.truncated == 0  # 10 choose 2 ordered X pairs
    cut = enumerate_candidates(
        spans, incoming, SEQUENTIAL, pools, allow_skip=np.zeros(3, bool), max_candidates=7
    )
    assert len(cut) == 7 and cut.truncated == 1
