"""``tacit reconstruct`` and ``tacit blind`` on spans from eBPF agents and sidecar logs
(``--input-format ebpf|envoy``): traces against the application's truth, and the failures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent_logs import (
    CALLGRAPH_SIDECARS_YAML,
    CALLGRAPH_YAML,
    MS,
    SERVICE_MAP_YAML,
    US,
    beyla_document,
    truth,
    write_sidecar_logs,
)
from clirun import finish, run_here
from tacit.formats.blind import read_blind
from tacit.formats.jaeger import read_jaeger
from tacit.model.spans import CLIENT, SERVER

N = 30


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("agents")
    calls = truth(N, 2.0)
    (d / "beyla.json").write_text(json.dumps(beyla_document(calls)))
    (d / "services.yaml").write_text(SERVICE_MAP_YAML)
    (d / "cg.yaml").write_text(CALLGRAPH_YAML)
    (d / "cg-sidecars.yaml").write_text(CALLGRAPH_SIDECARS_YAML)
    (d / "mesh").mkdir()
    write_sidecar_logs(d / "mesh", calls, "istio-json")
    (d / "bad.log").write_text('[2020-11-25T21:26:18.409Z] "GET / HTTP/1.1" 200\n')
    ebpf = ("--input-format", "ebpf", "--services", "services.yaml")
    return finish(
        {
            "ebpf": run_here(
                "reconstruct",
                "beyla.json",
                *ebpf,
                "--callgraph",
                "cg.yaml",
                "--out",
                "ebpf.json",
                "--json",
                cwd=d,
            ),
            "envoy": run_here(
                "reconstruct",
                "mesh",
                "--input-format",
                "envoy",
                "--callgraph",
                "cg-sidecars.yaml",
                "--out",
                "envoy.json",
                "--json",
                cwd=d,
            ),
            "blind": run_here(
                "blind", "mesh", "--input-format", "envoy", "--out", "mesh.jsonl", "--json", cwd=d
            ),
            "learn": run_here("reconstruct", "beyla.json", *ebpf, "--out", "x.json", cwd=d),
            "bad": run_here(
                "blind", "bad.log", "--input-format", "envoy", "--out", "y.jsonl", cwd=d
            ),
            "map_alone": run_here(
                "blind", "beyla.json", "--services", "services.yaml", "--out", "z.jsonl", cwd=d
            ),
        }
    ) | {"dir": d}


def offsets(path: Path) -> set[tuple[str, str, int]]:
    """Per reconstructed call: (caller, callee, µs from the caller's request to the call)."""
    t = read_jaeger(path)
    rows = np.flatnonzero((t.kind == CLIENT) & (t.parent >= 0))
    return {
        (t.name("service", int(t.parent[r])), t.name("peer", r),
         int(t.start[r] - t.start[t.parent[r]]) // US)
        for r in rows
    }  # fmt: skip


def test_ebpf_spans_reconstruct_into_the_true_traces(runs) -> None:
    r = runs["ebpf"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["spans"] == 6 * N and doc["traces"] == N
    assert doc["accounting"]["rpcs_paired"] == 2 * N
    # Every call under the request that made it, at its true offset.
    assert offsets(runs["dir"] / "ebpf.json") == {
        ("frontend", "catalog", 500),
        ("frontend", "cart", 5000),
        ("catalog", "redis", 300),
    }
    assert doc["mapped"] == 3 * N


def test_sidecar_logs_reconstruct_into_the_true_traces(runs) -> None:
    r = runs["envoy"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["traces"] == N and doc["mapped"] == 2 * N
    # The sidecar's times are whole milliseconds: catalog's call at 0.5 ms logs at 0 ms.
    assert offsets(runs["dir"] / "envoy.json") == {
        ("frontend", "catalog", 0),
        ("frontend", "cart", 5 * MS // US),
    }


def test_blind_spans_from_sidecar_logs(runs) -> None:
    r = runs["blind"]
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["accounting"]["rpcs_paired"] == 2 * N
    spans = read_blind(runs["dir"] / "mesh.jsonl")
    assert int((spans.link >= 0).sum()) == 4 * N
    assert int((spans.kind == SERVER).sum()) == 3 * N


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("learn", "no trace ids to learn a call graph from: give --callgraph FILE"),
        ("bad", "bad.log: record line 1: expected Envoy's default access log format"),
        ("map_alone", "a service map goes with the formats ebpf, envoy"),
    ],
)
def test_failures_are_one_line_and_exit_2(runs, name: str, message: str) -> None:
    r = runs[name]
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
