"""The Jaeger query API subset against what was stored, and the configuration's errors."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import numpy as np
import pytest

from clirun import finish, ok, one_error_line, start
from serve_app import get, get_json, running, shop_spans
from tacit.errors import ConfigError
from tacit.experiment.otlp_load import encoded_requests, post_requests, send_spans
from tacit.model.spans import CLIENT
from tacit.serve import Store, load_config
from tacit.serve.jaeger_api import go_duration


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    spans = shop_spans(3)
    with running(tmp_path_factory.mktemp("serve")) as svc:
        send_spans(spans, f"http://127.0.0.1:{svc.http_port}/v1/traces")
        assert svc.wait_idle(60)
        yield svc


def _rows(svc, sql: str) -> list[tuple]:
    return svc.store._cursor().execute(sql).fetchall()


def test_services_and_operations_are_those_stored(svc):
    stored = sorted(r[0] for r in _rows(svc, "SELECT DISTINCT service FROM spans"))
    assert get_json(svc, "/api/services")["data"] == stored
    ops = sorted(
        r[0] for r in _rows(svc, "SELECT DISTINCT operation FROM spans WHERE service='catalog'")
    )
    assert get_json(svc, "/api/services/catalog/operations")["data"] == ops
    kinds = get_json(svc, "/api/operations?service=catalog")["data"]
    assert sorted({k["name"] for k in kinds}) == ops
    assert {k["spanKind"] for k in kinds} <= {"server", "client"}


def test_search_filters_by_service_operation_and_duration(svc):
    found = get_json(svc, "/api/traces?service=catalog&limit=1000")["data"]
    expected = _rows(svc, "SELECT count(DISTINCT trace_id) FROM spans WHERE service='catalog'")
    assert len(found) == expected[0][0]
    for trace in found:  # each has a span of the service
        names = {p["serviceName"] for p in trace["processes"].values()}
        assert "catalog" in names
    starts = [min(s["startTime"] for s in t["spans"]) for t in found]
    assert starts == sorted(starts, reverse=True)  # the traces that started last first
    limited = get_json(svc, "/api/traces?service=catalog&limit=5")["data"]
    assert len(limited) == 5
    slow = get_json(svc, "/api/traces?service=frontend&minDuration=8ms&limit=1000")["data"]
    for trace in slow:
        assert any(
            s["duration"] >= 8000
            for s in trace["spans"]
            if trace["processes"][s["processID"]]["serviceName"] == "frontend"
        )
    n_slow = _rows(
        svc,
        "SELECT count(DISTINCT trace_id) FROM spans "
        "WHERE service='frontend' AND duration_ns >= 8000000",
    )[0][0]
    assert len(slow) == n_slow


def test_search_by_tags_keeps_traces_with_a_span_that_has_them(svc):
    """Jaeger UI's and Grafana's ``tags``: a JSON object; every tag on one span of the
    service, its own or its process's."""

    def search(tags: str, limit: int = 1000) -> list:
        return get_json(svc, f"/api/traces?service=catalog&tags={quote(tags)}&limit={limit}")[
            "data"
        ]

    calls_db = (
        "SELECT DISTINCT c.trace_id FROM spans c JOIN spans d ON d.parent_span_id = c.span_id"
    )
    calls_db += " WHERE c.service = 'catalog' AND d.service = 'db'"
    found = search('{"peer.service":"db"}')
    assert 0 < len(found) < len(get_json(svc, "/api/traces?service=catalog&limit=1000")["data"])
    assert {t["traceID"] for t in found} == {r[0] for r in _rows(svc, calls_db)}
    on_one = search('{"peer.service":"db","host.name":"catalog-1"}')  # a process tag too
    expected = _rows(svc, calls_db + " AND c.instance = 'catalog-1'")
    assert 0 < len(on_one) < len(found)
    assert {t["traceID"] for t in on_one} == {r[0] for r in expected}
    assert search('{"peer.service":"db","no.such.tag":"1"}') == []
    assert len(search('{"peer.service":"db"}', limit=3)) == 3


def test_a_trace_by_id_and_an_unknown_one(svc):
    trace = get_json(svc, "/api/traces?service=frontend&limit=1")["data"][0]
    again = get_json(svc, f"/api/traces/{trace['traceID']}")["data"]
    assert again == [trace]
    client = [
        s
        for s in trace["spans"]
        if {"key": "span.kind", "type": "string", "value": "client"} in s["tags"]
    ]
    evidence = {"tacit.score", "tacit.unmapped", "tacit.link"}
    assert all(any(t["key"] in evidence for t in s["tags"]) for s in client)
    status, body, _ = get(svc, "/api/traces/" + "0" * 32)
    assert status == 404 and json.loads(body) == {
        "data": None,
        "total": 0,
        "limit": 0,
        "offset": 0,
        "errors": [{"code": 404, "msg": "trace not found"}],
    }
    status, body, _ = get(svc, "/api/traces/not-a-trace-id")
    assert status == 400 and "traceID: 'not-a-trace-id'" in json.loads(body)["errors"][0]["msg"]


