"""Rank displacement (tacit.reconstruct.order) on hand-made in-order instances."""

from __future__ import annotations

import numpy as np

from beamsearch import run_search
from spanrows import table
from tacit.model.spans import CLIENT, NONE, SERVER
from tacit.reconstruct.callgraph import CallPath, Slot
from tacit.reconstruct.candidates import CallPools
from tacit.reconstruct.delays import slot_ready
from tacit.reconstruct.order import ArrivalOrder

CHAIN = CallPath([Slot("b", "X", 0), Slot("c", "Y", 0)], [[], [0]])
"""a.E -> b.X -> c.Y"""


def instance(requests: list[tuple[int, int, list[tuple[str, str, int, int]]]]):
    """Spans of one instance: (start, end, [(callee, endpoint, start, end), ...]) per request."""
    rows: list[tuple] = []
    for s, e, calls in requests:
        r = len(rows)
        rows.append((SERVER, "E", None, s, e, NONE))
        rows.extend((CLIENT, ep, svc, cs, ce, r) for svc, ep, cs, ce in calls)
    spans = table(rows)
    cs, _ = run_search(spans, CHAIN)
    order = ArrivalOrder(CallPools(spans, np.flatnonzero(spans.kind == CLIENT)))
    return spans, cs, order


def displacement(spans, cs, order: ArrivalOrder, previous: np.ndarray) -> np.ndarray:
    """d of every candidate against the mapping that chose the candidates ``previous``."""
    ready = slot_ready(spans, cs)
    order.observe([cs], [ready], [previous])
    (d,) = order.displacements([cs], [ready])
    return d


def true_candidates(spans, cs) -> np.ndarray:
    ok = np.all(spans.parent[cs.calls] == cs.incoming[:, None], axis=1)
    return np.flatnonzero(ok)


def test_true_mapping_of_an_in_order_service_has_zero_displacement():
    # The second request's b.X ends first, so its c.Y comes first: order follows the trigger
    # (the end of b.X), not the arrival.
    spans, cs, order = instance(
        [
            (0, 100, [("b", "X", 10, 60), ("c", "Y", 65, 90)]),
            (5, 100, [("b", "X", 15, 50), ("c", "Y", 55, 95)]),
            (20, 100, [("b", "X", 25, 70), ("c", "Y", 75, 99)]),
        ]
    )
    truth = true_candidates(spans, cs)
    assert len(truth) == 3
    d = displacement(spans, cs, order, truth)
    np.testing.assert_array_equal(d[truth], 0.0)


def test_a_swapped_call_is_displaced_by_one():
    spans, cs, order = instance(
        [
            (0, 100, [("b", "X", 10, 40), ("c", "Y", 45, 90)]),
            (5, 100, [("b", "X", 15, 50), ("c", "Y", 55, 95)]),
        ]
    )
    truth = true_candidates(spans, cs)
    d = displacement(spans, cs, order, truth)
    first_b, second_b = 1, 4  # rows of the two b.X calls
    swapped = np.flatnonzero((cs.incoming == 0) & (cs.calls[:, 0] == second_b))
    assert len(swapped)
    assert np.all(d[swapped, 0] == 1.0)
    swapped = np.flatnonzero((cs.incoming == 3) & (cs.calls[:, 0] == first_b))
    assert np.all(d[swapped, 0] == -1.0)


def test_ties_count_one_half():
    spans, cs, order = instance(
        [
            (0, 100, [("b", "X", 10, 40), ("c", "Y", 45, 90)]),
            (0, 100, [("b", "X", 10, 40), ("c", "Y", 45, 90)]),
        ]
    )
    truth = true_candidates(spans, cs)
    d = displacement(spans, cs, order, truth)
    # Identical requests: either way round, nothing is out of order.
    np.testing.assert_array_equal(d, 0.0)
