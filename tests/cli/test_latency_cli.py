"""``tacit latency response`` and ``tacit experiment loadbalancer`` end to end, as subprocesses."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from capture_probe import needs_capture
from clirun import finish, run_here, start
from tacit.formats.pcap_write import write_packets
from tacit.response_latency import estimate_response_latency
from tacit.simulate.request_streams import RequestStreamParams, simulate_requests

ISSUE_FIELDS = {
    "connections",
    "samples",
    "median_relative_error",
    "p5_relative_error",
    "p95_relative_error",
    "packets",
    "packets_per_second",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("latency")
    stream = simulate_requests(RequestStreamParams(clients=4, duration_ns=3 * 10**9, seed=3))
    write_packets(d / "sim.pcap", stream.packets)
    (d / "bad.pcap").write_bytes(b"\xd4\xc3\xb2\xa1 truncated")
    procs = {
        "sim": run_here("latency", "response", d / "sim.pcap", "--json", "--rows", cwd=d),
        "sim_text": run_here("latency", "response", d / "sim.pcap", cwd=d),
        "bad": run_here("latency", "response", d / "bad.pcap", "--json", cwd=d),
        "bad_algorithm": run_here("latency", "response", d / "sim.pcap", "--algorithm", "x", cwd=d),
        "lb": run_here("experiment", "loadbalancer", "--json", cwd=d),
    }
    return d, finish(procs) | {"stream": stream}


def test_response_json_has_the_issue_fields_and_matches_the_api(runs):
    _, r = runs
    assert r["sim"].returncode == 0, r["sim"].stderr
    doc = json.loads(r["sim"].stdout)
    assert {"packets", "packets_per_second", "connections"} <= doc.keys()
    api = estimate_response_latency(r["stream"].packets)
    assert doc["packets"] == len(r["stream"].packets)
    assert doc["estimates"] == len(api) == len(doc["rows"])
    assert [row["latency_ns"] for row in doc["rows"]] == api.latency_ns.tolist()
    assert sum(doc["packet_accounting"].values()) == doc["packets"]
    assert "median estimate ms" in r["sim_text"].stdout


def test_bad_input_is_one_line_and_exit_2(runs):
    _, r = runs
    for name in ("bad", "bad_algorithm"):
        assert r[name].returncode == 2, (name, r[name].stderr)
        lines = r[name].stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r[name].stderr
    assert "bad.pcap" in r["bad"].stderr


def test_truth_scores_a_real_capture(shared_data, tmp_path):
    http = shared_data / "pcap" / "zeek-http-1000-requests-one-dropped-response.pcap.gz"
    args = ("latency", "response", http, "--truth", "--gap-threshold", "5us", "--json")
    r = finish({"truth": run_here(*args, cwd=tmp_path)})["truth"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc.keys() >= ISSUE_FIELDS
    assert doc["truth"]["accounting"]["requests"] == 1000
    assert doc["rtt_baselines"]["seq_ack"]["samples"] > 0
    assert doc["causal_pairs"]["samples"] >= 1
    assert doc["causal_pairs"]["median_relative_error"] < 0.01


def test_loadbalancer_compares_both_runs(runs):
    _, r = runs
    assert r["lb"].returncode == 0, r["lb"].stderr
    doc = json.loads(r["lb"].stdout)
    un, co = doc["unweighted"], doc["controlled"]
    assert np.isclose(doc["p99_reduction"], 1 - co["p99_ms"] / un["p99_ms"])
    assert un["p50_ms"] <= un["p99_ms"] and co["p50_ms"] <= co["p99_ms"]


@pytest.mark.live
@needs_capture(tool=False)
def test_live_capture_on_loopback(tmp_path):
    """``--interface``: a request-response loop on loopback (5 ms service time) captured live;
    every estimate lies within the service times the server took (5 ms asked of ``sleep``,
    more on a busy machine), and every packet is accounted for."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    args = ("latency", "response", "--interface", "lo", "--filter", f"tcp port {port}")
    proc = start(*args, "--seconds", "6", "--epoch", "500ms", "--rows", "--json", cwd=tmp_path)

    took: list[float] = []  # each response's service time, as the server saw it (ns)

    def serve() -> None:
        conn, _ = srv.accept()
        while conn.recv(100):
            began = time.perf_counter_ns()
            time.sleep(0.005)
            took.append(time.perf_counter_ns() - began)
            conn.sendall(b"x" * 200)

    threading.Thread(target=serve, daemon=True).start()
    client = socket.create_connection(("127.0.0.1", port))
    while proc.poll() is None:
        client.sendall(b"GET")
        client.recv(1000)
    client.close()
    r = finish({"live": proc})["live"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["packets"] > 100 and sum(doc["packet_accounting"].values()) == doc["packets"]
    assert doc["estimates"] >= 1
    latencies = [row["latency_ns"] for row in doc["rows"]]
    slack = 1e6  # capture timestamps and the server's clock reads, apart
    assert all(min(took) - slack < v < max(took) + slack for v in latencies), (
        latencies,
        min(took),
        max(took),
    )


def test_responses_faster_than_the_gap_threshold_are_explained(tmp_path):
    """Requests every 0.1 ms, each answered within 0.03 ms (a loopback server): the threshold
    algorithm (Algorithm 1) sees no gap above δ = 1 ms, so no estimates, and a warning says why
    and which setting would see them; that setting does."""
    from tcp_conversations import MS, Conversation, capture

    c = Conversation()
    t = c.handshake(0, server_rtt=MS // 50, client_rtt=MS // 50)
    for k in range(500):
        c.send(t + k * MS // 10, 0, b"GET / HTTP/1.1\r\n\r\n")
        c.send(t + k * MS // 10 + MS // 30, 1, b"HTTP/1.1 204 No Content\r\n\r\n")
    capture(tmp_path, c)
    args = ("latency", "response", "c.pcap", "--algorithm", "threshold", "--json")
    runs = finish(
        {
            "default": start(*args, cwd=tmp_path),
            "smaller": start(*args, "--gap-threshold", "20us", cwd=tmp_path),
        }
    )
    default, smaller = (json.loads(runs[k].stdout) for k in ("default", "smaller"))
    assert default["estimates"] == 0
    assert (
        len(default["warnings"]) == 1 and "--gap-threshold (e.g. 20 us)" in default["warnings"][0]
    )
    assert smaller["estimates"] > 0 and smaller["warnings"] == []