def test_a_search_by_trace_ids_gives_those_found_and_names_the_others(svc):
    """Jaeger UI's search by id and its trace comparison: ``traceID`` repeated, the other
    parameters ignored; an id not stored is an error of the answer, not of the request."""
    first, second = get_json(svc, "/api/traces?service=frontend&limit=2")["data"]
    absent = "ab" * 16
    ids = f"traceID={first['traceID']}&traceID={absent}&traceID={second['traceID'].upper()}"
    found = get_json(svc, f"/api/traces?{ids}&service=nowhere")
    assert found["data"] == [first, second] and found["total"] == 2
    assert found["errors"] == [{"code": 404, "msg": "trace not found", "traceID": absent}]
    status, body, _ = get(svc, "/api/traces?traceID=xyz")
    assert status == 400 and "traceID: 'xyz'" in json.loads(body)["errors"][0]["msg"]


def test_operations_of_one_span_kind(svc):
    ops = _rows(
        svc, "SELECT DISTINCT operation, kind FROM spans WHERE service='catalog' ORDER BY ALL"
    )
    for kind in ("server", "client"):
        answer = get_json(svc, f"/api/operations?service=catalog&spanKind={kind}")["data"]
        assert answer == [{"name": name, "spanKind": kind} for name, k in ops if k == kind]
        assert answer
    status, body, _ = get(svc, "/api/operations?service=catalog&spanKind=sideways")
    assert status == 400 and "spanKind" in json.loads(body)["errors"][0]["msg"]


def test_dependencies_count_the_calls_between_services(svc):
    end_ms = time.time_ns() // 10**6 + 3_600_000  # the spans were sent shifted to start now
    links = get_json(svc, f"/api/dependencies?endTs={end_ms}&lookback=7200000")["data"]
    expected = _rows(
        svc,
        "SELECT parent_service, service, count(*) FROM spans WHERE parent_service <> service "
        "GROUP BY ALL",
    )
    assert {(d["parent"], d["child"]): d["callCount"] for d in links} == {
        (a, b): n for a, b, n in expected
    }


@pytest.mark.parametrize(
    "query, message",
    [
        ("", "service"),
        ("service=catalog&minDuration=soon", "minDuration"),
        ("service=catalog&minProbability=1.5", "minProbability"),
        ("service=catalog&minProbability=sure", "minProbability"),
        ("service=catalog&limit=-3", "limit"),
        ("service=catalog&tags=a%3D1", "tags"),
        ("service=catalog&minDuration=99999999999999h", "minDuration: '99999999999999h' is longer"),
        ("service=catalog&limit=99999999999999999999", "limit: '99999999999999999999' is more"),
        ("service=catalog&limit=10001", "limit: '10001' is more than 10,000"),
        ("service=catalog&start=99999999999999999", "start: '99999999999999999' is more"),
    ],
)
def test_bad_searches_are_400_with_the_reason(svc, query, message):
    status, body, _ = get(svc, f"/api/traces?{query}")
    assert status == 400
    answer = json.loads(body)
    assert message in answer["errors"][0]["msg"]
    assert answer["data"] is None and answer["total"] == answer["limit"] == answer["offset"] == 0


@pytest.mark.parametrize("series", ["response", "oneway"])
def test_a_latency_series_beyond_what_the_store_holds_is_400(svc, series):
    for query in ("limit=99999999999999999999", "start=99999999999999999"):
        status, body, _ = get(svc, f"/api/tacit/latency/{series}?{query}")
        assert status == 400, body
        assert b"is more than" in body


def test_go_durations():
    assert go_duration("1.5ms", "d") == 1_500_000
    assert go_duration("1m30s", "d") == 90 * 10**9
    assert go_duration("250us", "d") == 250_000
    with pytest.raises(Exception, match="not a duration"):
        go_duration("5 parsecs", "d")


