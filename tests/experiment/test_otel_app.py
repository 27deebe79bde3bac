"""The OpenTelemetry app: each mode run for 2 s at a low rate with the run's own receiver, the
spans its services exported against the truth they logged.

The six runs start together, once: five Python processes start per run, and on two cores the
runs one after another took a minute; under pytest-xdist the first worker to need them makes
them and the others read them (a module fixture would run them again in every worker). Nothing
here depends on timing: the properties hold however slowly the requests are served.
"""

from __future__ import annotations

import fcntl
import json
import pickle
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.experiment.otel_app import (
    OtelAppParams,
    OtelAppResult,
    otel_app_unavailable,
    run_otel_app,
)
from tacit.experiment.otel_app_services import MODES, PROFILES

pytestmark = pytest.mark.skipif(
    otel_app_unavailable() is not None, reason=f"otel app unavailable: {otel_app_unavailable()}"
)

PROTOCOL = {"detached": "grpc"}
"""One run exports over OTLP/gRPC (its own receiver takes both), the others protobuf over HTTP."""
SPANS_PER_REQUEST = {
    # frontend server, search client + server, geo and rate client + server, PROFILES × 2
    "full": 7 + 2 * PROFILES,
    "uninstrumented": 4 + 2 * PROFILES,  # no search spans, none of its calls
    "queue": 7 + 2 * PROFILES + 4,  # producer, consumer, its call to profile (client + server)
}


@dataclass
class Run:
    result: OtelAppResult
    truth: dict[str, dict]
    hops: list[dict]
    exported: dict[str, dict]
    """Each exported span by id: its parentSpanId (None: none), traceId, service, kind, name
    and attributes."""


