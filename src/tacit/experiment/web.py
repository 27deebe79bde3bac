"""Pirate's live experiment on this machine: a server, clients that log the true latency of
every response, a capture of the client-to-server packets, Pirate's estimate from that capture,
and its error against the clients' log.

Follows the evaluation of Pirate (Vannarth Shobhana et al., "Measuring (Round-Trip) Response
Latencies Under Asymmetric Routing", arXiv 2505.14358, §6): clients fetch dependency trees from
a web application whose latency varies over time, the estimate is made from the client-to-server
direction alone, and it is scored against the latency measured at the clients' application
layer. Here everything runs on loopback: the server (:mod:`.web_server`, or Debian's memcached,
:mod:`.memcached`), the clients (:mod:`.web_clients`) in this process, and tcpdump
(:mod:`.capture`) recording only packets to the server's port — the vantage point of a
load balancer whose responses bypass it (direct server return).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tacit.errors import ConfigError
from tacit.experiment.capture import Capture, CaptureStats, stop_process
from tacit.experiment.memcached import (
    MemcachedParams,
    MemcachedProtocol,
    free_port,
    memcached_site,
    populate,
    start_memcached,
)
from tacit.experiment.web_clients import (
    ClientParams,
    ClientProtocol,
    HttpProtocol,
    ResponseLog,
    run_clients,
)
from tacit.experiment.web_server import ServiceTime, SiteParams, config_json
from tacit.formats.pcap import read_packets
from tacit.model.packets import PacketTable
from tacit.response_latency import (
    ErrorSummary,
    PirateParams,
    ResponseEstimates,
    estimate_response_latency,
    score_estimates,
)
from tacit.response_latency.evaluate import score_causal_pairs, trigger_from_completions

SERVERS = ("http", "memcached")
HOST = "127.0.0.1"
SETTLE_SECONDS = 0.2
"""Pause between the clients' last packet and stopping tcpdump, so that it has read them all."""


@dataclass
class WebExperimentResult:
    """What one run measured. :meth:`as_dict` has the figures a run reports; the rest is for tests
    and further analysis: the clients' ``log``, the captured ``packet_table``, the ``estimates``
    and the server's port. ``errors``: against the mean latency of the requests completing in
    each epoch; ``causal_errors``: against the causal pairs' gaps (:func:`score_web_log`)."""

    server: str
    seconds: float
    duration_seconds: float
    connections: int
    errors: ErrorSummary
    causal_errors: ErrorSummary
    packets: int
    estimator_seconds: float
    capture: CaptureStats | None
    log: ResponseLog
    packet_table: PacketTable
    estimates: ResponseEstimates
    server_port: int

    def as_dict(self) -> dict:
        """The issue's fields; ``packets_per_second`` is the estimator's throughput on the
        capture (packets / its wall time), ``capture_packets_per_second`` the traffic's rate."""
        errors = self.errors.as_dict()
        return {
            "server": self.server,
            "connections": self.connections,
            "scored_connections": errors["connections"],
            "samples": errors["samples"],
            "median_relative_error": errors["median_relative_error"],
            "p5_relative_error": errors["p5_relative_error"],
            "p95_relative_error": errors["p95_relative_error"],
            "median_signed_error": errors["median_signed_error"],
            "unscored_estimates": errors["unscored_estimates"],
            "unmatched_requests": errors["unmatched_requests"],
            "causal_pairs": self.causal_errors.as_dict(),
            "packets": self.packets,
            "packets_per_second": round(self.packets / max(self.estimator_seconds, 1e-9)),
            "capture_packets_per_second": round(self.packets / self.duration_seconds),
            "capture_dropped": None if self.capture is None else self.capture.dropped,
            "capture": None if self.capture is None else self.capture.as_dict(),
            "requests_logged": len(self.log),
            "seconds": self.seconds,
            "duration_seconds": round(self.duration_seconds, 3),
        }


