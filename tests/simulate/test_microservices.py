"""The simulator against its own invariants: call plans, clocks, links, queueing, config."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections import Counter, defaultdict

import numpy as np
import pytest
import yaml

from tacit.errors import ConfigError
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.simulate import (
    AppSpec,
    SlowdownSpec,
    load_app,
    load_sweep,
    parse_app,
    scale_out,
    simulate,
    slow_down,
)
from tacit.simulate.microservices import EPOCH_NS


@pytest.fixture(scope="module")
def shop() -> AppSpec:
    return load_app()


@pytest.fixture(scope="module")
def shop_spans(shop: AppSpec) -> SpanTable:
    return simulate(shop, 300, n_requests=1500, seed=1)


def certain(app: AppSpec) -> AppSpec:
    """``app`` with every call made (probability 1)."""
    services = {
        name: dataclasses.replace(
            s,
            endpoints={
                e: dataclasses.replace(
                    ep,
                    steps=tuple(
                        dataclasses.replace(
                            step,
                            calls=tuple(
                                dataclasses.replace(c, probability=1.0) for c in step.calls
                            ),
                        )
                        for step in ep.steps
                    ),
                )
                for e, ep in s.endpoints.items()
            },
        )
        for name, s in app.services.items()
    }
    return dataclasses.replace(app, services=services)


def expected_spans(app: AppSpec, service: str, endpoint: str) -> Counter:
    """The (kind, service, endpoint) of every span of one request when every call is made."""
    out = Counter({(SERVER, service, endpoint): 1})
    for step in app.services[service].endpoints[endpoint].steps:
        for call in step.calls:
            below = expected_spans(app, call.service, call.endpoint)
            below[(CLIENT, service, call.endpoint)] += 1
            for key, n in below.items():
                out[key] += n * call.repeat
    return out


def by_trace(t: SpanTable) -> dict[int, np.ndarray]:
    order = np.argsort(t.trace, kind="stable")
    cuts = np.flatnonzero(np.diff(t.trace[order])) + 1
    return {int(t.trace[rows[0]]): rows for rows in np.split(order, cuts)}


def children(t: SpanTable) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for row, parent in enumerate(t.parent.tolist()):
        if parent != NONE:
            out[parent].append(row)
    return out


def rows_of(t: SpanTable, kind: int, service: str, endpoint: str) -> np.ndarray:
    return np.flatnonzero(
        (t.kind == kind)
        & (t.service == t.strings.find(service))
        & (t.endpoint == t.strings.find(endpoint))
    )


def test_default_app_has_the_documented_features(shop: AppSpec) -> None:
    assert shop.name == "shop"
    assert len(shop.services) == 6
    calls = [
        (caller, step, call)
        for caller, s in shop.services.items()
        for ep in s.endpoints.values()
        for step in ep.steps
        for call in step.calls
    ]
    assert any(len(ep.steps) > 1 for s in shop.services.values() for ep in s.endpoints.values())
    assert any(step.parallel and len(step.calls) > 1 for _, step, _ in calls)
    assert any(call.probability < 1 for _, _, call in calls)
    assert any(call.repeat > 1 for _, _, call in calls)
    assert any(s.instances == 2 for s in shop.services.values())
    callers = defaultdict(set)
    for caller, _, call in calls:
        callers[call.service].add(caller)
    assert any(len(c) >= 2 for c in callers.values())
    leaves = [n for n, s in shop.services.items() if not any(e.steps for e in s.endpoints.values())]
    assert "db" in leaves


def test_every_trace_has_exactly_the_spans_of_its_call_plan(shop: AppSpec) -> None:
    app = certain(shop)
    t = simulate(app, 200, n_requests=400, seed=3)
    traces = by_trace(t)
    assert len(traces) == 400
    for rows in traces.values():
        roots = rows[t.parent[rows] == NONE]
        assert len(roots) == 1
        root = int(roots[0])
        want = expected_spans(app, t.name("service", root), t.name("endpoint", root))
        got = Counter((int(t.kind[r]), t.name("service", r), t.name("endpoint", r)) for r in rows)
        assert got == want


@pytest.mark.parametrize(
    ("caller", "callee", "p"),
    [
        (("catalog", "Get"), ("db", "Query"), 0.3),
        (("frontend", "GET /product"), ("cache", "Put"), 0.3),
    ],
)
def test_probabilistic_calls_are_made_at_their_rate(
    shop_spans: SpanTable, caller: tuple[str, str], callee: tuple[str, str], p: float
) -> None:
    t = shop_spans
    kids = children(t)
    parents = rows_of(t, SERVER, *caller)
    made = sum(
        any(t.name("endpoint", c) == callee[1] and t.name("peer", c) == callee[0] for c in kids[r])
        for r in parents.tolist()
    )
    n = len(parents)
    assert n > 300
    assert abs(made - p * n) < 4 * math.sqrt(n * p * (1 - p))


def test_client_spans_nest_in_their_parent_server_span(shop_spans: SpanTable) -> None:
    t = shop_spans
    client = np.flatnonzero(t.kind == CLIENT)
    parent = t.parent[client]
    assert (t.kind[parent] == SERVER).all()
    assert (t.instance[parent] == t.instance[client]).all()
    assert (t.service[parent] == t.service[client]).all()
    assert (t.start[parent] <= t.start[client]).all()
    assert (t.end[client] <= t.end[parent]).all()
    assert (t.thread[parent] == t.thread[client]).all()


def test_server_spans_nest_in_their_caller_only_without_clock_skew(shop: AppSpec) -> None:
    def nested_fraction(app: AppSpec) -> float:
        t = simulate(app, 200, n_requests=300, seed=2)
        server = np.flatnonzero((t.kind == SERVER) & (t.parent != NONE))
        parent = t.parent[server]
        inside = (t.start[parent] < t.start[server]) & (t.end[server] < t.end[parent])
        return float(inside.mean())

    assert nested_fraction(dataclasses.replace(shop, clock_skew_us=0.0)) == 1.0
    assert nested_fraction(shop) < 0.9


def test_links_pair_both_sides_of_each_rpc(shop_spans: SpanTable) -> None:
    t = shop_spans
    roots = t.parent == NONE
    assert (t.link[roots] == NONE).all()
    assert (t.kind[roots] == SERVER).all()
    assert (t.peer[roots] == NONE).all()
    rows = np.flatnonzero(~roots)
    link = t.link[rows]
    assert (link >= 0).all()
    assert (t.link[link] == rows).all()
    assert (t.endpoint[link] == t.endpoint[rows]).all()
    assert (t.kind[link] != t.kind[rows]).all()
    assert (t.trace[link] == t.trace[rows]).all()
    assert (t.peer[link] == t.service[rows]).all()
    server = rows[t.kind[rows] == SERVER]
    assert (t.parent[server] == t.link[server]).all()


def test_ids_order_and_records(shop_spans: SpanTable) -> None:
    t = shop_spans
    assert (np.diff(t.start) >= 0).all()
    assert (t.end >= t.start).all()
    assert t.start[0] >= EPOCH_NS - 10**6
    assert (t.record == np.arange(1, len(t) + 1)).all()
    assert t.sources == ["simulate:shop"]
    traces = {t.name("trace", r) for r in range(len(t))}
    assert len(traces) == 1500
    assert all(re.fullmatch("[0-9a-f]{32}", x) for x in traces)
    span_ids = [t.name("span_id", r) for r in range(len(t))]
    assert all(re.fullmatch("[0-9a-f]{16}", x) for x in span_ids)
    assert len(set(span_ids)) == len(t)


def test_parallel_calls_overlap_and_sequential_calls_do_not(
    shop: AppSpec, shop_spans: SpanTable
) -> None:
    t = shop_spans
    step_of = {
        (name, ep.name, call.service, call.endpoint): (i, step.parallel)
        for name, s in shop.services.items()
        for ep in s.endpoints.values()
        for i, step in enumerate(ep.steps)
        for call in step.calls
    }
    overlaps: dict[str, list[bool]] = {"parallel": [], "sequential": []}
    for parent, kids in children(t).items():
        if t.kind[parent] != SERVER:
            continue
        for a in kids:
            for b in kids:
                if a >= b:
                    continue
                key = (t.name("service", parent), t.name("endpoint", parent))
                step_a, parallel = step_of[(*key, t.name("peer", a), t.name("endpoint", a))]
                step_b, _ = step_of[(*key, t.name("peer", b), t.name("endpoint", b))]
                overlap = bool(t.start[a] < t.end[b] and t.start[b] < t.end[a])
                if step_a == step_b and parallel and t.endpoint[a] != t.endpoint[b]:
                    overlaps["parallel"].append(overlap)
                    assert t.start[a] == t.start[b]  # issued together, on the same clock
                else:
                    overlaps["sequential"].append(overlap)
    assert len(overlaps["parallel"]) > 500
    assert np.mean(overlaps["parallel"]) > 0.9
    assert len(overlaps["sequential"]) > 1000
    assert not any(overlaps["sequential"])


def test_a_parallel_group_leaves_launch_us_apart(shop: AppSpec) -> None:
    t = simulate(dataclasses.replace(shop, launch_us=300.0), 50, n_requests=300, seed=5)
    gaps = []
    for parent, kids in children(t).items():
        # GET /product's pricing and reviews calls: its only parallel step.
        if t.kind[parent] == SERVER and t.name("endpoint", parent) == "GET /product":
            both = [k for k in kids if t.name("peer", k) in ("pricing", "reviews")]
            gaps.append(abs(int(t.start[both[0]]) - int(t.start[both[1]])) / 1e3)
    assert len(gaps) > 200 and min(gaps) > 0
    assert np.mean(gaps) == pytest.approx(300, rel=0.15)


def test_latency_at_the_bottleneck_grows_with_load(shop: AppSpec) -> None:
    sweep = load_sweep(shop, [50.0, 700.0], n_requests=3000, seed=4)
    assert list(sweep) == [50.0, 700.0]

    def mean_db_latency(t: SpanTable) -> float:
        rows = t.kind == SERVER
        rows &= t.service == t.strings.find("db")
        return float((t.end - t.start)[rows].mean())

    assert mean_db_latency(sweep[700.0]) > 1.2 * mean_db_latency(sweep[50.0])


def test_a_slowdown_lengthens_the_service_times_begun_within_it(shop: AppSpec) -> None:
    """The front end slowed fivefold from 1 to 2 s into the load: its requests that arrived
    then take about five times as long before their first call (a compute phase), and the
    database it calls is as fast as ever."""
    slow = slow_down(shop, "frontend", SlowdownSpec(factor=5.0, from_s=1.0, until_s=2.0))
    t = simulate(slow, 100, duration_s=3.0, seed=2)
    start = (t.start - EPOCH_NS) / 1e9
    during, outside = (start >= 1.1) & (start < 1.9), (start < 0.9) | (start >= 2.1)
    first_call = {}
    for row, kids in children(t).items():
        first_call[row] = min(int(t.start[k]) for k in kids)
    front = [
        r for r in np.flatnonzero(t.kind == SERVER) if t.service[r] == t.strings.find("frontend")
    ]
    think = np.array([first_call[r] - t.start[r] for r in front], dtype=np.float64)
    front = np.array(front)
    ratio = np.median(think[during[front]]) / np.median(think[outside[front]])
    assert 3.5 < ratio < 6.5, ratio
    db = (t.kind == SERVER) & (t.service == t.strings.find("db"))
    took = t.end - t.start
    assert np.median(took[db & during]) < 1.5 * np.median(took[db & outside])


def test_a_seed_fixes_the_output(shop: AppSpec) -> None:
    def run(seed: int) -> tuple:
        t = simulate(shop, 400, n_requests=200, seed=seed)
        names = [
            (t.name("service", r), t.name("instance", r), t.name("trace", r), t.name("span_id", r))
            for r in range(len(t))
        ]
        cols = {
            k: v
            for k, v in t.columns().items()
            if k not in ("service", "instance", "endpoint", "peer", "trace", "span_id")
        }
        return names, cols

    names_a, cols_a = run(7)
    names_b, cols_b = run(7)
    assert names_a == names_b
    assert all((cols_a[k] == cols_b[k]).all() for k in cols_a)
    names_c, _ = run(8)
    assert names_c != names_a


def test_thread_ids_identify_the_parent_of_client_spans(shop: AppSpec) -> None:
    t = simulate(shop, 700, n_requests=1000, seed=5)
    server = np.flatnonzero(t.kind == SERVER)
    ambiguous = 0
    for c in np.flatnonzero(t.kind == CLIENT).tolist():
        open_ = server[
            (t.instance[server] == t.instance[c])
            & (t.start[server] <= t.start[c])
            & (t.end[server] >= t.end[c])
        ]
        ambiguous += len(open_) > 1
        same_thread = open_[t.thread[open_] == t.thread[c]]
        assert same_thread[np.argmin(t.end[same_thread])] == t.parent[c]
    assert ambiguous > 100  # without the thread ids, the instance alone does not tell
    untracked = simulate(shop, 700, n_requests=50, seed=5, record_threads=False)
    assert (untracked.thread == NONE).all()


@pytest.mark.parametrize(("balance", "max_imbalance"), [("round_robin", 1), ("random", 60)])
def test_load_balancing(shop: AppSpec, balance: str, max_imbalance: int) -> None:
    t = simulate(dataclasses.replace(shop, balance=balance), 300, n_requests=500, seed=6)
    rows = (t.kind == SERVER) & (t.service == t.strings.find("catalog"))
    per_instance = Counter(t.name("instance", r) for r in np.flatnonzero(rows))
    assert set(per_instance) == {"catalog-0", "catalog-1"}
    imbalance = abs(per_instance["catalog-0"] - per_instance["catalog-1"])
    assert imbalance <= max_imbalance
    if balance == "random":
        assert imbalance > 1  # not alternating


def test_duration_bounds_the_arrivals(shop: AppSpec) -> None:
    t = simulate(shop, 100, duration_s=3.0, seed=9)
    roots = t.parent == NONE
    assert abs(roots.sum() - 300) < 4 * math.sqrt(300)
    assert (t.start[roots] < EPOCH_NS + 3 * 10**9 + 10**6).all()
    both = simulate(shop, 100, n_requests=50, duration_s=100.0, seed=9)
    assert (both.parent == NONE).sum() == 50


def test_two_thousand_requests(shop: AppSpec) -> None:
    """bench_simulators.py measures how fast this is."""
    t = simulate(shop, 300, n_requests=2000)
    assert len(t) > 20_000
    assert (t.parent == NONE).sum() == 2000


BASE = yaml.safe_load(
    """
