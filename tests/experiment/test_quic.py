"""Pirate §5.7's QUIC experiment: aioquic's HTTP/3 server and clients in the namespaces of the
asymmetric experiment, the vantage point capturing the client's UDP. A short run, checked
against the clients' log. Skips, with the reason, where namespaces, tcpdump, the cgroup cpu
controller or aioquic are not available."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pirate_oracle import check_follows
from tacit.errors import ConfigError
from tacit.experiment.asymmetric import (
    QUIC_ACK_BYTES,
    AsymmetricParams,
    AsymmetricResult,
    experiment_unavailable,
    quic_estimators,
    run_asymmetric_experiment,
)
from tacit.experiment.cpu_series import NEAR_FULL_CORE
from tacit.experiment.quic import SCENARIOS, TREE, body_size, quic_unavailable, request_path
from tacit.formats.pcap import read_packets
from tacit.model.packets import UDP, PacketTable

pytestmark = pytest.mark.live


QUIC = AsymmetricParams(
    seconds=4.0,
    server="quic",
    connections=1,
    max_outstanding=1,
    response_bytes=SCENARIOS["noack"],
    cpu=NEAR_FULL_CORE,
    subnet=81,
    seed=1,
)
"""Scenario 1 (responses of 30–130 B), one stream. The server gets almost a whole core:
throttled CFS periods make a mode of stalls that Algorithm 2 may take for the inter-batch gap
whatever the transport (the report's runs show it); these tests are about the QUIC path."""


@pytest.fixture(scope="module")
def quic_run(tmp_path_factory) -> tuple[AsymmetricResult, PacketTable]:
    reason = experiment_unavailable() or quic_unavailable()
    if reason:
        pytest.skip(f"the QUIC experiment cannot run here: {reason}")
    work = tmp_path_factory.mktemp("quic")
    result = run_asymmetric_experiment(QUIC, work, quic_estimators())
    return result, read_packets(work / "vantage.pcap").packets


def test_the_vantage_point_sees_only_the_clients_datagrams(quic_run):
    run, packets = quic_run
    assert np.all(packets.proto == UDP)
    assert run.server_packets_at_vantage == 0
    assert run.capture is not None and run.capture.dropped == 0
    assert run.client_packets_at_vantage > run.requests


def test_every_request_is_logged_and_seen_at_the_vantage_point(quic_run):
    """With one stream each request leaves in a datagram of its own: the first datagram the
    vantage point sees after a logged request's send time is a different one for every request,
    and comes within milliseconds. The other way round, almost every datagram larger than a
    pure ACK is such a request's: the rest are the handshake's, and requests that a pure ACK
    (aioquic's are 32–34 bytes) sent just before them overtook on the way to the vantage point.
    Requests are as small as 40 bytes when QPACK's dynamic table holds their path."""
    run, packets = quic_run
    log = run.log
    assert np.all(log.received > log.sent) and np.all(log.outstanding == 1)
    assert log.size.min() >= 30 and log.size.max() <= 130
    assert np.all(np.diff(log.sent) > 0)  # one stream: one request at a time
    first = np.searchsorted(packets.time, log.sent)
    assert np.all(first < len(packets)) and len(np.unique(first)) == len(log)
    # ~0.15 ms. Not every one: a stall of the machine between the client's log and the
    # datagram's capture (once in a make test run, 2026-11-28) took one past 5 ms.
    wait = packets.time[first] - log.sent
    assert np.median(wait) < 1_000_000 and np.percentile(wait, 99) < 5_000_000, wait.max()
    large = np.flatnonzero(packets.payload_len > QUIC_ACK_BYTES)
    assert len(np.setdiff1d(large, first)) <= 4 + len(log) // 100
    roots = sum(log.strings[int(t)].startswith("/n0?") for t in log.target)
    assert roots == pytest.approx(run.requests / len(TREE), abs=1)


def test_pirate_follows_the_clients(quic_run, tmp_path):
    """Against the same run's per-epoch mean oracle (what Pirate estimates, §3.3; see
    :mod:`pirate_oracle`). Measured (4 s runs at almost a whole core, seeds 1 and 2, six runs
    on 2026-11-28): the mean oracle's median |error| 7.6–21.2 %; -noack's 0.80–0.97 times
    it, its median signed error +3.2 to +5.5 %; with ACKs of 8-byte CIDs 0.95–1.01 times, +3.5
    to +10.8 %. Against the median oracle, which the test used before, those were up to 1.54
    times: the spread of the machine's latencies, not Pirate. A run that misses is followed by
    one more with another seed, and the test fails when that one misses too. With other work
    loading the 2 cores (load average 5–7), one run in five once gave 4 times the latency:
    scheduling outliers made the inter-batch-gap mode (the report's QUIC section, item 2);
    ``make test`` runs live tests alone. The default size heuristic (64 bytes) takes most of
    aioquic's requests (40–78 bytes) for ACKs and is 100–600 times too high."""
    run, _ = quic_run
    assert run.req_to_req.median_relative_error < 0.05
    estimators = ("modes-noack", "modes-ack, CID 8")
    for name in estimators:
        summary = run.pirate[name]
        assert summary.samples + summary.unmatched_requests == run.requests
    check_follows(
        run,
        estimators,
        lambda: run_asymmetric_experiment(replace(QUIC, seed=2), tmp_path, quic_estimators()),
    )


def test_paths_carry_the_body_size():
    assert body_size(request_path(3, 1234).encode()) == 1234
    assert body_size(b"/favicon.ico") is None
    with pytest.raises(ConfigError):
        AsymmetricParams(server="quic", max_outstanding=17)
    with pytest.raises(ConfigError):
        AsymmetricParams(server="quic", response_bytes=(200, 100))