@contextlib.contextmanager
def _directory(workdir: str | Path | None) -> Iterator[Path]:
    if workdir is not None:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix="tacit-experiment-") as d:
            yield Path(d)


def _start_web_server(seed: int, site: SiteParams) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "tacit.experiment.web_server", "--seed", str(seed)]
    cmd += ["--config", config_json(site, ServiceTime())]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.strip().isdigit():
        stop_process(proc)
        raise ConfigError(f"the web server did not start (exit code {proc.returncode})")
    return proc, int(line)


def score_web_log(
    estimates: ResponseEstimates, log: ResponseLog
) -> tuple[ErrorSummary, ErrorSummary]:
    """Score ``estimates`` of a run against the clients' log: against the mean latency of the
    requests completing in each epoch, and against the causal pairs' gaps (Pirate §3: from a
    request sent to the request its response let go; the trigger of a request is the response
    its connection read last before sending it — the one that named it, or that freed a slot
    in the pipeline)."""
    endpoints = [f"{HOST}:{p}" for p in log.port.tolist()]
    trigger = trigger_from_completions(log.port, log.sent, log.received)
    return (
        score_estimates(estimates, endpoints, log.sent, log.latency),
        score_causal_pairs(estimates, endpoints, log.sent, trigger),
    )


def run_web_experiment(
    seconds: float,
    *,
    clients: int = ClientParams.connections,
    seed: int = 0,
    workdir: str | Path | None = None,
    server: str = "http",
    params: PirateParams | None = None,
) -> WebExperimentResult:
    """Run the experiment for ``seconds`` with ``clients`` connections against ``server``
    ("http": :mod:`.web_server`; "memcached": Debian's memcached), capture the packets to the
    server on loopback (kept in ``workdir`` when given, as ``<server>.pcap``), estimate the
    response latency from them with Pirate (``params``) and score it against the clients' log.

    Raises :class:`ConfigError` when tcpdump, capture permission or memcached is missing. No
    process started here outlives the call, even when it raises.
    """
    if server not in SERVERS:
        raise ConfigError(f"unknown server {server!r}; expected one of {', '.join(SERVERS)}")
    if seconds <= 0 or clients < 1:
        raise ConfigError(f"need seconds > 0 and clients ≥ 1, got {seconds} and {clients}")
    with _directory(workdir) as directory:
        pcap = directory / f"{server}.pcap"
        proc: subprocess.Popen | None = None
        capture: Capture | None = None
        try:
            protocol: ClientProtocol
            if server == "http":
                site = SiteParams()
                proc, port = _start_web_server(seed, site)
                protocol = HttpProtocol(site.pages)
            else:
                mc = MemcachedParams()
                port = free_port(HOST)
                proc = start_memcached(port, mc.memory_mb, HOST)
                trees = memcached_site(mc, seed)
                populate((HOST, port), trees, mc)
                protocol = MemcachedProtocol(trees, mc)
            capture = Capture(pcap, f"tcp dst port {port}").start()
            start = time.monotonic()
            log = run_clients(
                protocol, (HOST, port), seconds, ClientParams(connections=clients), seed
            )
            duration = time.monotonic() - start
            time.sleep(SETTLE_SECONDS)
            stats = capture.stop()
        finally:
            if capture is not None:
                capture.stop()
            if proc is not None:
                stop_process(proc)
        packets = read_packets(pcap).packets
    t0 = time.perf_counter()
    estimates = estimate_response_latency(packets, params, server=f"{HOST}:{port}")
    estimator_seconds = time.perf_counter() - t0
    errors, causal_errors = score_web_log(estimates, log)
    return WebExperimentResult(
        server=server,
        seconds=seconds,
        duration_seconds=duration,
        connections=len(set(log.port.tolist())),
        errors=errors,
        causal_errors=causal_errors,
        packets=len(packets),
        estimator_seconds=estimator_seconds,
        capture=stats,
        log=log,
        packet_table=packets,
        estimates=estimates,
        server_port=port,
    )