def test_configuration_errors_name_the_field(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("http: 127.0.0.1:4318\nmax_pending: 5\n")
    with pytest.raises(ConfigError, match=r"unknown field.*max_pending"):
        load_config(path)
    path.write_text("online: {window_s: -1}\n")
    with pytest.raises(ConfigError, match="window_s"):
        load_config(path)
    path.write_text("idle_s: 0\n")
    with pytest.raises(ConfigError, match="idle_s"):
        load_config(path)
    for bad in ("0.5", "17592186044416"):  # DuckDB's own parser refused the second
        path.write_text(f"database_memory_mib: {bad}\n")
        with pytest.raises(ConfigError, match="database_memory_mib"):
            load_config(path)
    for bad in ("max_future_s: 0\n", "max_future_s: 1e9\n"):
        path.write_text(bad)
        with pytest.raises(ConfigError, match="max_future_s"):
            load_config(path)
    path.write_text("callgraph: cg.yaml\nidle_s: 2.5\nonline: {lateness_s: 3}\nmax_future_s: 60\n")
    config = load_config(path)
    assert config.callgraph == tmp_path / "cg.yaml" and config.online.lateness_ns == 3 * 10**9
    assert config.idle_s == 2.5 and config.database_memory_mib == 1024
    assert config.max_future_s == 60
    path.write_text("")
    assert load_config(path).max_future_s == 600


def test_the_stores_memory_limit_is_duckdbs(tmp_path):
    """``database_memory_mib`` bounds DuckDB's cache of the store (its own default is 80% of
    the machine's memory, which its cache grows into as the store grows)."""
    store = Store(tmp_path / "t.duckdb", 64)
    try:
        limit = store._cursor().execute("SELECT current_setting('memory_limit')").fetchone()[0]
    finally:
        store.close()
    assert limit == "64.0 MiB"


def test_serve_with_a_missing_call_graph_file_is_one_line_exit_2(tmp_path):
    args = ("serve", "--http", "127.0.0.1:0", "--callgraph", "nosuch.yaml")
    done = finish({"serve": start(*args, cwd=tmp_path)})["serve"]
    one_error_line(done, "no such call graph file")


def test_demo_serve_runs_the_app_into_the_service(tmp_path):
    proc = start(
        "demo", "--serve", "--out", "d", "--seconds", "6", "--http", "127.0.0.1:0", cwd=tmp_path
    )
    done = ok(finish({"demo": proc})["demo"])
    assert "web page        http://127.0.0.1:" in done.stdout
    import duckdb

    con = duckdb.connect(str(tmp_path / "d" / "tacit.duckdb"), read_only=True)
    acknowledged = con.execute("SELECT sum(spans) FROM ingest").fetchone()[0]
    # The latency charts' inputs: Pirate over the simulated capture (8 clients, 10 epochs of
    # 1 s) and the RDA receiver's 20 intervals, as the agents published them.
    estimates = con.execute("SELECT count(DISTINCT client) FROM pirate_estimates").fetchone()[0]
    intervals = con.execute("SELECT status, count(*) FROM rda_intervals GROUP BY ALL").fetchall()
    con.close()
    assert f"{acknowledged} spans sent and acknowledged" in done.stdout and acknowledged > 0
    assert estimates == 8
    published = (tmp_path / "d" / "rda.jsonl").read_text().splitlines()
    assert intervals == [("complete", len(published) - 1)] and len(published) - 1 == 20


def test_a_trace_keeps_its_senders_id_and_a_fragment_finds_the_trace_it_joined(tmp_path):
    """A call whose context a thread pool lost starts a trace of its own, its callee's spans
    under it: the trace reconstructed from both keeps its root's id, which the fragment's id
    finds too, and the fragment's root links to itself under that id; each request sent twice
    (an exporter's retry) is stored once."""
    spans = shop_spans(2)
    s = spans.strings
    call = int(np.flatnonzero((spans.kind == CLIENT) & (spans.parent >= 0))[0])
    fragment = f"{call + 1:032x}"
    spans.trace[_subtree(spans, call)] = s.code(fragment)
    root_id = s[int(spans.trace[spans.parent[call]])]
    spans.parent[call] = -1
    call_id = s[int(spans.span_id[call])]
    requests = encoded_requests(spans, shift_ns=0)
    with running(tmp_path) as svc:
        url = f"http://127.0.0.1:{svc.http_port}/v1/traces"
        log = post_requests([r for r in requests for r in (r, r)], url, connections=1)
        assert svc.wait_idle(60)
        status = get_json(svc, "/api/tacit/status")
        whole = get_json(svc, f"/api/traces/{root_id}")["data"][0]
        found = get_json(svc, f"/api/traces/{fragment}")["data"][0]
    assert log.acknowledged == 2 * len(spans)
    assert status["duplicates"] == len(spans) == status["stored"]["spans"]
    assert whole["traceID"] == root_id
    assert call_id in {x["spanID"] for x in found["spans"]} and found["traceID"] != fragment
    links = {
        x["spanID"]: [(r["refType"], r["traceID"], r["spanID"]) for r in x["references"][1:]]
        for x in whole["spans"]
    }
    assert links.pop(call_id) == [("FOLLOWS_FROM", fragment, call_id)]
    assert not any(links.values())


def test_a_span_sent_again_after_a_restart_is_stored_once(tmp_path):
    """An exporter that retries a batch across the service's restart: the spans the store
    already holds are known after it, counted as duplicates and not stored again."""
    requests = encoded_requests(shop_spans(1), shift_ns=0)
    url = "http://127.0.0.1:{}/v1/traces"
    with running(tmp_path) as svc:
        post_requests(requests, url.format(svc.http_port), connections=1)
        assert svc.wait_idle(60)
        stored = get_json(svc, "/api/tacit/status")["stored"]["spans"]
    with running(tmp_path) as svc:
        log = post_requests(requests[-3:], url.format(svc.http_port), connections=1)
        assert svc.wait_idle(60)
        status = get_json(svc, "/api/tacit/status")
    assert log.acknowledged > 0
    assert status["duplicates"] == log.acknowledged
    assert status["stored"]["spans"] == stored


def _subtree(spans, top: int) -> np.ndarray:
    """The rows of ``top`` and every span below it."""
    below = np.zeros(len(spans), dtype=bool)
    below[top] = True
    while True:
        more = below | ((spans.parent >= 0) & below[np.maximum(spans.parent, 0)])
        if (more == below).all():
            return np.flatnonzero(below)
        below = more


def _rfc3339(ns: int) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9))
    return f"{whole}.{ns % 10**9:09d}Z"


