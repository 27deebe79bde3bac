"""Call graphs learned from simulated ground truth, and their YAML form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tacit.errors import ConfigError, InputError
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, StringPool
from tacit.reconstruct import callgraph
from tacit.reconstruct.callgraph import CallGraph, EndpointGraph, Slot, learn_callgraph
from tacit.simulate import load_app, simulate

N_REQUESTS = 600


@pytest.fixture(scope="module")
def learned() -> CallGraph:
    spans = infer_roles(simulate(load_app(None), 20, n_requests=N_REQUESTS, seed=11)).spans
    return learn_callgraph(spans)


def slot_index(g: EndpointGraph, service: str, endpoint: str, occurrence: int = 0) -> int:
    hits = [
        j
        for j, s in enumerate(g.slots)
        if (s.service, s.endpoint, s.occurrence) == (service, endpoint, occurrence)
    ]
    assert len(hits) == 1, (service, endpoint, occurrence, g.slots)
    return hits[0]


def ancestors(g: EndpointGraph, j: int) -> set[int]:
    out: set[int] = set()
    todo = list(g.preds[j])
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(g.preds[p])
    return out


def close_to(p_hat: float, p: float, n: int) -> bool:
    return abs(p_hat - p) <= 4.5 * math.sqrt(p * (1 - p) / n)


def test_learns_every_endpoint_of_the_default_app(learned):
    assert set(learned.endpoints) == {
        ("frontend", "GET /product"),
        ("frontend", "POST /checkout"),
        ("catalog", "Get"),
        ("pricing", "Quote"),
        ("reviews", "List"),
        ("cache", "Get"),
        ("cache", "Put"),
        ("db", "Query"),
        ("db", "Write"),
    }
    for leaf in [("cache", "Get"), ("cache", "Put"), ("db", "Query"), ("db", "Write")]:
        assert learned.endpoints[leaf].slots == []
    front = learned.get("frontend", "GET /product").requests
    checkout = learned.get("frontend", "POST /checkout").requests
    assert front + checkout == N_REQUESTS
    assert close_to(front / N_REQUESTS, 0.8, N_REQUESTS)


def test_product_page_has_catalog_first_then_parallel_pricing_and_reviews(learned):
    g = learned.get("frontend", "GET /product")
    assert sorted((s.service, s.endpoint, s.occurrence) for s in g.slots) == [
        ("cache", "Put", 0),
        ("catalog", "Get", 0),
        ("pricing", "Quote", 0),
        ("reviews", "List", 0),
    ]
    cat = slot_index(g, "catalog", "Get")
    pri = slot_index(g, "pricing", "Quote")
    rev = slot_index(g, "reviews", "List")
    put = slot_index(g, "cache", "Put")
    assert g.preds[cat] == []
    assert g.preds[pri] == [cat]
    assert g.preds[rev] == [cat]
    # pricing and reviews run in parallel: neither is before the other.
    assert pri not in ancestors(g, rev) and rev not in ancestors(g, pri)
    assert sorted(g.preds[put]) == sorted([pri, rev])  # transitive catalog edge removed
    assert not g.is_sequential()
    order = g.order
    assert order.index(cat) < order.index(pri) < order.index(put)
    assert order.index(rev) < order.index(put)


def test_without_order_no_call_waits_and_the_learned_graph_is_kept(learned):
    """The ablation's graph (TraceWeaver §6.2.5): the same calls, none waiting for another,
    each timed from its trigger; the graph it was made from keeps its order."""
    free = learned.without_order()
    g, f = learned.get("frontend", "GET /product"), free.get("frontend", "GET /product")
    assert f.slots == g.slots and [p.slots for p in f.paths] == [p.slots for p in g.paths]
    assert all(ps == [] for e in free.endpoints.values() for ps in e.preds)
    assert all(ps == [] for e in free.endpoints.values() for p in e.paths for ps in p.preds)
    assert all(p.anchor(j) is None for p in f.call_paths() for j in range(len(p.slots)))
    assert sorted(f.sinks()) == list(range(len(f.slots)))
    assert g.preds[slot_index(g, "pricing", "Quote")] == [slot_index(g, "catalog", "Get")]


def test_repeated_calls_are_two_sequential_slots(learned):
    g = learned.get("frontend", "POST /checkout")
    c0 = slot_index(g, "catalog", "Get", 0)
    c1 = slot_index(g, "catalog", "Get", 1)
    q = slot_index(g, "pricing", "Quote")
    w = slot_index(g, "db", "Write")
    assert g.preds[c0] == [] and g.preds[c1] == [c0] and g.preds[q] == [c1] and g.preds[w] == [q]
    assert g.is_sequential()
    assert len(g.slots) == 4

    r = learned.get("reviews", "List")
    q0 = slot_index(r, "db", "Query", 0)
    q1 = slot_index(r, "db", "Query", 1)
    assert r.preds[q0] == [] and r.preds[q1] == [q0]
    assert r.is_sequential()
    assert all(s.probability == 1.0 for s in r.slots)


def test_probabilistic_calls_get_their_configured_probability(learned):
    g = learned.get("frontend", "GET /product")
    put = g.slots[slot_index(g, "cache", "Put")]
    assert close_to(put.probability, 0.3, g.requests), put
    for name in [("catalog", "Get"), ("pricing", "Quote"), ("reviews", "List")]:
        assert g.slots[slot_index(g, *name)].probability == 1.0
    c = learned.get("catalog", "Get")
    q = c.slots[slot_index(c, "db", "Query")]
    assert close_to(q.probability, 0.3, c.requests), q
    assert c.slots[slot_index(c, "cache", "Get")].probability == 1.0
    assert c.preds[slot_index(c, "db", "Query")] == [slot_index(c, "cache", "Get")]


def _table(rows: list[tuple]) -> SpanTable:
    """rows: (service, endpoint, kind, start, end, peer, parent row)."""
    s = StringPool()
    n = len(rows)
    return SpanTable(
        s,
        service=[s.code(r[0]) for r in rows],
        instance=[s.code(r[0]) for r in rows],
        endpoint=[s.code(r[1]) for r in rows],
        kind=[r[2] for r in rows],
        start=[r[3] for r in rows],
        end=[r[4] for r in rows],
        peer=[s.code(r[5]) for r in rows],
        thread=[NONE] * n,
        trace=[NONE] * n,
        span_id=[NONE] * n,
        parent=[r[6] for r in rows],
        link=[NONE] * n,
        record=list(range(n)),
    )


def test_one_overlapping_request_makes_calls_parallel():
    # Two requests of a.E calling b.X then b.Y; the second overlaps them: the order is eliminated.
    spans = _table(
        [
            ("a", "E", SERVER, 0, 100, None, NONE),
            ("a", "X", CLIENT, 10, 20, "b", 0),
            ("a", "Y", CLIENT, 30, 40, "b", 0),
            ("a", "E", SERVER, 200, 300, None, NONE),
            ("a", "X", CLIENT, 210, 250, "b", 3),
            ("a", "Y", CLIENT, 240, 260, "b", 3),
        ]
    )
    g = learn_callgraph(spans).get("a", "E")
    assert g.requests == 2 and g.preds == [[], []] and not g.is_sequential()
    # Without the overlap, X -> Y survives.
    seq = learn_callgraph(spans.take(np.arange(3))).get("a", "E")
    assert seq.preds == [[], [0]] and seq.is_sequential()


def test_the_order_learned_a_few_requests_at_a_time_is_the_same(monkeypatch):
    """Slots are ordered comparing requests in chunks (memory slots² per chunk, not requests ×
    slots²): one request at a time gives the graph all at once gives."""
    monkeypatch.setattr(callgraph, "_SLOT_PAIR_CHUNK", 1)
    sim = simulate(load_app(None), 20, duration_s=5.0, seed=1)
    one_at_a_time = learn_callgraph(sim)
    monkeypatch.undo()
    assert one_at_a_time.to_yaml() == learn_callgraph(sim).to_yaml()


def test_ordering_more_slots_than_memory_allows_is_refused_naming_the_input(monkeypatch):
    rows: list[tuple] = [("a", "E", SERVER, 0, 10_000, None, NONE)]
    rows += [("a", f"X{k}", CLIENT, 10 * k, 10 * k + 5, "b", 0) for k in range(100)]
    spans = _table(rows)
    spans.sources = ["fan.json"]
    monkeypatch.setenv("TACIT_MEMORY_BUDGET", "64K")  # 2 × 1 × 100 fits, 4 × 100 × 100 not
    with pytest.raises(InputError, match="ordering 100 call slots") as e:
        learn_callgraph(spans)
    assert e.value.path == "fan.json"


def _fan_out(offsets: list[tuple[int, int]], x_length: list[int] | None = None) -> SpanTable:
    """Requests of a.E (1 ms apart) calling b.X and b.Y in parallel, at these start offsets;
    b.X lasts ``x_length[i]`` ns in request i (200 by default)."""
    rows: list[tuple] = []
    for i, (x, y) in enumerate(offsets):
        t, r = 1000 * i, len(rows)
        length = 200 if x_length is None else x_length[i]
        rows += [
            ("a", "E", SERVER, t, t + 500, None, NONE),
            ("a", "X", CLIENT, t + x, t + x + length, "b", r),
            ("a", "Y", CLIENT, t + y, t + y + 200, "b", r),
        ]
    return _table(rows)


def test_a_call_launched_with_a_sibling_is_timed_from_the_sibling():
    # X starts after varying work; Y leaves 5 to 9 ns after X: its gap from X varies less.
    g = learn_callgraph(_fan_out([(10 + 7 * i, 15 + 7 * i + i % 5) for i in range(12)]))
    g = g.get("a", "E")
    assert g.preds == [[], []] and g.anchors == [None, 0]
    assert g.paths[0].anchors == [None, 0] and g.order == [0, 1]


def test_a_call_opened_just_before_a_sibling_closes_is_timed_from_its_end(tmp_path):
    # X lasts 100 to 210 ns; Y opens 1 to 3 ns before X's span closes (Nezha's sql.rows inside
    # sql.conn.query): no order between them, and Y's gap from X's end varies least.
    length = [100 + 10 * i for i in range(12)]
    g = learn_callgraph(_fan_out([(10, 10 + n - 1 - i % 3) for i, n in enumerate(length)], length))
    e = g.get("a", "E")
    assert e.preds == [[], []] and e.anchors == [None, 0] and e.anchor_ends == [False, True]
    assert [e.anchor_event(j) for j in (0, 1)] == ["start", "end"]
    assert e.paths[0].anchor_event(1) == "end"
    g.save(tmp_path / "cg.yaml")
    assert "from_end_of: 0" in (tmp_path / "cg.yaml").read_text()
    back = CallGraph.load(tmp_path / "cg.yaml").get("a", "E")
    assert back.anchors == [None, 0] and back.anchor_event(1) == "end"
    assert back.paths[0].anchor_event(1) == "end"
    assert g.without_anchors().get("a", "E").anchor_event(1) == "start"
    # X of a constant length: its start times Y as well, and is preferred.
    same = learn_callgraph(_fan_out([(10 + 7 * i, 15 + 7 * i + i % 5) for i in range(12)]))
    assert same.get("a", "E").anchor_ends == [False, False]


def test_a_call_timed_from_the_arrival_keeps_its_trigger():
    # Y leaves 40 to 44 ns after the arrival whenever X leaves: the arrival times it better.
    g = learn_callgraph(_fan_out([(10 + 7 * i, 40 + i % 5) for i in range(12)])).get("a", "E")
    assert g.preds == [[], []] and g.anchors == [None, None]
    # Too few requests to tell: no anchor either.
    few = learn_callgraph(_fan_out([(10 + 7 * i, 15 + 7 * i) for i in range(5)])).get("a", "E")
    assert few.anchors == [None, None]


def _queue(n: int, lag: list[int]) -> SpanTable:
    """n requests of a.E arriving 10 ns apart, request i calling b.X lag[i % len(lag)] ns
    after its arrival (so that later requests arrive before earlier calls leave)."""
    rows: list[tuple] = []
    for i in range(n):
        t, r, x = 10 * i, len(rows), lag[i % len(lag)]
        rows += [
            ("a", "E", SERVER, t, t + 100, None, NONE),
            ("a", "X", CLIENT, t + x, t + x + 5, "b", r),
        ]
    return _table(rows)


def test_calls_that_leave_out_of_arrival_order_are_learned_as_reordering(tmp_path):
    # Every call 25 ns after its request: the later requests arrived first, order kept.
    assert not learn_callgraph(_queue(40, [25])).get("a", "E").reorders
    # Every other call leaves 20 ns sooner: it overtakes the call of the request before it.
    swapped = learn_callgraph(_queue(40, [25, 5]))
    assert swapped.get("a", "E").reorders
    swapped.save(tmp_path / "cg.yaml")
    assert CallGraph.load(tmp_path / "cg.yaml").get("a", "E").reorders
    # Too few calls that could have swapped to tell.
    assert not learn_callgraph(_queue(6, [25, 5])).get("a", "E").reorders


def test_yaml_round_trip_preserves_graph(learned, tmp_path):
    path = tmp_path / "cg.yaml"
    learned.save(path)
    back = CallGraph.load(path)
    assert set(back.endpoints) == set(learned.endpoints)
    for key, g in learned.endpoints.items():
        h = back.endpoints[key]
        assert (h.service, h.endpoint, h.requests) == (g.service, g.endpoint, g.requests)
        assert h.preds == g.preds
        assert [(s.service, s.endpoint, s.occurrence) for s in h.slots] == [
            (s.service, s.endpoint, s.occurrence) for s in g.slots
        ]
        for a, b in zip(h.slots, g.slots, strict=True):
            assert a.probability == pytest.approx(b.probability, abs=1e-6)
        assert h.order == g.order
        assert h.anchors == g.anchors
        assert [h.anchor_event(j) for j in range(len(h.slots))] == [
            g.anchor_event(j) for j in range(len(g.slots))
        ]
        assert h.reorders == g.reorders
        assert [p.anchors for p in h.paths] == [p.anchors for p in g.paths]
    # The default app launches parallel calls at once: they are timed from each other.
    assert any(a is not None for g in learned.endpoints.values() for a in g.anchors)
    assert back.to_yaml() == learned.to_yaml()


def test_hand_written_yaml_with_ids(tmp_path):
    path = tmp_path / "cg.yaml"
    path.write_text(
        "svc:\n"
        "  E:\n"
        "    calls:\n"
        "      - {id: a, service: b, endpoint: X}\n"
        "      - {id: c, service: b, endpoint: X, after: [a], probability: 0.5}\n"
        "      - {id: d, service: z, endpoint: Y, after: [a]}\n"
    )
    g = CallGraph.load(path).get("svc", "E")
    assert g.slots == [Slot("b", "X", 0), Slot("b", "X", 1, 0.5), Slot("z", "Y", 0)]
    assert g.preds == [[], [0], [0]]


@pytest.mark.parametrize(
    "text",
    [
        # a cycle
        "s:\n  E:\n    calls:\n"
        "      - {id: 0, service: b, endpoint: X, after: [1]}\n"
        "      - {id: 1, service: b, endpoint: Y, after: [0]}\n",
        # a self loop
        "s:\n  E:\n    calls:\n      - {id: 0, service: b, endpoint: X, after: [0]}\n",
        # unknown id in after
        "s:\n  E:\n    calls:\n      - {id: 0, service: b, endpoint: X, after: [7]}\n",
        # unknown id in from_start_of
        "s:\n  E:\n    calls:\n      - {id: 0, service: b, endpoint: X, from_start_of: 7}\n",
        # a gap timed from its own call
        "s:\n  E:\n    calls:\n      - {id: 0, service: b, endpoint: X, from_start_of: 0}\n",
        # unknown id in from_end_of
        "s:\n  E:\n    calls:\n      - {id: 0, service: b, endpoint: X, from_end_of: 7}\n",
        # timed from a sibling's start and its end at once
        "s:\n  E:\n    calls:\n"
        "      - {id: 0, service: b, endpoint: X}\n"
        "      - {id: 1, service: b, endpoint: Y, from_start_of: 0, from_end_of: 0}\n",
        # two calls timed from each other
        "s:\n  E:\n    calls:\n"
        "      - {id: 0, service: b, endpoint: X, from_start_of: 1}\n"
        "      - {id: 1, service: b, endpoint: Y, from_start_of: 0}\n",
        # missing endpoint
        "s:\n  E:\n    calls:\n      - {service: b}\n",
        # not a mapping at the top
        "- s\n- t\n",
        # not YAML
        "s: [unclosed\n",
    ],
)
def test_bad_yaml_raises_config_error(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        CallGraph.load(path)


def test_missing_file_raises_config_error(tmp_path):
    with pytest.raises(ConfigError):
        CallGraph.load(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "s:\n  E:\n    calls:\n      - foo\n",  # a call that is not a mapping
        "s:\n  - E\n",  # endpoints given as a list
        "s:\n  E:\n    calls: 3\n",  # calls not a list
        "s:\n  E:\n    calls:\n      - {service: b, endpoint: X, after: 0}\n",  # after not a list
        "s:\n  E:\n    calls:\n      - {id: [1], service: b, endpoint: X}\n",  # id not a scalar
        "s:\n  E:\n    calls:\n      - {service: b, endpoint: X, after: [[0]]}\n",  # nor after's
    ],
)
def test_malformed_structure_raises_config_error(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        CallGraph.load(path)


def test_blind_spans_teach_no_call_graph():
    """Calls without their parents are blind: learning from them is refused, not an empty
    graph that would leave every call unmapped."""
    rows = _fan_out([(10, 20)] * 3)
    rows.parent[:] = NONE
    with pytest.raises(ConfigError, match="no call carries its parent"):
        learn_callgraph(rows)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"s:\n  E: x\n   y: z\n", r"cg\.yaml: invalid YAML at line 3 column 5: "),
        (b"s:\n  E:\n    calls: [\xff]\n", r"cg\.yaml: not UTF-8 text \(byte 20\)$"),
        # Nested 100,000 deep: libyaml's composer overflowed the C stack and crashed.
        (b"[" * 100_000 + b"]" * 100_000, r"cg\.yaml: .* nested deeper than 64 levels at line 1$"),
        ("".join(f"{' ' * k}k{k}:\n" for k in range(3000)).encode(), r"deeper .* at line 65$"),
    ],
)
def test_unreadable_yaml_is_one_line_naming_the_line(tmp_path, data, message):
    path = tmp_path / "cg.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=message) as e:
        CallGraph.load(path)
    assert "\n" not in str(e.value)


def test_the_interquartile_range_of_every_column_is_numpys():
    """The sibling gaps' spread, computed for all columns at once, equals numpy's percentile
    of each column's finite values, bit for bit (ties between anchors depend on it)."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        r, c = int(rng.integers(0, 12)), int(rng.integers(1, 5))
        x = rng.normal(size=(r, c)) * 10 ** int(rng.integers(0, 9))
        x[rng.random((r, c)) < 0.3] = np.nan
        got = callgraph._iqr(x)
        for k in range(c):
            v = x[np.isfinite(x[:, k]), k]
            q1, q3 = np.percentile(v, [25, 75]) if len(v) >= 2 else (0.0, np.inf)
            assert got[k] == q3 - q1
