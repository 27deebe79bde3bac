"""Pirate's §5.1 experiment: network namespaces with asymmetric routing and a CPU-limited
server. A short run, checked against the clients' log. Skips, with the reason, where
namespaces, tcpdump or the cgroup cpu controller are not available."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.experiment.asymmetric import (
    AsymmetricParams,
    AsymmetricResult,
    experiment_unavailable,
    run_asymmetric_experiment,
)
from tacit.experiment.cpu_series import CpuSeriesParams, cpu_allocation_series
from tacit.experiment.cpu_server import spin
from tacit.experiment.memcached import MemtierParams, MemtierProtocol, memcached_unavailable

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> AsymmetricResult:
    reason = experiment_unavailable()
    if reason:
        pytest.skip(f"the asymmetric-routing experiment cannot run here: {reason}")
    params = AsymmetricParams(seconds=6.0, connections=6, subnet=79, seed=3)
    return run_asymmetric_experiment(params, tmp_path_factory.mktemp("asymmetric"))


def test_only_the_client_to_server_direction_reaches_the_vantage_point(run):
    assert run.server_packets_at_vantage == 0
    assert run.client_packets_at_vantage > run.requests  # requests, handshakes, ACKs
    assert run.capture is not None and run.capture.dropped == 0
    assert run.pirate_at_client is None and run.rtt is None  # no capture at the client asked
    assert run.packets.keys() == {"vantage"}
    assert sum(run.packets["vantage"].values()) == run.client_packets_at_vantage


def test_every_response_is_scored_or_counted(run):
    for summary in run.pirate.values():
        assert summary.samples + summary.unmatched_requests == run.requests
    assert run.req_to_req.samples + run.req_to_req.unmatched_requests == run.requests


def test_the_server_cpu_sets_the_latency(run):
    # 250 µs of CPU per request at about half a core: well below 4K requests/s.
    assert 300 < run.requests / run.duration_seconds < 3_000
    assert np.median(run.log.latency) > 1_000_000  # queueing behind the quota: milliseconds


def test_pirate_follows_the_clients(run):
    """Pirate's default estimates, and the published rule's are further off: with one outlier
    gap taken for the inter-batch gap, the paper's rule estimates a multiple of the latency.
    How close Pirate comes is the reproduction bench's figure (``bench/
    bench_pirate_reproduction.py``, longer runs against the per-epoch oracles): it moves with
    the machine's load, a stall of a client or of the server being a gap Pirate reads."""
    assert run.req_to_req.median_relative_error < 0.02
    modes, paper = run.pirate["modes"], run.pirate["paper"]
    assert modes.samples > 0 and np.isfinite(modes.median_relative_error)
    assert paper.median_relative_error > modes.median_relative_error


def test_cpu_series_is_seeded_and_bounded():
    p = CpuSeriesParams()
    a = cpu_allocation_series(600, p, 1)
    assert np.array_equal(a, cpu_allocation_series(600, p, 1))
    assert a.min() >= p.floor and a.max() <= 1
    assert abs(a.mean() - p.mean) < 0.2
    with pytest.raises(ConfigError):
        CpuSeriesParams(mean=0.1, floor=0.2)


def test_spin_uses_cpu_time():
    before = time.thread_time()
    spin(0.01)
    assert time.thread_time() - before >= 0.01


MEMCACHED = AsymmetricParams(
    seconds=5.0, server="memcached", connections=10, max_outstanding=1, subnet=80, seed=2
)


@pytest.fixture(scope="module")
def memcached_run(tmp_path_factory) -> AsymmetricResult:
    reason = experiment_unavailable() or memcached_unavailable()
    if reason:
        pytest.skip(f"the memcached experiment cannot run here: {reason}")
    return run_asymmetric_experiment(MEMCACHED, tmp_path_factory.mktemp("memcached"))