def test_api_v3_answers_as_jaegers_http_gateway(svc):
    """Jaeger v2's /api/v3: the same services, operations, traces and dependencies as the v1
    API, traces as OTLP JSON (read back by the OTLP reader), errors in its shape."""
    from tacit.formats.otlp import read_export_request

    assert get_json(svc, "/api/v3/services") == {"services": get_json(svc, "/api/services")["data"]}
    v1_ops = get_json(svc, "/api/operations?service=catalog&spanKind=server")["data"]
    v3_ops = get_json(svc, "/api/v3/operations?service=catalog&spanKind=server")["operations"]
    assert v3_ops == v1_ops and v3_ops
    now = time.time_ns()
    since, until = _rfc3339(now - 7200 * 10**9), _rfc3339(now + 7200 * 10**9)
    window = f"query.startTimeMin={since}&query.startTimeMax={until}"
    v1 = get_json(svc, "/api/traces?service=frontend&limit=5")["data"]
    status, body, _ = get(
        svc,
        f"/api/v3/traces?query.serviceName=frontend&{quote(window, safe='=&')}&query.searchDepth=5",
    )
    assert status == 200, body
    spans, _ = read_export_request(json.dumps(json.loads(body)["result"]).encode(), "json", "v3")
    ids = {spans.strings[int(x)] for x in spans.span_id}
    assert ids == {s["spanID"] for t in v1 for s in t["spans"]}
    one = get_json(svc, f"/api/v3/traces/{v1[0]['traceID']}")["result"]
    spans, _ = read_export_request(json.dumps(one).encode(), "json", "v3")
    assert {spans.strings[int(x)] for x in spans.span_id} == {s["spanID"] for s in v1[0]["spans"]}
    status, body, _ = get(svc, "/api/v3/traces/" + "0" * 32)
    assert status == 404 and json.loads(body) == {
        "error": {"httpCode": 404, "message": "trace not found"}
    }
    status, body, _ = get(svc, "/api/v3/traces?query.serviceName=frontend")
    assert (
        status == 400 and "query.startTimeMin and query.startTimeMax are required" in body.decode()
    )
    status, body, _ = get(
        svc,
        f"/api/v3/traces?query.serviceName=frontend&query.startTimeMin=yesterday&query.startTimeMax={_rfc3339(now)}",
    )
    assert status == 400 and "malformed parameter query.startTimeMin" in body.decode()
    deps = get_json(
        svc,
        f"/api/v3/dependencies?startTime={since}&endTime={until}",
    )
    end_ms = (now + 7200 * 10**9) // 10**6
    v1_deps = get_json(svc, f"/api/dependencies?endTs={end_ms}&lookback={4 * 3600 * 1000}")["data"]
    assert deps["dependencies"] == v1_deps and v1_deps
