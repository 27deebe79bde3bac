"""``tacit capture`` end to end: blind spans from a capture, and traces reconstructed with a
call graph learned from a capture of requests sent one at a time."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from app_captures import pong_server, three_tier
from capture_probe import needs_capture
from clirun import finish, run_here, start
from tacit.formats.blind import read_blind
from tacit.formats.jaeger import read_jaeger
from tacit.reconstruct.result import ROOT_CALL
from tcp_conversations import capture_all


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    d = tmp_path_factory.mktemp("capture")
    capture_all(d, three_tier([10, 30, 50]))  # written as all.pcap
    (d / "all.pcap").rename(d / "test.pcap")
    # Two requests in flight at once: A (10-30 ms) calls geo at 12-15 ms, B (20-40 ms) at
    # 25-28 ms, when both are open; only A can own the first call, so B owns the second.
    capture_all(
        d,
        three_tier([10], call_ms=(2, 5, 20))
        + three_tier([20], ports=(40001, 50001), call_ms=(5, 8, 20)),
    )
    (d / "all.pcap").rename(d / "prod.pcap")
    (d / "services.yaml").write_text('"10.0.0.1": loadgen\n"10.0.0.2": front\n":80": geo\n')
    return finish(
        {
            "blind": run_here(
                "capture",
                "prod.pcap",
                "--services",
                "services.yaml",
                "--out",
                "s.jsonl",
                "--json",
                cwd=d,
            ),
            "traces": run_here(
                "capture",
                "prod.pcap",
                "--services",
                "services.yaml",
                "--reconstruct",
                "--test-capture",
                "test.pcap",
                "--out",
                "t.json",
                "--json",
                cwd=d,
            ),
            "no_callgraph": run_here(
                "capture", "prod.pcap", "--reconstruct", "--out", "x.json", cwd=d
            ),
            "not_a_capture": run_here("capture", "services.yaml", "--out", "y.jsonl", cwd=d),
        }
    ) | {"dir": d}  # type: ignore[dict-item]


def test_blind_spans_from_a_capture(runs) -> None:
    r = runs["blind"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exchanges"] == {"exchanges": 4, "paired": 4, "spans": 8, "left_out": {}}
    assert doc["services"] == {
        "front": {"server": 2, "client": 2},
        "geo": {"server": 2, "client": 0},
        "loadgen": {"server": 0, "client": 2},
    }
    spans = read_blind(runs["dir"] / "s.jsonl")
    assert len(spans) == 8 and (spans.link >= 0).all()


def test_traces_reconstructed_with_a_call_graph_from_isolated_requests(runs) -> None:
    r = runs["traces"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["test_capture"] == {
        "spans": 12,
        "unwoven": {ROOT_CALL: 3},
    }
    # The load generator's calls are the roots: nothing at its address caused them.
    assert doc["traces"] == 2
    assert doc["unmapped"] == {ROOT_CALL: 2}
    t = read_jaeger(runs["dir"] / "t.json")
    front_calls = [r for r in range(len(t)) if t.name("service", r) == "front" and t.kind[r] == 1]
    for c in front_calls:  # each call under the front request that began first before it
        p = int(t.parent[c])
        assert t.name("endpoint", p) == "GET /hotels"
    starts = sorted((int(t.start[int(t.parent[c])]), int(t.start[c])) for c in front_calls)
    assert starts[0][0] < starts[1][0] and starts[0][1] < starts[1][1]


def test_a_call_graph_learned_blind_from_a_captures_spans(runs) -> None:
    """The spans of a capture in which the requests ran one after the other: ``tacit
    callgraph --blind`` learns the front end's call to geo from them, as ``--test-capture``
    does, and ``tacit capture --reconstruct --callgraph blind`` reconstructs with it."""
    d = runs["dir"]
    made = run_here("capture", "test.pcap", "--services", "services.yaml", "--out", "iso.jsonl",
                    cwd=d)  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = run_here("callgraph", "iso.jsonl", "--blind", "--json", cwd=d)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    front = doc["callgraph"]["front"]["GET /hotels"]
    assert [(c["service"], c["endpoint"]) for c in front["calls"]] == [("geo", "GET /near")]
    assert front["support"] == {"seen": 3, "alone": 3, "given": 0, "explained": 0}
    assert doc["support"]["left_out"] == {}
    # In one command: the capture's spans, the call graph learned from them, their traces.
    one = run_here("capture", "test.pcap", "--services", "services.yaml", "--reconstruct",
                   "--callgraph", "blind", "--out", "b.json", "--json", cwd=d)  # fmt: skip
    assert one.returncode == 0, one.stderr
    summary = json.loads(one.stdout)
    assert summary["callgraph"]["endpoints"]["front GET /hotels"]["alone"] == 3
    assert summary["traces"] == 3 and summary["unmapped"] == {ROOT_CALL: 3}
    t = read_jaeger(d / "b.json")
    front_calls = [r for r in range(len(t)) if t.name("service", r) == "front" and t.kind[r] == 1]
    assert len(front_calls) == 3
    assert all(t.name("endpoint", int(t.parent[c])) == "GET /hotels" for c in front_calls)


def test_bad_use_is_one_line(runs) -> None:
    for name, needle in (("no_callgraph", "--callgraph"), ("not_a_capture", "services.yaml")):
        r = runs[name]
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.live
@needs_capture(tool=False)
def test_live_capture_on_loopback(tmp_path):
    """``--interface``: HTTP/1.1 requests on loopback, each on a connection of its own, captured
    live and turned into span pairs; every exchange accounted for."""
    with pong_server() as port:
        (tmp_path / "services.yaml").write_text(f'":{port}": pong\n')
        args = ("capture", "--interface", "lo", "--filter", f"tcp port {port}", "--seconds", "2")
        proc = start(
            *args, "--services", "services.yaml", "--out", "s.jsonl", "--json", cwd=tmp_path
        )
        sent = 0
        while proc.poll() is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as r:
                assert r.read() == b"pong"
            sent += 1
            time.sleep(0.01)
    r = finish({"live": proc})["live"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    x = doc["exchanges"]
    assert 10 <= x["paired"] <= sent and x["spans"] == 2 * x["paired"]
    assert x["exchanges"] == x["paired"] + sum(x["left_out"].values())
    assert doc["services"]["pong"] == {"server": x["paired"], "client": 0}
    assert doc["live"]["dropped"] == 0, (doc["live"], sent, x)
    spans = read_blind(tmp_path / "s.jsonl")
    assert {spans.name("endpoint", r) for r in range(len(spans))} == {"GET /ping"}