def test_memcached_follows_the_memtier_style_clients(memcached_run):
    """§5.7: memtier-style clients (a pipeline of one, get:set 1:1) seen from the client-to-
    server direction only, every response scored or counted. How close Pirate comes against
    the per-epoch mean oracle is the reproduction bench's figure (its memcached section): with
    one request in flight, a client's or the server's stall is a whole gap."""
    run = memcached_run
    assert run.server_packets_at_vantage == 0
    assert np.all(run.log.outstanding == 1)  # memtier's pipeline of one
    gets = sum(run.log.strings[int(t)].startswith("get") for t in run.log.target)
    assert 0.4 < gets / len(run.log) < 0.6  # get:set 1:1
    # The client's own turnaround (2026-11-29, 20 s runs): 2.1 % of the latency when the
    # clients drew and encoded each request after the response, 0.7 % drawing it while waiting.
    assert run.req_to_req.median_relative_error < 0.02
    modes = run.pirate["modes"]
    assert modes.samples + modes.unmatched_requests == run.requests
    assert modes.samples > 0 and np.isfinite(modes.median_relative_error)


def test_loss_is_scored_against_the_same_traffic_before_it(tmp_path):
    """§5.4 within one run: the vantage point sees what the relay let through, every packet
    the client sent but the dropped ones, and Pirate is scored on both that and the client's
    own capture, against one log. How much the loss moves the error is the reproduction
    bench's figure (``bench/bench_pirate_reproduction.py``, its loss runs of 20 s), not this
    test's: a run of 4 s rests on about 150 connection-epochs, and with the machine loaded
    the change reached 5.6 and 11 points, where 20 s runs moved by 0.2 to 0.7."""
    if reason := experiment_unavailable():
        pytest.skip(f"the asymmetric-routing experiment cannot run here: {reason}")
    params = AsymmetricParams(
        seconds=4.0, connections=4, loss=0.01, cfs_period_us=1_000, client_capture=True,
        subnet=84, seed=5,
    )  # fmt: skip
    run = run_asymmetric_experiment(params, tmp_path)
    forward = run.relay["forward"]
    assert 0.003 < forward["dropped"] / forward["received"] < 0.03
    assert run.client_packets_at_vantage == forward["received"] - forward["dropped"]
    at_client = run.pirate_at_client
    assert at_client is not None and at_client.keys() == run.pirate.keys()
    for scored in (run.pirate["modes"], at_client["modes"]):
        assert scored.samples > 0 and np.isfinite(scored.median_relative_error)
    # The same packets at both points, but for the dropped ones, each in one bucket.
    assert sum(run.packets["vantage"].values()) == run.client_packets_at_vantage
    assert sum(run.packets["client"].values()) > run.client_packets_at_vantage


def test_impairment_is_the_relays():
    p = AsymmetricParams(loss=0.01, reorder=0.25, seed=4)
    assert p.impaired and not AsymmetricParams().impaired
    relay = p.impairment()
    assert (relay.loss, relay.reorder, relay.delay_ns, relay.seed) == (0.01, 0.25, 1_000_000, 4)
    assert AsymmetricParams(loss=0.01).impairment().delay_ns == 0  # no reordering, no delay
    with pytest.raises(ConfigError):
        AsymmetricParams(loss=1.5)
    with pytest.raises(ConfigError):
        AsymmetricParams(server="nginx")


def test_memtier_protocol_speaks_memcached_text():
    asyncio.run(_memtier_protocol())


async def _memtier_protocol():

    protocol = MemtierProtocol(MemtierParams(keys=10, value_bytes=(40, 40)))
    rng = np.random.default_rng(0)
    targets = [protocol.root(rng, 0.0) for _ in range(200)]
    assert {t.split()[0] for t in targets} == {"get", "set"}
    assert protocol.request("set k3 40") == b"set k3 0 0 40\r\n" + b"v" * 40 + b"\r\n"
    assert protocol.request("get k3") == b"get k3\r\n"
    reader = asyncio.StreamReader()
    reader.feed_data(b"VALUE k3 0 4\r\nabcd\r\nEND\r\nSTORED\r\nEND\r\n")
    assert await protocol.response(reader, "get k3") == (len(b"VALUE k3 0 4\r\n") + 6 + 5, [])
    assert await protocol.response(reader, "set k3 4") == (8, [])
    assert await protocol.response(reader, "get k9") == (5, [])  # a miss
