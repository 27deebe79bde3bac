"""Pirate's §5.1 experiment on one machine: client, link, vantage point and server in four
network namespaces with asymmetric routing, a server whose CPU allocation follows a per-second
series through a cgroup, and the error of every response against the client's log (§5.1–5.2;
the scores are :mod:`.response_scores`).

    ns C (client) cv ── lc  ns L (link)  lv ── vl  ns V (vantage point)  vs ── sv  ns S (server)
    10.x.1.1 ──────────────── client → server ───────────────────────────────────▶ 10.x.2.2
       cs ◀─────────────────────── server → client (direct) ──────────────────────── sc
    10.x.3.1                                                                      10.x.3.2

C routes the server's subnet through L and V; S routes the client's subnet over the direct
link, so V forwards only the client-to-server direction (§5.1's triangle; asymmetric by design,
as with direct server return). tcpdump in V captures on ``vl``, the client-facing ingress, as
Pirate's XDP program is attached there; the result counts server packets seen there (0 when
the routing is asymmetric). L is the link from the client to the vantage point: it forwards
in the kernel, or, for §5.4 (``loss``, ``reorder``), the userspace relay of
:mod:`.impair` forwards instead and drops or reorders as netem would (this kernel may lack
netem); reordering needs a delay to overtake, ``reorder_delay_ns`` (netem's manual uses
10 ms; the paper gives none).

The server (:mod:`.cpu_server`) is single-threaded and spends 250 µs of CPU per request (the
paper's 4K requests/s per core); the cgroup (v1 ``cpu`` controller) quota is set every second
from :func:`~.cpu_series.cpu_allocation_series`, so response latency follows CPU allocation.
The clients (:mod:`.web_clients`) walk dependency trees with at most 4 outstanding requests per
connection and log when each request was sent and its response's last byte read. Two other
server kinds replace the HTTP server for §5.7: Debian's memcached (:mod:`.memcached`), and an
HTTP/3 server with its clients (:mod:`.quic`, aioquic), whose encrypted UDP the vantage point
captures instead of TCP.

Scored as §5.1 defines accuracy, per response (:func:`~tacit.response_latency.score_responses`):
the estimate of the response's (connection, epoch) against its req-to-res latency; and, for
reference, the client-side req-to-req delay (from a request to the request its response
triggered) against the same truth. What differs from the paper's setup: one 2-core machine
instead of three 16-core ones, veth links instead of 10 Gb NICs, Python clients and server
instead of WebPolygraph, a generated utilisation series instead of Google's Borg trace, and
closed-loop clients (each connection starts its next tree as soon as the last response is
read), so the load is what the CPU allocation lets through rather than a fixed 2K requests/s.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.capture import Capture, CaptureStats, stop_process
from tacit.experiment.cpu_series import CpuSeriesParams, cpu_allocation_series
from tacit.experiment.cpu_server import CPU_US
from tacit.experiment.impair import ImpairParams
from tacit.experiment.memcached import memcached_command, memcached_unavailable
from tacit.experiment.netns import ManagedProcess, namespaces_unavailable
from tacit.experiment.quic import SCENARIOS, QuicParams, quic_unavailable
from tacit.experiment.response_scores import epoch_oracle_errors, req_to_req_errors, rtt_baselines
from tacit.experiment.web_clients import ResponseLog
from tacit.formats.pcap import read_packets
from tacit.model.packets import PacketTable
from tacit.response_latency import (
    ErrorSummary,
    PirateParams,
    estimate_response_latency,
    score_responses,
)

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
SERVERS = ("http", "memcached", "quic")
PORTS = {"http": 8080, "memcached": 11211, "quic": 4433}


@dataclass(frozen=True)
class AsymmetricParams:
    """The run: ``seconds`` of clients of ``server`` (``http``: :mod:`.cpu_server` and the web
    clients; ``memcached``: Debian's memcached and §5.7's memtier-style clients,
    :class:`~.memcached.MemtierProtocol`, whose connections hold one request each; ``quic``:
    §5.7's HTTP/3 server and clients, :mod:`.quic`, with ``max_outstanding`` streams per
    connection and response bodies uniform within ``response_bytes``) on
    ``connections`` connections (each with at most ``max_outstanding`` requests; ``browser``:
    browser-like clients,
    :class:`~.web_clients.ClientParams`), the server's ``cpu_us`` per request, its CPU
    allocation series (``cpu``) enforced with a CFS period of ``cfs_period_us``, and the
    ``subnet`` (10.<subnet>.x.y) of the namespaces. ``client_capture``: capture both
    directions at the client too, for the RTT baselines of §5.3 (:func:`rtt_baselines`) and
    to score Pirate on the client's packets as they left it, before any impairment.
    ``loss``/``reorder``: probabilities of §5.4's impairment from client to vantage point
    (module docstring); reordered packets overtake the others, held ``reorder_delay_ns``."""

    seconds: float = 20.0
    server: str = "http"
    connections: int = 8
    max_outstanding: int = 4
    browser: bool = False
    response_bytes: tuple[int, int] = SCENARIOS["noack"]
    client_capture: bool = False
    loss: float = 0.0
    reorder: float = 0.0
    reorder_delay_ns: int = 1_000_000
    cpu_us: float = CPU_US
    cpu: CpuSeriesParams = field(default_factory=CpuSeriesParams)
    cfs_period_us: int = 100_000
    subnet: int = 78
    seed: int = 0

    def __post_init__(self) -> None:
        if self.server not in SERVERS:
            raise ConfigError(f"server must be one of {SERVERS}, got {self.server!r}")
        if not self.seconds > 0 or self.connections < 1 or self.max_outstanding < 1:
            raise ConfigError("need seconds > 0, connections ≥ 1 and max_outstanding ≥ 1")
        if not 1_000 <= self.cfs_period_us <= 1_000_000 or not 0 < self.subnet < 255:
            raise ConfigError("cfs_period_us must be within 1 ms..1 s and subnet within 1..254")
        ImpairParams(self.reorder_delay_ns, 0, self.loss, self.reorder)  # validates them
        if self.server == "quic":
            self.quic()  # validates streams and response sizes

    def quic(self) -> QuicParams:
        """The HTTP/3 clients of a ``quic`` run."""
        return QuicParams(self.connections, self.max_outstanding, self.response_bytes)

    @property
    def impaired(self) -> bool:
        return self.loss > 0 or self.reorder > 0

    def impairment(self) -> ImpairParams:
        """The relay's impairment: netem's ``delay D reorder R loss L`` (delay only when
        reordering)."""
        delay = self.reorder_delay_ns if self.reorder > 0 else 0
        return ImpairParams(delay, 0, self.loss, self.reorder, self.seed)


@dataclass
class AsymmetricResult:
    """What a run measured: per algorithm the per-response errors (:class:`ErrorSummary`,
    tacit's sign: positive when the estimate is high) at the vantage point and, with
    ``client_capture``, on the client's own capture of the same traffic (``pirate_at_client``:
    §5.4's change under loss and reordering without the difference between two runs), the
    req-to-req baseline's, the per-epoch oracles' (:func:`epoch_oracle_errors`), the load and
    the capture. ``packets``: what Pirate's default made of the client's packets (its buckets,
    :data:`~tacit.response_latency.gaps.BUCKETS`), at the vantage point and, with
    ``client_capture``, at the client: an original that arrives after later data goes with the
    retransmissions unless it comes within δ (:mod:`tacit.response_latency.gaps`)."""

    params: AsymmetricParams
    pirate: dict[str, ErrorSummary]
    pirate_at_client: dict[str, ErrorSummary] | None
    packets: dict[str, dict[str, int]]
    req_to_req: ErrorSummary
    oracle: dict[str, ErrorSummary]
    requests: int
    duration_seconds: float
    server_packets_at_vantage: int
    client_packets_at_vantage: int
    capture: CaptureStats | None
    rtt: dict[str, dict[str, float]] | None
    relay: dict[str, Any] | None
    allocation: np.ndarray = field(repr=False)
    log: ResponseLog = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the paper's sign, ``(truth − estimate) / truth``, beside tacit's."""
        return {
            "params": asdict(self.params),
            "requests": self.requests,
            "requests_per_second": round(self.requests / self.duration_seconds, 1),
            "median_latency_ms": round(float(np.median(self.log.latency)) / 1e6, 3),
            "cpu_allocation_mean": round(float(self.allocation.mean()), 3),
            "server_packets_at_vantage": self.server_packets_at_vantage,
            "client_packets_at_vantage": self.client_packets_at_vantage,
            "capture": None if self.capture is None else self.capture.as_dict(),
            "pirate": {a: _summary(s) for a, s in self.pirate.items()},
            "pirate_at_client": None
            if self.pirate_at_client is None
            else {a: _summary(s) for a, s in self.pirate_at_client.items()},
            "packets": self.packets,
            "req_to_req": _summary(self.req_to_req),
            "oracle": {k: _summary(s) for k, s in self.oracle.items()},
            "rtt_baselines": self.rtt,
            "relay": self.relay,
        }


def _summary(s: ErrorSummary) -> dict[str, Any]:
    out = s.as_dict()
    out["median_error_paper_sign"] = -s.median_signed_error
    return out


def experiment_unavailable() -> str | None:
    """Why the experiment cannot run here (None: it can): namespaces, tcpdump or the cgroup
    ``cpu`` controller missing or refused."""
    reason = namespaces_unavailable("none")
    if reason:
        return reason
    if not (CGROUP_CPU / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 cpu controller at {CGROUP_CPU}"
    probe = CGROUP_CPU / f"tacit-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"cannot make a cgroup under {CGROUP_CPU}: {e.strerror}"
    return None


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise ConfigError(f"{' '.join(cmd)}: {done.stderr.strip()}")


def _build(ns: dict[str, str], tag: str, net: str, relay: bool) -> None:
    c, link, v, s = ns["c"], ns["l"], ns["v"], ns["s"]
    links = (("cv", c, "lc", link), ("lv", link, "vl", v), ("vs", v, "sv", s), ("cs", c, "sc", s))
    steps: list[list[str]] = [["ip", "netns", "add", n] for n in (c, link, v, s)]
    for a, na, b, nb in links:
        steps += [
            ["ip", "link", "add", f"{a}{tag}", "netns", na, "type", "veth", "peer", "name",
             f"{b}{tag}", "netns", nb],
            ["ip", "-n", na, "link", "set", f"{a}{tag}", "name", a],
            ["ip", "-n", nb, "link", "set", f"{b}{tag}", "name", b],
        ]  # fmt: skip
    addresses = (
        (c, "cv", "1.1"), (link, "lc", "1.2"), (link, "lv", "4.1"), (v, "vl", "4.2"),
        (v, "vs", "2.1"), (s, "sv", "2.2"), (c, "cs", "3.1"), (s, "sc", "3.2"),
    )  # fmt: skip
    for n, dev, host in addresses:
        steps += [
            ["ip", "-n", n, "addr", "add", f"{net}.{host}/24", "dev", dev],
            ["ip", "-n", n, "link", "set", dev, "up"],
        ]
    steps += [["ip", "-n", n, "link", "set", "lo", "up"] for n in (c, link, v, s)]
    steps += [
        ["ip", "-n", c, "route", "add", f"{net}.2.0/24", "via", f"{net}.1.2"],
        ["ip", "-n", link, "route", "add", f"{net}.2.0/24", "via", f"{net}.4.2"],
        ["ip", "-n", s, "route", "add", f"{net}.1.0/24", "via", f"{net}.3.1"],
        ["ip", "netns", "exec", v, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
        ["ip", "netns", "exec", link, "sysctl", "-qw", f"net.ipv4.ip_forward={int(not relay)}"],
    ]
    if relay:  # the relay re-sends the client's frames: their checksums must be complete
        steps.append(["ip", "netns", "exec", c, sys.executable, "-m", "tacit.experiment.impair",
                      "no-tx-checksum", "cv"])  # fmt: skip
    # Replies arrive on cs while the route back to the server goes out through cv.
    sysctl = ["ip", "netns", "exec", c, "sysctl", "-qw"]
    for key in ("all", "default", "cv", "cs"):
        steps.append([*sysctl, f"net.ipv4.conf.{key}.rp_filter=0"])
    for step in steps:
        _run(*step)


def _start_relay(ns: dict[str, str], net: str, params: AsymmetricParams, stats: Path):
    """The relay in L, from ``lc`` (the client's side, impaired) to ``lv``."""
    peers = {}
    for side, dev in (("c", "cv"), ("v", "vl")):
        done = subprocess.run(
            ["ip", "netns", "exec", ns[side], "cat", f"/sys/class/net/{dev}/address"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        peers[side] = done.stdout.strip()
    p = params.impairment()
    cmd = [
        sys.executable, "-m", "tacit.experiment.impair", "relay",
        "--a", "lc", "--a-peer", peers["c"], "--b", "lv", "--b-peer", peers["v"],
        "--own", f"{net}.1.2", f"{net}.4.1", "--loss", str(p.loss), "--reorder", str(p.reorder),
        "--delay-ns", str(p.delay_ns), "--seed", str(p.seed), "--stats", str(stats),
    ]  # fmt: skip
    relay = ManagedProcess(["ip", "netns", "exec", ns["l"], *cmd])
    relay.wait_for("relaying", 30)
    return relay


def _start_server(
    ns: dict[str, str], net: str, params: AsymmetricParams, cgroup: Path
) -> subprocess.Popen:
    """The server in S, moved into the cgroup at once; the HTTP and HTTP/3 servers report
    their port when they listen (memcached's readiness is the keyspace's population, which
    retries)."""
    if params.server == "http":
        cmd = [sys.executable, "-m", "tacit.experiment.cpu_server", "--host", f"{net}.2.2",
               "--port", str(PORTS["http"]), "--seed", str(params.seed),
               "--cpu-us", str(params.cpu_us)]  # fmt: skip
    elif params.server == "quic":
        reason = quic_unavailable()
        if reason:
            raise ConfigError(reason)
        cmd = [sys.executable, "-m", "tacit.experiment.quic", "serve", "--host", f"{net}.2.2",
               "--port", str(PORTS["quic"]), "--cpu-us", str(params.cpu_us)]  # fmt: skip
    else:
        reason = memcached_unavailable()
        if reason:
            raise ConfigError(reason)
        cmd = memcached_command(f"{net}.2.2", PORTS["memcached"], 256)
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns["s"], *cmd],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        (cgroup / "cgroup.procs").write_text(str(server.pid))
        if params.server != "memcached" and not (
            server.stdout and server.stdout.readline().strip().isdigit()
        ):
            raise ConfigError(f"the server did not start (exit code {server.poll()})")
    except BaseException:
        stop_process(server)
        raise
    return server


class _Allocator(threading.Thread):
    """Sets the cgroup's CPU quota every second from the series until stopped."""

    def __init__(self, cgroup: Path, allocation: np.ndarray, period_us: int) -> None:
        super().__init__(daemon=True)
        self.cgroup, self.allocation, self.period_us = cgroup, allocation, period_us
        self.stop = threading.Event()

    def set(self, share: float) -> None:
        quota = max(1_000, round(share * self.period_us))
        (self.cgroup / "cpu.cfs_quota_us").write_text(str(quota))

    def run(self) -> None:
        start = time.monotonic()
        k = 0
        while not self.stop.is_set():
            self.set(float(self.allocation[min(k, len(self.allocation) - 1)]))
            k += 1
            self.stop.wait(max(0.0, start + k - time.monotonic()))


def default_estimators() -> dict[str, tuple[PirateParams, str]]:
    """What a run scores: Algorithm 2 exactly as published (``paper``: fixed ε, the largest
    mode is the IBG), with tacit's two settings (``modes``, the default) and tacit's
    centre-tracking histogram (``centres``)."""
    paper = PirateParams.published()
    return {
        "paper": (paper, "modes"),
        "modes": (PirateParams(), "modes"),
        "centres": (PirateParams(), "centres"),
    }


QUIC_ACK_BYTES = 1 + 8 + 4 + 14 + 16
"""The largest UDP payload of a QUIC 1-RTT packet carrying one ACK frame of one range between
aioquic's endpoints (RFC 9000 §17.3.1, §19.3; RFC 9001 §5.3): the first byte, aioquic's
8-byte connection ID, a packet number of at most 4 bytes, the ACK frame (type, largest
acknowledged and ACK delay of at most 4 bytes each, a 1-byte range count, a first range of at
most 4 bytes) and the 16-byte AEAD tag. :attr:`PirateParams.udp_ack_max_payload`'s default
(64) allows for 20-byte connection IDs and a few ranges, and so also takes in HTTP/3 requests
of up to 64 bytes (aioquic's are 46–78 with QPACK)."""


def quic_estimators() -> dict[str, tuple[PirateParams, str]]:
    """What a ``quic`` run scores, with §5.7's labels: Pirate's default without the
    ACK-coalescing heuristic (``-noack``: every datagram is a packet of the gaps, as the paper's
    exact scenario-1 measurement) and with it (``-ack``). The paper *simulated* the correct
    identification of pure ACKs; tacit identifies them for real, by size: a datagram of at most
    :attr:`PirateParams.udp_ack_max_payload` bytes is taken for a pure ACK (§3.4), the default
    of 64 bytes, and (``-ack, CID 8``) :data:`QUIC_ACK_BYTES`, the bound for the connection-ID
    length these endpoints use."""
    return {
        "modes-noack": (PirateParams(coalesce_acks=False), "modes"),
        "modes-ack": (PirateParams(), "modes"),
        "modes-ack, CID 8": (PirateParams(udp_ack_max_payload=QUIC_ACK_BYTES), "modes"),
    }


def _client_command(params: AsymmetricParams, address: str, log_path: Path) -> list[str]:
    """The clients' command line: :mod:`.quic`'s for HTTP/3, :mod:`.web_clients`' else."""
    run = ["--address", address, "--seconds", str(params.seconds), "--out", str(log_path),
           "--connections", str(params.connections), "--seed", str(params.seed)]  # fmt: skip
    if params.server == "quic":
        quic = params.quic()
        lo, hi = quic.response_bytes
        return [sys.executable, "-m", "tacit.experiment.quic", "clients", *run,
                "--streams", str(quic.streams), "--response-bytes", str(lo), str(hi)]  # fmt: skip
    return [sys.executable, "-m", "tacit.experiment.web_clients", *run,
            "--protocol", "http" if params.server == "http" else "memtier",
            "--outstanding", str(params.max_outstanding),
            *(["--browser"] if params.browser else [])]  # fmt: skip


def run_asymmetric_experiment(  # noqa: C901, PLR0912, PLR0915
    params: AsymmetricParams,
    workdir: str | Path,
    estimators: dict[str, tuple[PirateParams, str]] | None = None,
) -> AsymmetricResult:
    """Build the namespaces and the cgroup, run server, capture and clients, and score every
    estimator (name → (params, algorithm); :func:`default_estimators` when None) per response.
    Raises :class:`ConfigError` when the machine cannot run it (:func:`experiment_unavailable`).
    Namespaces, cgroup and processes are always removed."""
    reason = experiment_unavailable()
    if reason:
        raise ConfigError(f"the asymmetric-routing experiment cannot run here: {reason}")
    estimators = estimators or default_estimators()
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid() % 10000:04d}{secrets.token_hex(2)}"
    ns = {side: f"tacit-{tag}-{side}" for side in ("c", "l", "v", "s")}
    net = f"10.{params.subnet}"
    cgroup = CGROUP_CPU / f"tacit-{tag}"
    allocation = cpu_allocation_series(int(np.ceil(params.seconds)) + 5, params.cpu, params.seed)
    pcap, log_path = work / "vantage.pcap", work / "clients.npz"
    client_pcap = work / "client.pcap"
    server: subprocess.Popen | None = None
    capture: Capture | None = None
    at_client: Capture | None = None
    allocator: _Allocator | None = None
    relay: ManagedProcess | None = None
    relay_stats = work / "relay.json"
    try:
        _build(ns, tag, net, params.impaired)
        if params.impaired:
            relay = _start_relay(ns, net, params, relay_stats)
        cgroup.mkdir()
        (cgroup / "cpu.cfs_period_us").write_text(str(params.cfs_period_us))
        allocator = _Allocator(cgroup, allocation, params.cfs_period_us)
        allocator.set(float(allocation[0]))
        port = PORTS[params.server]
        address = f"{net}.2.2:{port}"
        server = _start_server(ns, net, params, cgroup)
        if params.server == "memcached":  # the keyspace, before the capture starts
            _run("ip", "netns", "exec", ns["c"], sys.executable, "-m",
                 "tacit.experiment.memcached", "populate", "--address", address,
                 "--seed", str(params.seed))  # fmt: skip
        bpf = f"{'udp' if params.server == 'quic' else 'tcp'} port {port}"
        capture = Capture(pcap, bpf, interface="vl", namespace=ns["v"]).start()
        if params.client_capture:
            at_client = Capture(client_pcap, bpf, "any", namespace=ns["c"])
            at_client.start()
        allocator.start()
        start = time.monotonic()
        clients = subprocess.run(
            ["ip", "netns", "exec", ns["c"], *_client_command(params, address, log_path)],
            capture_output=True, text=True, timeout=params.seconds + 120,
        )  # fmt: skip
        duration = time.monotonic() - start
        if clients.returncode:
            raise ConfigError(f"the clients failed: {clients.stderr.strip()[-300:]}")
        time.sleep(0.2)
        stats = capture.stop()
    finally:
        if allocator is not None:
            allocator.stop.set()
        for running in (capture, at_client):
            if running is not None:
                running.stop()
        if relay is not None:
            relay.end()  # the relay writes its counts and exits
        if server is not None:
            stop_process(server)
        if cgroup.exists():
            cgroup.rmdir()
        for name in ns.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    log = ResponseLog.load(str(log_path))
    packets = read_packets(pcap).packets
    from_server = int((packets.sport == port).sum())
    endpoints = [f"{net}.1.1:{p}" for p in log.port.tolist()]

    def scores(seen: PacketTable) -> dict[str, ErrorSummary]:
        out = {}
        for name, (pp, algorithm) in estimators.items():
            est = estimate_response_latency(seen, pp, server=address, algorithm=algorithm)
            out[name] = score_responses(est, endpoints, log.sent, log.latency)
        return out

    def buckets(seen: PacketTable) -> dict[str, int]:
        est = estimate_response_latency(seen, PirateParams(), server=address)
        return {k: v for k, v in est.accounting.as_dict().items() if v}

    pirate = scores(packets)
    at_client_packets = read_packets(client_pcap).packets if params.client_capture else None
    seen = {"vantage": packets}
    if at_client_packets is not None:
        seen["client"] = at_client_packets
    return AsymmetricResult(
        params=params,
        pirate=pirate,
        pirate_at_client=None if at_client_packets is None else scores(at_client_packets),
        packets={where: buckets(p) for where, p in seen.items()},
        req_to_req=req_to_req_errors(log),
        oracle={
            k: epoch_oracle_errors(log, PirateParams().epoch_ns, k) for k in ("mean", "median")
        },
        requests=len(log),
        duration_seconds=duration,
        server_packets_at_vantage=from_server,
        client_packets_at_vantage=len(packets) - from_server,
        capture=stats,
        rtt=None
        if at_client_packets is None
        else rtt_baselines(at_client_packets, address, log, pirate),
        relay=json.loads(relay_stats.read_text()) if params.impaired else None,
        allocation=allocation[: int(np.ceil(duration))],
        log=log,
    )
