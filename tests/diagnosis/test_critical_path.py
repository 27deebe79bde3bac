"""Critical paths and contributions: constructed traces with known paths, the simulator's
traces, and the real HotelReservation traces (invariants, and a delay injected with known size)."""

from __future__ import annotations

import numpy as np
import pytest
from constructed_traces import PARALLEL_CALLS, REDUNDANT_CALLS, SERIAL_CALLS, US, trace

from tacit.diagnosis.critical_path import NETWORK, critical_paths
from tacit.formats import read_spans
from tacit.model.spans import CLIENT, SpanTable
from tacit.simulate import load_app, simulate


def _contrib(cp, i=0) -> dict[str, int]:
    return {s: int(v) // US for s, v in zip(cp.services, cp.contribution[i], strict=True) if v}


def _on(cp, rows) -> set[str]:
    return {name for name, r in rows.items() if cp.on_path[r]}


def test_serial_path_is_every_call():
    t, rows = trace(SERIAL_CALLS)
    cp = critical_paths(t)
    assert _on(cp, rows) == set(rows)
    # frontend computes 10+10+10; each RPC spends 10 in transit; A 20, B 30.
    assert _contrib(cp) == {"frontend": 30, NETWORK: 20, "A": 20, "B": 30}
    assert cp.latency[0] == 100 * US


def test_parallel_path_follows_the_last_response():
    t, rows = trace(PARALLEL_CALLS)
    cp = critical_paths(t)
    assert _on(cp, rows) == {"root", "b:client", "b:server"}
    assert _contrib(cp) == {"frontend": 30, NETWORK: 4, "B": 66}
    assert cp.top(0, 1) == [("B", 66 * US, 0.66)]


def test_redundant_path_follows_the_kth_response_not_the_late_one():
    t, rows = trace(REDUNDANT_CALLS)
    cp = critical_paths(t)
    # Two of three answers were awaited: b (the 2nd) is on the path, c (answered at 95, after
    # the parent went on at 55) is not, though it ends before the root does.
    assert _on(cp, rows) == {"root", "b:client", "b:server", "d:client", "d:server"}
    assert _contrib(cp) == {"frontend": 10 + 5 + 10, NETWORK: 4 + 4, "B": 36, "D": 31}
    assert cp.contribution.sum() == cp.latency[0]


def test_nested_path_and_misaligned_clocks():
    # A calls X; A's host clock is 100 µs ahead.
    calls = [("a", None, "A", 10, 90, 115, 185), ("x", "a", "X", 130, 160, 132, 158)]
    t, rows = trace(calls)
    cp = critical_paths(t)
    assert _on(cp, rows) == set(rows)
    assert _contrib(cp) == {"frontend": 20, NETWORK: 10 + 4, "A": 40, "X": 26}


def _check_invariants(cp) -> None:
    g = cp.graph
    assert np.array_equal(cp.contribution.sum(axis=1), cp.latency)
    assert (cp.contribution >= 0).all()
    on = np.flatnonzero(cp.on_path)
    assert g.in_trace[on].all()
    p = g.spans.parent[on]
    assert ((p == -1) == np.isin(on, cp.root)).all()
    assert cp.on_path[p[p >= 0]].all()  # a connected path from the root down
    # Siblings on the path run one after another: one causal chain, not overlapping branches.
    kids = on[p >= 0]
    order = kids[np.lexsort((g.start[kids], g.spans.parent[kids]))]
    same = g.spans.parent[order][1:] == g.spans.parent[order][:-1]
    assert (g.start[order][1:][same] >= g.end[order][:-1][same]).all()
    assert (cp.self_ns[~cp.on_path] == 0).all()


@pytest.fixture(scope="module")
def shop() -> SpanTable:
    return simulate(load_app(None), 200, n_requests=1500, seed=3)


def test_simulated_traces(shop):
    cp = critical_paths(shop)
    assert len(cp) == 1500
    _check_invariants(cp)
    # Ground truth of the parallel step of GET /product: of pricing || reviews, the call that
    # returned last is on the path and the other is not.
    s = shop
    ep = {e: s.strings.find(e) for e in ("Quote", "List")}
    root_ep = s.endpoint[cp.root]
    product = cp.root[root_ep == s.strings.find("GET /product")]
    clients = np.flatnonzero((s.kind == CLIENT) & np.isin(s.parent, product))
    checked = 0
    for root in product[:300]:
        mine = clients[s.parent[clients] == root]
        q = mine[s.endpoint[mine] == ep["Quote"]]
        li = mine[s.endpoint[mine] == ep["List"]]
        if len(q) == 1 and len(li) == 1:
            later, earlier = (q[0], li[0]) if s.end[q[0]] > s.end[li[0]] else (li[0], q[0])
            assert cp.on_path[later] and not cp.on_path[earlier]
            checked += 1
    assert checked > 250


def _hotel(shared_data, load: int) -> SpanTable:
    return read_spans([shared_data / f"traceweaver/hotel_reservation/load{load}.jaeger.json.gz"])


@pytest.mark.realdata
def test_hotel_reservation_invariants(shared_data):
    cp = critical_paths(_hotel(shared_data, 50))
    assert len(cp) == 1000
    _check_invariants(cp)
    # One in five spans of this export is outside its parent: each is moved, none dropped.
    assert cp.warnings and sum(cp.warnings.values()) > 1000
    assert set(cp.services) >= {"frontend", "search", "geo", "rate", "reservation", "profile"}


@pytest.mark.realdata
def test_injected_delay_is_attributed_to_its_service(shared_data):
    """Add 40 ms to reservation's server span in a random 10% of traces, shifting every later
    event of the trace: its contribution grows by exactly 40 ms there, and nothing else moves.

    On load150, whose hosts' clocks agree (every span nests in its parent), so that "later" is
    well defined across hosts."""
    d = 40_000_000
    s = _hotel(shared_data, 150)
    before = critical_paths(s)
    rng = np.random.default_rng(0)
    res = np.flatnonzero((s.service == s.strings.find("reservation")) & (s.kind != CLIENT))
    hit = res[rng.random(len(res)) < 0.1]
    start, end = s.start.copy(), s.end.copy()
    for r in hit:
        same = s.trace == s.trace[r]
        t0 = s.end[r]
        start[same & (s.start >= t0)] += d
        end[same & (s.end >= t0)] += d
    delayed = SpanTable(s.strings, **{**s.columns(), "start": start, "end": end})
    after = critical_paths(delayed)
    assert after.services == before.services
    j = before.services.index("reservation")
    hit_traces = np.isin(before.trace, s.trace[hit])
    diff = after.contribution - before.contribution
    assert (diff[hit_traces, j] == d).all()
    diff[:, j] = 0
    assert not diff.any()
    assert (after.latency - before.latency == np.where(hit_traces, d, 0)).all()


@pytest.mark.realdata
def test_reconstructed_paths_agree_with_ground_truth(shared_data):
    """Blinded-then-reconstructed load150: each trace's top contributor is the ground truth's,
    with and without weighing uncertain links, and weighed contributions still sum exactly."""
    from tacit.diagnosis.critical_path import W_WEIGHED
    from tacit.diagnosis.tail import blind_and_reconstruct
    from tacit.model.roles import infer_roles

    truth = infer_roles(_hotel(shared_data, 150)).spans
    rebuilt, rec = blind_and_reconstruct(truth)
    gt, plain, weighed = (
        critical_paths(truth),
        critical_paths(rebuilt),
        critical_paths(rebuilt, rec=rec),
    )
    assert weighed.warnings[W_WEIGHED] > 0
    assert np.array_equal(weighed.contribution.sum(axis=1), weighed.latency)
    assert (weighed.contribution >= 0).all()
    _, ia, ib = np.intersect1d(gt.root, plain.root, return_indices=True)
    assert len(ia) == len(gt)
    top = np.array(gt.services)[gt.contribution.argmax(1)][ia]
    for cp in (plain, weighed):
        assert (np.array(cp.services)[cp.contribution.argmax(1)][ib] == top).mean() >= 0.99
