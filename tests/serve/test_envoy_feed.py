"""Sidecar access logs as a source of ``tacit serve``: followed as they grow, paired, taken in
once and reconstructed into the application's true traces."""

from __future__ import annotations

import time
from pathlib import Path

from agent_logs import CALLGRAPH_SIDECARS_YAML, MS, US, truth, write_sidecar_logs
from serve_app import config, get_json
from tacit.reconstruct.callgraph import CallGraph
from tacit.serve import Service

N = 30


def _service(tmp_path: Path, logs: Path) -> Service:
    graph = tmp_path / "cg.yaml"
    graph.write_text(CALLGRAPH_SIDECARS_YAML)
    return Service(config(tmp_path, envoy_logs=(logs,)), CallGraph.load(graph)).start()


def _taken_in(svc: Service, spans: int) -> dict:
    """The feed's status once it took in ``spans`` spans and they are in finished traces: all
    read from one status, whose ``received`` and ``pending`` come before its stored counts."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        status = get_json(svc, "/api/tacit/status")
        feed = status["envoy"][0]
        if status["received"] >= spans and not status["pending"] and not feed["waiting"]:
            return status
        time.sleep(0.1)
    raise AssertionError(f"not taken in: {feed}")


def _calls(svc: Service) -> set[tuple[str, str, int]]:
    """Per stored call: (caller, callee, ms from its request's start to the call's, in µs)."""
    out = set()
    for t in get_json(svc, "/api/traces?service=frontend&limit=1000")["data"]:
        spans = {s["spanID"]: s for s in t["spans"]}
        parent = {s["spanID"]: s["references"][0]["spanID"] for s in t["spans"] if s["references"]}
        callee = {p: c for c, p in parent.items()}
        service = {i: t["processes"][s["processID"]]["serviceName"] for i, s in spans.items()}
        for call, request in parent.items():
            if call in callee and service[call] == service[request]:  # a client span
                offset = (spans[call]["startTime"] - spans[request]["startTime"]) // 1000 * 1000
                out.add((service[request], service[callee[call]], offset))
    return out


def test_sidecar_logs_become_the_true_traces_and_a_restart_takes_nothing_twice(tmp_path):
    """Each sidecar's log (Envoy's default format; the reader's own tests take the others) read
    as it grows: the half written before the service started, then the rest; every request's
    calls under it at their true offsets; a restart reads on after what was taken in."""
    calls = truth(N, 2.0)
    mesh = tmp_path / "mesh"
    mesh.mkdir()
    files = write_sidecar_logs(mesh, calls, "envoy")
    whole = {svc: path.read_text() for svc, path in files.items()}
    for svc, path in files.items():  # the first half of every log, to begin with
        lines = whole[svc].splitlines(keepends=True)
        path.write_text("".join(lines[: len(lines) // 2]))
    svc = _service(tmp_path, mesh)
    try:
        for path in files.values():
            path.write_text(whole[next(k for k, p in files.items() if p == path)])
        status = _taken_in(svc, 5 * N)
        feed = status["envoy"][0]
        assert feed["spans"] == status["received"] == status["stored"]["spans"] == 5 * N
        assert feed["paired"] == 4 * N and feed["alone"] == N and feed["refused"] == 0
        assert feed["sidecars"] == 3
        assert _calls(svc) == {("frontend", "catalog", 0), ("frontend", "cart", 5 * MS // US)}
    finally:
        svc.stop()
    svc = _service(tmp_path, mesh)
    try:
        time.sleep(1.0)  # two polls
        status = get_json(svc, "/api/tacit/status")
        assert status["envoy"][0]["spans"] == 0 and status["stored"]["spans"] == 5 * N
    finally:
        svc.stop()


def test_a_line_that_is_no_access_log_entry_is_refused_and_the_rest_taken(tmp_path):
    mesh = tmp_path / "mesh"
    mesh.mkdir()
    files = write_sidecar_logs(mesh, truth(4, 2.0), "istio-json")
    with files["cart"].open("a") as f:
        f.write("not an entry\n")
    svc = _service(tmp_path, mesh)
    try:
        feed = _taken_in(svc, 5 * 4)["envoy"][0]
    finally:
        svc.stop()
    assert feed["refused"] == 1 and feed["spans"] == 5 * 4


def test_the_command_refuses_a_missing_log_in_one_line(tmp_path):
    from clirun import finish, one_error_line, start

    run = finish({"serve": start("serve", "--envoy-logs", "nosuch", cwd=tmp_path)})
    assert "no such sidecar log" in one_error_line(run["serve"], "nosuch")
