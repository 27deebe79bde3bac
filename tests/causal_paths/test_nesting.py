"""The nesting algorithm (tacit.causal_paths.nesting, Project 5 SOSP '03 §4) on hand-built
traces and on a small call-return simulator with known parents."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import pytest

from tacit.causal_paths.nesting import (
    CALL,
    RETURN,
    UNPAIRED,
    UNPAIRED_REASONS,
    NestingParams,
    nest_calls,
)
from tacit.errors import ConfigError
from tacit.model.messages import MISSING, MessageTable, MessageTableBuilder

MS = 1_000_000
EPOCH = 1_700_000_000 * 1_000_000_000


def _table(rows: list[tuple]) -> MessageTable:
    """Messages from (src, dst, send, recv, flow) tuples, in the given order."""
    b = MessageTableBuilder("hand")
    for i, (src, dst, send, recv, flow) in enumerate(rows):
        b.add(src=src, dst=dst, send=send, recv=recv, flow=flow, record=i)
    return b.build()


# ---------------------------------------------------------------- hand-built traces


def test_chain_a_b_c():
    m = _table(
        [
            ("A", "B", 0, 1 * MS, 1),  # 0 call A->B
            ("B", "C", 2 * MS, 3 * MS, 2),  # 1 call B->C
            ("C", "B", 4 * MS, 5 * MS, 2),  # 2 return
            ("B", "A", 6 * MS, 7 * MS, 1),  # 3 return
        ]
    )
    r = nest_calls(m)
    assert r.role.tolist() == [CALL, CALL, RETURN, RETURN]
    assert r.return_of.tolist() == [3, 2, -1, -1]
    assert r.call_of.tolist() == [-1, -1, 1, 0]
    assert r.parent_call.tolist() == [-1, 0, -1, -1]
    assert r.root_call.tolist() == [0, 0, -1, -1]
    assert r.candidates.tolist() == [0, 1, -1, -1]
    assert r.patterns == {"A -> B(C)": 1}
    assert r.root_pattern.tolist() == [0, -1, -1, -1]
    assert r.stats["calls"] == 2 and r.stats["roots"] == 1
    assert r.accounted() and sum(r.unpaired.values()) == 0


def test_sequential_then_parallel_calls():
    seq = _table(
        [
            ("A", "B", 0, 1 * MS, 1),
            ("B", "C", 2 * MS, 3 * MS, 2),
            ("C", "B", 4 * MS, 5 * MS, 2),
            ("B", "D", 6 * MS, 7 * MS, 3),
            ("D", "B", 8 * MS, 9 * MS, 3),
            ("B", "A", 10 * MS, 11 * MS, 1),
        ]
    )
    r = nest_calls(seq)
    assert r.parent_call.tolist() == [-1, 0, -1, 0, -1, -1]
    assert r.patterns == {"A -> B(C, D)": 1}

    par = _table(
        [
            ("A", "B", 0, 1 * MS, 1),
            ("B", "D", 2 * MS, 3 * MS, 3),  # D leaves first: the pattern does not care
            ("B", "C", 2 * MS + 10, 3 * MS, 2),
            ("C", "B", 4 * MS, 5 * MS, 2),
            ("D", "B", 4 * MS, 6 * MS, 3),
            ("B", "E", 7 * MS, 8 * MS, 4),  # after both returned: a new group
            ("E", "B", 8 * MS, 9 * MS, 4),
            ("B", "A", 10 * MS, 11 * MS, 1),
        ]
    )
    r = nest_calls(par)
    assert r.parent_call[[1, 2, 5]].tolist() == [0, 0, 0]
    assert r.patterns == {"A -> B(C | D, E)": 1}


def test_connection_carries_calls_in_sequence_and_both_directions():
    m = _table(
        [
            ("A", "B", 0, 1 * MS, 7),
            ("B", "A", 2 * MS, 3 * MS, 7),
            ("A", "B", 4 * MS, 5 * MS, 7),
            ("B", "A", 6 * MS, 7 * MS, 7),
            ("B", "A", 8 * MS, 9 * MS, 7),  # B now calls A on the same connection
            ("A", "B", 10 * MS, 11 * MS, 7),
        ]
    )
    r = nest_calls(m)
    assert r.role.tolist() == [CALL, RETURN, CALL, RETURN, CALL, RETURN]
    assert r.return_of[[0, 2, 4]].tolist() == [1, 3, 5]
    assert r.patterns == {"A -> B": 2, "B -> A": 1}


def test_input_order_does_not_matter():
    rows = [
        ("A", "B", 0, 1 * MS, 1),
        ("B", "C", 2 * MS, 3 * MS, 2),
        ("C", "B", 4 * MS, 5 * MS, 2),
        ("B", "A", 6 * MS, 7 * MS, 1),
    ]
    perm = [3, 1, 0, 2]
    r = nest_calls(_table([rows[i] for i in perm]))
    # rows in the permuted table: 0=B->A, 1=B->C, 2=A->B, 3=C->B
    assert r.return_of[[2, 1]].tolist() == [0, 3]
    assert r.parent_call[1] == 2
    assert r.patterns == {"A -> B(C)": 1}


def test_untraced_leaf_is_still_paired_and_nested():
    # C is not traced: the call's receipt and the return's send are missing
    m = _table(
        [
            ("A", "B", 0, 1 * MS, 1),
            ("B", "C", 2 * MS, MISSING, 2),
            ("C", "B", MISSING, 5 * MS, 2),
            ("B", "A", 6 * MS, 7 * MS, 1),
        ]
    )
    r = nest_calls(m)
    assert r.role.tolist() == [CALL, CALL, RETURN, RETURN]
    assert r.parent_call[1] == 0
    assert r.patterns == {"A -> B(C)": 1}
    assert r.stats["unobservable_parents"] == 1  # B->C cannot be a parent at C


def test_untraced_middle_node_makes_its_calls_roots():
    # B is not traced: its calls cannot be nested, and every message is still accounted for
    m = _table(
        [
            ("A", "B", 0, MISSING, 1),
            ("B", "C", MISSING, 3 * MS, 2),
            ("C", "B", 4 * MS, MISSING, 2),
            ("B", "A", MISSING, 7 * MS, 1),
        ]
    )
    r = nest_calls(m)
    assert r.role.tolist() == [CALL, CALL, RETURN, RETURN]
    assert r.parent_call.tolist() == [-1, -1, -1, -1]
    assert r.stats["unobservable_children"] == 1  # B->C
    assert r.patterns == {"A -> B": 1, "B -> C": 1}


def test_unpaired_messages_are_counted_with_their_reason():
    m = _table(
        [
            ("A", "B", 0, 1 * MS, 1),  # 0 call
            ("B", "C", 2 * MS, 3 * MS, 2),  # 1 call B->C, never answered (connection ends)
            ("B", "D", 2 * MS, 3 * MS, 3),  # 2 call B->D, superseded by another B->D
            ("B", "D", 4 * MS, 5 * MS, 3),  # 3 call B->D
            ("D", "B", 5 * MS, 6 * MS, 3),  # 4 its return
            ("B", "E", 2 * MS, 3 * MS, -1),  # 5 no flow
            ("B", "E", MISSING, MISSING, 4),  # 6 no timestamp
            ("B", "A", 8 * MS, 9 * MS, 1),  # 7 return
        ]
    )
    r = nest_calls(m)
    assert r.role.tolist() == [CALL, UNPAIRED, UNPAIRED, CALL, RETURN, UNPAIRED, UNPAIRED, RETURN]
    reasons = [UNPAIRED_REASONS[i] if i >= 0 else None for i in r.unpaired_reason.tolist()]
    assert reasons[1] == "no return: connection ends"
    assert reasons[2] == "no return: next message on the connection goes the same way"
    assert reasons[5] == "no flow"
    assert reasons[6] == "no timestamp"
    assert r.unpaired == {
        "no flow": 1,
        "no timestamp": 1,
        "no return: connection ends": 1,
        "no return: next message on the connection goes the same way": 1,
    }
    assert r.parent_call.tolist() == [-1, -1, -1, 0, -1, -1, -1, -1]
    assert r.accounted()
    assert r.patterns == {"A -> B(D)": 1}


def test_clock_offsets_never_mix():
    # every host's clock is hours away from the others; nesting only compares one clock
    off = {"A": 0, "B": 3_600_000 * MS, "C": -7_200_000 * MS}
    m = _table(
        [
            ("A", "B", 0 + off["A"], 1 * MS + off["B"], 1),
            ("B", "C", 2 * MS + off["B"], 3 * MS + off["C"], 2),
            ("C", "B", 4 * MS + off["C"], 5 * MS + off["B"], 2),
            ("B", "A", 6 * MS + off["B"], 7 * MS + off["A"], 1),
        ]
    )
    r = nest_calls(m)
    assert r.parent_call.tolist() == [-1, 0, -1, -1]
    assert r.patterns == {"A -> B(C)": 1}


def test_inconsistent_timestamps_cannot_make_a_cycle():
    # A->B (rows 0/3) and B->A (rows 1/2) each enclose the other on its own clock: impossible
    # with causal timestamps, but the trees must still be a forest
    m = _table(
        [
            ("A", "B", 1, 0, 1),
            ("B", "A", 1, 0, 2),
            ("A", "B", 3, 2, 2),
            ("B", "A", 3, 2, 1),
        ]
    )
    r = nest_calls(m)
    assert r.candidates[[0, 1]].tolist() == [1, 1]
    assert r.stats["cycles_broken"] == 1
    assert (r.parent_call[[0, 1]] == -1).sum() == 1
    assert sum(r.patterns.values()) == 1 and r.accounted()


def test_only_unpaired_messages():
    r = nest_calls(_table([("A", "B", 0, 1, 1), ("A", "B", 2, 3, 1)]))
    assert r.role.tolist() == [UNPAIRED, UNPAIRED]
    assert r.patterns == {} and r.stats["calls"] == 0 and r.accounted()


def test_empty_table():
    r = nest_calls(MessageTable.empty())
    assert len(r) == 0 and r.patterns == {} and r.accounted()


def test_params_are_checked():
    with pytest.raises(ConfigError):
        NestingParams(bin_width_ns=0)
    with pytest.raises(ConfigError):
        NestingParams(min_bin_width_ns=-1)
    with pytest.raises(ConfigError):
        NestingParams(resolve="random")  # type: ignore[arg-type]


# ---------------------------------------------------------------- a call-return simulator


@dataclass
class Call:
    """One call in a request template: the callee, its think time (ms, normal) before each
    stage and before returning, and stages of calls made in parallel."""

    callee: str
    think: tuple[float, float] = (1.0, 0.05)
    stages: list[list[Call]] = field(default_factory=list)


@dataclass
class _Sim:
    rng: np.random.Generator
    latency_ms: float = 0.2
    # one record per message: src, dst, true send, true recv, call id, is_return, parent call id
    src: list = field(default_factory=list)
    dst: list = field(default_factory=list)
    send: list = field(default_factory=list)
    recv: list = field(default_factory=list)
    call: list = field(default_factory=list)
    ret: list = field(default_factory=list)
    parent: list = field(default_factory=list)
    ncalls: int = 0

    def _ms(self, mean: float, sd: float, n: int) -> np.ndarray:
        return np.maximum(self.rng.normal(mean, sd, n), 0.01) * MS

    def _lat(self, n: int) -> np.ndarray:
        return (self.latency_ms + self.rng.exponential(0.05, n)) * MS

    def run(self, c: Call, caller: str, t: np.ndarray, parent: np.ndarray) -> np.ndarray:
        """Send ``c`` from ``caller`` at true times ``t``; returns when the return arrives."""
        n = len(t)
        ids = np.arange(self.ncalls, self.ncalls + n)
        self.ncalls += n
        arrive = t + self._lat(n)
        self._emit(caller, c.callee, t, arrive, ids, False, parent)
        now = arrive
        for stage in c.stages:
            now = now + self._ms(*c.think, n)
            now = np.max([self.run(k, c.callee, now, ids) for k in stage], axis=0)
        now = now + self._ms(*c.think, n)
        back = now + self._lat(n)
        self._emit(c.callee, caller, now, back, ids, True, parent)
        return back

    def _emit(self, s, d, send, recv, ids, is_ret, parent):
        n = len(ids)
        self.src += [s] * n
        self.dst += [d] * n
        self.send.append(send)
        self.recv.append(recv)
        self.call.append(ids)
        self.ret.append(np.full(n, is_ret))
        self.parent.append(parent)


def simulate(
    templates: list[tuple[Call, float]],
    n_requests: int,
    rate_per_s: float,
    seed: int = 0,
    offsets_ms: dict[str, float] | None = None,
    untraced: frozenset[str] = frozenset(),
    pool: bool = True,
    poisson: bool = True,
) -> tuple[MessageTable, np.ndarray]:
    """Requests from "client" (Poisson arrivals, or evenly spaced when not ``poisson``), each
    following one of ``templates`` (chosen with the given weights). Returns the messages, in
    order of true send time, and the true parent call row of every call message (-1 for roots
    and for returns). Connections are pooled per (caller, callee): a call reuses an idle
    connection when there is one."""
    rng = np.random.default_rng(seed)
    sim = _Sim(rng)
    gaps = (
        rng.exponential(1e9 / rate_per_s, n_requests)
        if poisson
        else np.full(n_requests, 1e9 / rate_per_s)
    )
    start = np.cumsum(gaps)
    weights = np.array([w for _, w in templates], dtype=float)
    kind = rng.choice(len(templates), n_requests, p=weights / weights.sum())
    for i, (tpl, _) in enumerate(templates):
        t = start[kind == i]
        sim.run(tpl, "client", t, np.full(len(t), -1))

    src = np.array(sim.src)
    dst = np.array(sim.dst)
    send = np.concatenate(sim.send).astype(np.int64) + EPOCH
    recv = np.concatenate(sim.recv).astype(np.int64) + EPOCH
    call = np.concatenate(sim.call)
    is_ret = np.concatenate(sim.ret)
    parent = np.concatenate(sim.parent)
    flow = _flows(src, dst, send, recv, call, is_ret, pool)

    order = np.argsort(send, kind="stable")
    row_of_call = np.empty(sim.ncalls, dtype=np.int64)
    call_rows = np.flatnonzero(~is_ret[order])
    row_of_call[call[order][call_rows]] = call_rows
    truth = np.full(len(order), -1, dtype=np.int64)
    par = parent[order][call_rows]
    truth[call_rows] = np.where(par >= 0, row_of_call[np.maximum(par, 0)], -1)

    off = offsets_ms or {}
    nodes = sorted(set(src.tolist()) | set(dst.tolist()))
    shift = {v: int(off.get(v, 0.0) * MS) for v in nodes}
    src_off = np.array([shift[v] for v in src.tolist()], dtype=np.int64)
    dst_off = np.array([shift[v] for v in dst.tolist()], dtype=np.int64)
    send_clock = send + src_off
    recv_clock = recv + dst_off
    send_clock[np.isin(src, list(untraced))] = MISSING
    recv_clock[np.isin(dst, list(untraced))] = MISSING
    o = order
    table = MessageTable(
        _pool(nodes),
        src=_codes(src[o], nodes),
        dst=_codes(dst[o], nodes),
        src_host=_codes(src[o], nodes),
        dst_host=_codes(dst[o], nodes),
        src_endpoint=np.full(len(o), -1),
        dst_endpoint=np.full(len(o), -1),
        send=send_clock[o],
        recv=recv_clock[o],
        size=np.full(len(o), -1),
        flow=flow[o],
        record=np.arange(len(o)),
    )
    return table, truth


def _pool(nodes: list[str]):
    from tacit.model.spans import StringPool

    return StringPool(nodes)


def _codes(names: np.ndarray, nodes: list[str]) -> np.ndarray:
    return np.searchsorted(np.array(nodes), names).astype(np.int32)


def _flows(src, dst, send, recv, call, is_ret, pool: bool) -> np.ndarray:
    """A connection for every call (and its return): idle pooled connections are reused."""
    flow = np.empty(len(call), dtype=np.int64)
    ncalls = int(call.max()) + 1 if len(call) else 0
    call_row = np.empty(ncalls, dtype=np.int64)
    ret_row = np.empty(ncalls, dtype=np.int64)
    call_row[call[~is_ret]] = np.flatnonzero(~is_ret)
    ret_row[call[is_ret]] = np.flatnonzero(is_ret)
    if not pool:
        flow[call_row] = np.arange(ncalls)
        flow[ret_row] = np.arange(ncalls)
        return flow
    idle: dict[tuple[str, str], list[tuple[int, int]]] = {}
    next_id = 0
    for c in np.argsort(send[call_row], kind="stable").tolist():
        r, q = call_row[c], ret_row[c]
        heap = idle.setdefault((src[r], dst[r]), [])
        if heap and heap[0][0] <= send[r]:
            _, f = heapq.heappop(heap)
        else:
            f, next_id = next_id, next_id + 1
        flow[r] = flow[q] = f
        heapq.heappush(heap, (int(recv[q]), f))
    return flow


def _three_tier() -> list[tuple[Call, float]]:
    """web calls app (which calls db), then cache; or web calls auth alone."""
    db = Call("db", (0.5, 0.05))
    app = Call("app", (0.8, 0.05), [[db]])
    cache = Call("cache", (0.3, 0.03))
    auth = Call("auth", (0.6, 0.05))
    browse = Call("web", (1.0, 0.05), [[app], [cache]])
    login = Call("web", (2.0, 0.1), [[auth]])
    both = Call("web", (1.5, 0.05), [[app, cache]])
    return [(browse, 0.6), (login, 0.25), (both, 0.15)]


def test_simulated_requests_one_at_a_time_are_nested_exactly():
    m, truth = simulate(_three_tier(), 400, rate_per_s=20, seed=1, poisson=False)
    r = nest_calls(m)
    assert r.accounted() and sum(r.unpaired.values()) == 0
    calls = np.flatnonzero(r.role == CALL)
    assert np.array_equal(r.parent_call[calls], truth[calls])
    assert sum(r.patterns.values()) == 400
    assert set(r.patterns) == {
        "client -> web(app(db), cache)",
        "client -> web(auth)",
        "client -> web(app(db) | cache)",
    }


def test_clock_offsets_and_untraced_leaves_in_simulation():
    offsets = {"client": 0.0, "web": 5_000.0, "app": -12_345.6, "db": 60_000.0, "cache": 3.3}
    m, truth = simulate(
        _three_tier(),
        400,
        rate_per_s=20,
        seed=2,
        offsets_ms=offsets,
        untraced=frozenset({"db"}),
        poisson=False,
    )
    r = nest_calls(m)
    calls = np.flatnonzero(r.role == CALL)
    assert len(calls) == np.count_nonzero(truth >= 0) + 400
    assert np.array_equal(r.parent_call[calls], truth[calls])


def test_concurrent_requests_resolved_by_delay_scoring():
    # 600 requests/s against requests of ~5-7 ms: web serves about three at once, so 80 % of the
    # nested calls sit inside more than one open request (ambiguous nesting).
    m, truth = simulate(_three_tier(), 6000, rate_per_s=600, seed=3)
    r = nest_calls(m)
    latest = nest_calls(m, NestingParams(resolve="latest"))
    assert r.accounted()
    calls = np.flatnonzero(r.role == CALL)
    kids = calls[truth[calls] >= 0]
    amb = calls[r.candidates[calls] > 1]
    assert len(amb) > 0.7 * len(kids)
    # every single-candidate nesting is right: the enclosing interval was the true parent's
    single = calls[r.candidates[calls] == 1]
    assert np.array_equal(r.parent_call[single], truth[single])
    # Measured on seeds 3-5: the histograms pick the true parent of 88-89 % of ambiguous
    # calls (93-94 % at 200 requests/s, 64-78 % at 1200/s); always taking the last-arrived
    # candidate gets 28 %. What is left is real confusion: a web->app call ~1.0 ms after one
    # "browse" request arrived is as likely as ~1.5 ms after a "both" request.
    acc = np.mean(r.parent_call[amb] == truth[amb])
    acc_latest = np.mean(latest.parent_call[amb] == truth[amb])
    assert acc > 0.85
    assert acc_latest < 0.4
    # the three true shapes are the three most frequent patterns (measured: 72 % of trees)
    top = list(r.patterns)[:3]
    assert set(top) == {
        "client -> web(app(db), cache)",
        "client -> web(auth)",
        "client -> web(app(db) | cache)",
    }
    assert sum(r.patterns[t] for t in top) > 0.65 * 6000
