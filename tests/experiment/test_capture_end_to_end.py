"""The instrumentation-free path end to end: the traced app in namespaces, captured with
tcpdump; spans from the packets; the call graph from a test environment's capture (requests one
at a time, TraceWeaver §5.2); traces reconstructed and scored against the app's own log of
which request caused which, beside FCFS."""

from __future__ import annotations

import pytest

from tacit.evaluation.capture_accuracy import evaluate_capture
from tacit.experiment.traced_app import run_traced_app
from tacit.formats.capture_spans import read_service_map

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def scored(traced_app_params, traced_app_run, tmp_path_factory):
    run = traced_app_run
    test_env = traced_app_params.test_environment(3.0)
    test = run_traced_app(test_env, tmp_path_factory.mktemp("test-env"))
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
    """Behaviour only: TraceWeaver links most calls and more than FCFS. How many depends on how
    much the app's requests overlapped, which a busy machine changes; the figure over a longer
    run is ``bench/bench_capture.py``'s."""
    _, doc = scored
    acc = doc["accuracy"]
    assert acc["traceweaver"] > max(acc["fcfs"], 0.5), acc
