"""Pirate's live experiment (issue 4): a short web and memcached run on loopback, checked against
what the clients logged. Skips, with the reason, where packet capture or memcached is not
available."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from capture_probe import capture_refused, needs_capture
from tacit.errors import ConfigError
from tacit.experiment.capture import Capture
from tacit.experiment.memcached import (
    MemcachedParams,
    MemcachedProtocol,
    key,
    memcached_site,
    memcached_unavailable,
)
from tacit.experiment.web import WebExperimentResult, run_web_experiment
from tacit.experiment.web_clients import HttpProtocol
from tacit.experiment.web_server import ServiceTime, SiteParams, generate_site, object_path
from tacit.model.packets import SYN
from tacit.response_latency import PirateParams
from tacit.response_latency.evaluate import trigger_from_completions

pytestmark = pytest.mark.live

SECONDS = 3.0
CLIENTS = 4
SEED = 7


@pytest.fixture(scope="module", params=["http", "memcached"])
def run(request, tmp_path_factory) -> WebExperimentResult:
    if reason := capture_refused():
        pytest.skip(reason)
    if request.param == "memcached" and (reason := memcached_unavailable()):
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp(request.param)
    # memcached answers on loopback in well under Pirate's δ of 1 ms: only the adaptive floor
    # of PirateParams.pipelining() sees its gaps at all.
    params = PirateParams.pipelining() if request.param == "memcached" else PirateParams()
    result = run_web_experiment(
        SECONDS, clients=CLIENTS, seed=SEED, workdir=workdir, server=request.param, params=params
    )
    print(request.param, result.as_dict())
    return result


def expected_children(result: WebExperimentResult) -> dict[str, Counter]:
    """What every target names, from the site or trees the server was given (gets only: a
    memcached visit record is named by some gets, chosen by key)."""
    if result.server == "http":
        site = generate_site(SiteParams(), SEED)
        return {
            object_path(site, i): Counter(object_path(site, c) for c in site.children[i])
            for i in range(len(site.sizes))
        }
    mc = MemcachedParams()
    trees = memcached_site(mc, SEED)
    return {
        f"get {key(f, i)}": Counter(f"get {key(f, c)}" for c in trees.children[i])
        for f in range(len(mc.value_sizes))
        for i in range(len(trees.sizes))
    }


def test_every_response_is_logged(run: WebExperimentResult):
    log = run.log
    assert len(log) > 100 and run.connections == CLIENTS
    assert np.all(log.received > log.sent)
    targets = [log.strings[c] for c in log.target]
    named: dict[int, Counter] = {}
    for row, parent in enumerate(log.parent.tolist()):
        if parent >= 0:
            named.setdefault(parent, Counter())[targets[row]] += 1
    expected = expected_children(run)
    for row, target in enumerate(targets):
        if target.startswith("set "):
            assert row not in named
            continue
        got = named.get(row, Counter())
        visit = Counter(t for t in got if t.startswith("set "))
        assert got - visit == expected[target], target
        assert sum(visit.values()) <= 1


def test_capture_holds_every_request(run: WebExperimentResult):
    p = run.packet_table
    assert run.capture is not None and run.capture.dropped == 0
    assert np.all(p.dport == run.server_port)
    ports = set(run.log.port.tolist())
    assert set(p.sport[(p.tcp_flags & SYN) != 0].tolist()) == ports
    # Every request's bytes were captured: the sequence space each connection's data segments
    # cover (retransmitted or split segments counted once) is the requests' bytes.
    protocol = (
        HttpProtocol(SiteParams().pages)
        if run.server == "http"
        else MemcachedProtocol(memcached_site(MemcachedParams(), SEED), MemcachedParams())
    )
    sent = Counter()
    for port, code in zip(run.log.port.tolist(), run.log.target.tolist(), strict=True):
        sent[port] += len(protocol.request(run.log.strings[code]))
    captured = Counter()
    for port in ports:
        data = (p.sport == port) & (p.payload_len > 0)
        syn = (p.sport == port) & ((p.tcp_flags & SYN) != 0)
        first = int(p.seq[syn][0]) + 1
        ends = (p.seq[data].astype(np.int64) + p.payload_len[data] - first) % 2**32
        captured[port] = int(ends.max())
    assert captured == sent


def test_pipelining_depth_at_most_four(run: WebExperimentResult):
    log = run.log
    assert log.outstanding.max() == 4 and log.outstanding.min() >= 1
    for conn in np.unique(log.conn):
        rows = log.conn == conn
        sent, received = log.sent[rows], log.received[rows]
        # Requests outstanding when each request was sent, itself included.
        outstanding = ((sent[None, :] <= sent[:, None]) & (received[None, :] > sent[:, None])).sum(
            axis=1
        )
        assert outstanding.max() <= 4


def test_dependency_tree_followed(run: WebExperimentResult):
    log = run.log
    child = log.parent >= 0
    parents = log.parent[child]
    assert np.all(parents < np.flatnonzero(child))
    assert np.all(log.sent[child] >= log.received[parents])
    assert np.all(log.conn[child] == log.conn[parents])


def test_estimate_close_to_client_log(run: WebExperimentResult):
    """Pirate's estimate from the capture against the clients' log. Web server: under a loose
    bound that an estimate of nothing or of the wrong scale fails. memcached: only that it is
    scored — its accuracy swings from run to run (four pipelined gets of large values come back
    one after the other, and the Python clients compete for 2 cores). The 1 % target is
    measured by bench/bench_web_experiment.py, not asserted."""
    d = run.as_dict()
    print(f"{run.server}: median relative error {d['median_relative_error']:.4f}")
    assert d["samples"] >= 1 and np.isfinite(d["median_relative_error"])
    if run.server == "http":
        assert d["median_relative_error"] < 0.3


def test_causal_pairs_are_scored(run: WebExperimentResult):
    """Both truths are scored. Each causal pair's gap (a request sent → the request its response
    let go) is its trigger's latency plus the client's processing, so the two truths agree to
    within the processing; a request's trigger is never later than its parent's response."""
    d = run.as_dict()["causal_pairs"]
    assert d["samples"] >= 1 and np.isfinite(d["median_relative_error"])
    if run.server == "http":
        assert d["median_relative_error"] < 0.3
    log = run.log
    trigger = trigger_from_completions(log.port, log.sent, log.received)
    has = trigger >= 0
    gap = log.sent[has] - log.sent[trigger[has]]
    assert np.all(gap >= log.latency[trigger[has]])
    child = log.parent >= 0
    assert np.all(log.received[trigger[child]] >= log.received[log.parent[child]])


def test_latency_varies_over_the_run(run: WebExperimentResult):
    """The server's latency steps (web: the service time; memcached: the value sizes), on a
    grid of Unix time that a run longer than one step crosses; memcached's gets answer values of
    the sizes its steps go through. Which of its steps is slowest is left to the machine: with
    other work on the cores, scheduling outweighed a 200 KB value."""
    mc = MemcachedParams()
    step = ServiceTime().step_seconds if run.server == "http" else mc.step_seconds
    assert step < SECONDS
    log = run.log
    steps = log.sent // int(step * 1e9)
    seen = [s for s in np.unique(steps) if (steps == s).sum() >= 50]
    medians = [np.median(log.latency[steps == s]) for s in seen]
    assert len(medians) >= 2 and max(medians) > 1.3 * min(medians)
    if run.server == "memcached":  # a step's trees may run on into the next one
        gets = np.array([log.strings[int(t)].startswith("get") for t in log.target])
        answered = [np.median(log.size[(steps == s) & gets]) for s in seen]
        nearest = [min(mc.value_sizes, key=lambda v: abs(a - v)) for a in answered]
        assert all(v <= a < v + 64 for v, a in zip(nearest, answered, strict=True)), answered
        assert len(set(nearest)) >= 2, answered


@needs_capture()
def test_capture_error_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no-such-interface"):
        Capture(tmp_path / "x.pcap", "tcp", interface="no-such-interface").start()
