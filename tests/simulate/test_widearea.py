"""The wide-area simulator against its own ground truth: causality, clocks, paths, tracing."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.model.messages import MISSING
from tacit.simulate.widearea import (
    HEARTBEAT,
    STEPS,
    WideAreaParams,
    WideAreaRun,
    simulate_widearea,
)


@pytest.fixture(scope="module")
def cdn() -> WideAreaRun:
    return simulate_widearea(WideAreaParams(duration_s=30, seed=3))


@pytest.fixture(scope="module")
def dht() -> WideAreaRun:
    return simulate_widearea(WideAreaParams(scenario="dht", duration_s=20, seed=4))


def names(run: WideAreaRun, column: str) -> np.ndarray:
    return np.array(run.messages.strings.values, dtype=object)[getattr(run.messages, column)]


def messages_by_request(run: WideAreaRun) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for row, req in enumerate(run.truth.request.tolist()):
        out[req].append(row)
    return out


def check_causality(run: WideAreaRun, exact: bool = True) -> None:
    m, truth = run.messages, run.truth
    n = len(m)
    assert len(truth.parent) == len(truth.request) == len(run.true_send) == n
    assert np.all(np.diff(run.true_send) >= 0), "sorted by true send time"
    child = np.flatnonzero(truth.parent >= 0)
    parent = truth.parent[child]
    assert np.all(parent < child)
    assert np.all(truth.request[parent] == truth.request[child])
    assert np.all(run.true_recv[parent] <= run.true_send[child])
    assert np.all(run.true_send < run.true_recv)
    if exact:
        # The parent is a message the child's sender received.
        assert np.all(m.dst[parent] == m.src[child])
        assert np.all(m.dst_host[parent] == m.src_host[child])
        # ... and the latest one of its request that it received before sending.
        for req, rows in messages_by_request(run).items():
            roots = [r for r in rows if truth.parent[r] < 0]
            assert len(roots) == 1, f"request {req} has {len(roots)} roots"
            for r in rows:
                if truth.parent[r] < 0:
                    continue
                got = [
                    q for q in rows if m.dst[q] == m.src[r] and run.true_recv[q] <= run.true_send[r]
                ]
                assert truth.parent[r] == max(got, key=lambda q: run.true_recv[q])
    assert np.all(run.step[child] >= 0)
    if exact:
        assert np.all(run.step[truth.parent < 0] == -1)


def test_cdn_ground_truth_is_consistent(cdn: WideAreaRun) -> None:
    check_causality(cdn)
    assert len(cdn.messages) > 20_000
    assert cdn.messages.sources == ["simulate:widearea-cdn"]
    assert np.array_equal(cdn.messages.record, np.arange(len(cdn.messages)))


def test_dht_ground_truth_is_consistent(dht: WideAreaRun) -> None:
    check_causality(dht)


@pytest.mark.parametrize("scenario", ["cdn", "dht"])
def test_clock_offsets_are_bounded_and_applied(scenario: str) -> None:
    params = WideAreaParams(scenario=scenario, duration_s=20, seed=5, trace_clients=True)
    run = simulate_widearea(params)
    m = run.messages
    bound = params.clock_offset_max_s * 1e9
    offsets = np.array(list(run.truth.host_offset.values()))
    assert np.all(np.abs(offsets) <= bound)
    assert np.abs(offsets).max() > 0.5 * bound, "clocks are off by seconds"
    hosts = m.strings.values
    off = np.array([run.truth.host_offset.get(h, 0) for h in hosts], dtype=np.int64)
    assert np.all(m.send == run.true_send + off[m.src_host])
    assert np.all(m.recv == run.true_recv + off[m.dst_host])
    delay = (m.recv - m.send) - (off[m.dst_host] - off[m.src_host])
    assert np.all(delay > 0)
    assert np.all(delay >= params.net_min_ms * 1e6 - 1)
    # Raw differences across hosts are dominated by the offsets: often negative.
    assert np.mean(m.recv - m.send < 0) > 0.1
    # The mean one-way delay of each busy host pair matches the truth, and is of tens of ms.
    pair = m.src_host.astype(np.int64) * len(hosts) + m.dst_host
    for key in np.unique(pair):
        rows = pair == key
        if rows.sum() < 300:
            continue
        truth = run.network_delay[hosts[key // len(hosts)], hosts[key % len(hosts)]]
        assert abs(delay[rows].mean() - truth) < 0.03 * truth
    means = np.array(list(run.network_delay.values()))
    assert 10e6 < np.median(means) < 100e6
    # Symmetric in expectation.
    for (a, b), d in run.network_delay.items():
        if (b, a) in run.network_delay:
            assert run.network_delay[b, a] == pytest.approx(d)


def test_cdn_paths_and_rare_path(cdn: WideAreaRun) -> None:
    p = cdn.params
    expected = {
        "hit1": p.hit_first,
        "hit2": (1 - p.hit_first) * p.hit_second,
        "miss": (1 - p.hit_first) * (1 - p.hit_second) * (1 - p.dns_lookup),
        "miss+dns": (1 - p.hit_first) * (1 - p.hit_second) * p.dns_lookup,
    }
    assert set(cdn.shape_fraction) == set(expected)
    assert expected["miss+dns"] == pytest.approx(0.03)
    n = cdn.n_requests
    assert n == pytest.approx(p.rate * p.duration_s, rel=0.05)
    for shape, q in expected.items():
        sd = math.sqrt(q * (1 - q) / n)
        assert abs(cdn.shape_fraction[shape] - q) < 5 * sd, shape
    # The shapes, from the messages of each request.
    src, dst = names(cdn, "src"), names(cdn, "dst")
    sizes = {"hit1": 2, "hit2": 4, "miss": 6, "miss+dns": 8}
    seen: Counter = Counter()
    for req, rows in messages_by_request(cdn).items():
        shape = cdn.shapes[cdn.request_shape[req]]
        seen[shape] += 1
        hops = [(src[r], dst[r]) for r in rows]
        if shape == HEARTBEAT:
            assert len(rows) == 2 and hops[0] == hops[1][::-1]
            assert hops[0][0].startswith("proxy-") and hops[0][1].startswith("proxy-")
            continue
        assert len(rows) == sizes[shape]
        assert hops[0][0].startswith("client-") and hops[-1][1] == hops[0][0]
        assert hops[0][1].startswith("proxy-") and hops[-1][0] == hops[0][1]
        if shape != "hit1":
            assert hops[1][1].startswith("proxy-") and hops[1][1] != hops[0][1]
        if shape == "miss":
            assert hops[2][1].startswith("origin-")
        if shape == "miss+dns":
            assert hops[2] == (hops[1][1], "dns") and hops[3] == ("dns", hops[1][1])
            assert hops[4][1].startswith("origin-")
    assert seen["miss+dns"] > 100
    # Heartbeats: spontaneous, about one per proxy per interval.
    beats = seen[HEARTBEAT]
    assert beats == pytest.approx(p.n_proxies * p.duration_s / p.heartbeat_interval_s, rel=0.05)
    assert sum(seen.values()) == cdn.n_requests + beats == len(cdn.request_shape)


def test_cdn_load_overlaps_at_every_proxy(cdn: WideAreaRun) -> None:
    m = cdn.messages
    dst = names(cdn, "dst")
    proxies = {d for d in dst.tolist() if d.startswith("proxy-")}
    assert len(proxies) == cdn.params.n_proxies
    for proxy in proxies:
        rows = np.flatnonzero(dst == proxy)
        # Requests arriving per second, and how many overlap one 100 ms window.
        assert len(np.unique(cdn.truth.request[rows])) / cdn.params.duration_s > 20
        arrivals = np.sort(cdn.true_recv[rows])
        overlap = np.searchsorted(arrivals, arrivals + 100_000_000) - np.arange(len(arrivals))
        assert overlap.mean() > 2
    assert np.all(m.size > 0)


def test_untraced_ends_are_missing(cdn: WideAreaRun) -> None:
    m = cdn.messages
    src, dst = names(cdn, "src"), names(cdn, "dst")
    from_client = np.array([s.startswith("client-") for s in src])
    to_client = np.array([d.startswith("client-") for d in dst])
    assert not cdn.traced["client-0"] and cdn.traced["proxy-0"]
    assert np.all(m.send[from_client] == MISSING) and np.all(m.recv[from_client] != MISSING)
    assert np.all(m.recv[to_client] == MISSING) and np.all(m.send[to_client] != MISSING)
    assert np.all(m.send[~from_client] != MISSING) and np.all(m.recv[~to_client] != MISSING)


def test_untraced_origin_and_dns() -> None:
    params = WideAreaParams(duration_s=10, seed=6, trace_origins=False, trace_dns=False)
    run = simulate_widearea(params)
    check_causality(run)
    m = run.messages
    src, dst = names(run, "src"), names(run, "dst")
    far = np.array([s == "dns" or s.startswith("origin-") for s in src])
    to_far = np.array([d == "dns" or d.startswith("origin-") for d in dst])
    assert far.any() and to_far.any()
    assert np.all(m.send[far] == MISSING) and np.all(m.recv[far] != MISSING)
    assert np.all(m.recv[to_far] == MISSING) and np.all(m.send[to_far] != MISSING)


def test_messages_nobody_traced_are_left_out() -> None:
    params = WideAreaParams(duration_s=10, seed=7, untraced=("proxy-1",))
    run = simulate_widearea(params)
    check_causality(run, exact=False)
    m = run.messages
    assert not np.any((m.send == MISSING) & (m.recv == MISSING))
    src, dst = names(run, "src"), names(run, "dst")
    client_to_p1 = [
        s.startswith("client-") and d == "proxy-1" for s, d in zip(src, dst, strict=True)
    ]
    assert not any(client_to_p1)
    # proxy-1's own forwards survive (the second hop sees them), with no visible parent.
    forwards = np.flatnonzero((src == "proxy-1") & np.array([d.startswith("proxy-") for d in dst]))
    assert len(forwards) and np.all(m.send[forwards] == MISSING)


def test_flows_pair_requests_and_responses(cdn: WideAreaRun) -> None:
    m = cdn.messages
    counts = np.bincount(m.flow)
    assert counts.min() >= 1 and counts.max() == 2
    order = np.argsort(m.flow, kind="stable")
    flows = m.flow[order]
    same = np.flatnonzero(flows[1:] == flows[:-1])
    pairs, nxt = order[same], order[same + 1]
    assert len(pairs) > 1000
    assert np.all(m.src[pairs] == m.dst[nxt]) and np.all(m.dst[pairs] == m.src[nxt])
    assert np.all(m.src_endpoint[pairs] == m.dst_endpoint[nxt])
    assert np.all(m.dst_endpoint[pairs] == m.src_endpoint[nxt])
    assert np.all(cdn.truth.request[pairs] == cdn.truth.request[nxt])
    ep = m.strings.values[m.dst_endpoint[np.flatnonzero(names(cdn, "dst") == "proxy-0")[0]]]
    assert ep.startswith("10.") and ep.count(":") == 1


def test_node_delays_match_truth(cdn: WideAreaRun) -> None:
    m, parent = cdn.messages, cdn.truth.parent
    child = np.flatnonzero(parent >= 0)
    delay = cdn.true_send[child] - cdn.true_recv[parent[child]]
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for d, node, step in zip(
        delay.tolist(), m.src[child].tolist(), cdn.step[child].tolist(), strict=True
    ):
        groups[m.strings.values[node], STEPS[step]].append(d)
    assert set(groups) == set(cdn.node_delay)
    checked = 0
    for key, ds in groups.items():
        if len(ds) >= 400:
            assert np.mean(ds) == pytest.approx(cdn.node_delay[key], rel=0.15), key
            checked += 1
    assert checked > 10
    slow = cdn.slow_nodes[0]
    others = [d for (node, step), d in cdn.node_delay.items() if step == "hit" and node != slow]
    assert cdn.node_delay[slow, "hit"] > 3 * max(others)


def test_deterministic_under_a_seed() -> None:
    a = simulate_widearea(WideAreaParams(duration_s=5, seed=11))
    b = simulate_widearea(WideAreaParams(duration_s=5, seed=11))
    c = simulate_widearea(WideAreaParams(duration_s=5, seed=12))
    for k, v in a.messages.columns().items():
        assert np.array_equal(v, b.messages.columns()[k]), k
    assert a.messages.strings.values == b.messages.strings.values
    assert np.array_equal(a.truth.parent, b.truth.parent)
    assert a.truth.host_offset == b.truth.host_offset
    assert a.shape_fraction == b.shape_fraction
    assert len(a.messages) != len(c.messages) or not np.array_equal(
        a.messages.send, c.messages.send
    )


@pytest.mark.parametrize("reply", ["direct", "path"])
def test_dht_iterative_and_recursive_shapes(reply: str) -> None:
    params = WideAreaParams(scenario="dht", duration_s=10, seed=8, recursive_reply=reply)
    run = simulate_widearea(params)
    check_causality(run)
    src, dst = names(run, "src"), names(run, "dst")
    max_nodes = math.floor(math.log2(params.dht_nodes - 1)) + 2
    kinds: Counter = Counter()
    for req, rows in messages_by_request(run).items():
        shape = run.shapes[run.request_shape[req]]
        hops = [(src[r], dst[r]) for r in rows]
        if shape == HEARTBEAT:
            assert hops == [(hops[0][0], hops[0][1]), (hops[0][1], hops[0][0])]
            i, j = (int(x.split("-")[1]) for x in hops[0])
            assert j == (i + 1) % params.dht_nodes  # the successor
            continue
        mode, k = shape.split("-")
        k = int(k)
        assert 1 <= k <= max_nodes
        kinds[mode] += 1
        client = hops[0][0]
        assert client.startswith("client-") and hops[-1][1] == client
        if mode == "iterative":
            assert len(rows) == 2 * k
            asked = [d for s, d in hops if s == client]
            assert len(set(asked)) == k and all(a.startswith("dht-") for a in asked)
            assert all(client in hop for hop in hops)
        else:
            contacted = [hops[0][1]] + [d for s, d in hops[1:k]]
            assert len(set(contacted)) == k
            if reply == "direct" or k == 1:
                assert len(rows) == k + 1
                assert all(client not in hop for hop in hops[1:k])
            else:
                assert len(rows) == 2 * k
                assert [(d, s) for s, d in hops[k:]] == hops[:k][::-1]
    total = sum(kinds.values())
    assert kinds["recursive"] / total == pytest.approx(params.recursive_fraction, abs=0.05)
    assert sum(run.shape_fraction.values()) == pytest.approx(1.0)
    assert {s.split("-")[0] for s in run.shape_fraction} == {"iterative", "recursive"}


def test_dht_clients_traced_by_default(dht: WideAreaRun) -> None:
    assert dht.traced["client-0"]
    assert not np.any(dht.messages.send == MISSING)
    assert not np.any(dht.messages.recv == MISSING)


@pytest.mark.parametrize(
    "change",
    [
        {"scenario": "p2p"},
        {"rate": 0},
        {"hit_first": 1.5},
        {"n_proxies": 1},
        {"recursive_reply": "sideways"},
        {"untraced": ("nobody",)},
        {"step_median_ms": {"hit": 1.0}},
        {"clock_offset_max_s": -1.0},
    ],
)
def test_bad_parameters_are_rejected(change: dict) -> None:
    with pytest.raises(ConfigError):
        simulate_widearea(dataclasses.replace(WideAreaParams(duration_s=1), **change))


def test_no_heartbeats() -> None:
    run = simulate_widearea(WideAreaParams(duration_s=5, heartbeat_interval_s=0))
    assert HEARTBEAT not in run.shapes
    assert run.n_requests == len(run.request_shape)


def test_a_minute_at_a_thousand_requests_per_second() -> None:
    """The scale the path benchmark runs at (bench_simulators.py measures its speed)."""
    run = simulate_widearea(WideAreaParams(rate=1000, duration_s=60))
    assert len(run.messages) > 200_000