name: tiny
roots: [{service: front, endpoint: Go}]
services:
  front:
    endpoints:
      Go:
        median_ms: 1
        sigma: 0.2
        calls:
          - {service: back, endpoint: Get}
          - parallel: [{service: back, endpoint: Get, repeat: 2}]
  back:
    workers: 2
    endpoints:
      Get: {median_ms: 0.5, sigma: 0.1}
"""
)


def _mutated(path: list, value: object) -> dict:
    data = copy.deepcopy(BASE)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


GO = ["services", "front", "endpoints", "Go"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _mutated([*GO, "calls", 0, "service"], "bakc"),
            r"tiny\.yaml: services\.front\.endpoints\['Go'\]\.calls\[0\]: unknown service 'bakc'",
        ),
        (
            _mutated([*GO, "calls", 1, "parallel", 0, "endpoint"], "Put"),
            r"calls\[1\]\.parallel\[0\]: service 'back' has no endpoint 'Put'",
        ),
        (_mutated([*GO, "median_ms"], None), r"endpoints\['Go'\]: missing field 'median_ms'"),
        (_mutated(["name"], None), r"top level: missing field 'name'"),
        (_mutated([*GO, "sigmma"], 0.1), r"unknown field\(s\) sigmma"),
        (_mutated([*GO, "calls", 0, "probability"], 1.5), r"'probability' must be >= 0 and <= 1"),
        (_mutated(["services", "back", "workers"], 0), r"'workers' must be > 0"),
        (_mutated(["services", "back", "workers"], 1.5), r"'workers' must be an integer"),
        (_mutated(["balance"], "fastest"), r"balance must be one of round_robin, random"),
        (_mutated(["roots", 0, "endpoint"], "Stop"), r"roots\[0\]: service 'front' has no"),
        (
            _mutated(
                ["services", "back", "endpoints", "Get", "calls"],
                [{"service": "front", "endpoint": "Go"}],
            ),
            r"call cycle: front\.Go -> back\.Get -> front\.Go",
        ),
        (_mutated([*GO, "calls", 0, "repeat"], [3, 1]), r"'repeat' needs lo <= hi"),
        (_mutated([*GO, "calls", 0, "repeat"], [2]), r"'repeat' must be N or \[lo, hi\]"),
        (_mutated([*GO, "calls", 0, "detached"], "yes"), r"'detached' must be true or false"),
        (
            _mutated(["services", "back", "join"], {"size": 1, "calls": []}),
            r"services\.back\.join: field 'size' must be >= 2",
        ),
        (
            _mutated(["services", "back", "slowdown"], {"factor": 2, "from_s": 3, "until_s": 1}),
            r"services\.back\.slowdown: 'from_s' must be before 'until_s'",
        ),
        (
            _mutated(["services", "back", "slowdown"], {"factor": 0, "from_s": 0, "until_s": 1}),
            r"services\.back\.slowdown: .*'factor' must be > 0",
        ),
    ],
)
def test_config_errors_name_the_file_and_field(tmp_path, data: dict, message: str) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=message):
        load_app(path)


def test_base_config_is_valid_and_bad_files_are_config_errors(tmp_path) -> None:
    app = parse_app(BASE, "tiny")
    assert app.services["back"].workers == 2
    assert app.services["front"].endpoints["Go"].steps[1].parallel
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML"):
        load_app(bad)
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read"):
        load_app(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0.0, "n_requests": 10}, "rate must be a positive"),
        ({"rate": 10.0}, "give n_requests or duration_s"),
        ({"rate": 10.0, "n_requests": -1}, "n_requests must be >= 0"),
        ({"rate": 10.0, "duration_s": 0.0}, "duration_s must be a positive"),
    ],
)
def test_simulate_rejects_bad_load(shop: AppSpec, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        simulate(shop, **kwargs)


def test_tiny_app_repeats_inside_a_parallel_group() -> None:
    app = parse_app(BASE, "tiny")
    t = simulate(app, 50, n_requests=100, seed=1)
    assert len(t) == 100 * expected_spans(app, "front", "Go").total()
    assert len(t) == 100 * (1 + 2 * 3)


@pytest.fixture(scope="module")
def reviews() -> SpanTable:
    from reviews_app import reviews_app

    return simulate(reviews_app(), 80, n_requests=300, seed=2)


def test_repeat_ranges_draw_a_count_per_request(reviews: SpanTable) -> None:
    t = reviews
    lookups = rows_of(t, CLIENT, "movie", "Lookup")
    per_request = np.bincount(np.unique(t.parent[lookups], return_inverse=True)[1])
    assert set(per_request.tolist()) == {1, 2, 3, 4}


def test_detached_calls_may_end_after_their_request(reviews: SpanTable) -> None:
    t = reviews
    inserts = rows_of(t, CLIENT, "store", "mongo.insert")
    late = t.end[inserts] > t.end[t.parent[inserts]]
    assert 0 < late.mean() < 1  # some end after Save responded, none is awaited
    awaited = rows_of(t, CLIENT, "store", "redis.set")
    assert np.all(t.end[awaited] <= t.end[t.parent[awaited]])


def test_a_join_calls_onward_once_from_the_last_handler(reviews: SpanTable) -> None:
    t = reviews
    kids = children(t)
    for rows in by_trace(t).values():
        compose = rows[(t.service[rows] == t.strings.find("compose")) & (t.kind[rows] == SERVER)]
        assert len(compose) == 3
        calling = [r for r in compose if kids.get(int(r))]
        assert len(calling) == 1
        (trigger,) = calling
        first_call = min(t.start[c] for c in kids[int(trigger)])
        others = [r for r in compose if r != trigger]
        assert all(t.end[r] <= first_call for r in others)  # one instance: one clock


def test_a_scaled_out_app_takes_more_load_at_the_same_latency(shop: AppSpec) -> None:
    """Four times the instances at four times the rate: four times the spans a second, each
    request about as long (the instances are as busy), the services and calls unchanged."""
    scaled = scale_out(shop, 4)
    assert {n: s.instances for n, s in scaled.services.items()} == {
        n: 4 * s.instances for n, s in shop.services.items()
    }
    one = simulate(shop, 300, duration_s=3, seed=5)
    four = simulate(scaled, 1200, duration_s=3, seed=5)
    assert 3.6 < len(four) / len(one) < 4.4
    dur = [np.median((t.end - t.start)[t.parent == NONE]) for t in (one, four)]
    assert 0.8 < dur[1] / dur[0] < 1.25
    names = [set(t.strings.names(t.service)) for t in (one, four)]
    assert names[0] == names[1]
    with pytest.raises(ConfigError, match="factor"):
        scale_out(shop, 0)