@pytest.fixture(scope="session")
def runs(request, tmp_path_factory) -> dict[str, OtelAppResult]:
    if not hasattr(request.config, "workerinput"):  # no xdist
        return _run_all(tmp_path_factory.mktemp("otel-app"))
    shared = tmp_path_factory.getbasetemp().parent  # this session's, shared by its workers
    with (shared / "otel-app.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = shared / "otel-app" / "runs.pickle"
        if not made.exists():
            results = _run_all(shared / "otel-app")
            made.write_bytes(pickle.dumps(results))
        return pickle.loads(made.read_bytes())


def _run_all(out: Path) -> dict[str, OtelAppResult]:
    with ThreadPoolExecutor(len(MODES)) as pool:
        futures = {
            mode: pool.submit(
                run_otel_app,
                OtelAppParams(
                    mode=mode,
                    duration_s=2.0,
                    rate=8.0,
                    concurrency=3,
                    seed=k,
                    otlp_protocol=PROTOCOL.get(mode, "http"),
                ),
                out / mode,
            )
            for k, mode in enumerate(MODES)
        }
        return {mode: future.result() for mode, future in futures.items()}


def _load(runs: dict[str, OtelAppResult], mode: str) -> Run:
    result = runs[mode]
    rows = [json.loads(line) for line in result.truth.read_text().splitlines()]
    truth = {r["span_id"]: r for r in rows if r["span_id"] is not None}
    assert len(truth) == result.truth_spans  # ids are unique
    exported: dict[str, dict] = {}
    assert result.spans is not None
    for line in result.spans.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = {a["key"]: a["value"]["stringValue"] for a in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    assert span["spanId"] not in exported
                    exported[span["spanId"]] = {
                        "parent": span.get("parentSpanId"),
                        "trace": span["traceId"],
                        "service": resource["service.name"],
                        "kind": span["kind"].removeprefix("SPAN_KIND_").lower(),
                        "name": span["name"],
                        "attributes": {a["key"]: a["value"] for a in span.get("attributes", [])},
                    }
    return Run(result, truth, [r for r in rows if r["span_id"] is None], exported)


def _lost(mode: str, row: dict) -> bool:
    """Whether ``mode`` loses the true parent of the span of truth ``row``."""
    frontend_client = row["service"] == "frontend" and row["kind"] == "client"
    return {
        "full": False,
        "threadpool": frontend_client and row["operation"] == "GET profile /profile",
        "detached": frontend_client,
        "uninstrumented": row["kind"] == "server" and row["service"] in ("geo", "rate"),
        "nopropagation": row["kind"] == "server" and row["parent_span_id"] is not None,
        "queue": row["kind"] == "consumer",
    }[mode]


@pytest.mark.parametrize("mode", MODES)
def test_every_span_is_exported_once_and_the_only_links_lost_are_the_modes(runs, mode):
    run = _load(runs, mode)
    result = run.result
    assert result.requests_sent == result.requests_answered > 0 and result.request_errors == 0
    assert set(run.exported) == set(run.truth)  # every truth span exported, nothing else
    received = result.received or {}
    assert received["spans"] == len(run.exported)
    assert received["with_parent"] == sum(s["parent"] is not None for s in run.exported.values())
    assert received["traces"] == len({s["trace"] for s in run.exported.values()})
    lost = Counter()
    for span_id, row in run.truth.items():
        span = run.exported[span_id]
        assert (span["service"], span["kind"]) == (row["service"], row["kind"])
        if _lost(mode, row):
            assert row["parent_span_id"] is not None and span["parent"] is None
            lost[row["service"], row["kind"]] += 1
        else:
            assert span["parent"] == row["parent_span_id"]
    # every span in its parent's trace: as many traces as spans without a parent
    for span in run.exported.values():
        if span["parent"] is not None:
            assert run.exported[span["parent"]]["trace"] == span["trace"]
    roots = sum(span["parent"] is None for span in run.exported.values())
    assert len({span["trace"] for span in run.exported.values()}) == roots
    # each request: its frontend server span the one root of the truth, the spans the mode makes
    by_request = defaultdict(list)
    for row in run.truth.values():
        by_request[row["request_id"]].append(row)
    assert len(by_request) == result.requests_answered
    for rows in by_request.values():
        assert [(r["service"], r["kind"]) for r in rows if r["parent_span_id"] is None] == [
            ("frontend", "server")
        ]
        assert len(rows) == SPANS_PER_REQUEST.get(mode, SPANS_PER_REQUEST["full"])
    if mode != "full" and mode != "uninstrumented":
        assert sum(lost.values()) > 0


def test_threadpool_the_profile_calls_start_new_traces_and_search_stays(runs):
    run = _load(runs, "threadpool")
    for span_id, row in run.truth.items():
        if row["service"] == "frontend" and row["kind"] == "client":
            profile = row["operation"] == "GET profile /profile"
            assert (run.exported[span_id]["parent"] is None) == profile
        if row["service"] == "profile":  # the callee's server span is the client span's child
            caller = run.exported[row["parent_span_id"]]
            assert caller["parent"] is None and run.exported[span_id]["trace"] == caller["trace"]
    requests = run.result.requests_answered
    assert len({span["trace"] for span in run.exported.values()}) == requests * (1 + PROFILES)


def test_detached_every_call_of_the_frontend_is_a_trace_of_its_own(runs):
    run = _load(runs, "detached")
    assert run.result.params.otlp_protocol == "grpc"
    requests = run.result.requests_answered
    assert len({span["trace"] for span in run.exported.values()}) == requests * (2 + PROFILES)


def test_uninstrumented_search_makes_no_span_and_its_hop_is_in_the_truth(runs):
    run = _load(runs, "uninstrumented")
    assert not any(span["service"] == "search" for span in run.exported.values())
    assert run.result.services["search"]["instrumented"] is False
    calls = {  # the frontend's client span to search, per request
        row["request_id"]: span_id
        for span_id, row in run.truth.items()
        if row["operation"] == "GET search /nearby"
    }
    assert len(run.hops) == run.result.unobserved_hops == len(calls)
    for hop in run.hops:
        assert (hop["service"], hop["kind"]) == ("search", "unobserved")
        assert hop["parent_span_id"] == calls[hop["request_id"]]
    behind = [row for row in run.truth.values() if row["service"] in ("geo", "rate")]
    assert len(behind) == 2 * len(calls)
    for row in behind:  # true parent: the nearest observed ancestor, the call to search
        assert row["parent_span_id"] == calls[row["request_id"]]
        assert run.exported[row["span_id"]]["parent"] is None


def test_nopropagation_no_server_span_has_a_parent_and_client_spans_keep_theirs(runs):
    run = _load(runs, "nopropagation")
    for span_id, row in run.truth.items():
        span = run.exported[span_id]
        if row["kind"] == "server":
            assert span["parent"] is None
        else:
            assert span["parent"] == row["parent_span_id"] is not None


def test_queue_the_consumer_starts_a_trace_its_producer_in_the_request(runs):
    run = _load(runs, "queue")
    kinds = Counter(row["kind"] for row in run.truth.values())
    assert kinds["producer"] == kinds["consumer"] == run.result.requests_answered
    for span_id, row in run.truth.items():
        span = run.exported[span_id]
        if row["kind"] in ("producer", "consumer"):
            assert span["attributes"]["messaging.destination.name"] == {
                "stringValue": "hotel-views"
            }
        if row["kind"] == "consumer":
            producer = run.truth[row["parent_span_id"]]
            assert producer["kind"] == "producer" and producer["request_id"] == row["request_id"]
            assert span["parent"] is None and span["name"] == "process hotel-views"
        if row["kind"] == "producer":
            assert run.truth[row["parent_span_id"]]["operation"] == "GET /hotels"


def test_the_summary_is_the_result(runs):
    result = runs["full"]
    assert json.loads(result.summary.read_text()) == json.loads(json.dumps(result.as_dict()))
    assert result.as_dict()["truth"]["spans"] == result.truth_spans


def test_tacit_reads_the_spans_the_receiver_wrote(runs):
    from tacit.formats import read_otlp

    run = _load(runs, "full")
    spans = read_otlp(run.result.spans)
    assert len(spans) == len(run.exported)
    assert sorted(set(spans.strings[c] for c in spans.service.tolist())) == [
        "frontend",
        "geo",
        "profile",
        "rate",
        "search",
    ]


@pytest.mark.parametrize("mode", ["threadpool", "detached"])
def test_reconstruct_keep_context_keeps_every_given_link_and_infers_the_lost(runs, tmp_path, mode):
    """``tacit reconstruct --keep-context`` on an export whose calls lost their context in a
    thread pool, with the call graph of the full run: every link the SDK gave is kept, and the
    lost ones are inferred; without it, the given links are reconstructed too."""
    from clirun import run_here
    from tacit.evaluation import score_traces

    full, broken = _load(runs, "full").result, _load(runs, mode).result
    graph = tmp_path / "callgraph.yaml"
    assert run_here("callgraph", full.spans, "--out", graph).returncode == 0
    scores = {}
    for keep in (True, False):
        out = tmp_path / f"traces-{keep}.json"
        args = ["reconstruct", broken.spans, "--callgraph", graph, "--out", out, "--seed", "1"]
        done = run_here(*args, *(["--keep-context"] if keep else []))
        assert done.returncode == 0, done.stderr
        scores[keep] = score_traces(broken.truth, json.loads(out.read_text()), broken.spans)
    kept = scores[True]
    assert kept["missing"] == 0
    assert kept["given"]["kept"] == kept["given"]["links"] > 0
    # a run of a few seconds leaves the delay models little to learn from: the bench measures
    # the accuracy (here, that the lost calls are inferred at all, and mostly right)
    assert kept["inferred"]["right"] >= 0.5 * kept["inferred"]["links"] > 0
    assert scores[False]["given"]["kept"] <= kept["given"]["kept"]


@pytest.mark.parametrize("mode", ["nopropagation", "queue"])
def test_reconstruct_pairs_the_calls_whose_context_did_not_cross_by_address(runs, tmp_path, mode):
    """Where no context crossed (a propagator that carries nothing, a queue), the batch commands
    pair each call with the request that names its server end and target, as ``tacit serve``
    does: every lost link is found, every given one kept."""
    from clirun import run_here
    from tacit.evaluation import score_traces

    full, broken = _load(runs, "full").result, _load(runs, mode).result
    graph, out = tmp_path / "callgraph.yaml", tmp_path / "traces.json"
    assert run_here("callgraph", full.spans, "--out", graph).returncode == 0
    args = ["reconstruct", broken.spans, "--callgraph", graph, "--out", out, "--keep-context"]
    done = run_here(*args)
    assert done.returncode == 0, done.stderr
    score = score_traces(broken.truth, json.loads(out.read_text()), broken.spans)
    assert score["given"]["kept"] == score["given"]["links"] > 0
    # two concurrent calls to the same end and target (two requests asking for one hotel's
    # profile at once) leave nothing to tell their requests apart: those may be swapped
    twins = _twin_calls(broken.spans)
    assert 0 <= score["inferred"]["links"] - score["inferred"]["right"] <= twins
    assert score["inferred"]["links"] > 0
    assert 0 <= score["requests"]["total"] - score["requests"]["right"] <= twins


def _twin_calls(spans_path: Path) -> int:
    """The client spans of ``spans_path`` that overlap in time another one naming the same
    server end and target."""
    from tacit.formats import read_otlp
    from tacit.formats.rpc_endpoints import rpc_endpoint, rpc_target
    from tacit.model.spans import CLIENT

    spans = read_otlp(spans_path)
    calls = defaultdict(list)
    for row in np.flatnonzero(spans.kind == CLIENT).tolist():
        attributes = spans.details[row].attributes
        key = (rpc_endpoint(CLIENT, attributes), rpc_target(CLIENT, attributes))
        calls[key].append((int(spans.start[row]), int(spans.end[row])))
    twins = 0
    for times in calls.values():
        for i, (start, end) in enumerate(times):
            twins += any(s < end and start < e for j, (s, e) in enumerate(times) if j != i)
    return twins


def test_parameters_are_checked_before_anything_runs(tmp_path):
    for bad in (
        {"mode": "sidecar"},
        {"otlp_protocol": "thrift"},
        {"rate": 0},
        {"otlp_endpoint": "x"},
    ):
        with pytest.raises(ConfigError):
            OtelAppParams(**bad)


def test_the_receiver_writes_hex_ids_and_refuses_what_is_not_an_otlp_protobuf_export(tmp_path):
    import http.client

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from tacit.experiment.otlp_receiver import OtlpReceiver

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.parent_span_id = b"\x01" * 16, b"\xab" * 8, b"\xcd" * 8
    span.name = "GET"
    path = tmp_path / "spans.jsonl"
    protobuf = {"Content-Type": "application/x-protobuf"}
    with OtlpReceiver(path) as receiver:
        host, port = receiver.endpoint.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        statuses = []
        for target, body, headers in (
            ("/v1/logs", b"", protobuf),
            ("/v1/traces", b"{}", {"Content-Type": "application/json"}),
            ("/v1/traces", b"\xff\xff", protobuf),
            ("/v1/traces", request.SerializeToString(), protobuf),
        ):
            conn.request("POST", target, body, headers)
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
        conn.close()
        assert not path.exists()  # it appears whole when the receiver stops
    assert statuses == [404, 415, 400, 200]
    assert (receiver.requests, receiver.spans) == (1, 1)
    (line,) = path.read_text().splitlines()
    span_doc = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert (span_doc["traceId"], span_doc["spanId"], span_doc["parentSpanId"]) == (
        "01" * 16,
        "ab" * 8,
        "cd" * 8,
    )


def test_the_command_refuses_bad_options_in_one_line(tmp_path):
    from clirun import one_error_line, run_here

    command = ("experiment", "otel-app", "--out", tmp_path / "o")
    one_error_line(run_here(*command, "--mode", "sidecar"), "mode")
    one_error_line(run_here(*command, "--otlp-protocol", "thrift"), "protocol")
    one_error_line(run_here(*command, "--concurrency", "0"), "--concurrency")
    assert not (tmp_path / "o").exists()
