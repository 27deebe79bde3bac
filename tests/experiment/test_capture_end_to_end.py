"""The instrumentation-free path end to end: the traced app in namespaces, captured with
tcpdump; spans from the packets; the call graph from a test environment's capture (requests one
at a time, TraceWeaver §5.2); traces reconstructed and scored against the app's own log of
which request caused which, beside FCFS."""

from __future__ import annotations

import pytest

from tacit.evaluation.capture_accuracy import evaluate_capture
from tacit.experiment.traced_app import TracedAppParams, run_traced_app, traced_app_unavailable
from tacit.formats.capture_spans import read_service_map

pytestmark = pytest.mark.live

PARAMS = TracedAppParams(duration_s=5.0, subnet=83)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    reason = traced_app_unavailable()
    if reason:
        pytest.skip(f"traced app unavailable: {reason}")
    out = tmp_path_factory.mktemp("end-to-end")
    test = run_traced_app(PARAMS.test_environment(3.0), out / "test")
    run = run_traced_app(PARAMS, out)
    doc = evaluate_capture(
        run.pcap, test.pcap, "x-request-id", run.parent_of(), read_service_map(run.services)
    )
    return run, doc


def test_every_call_of_the_app_becomes_a_labelled_span_pair(scored) -> None:
    run, doc = scored
    assert doc["exchanges"]["exchanges"] == doc["exchanges"]["paired"] == run.rpcs
    assert doc["labels"] == {"labelled": run.rpcs, "unlabelled": {}, "parents_missing": 0}
    assert doc["packets"]["unparsed"] == {} and doc["packets"]["unanswered"] == 0
    assert doc["traces"] == run.requests_completed


def test_traces_are_reconstructed_from_packets(scored) -> None:
    _, doc = scored
    acc = doc["accuracy"]
    assert acc["traceweaver"] >= 0.95, acc
    assert acc["traceweaver"] > acc["fcfs"], acc
