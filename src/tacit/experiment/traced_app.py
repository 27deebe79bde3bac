"""A small multi-service application run in network namespaces and captured with tcpdump, its
own call logs the ground truth of its request traces.

Capturing packets is the instrumentation-free way to observe calls between services
(TraceWeaver, Ashok et al., OSDI '24, §3: spans from a service mesh or from packets, without
trace ids). This experiment makes such a capture where the truth is known: the services of
:mod:`.traced_app_services` (front over HTTP/1.1, geo and rate over gRPC, a load generator as
the client), each in its own namespace with its own address, log every call they make with its
parent; one tcpdump sees every packet between them:

    ns client 10.x.0.2 ─┐
    ns front  10.x.0.3 ─┤  veth pairs into one bridge ``br0`` in ns hub, tcpdump on ``br0``
    ns geo    10.x.0.4 ─┤
    ns rate   10.x.0.5 ─┘

The bridge forwards frames between its ports and, as tcpdump puts it in promiscuous mode, also
passes a copy of each up its own device: every packet is captured once (the result counts
packets whose identifier another packet shares: 0). The namespaces' interfaces compute their
checksums and segment at the MSS themselves (transmit offload off), so the capture holds
packets as a wire would carry them, not partial checksums or 64 KB segments.

A run writes into its output directory:

- ``app.pcap``: the capture (whole packets, nanosecond timestamps, TCP only);
- ``services.yaml``: address → service name (``{"10.x.0.2": "client", ...}``);
- ``truth.jsonl``: every call made, the schema of :mod:`.traced_app_services`, ordered by
  ``start_ns``;
- ``summary.json``: :meth:`TracedAppResult.as_dict`.

The namespaces and veth pairs have unique names and are always deleted, and every process
started is ended by its id, on errors and interrupts too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tacit.errors import ConfigError
from tacit.experiment.capture import Capture, CaptureStats
from tacit.experiment.netns import ManagedProcess, namespaces_unavailable
from tacit.experiment.traced_app_services import PORTS, ROLES, SERVICES
from tacit.experiment.truth_logs import merge_logs
from tacit.formats.pcap import read_packets
from tacit.formats.textio import iter_json_lines
from tacit.model.packets import format_address
from tacit.outputs import output_directory, write_bytes

SERVICES_MODULE = "tacit.experiment.traced_app_services"
HOSTS = {role: 2 + k for k, role in enumerate(ROLES)}
"""The last byte of each role's address: client .2, front .3, geo .4, rate .5."""
TEST_RATE = 20.0
"""Requests per second of the test environment: at a few ms per request, rarely two at once."""
START_TIMEOUT = 30.0
"""Seconds a service may take to report that it listens (Python and grpc starting up)."""


@dataclass(frozen=True)
class TracedAppParams:
    """The run: the load generator's ``rate`` (Poisson arrivals per second, half to each of
    front's endpoints) for ``duration_s`` over ``concurrency`` persistent connections; ``seed``
    of the arrivals and service times; the namespaces use 10.<subnet>.0.0/24. 100 requests/s
    (300 calls/s) keeps the app within two shared cores."""

    duration_s: float = 10.0
    rate: float = 100.0
    concurrency: int = 8
    seed: int = 0
    subnet: int = 81

    def __post_init__(self) -> None:
        if not self.duration_s > 0 or not self.rate > 0 or self.concurrency < 1:
            raise ConfigError("need duration_s > 0, rate > 0 and concurrency ≥ 1")
        if not 0 < self.subnet < 255:
            raise ConfigError(f"subnet must be within 1..254, got {self.subnet}")

    def addresses(self) -> dict[str, str]:
        """Each role's IPv4 address."""
        return {role: f"10.{self.subnet}.0.{host}" for role, host in HOSTS.items()}

    def test_environment(self, duration_s: float) -> TracedAppParams:
        """The same app in a test environment (TraceWeaver §5.2.1): requests replayed one at a
        time (one connection, :data:`TEST_RATE` per second, each waiting for the one before),
        for ``duration_s``, to learn the call graph from."""
        return replace(self, duration_s=duration_s, rate=TEST_RATE, concurrency=1)


@dataclass
class TracedAppResult:
    """What a run wrote (paths) and counted: each role's address; the load generator's
    requests (scheduled, sent, answered 200, failed), the seconds from its first arrival to its
    last answer, and the 99th percentile of how late requests started after their arrival
    (above a few ms the app did not keep up with the load); the truth's calls (``rpcs``), per
    endpoint and failed (``rpc_errors``); the capture: tcpdump's counts, the IP packets in the
    file, per sending service, and how many share their identifier with another packet
    (``duplicate_packets``: a packet captured twice)."""

    params: TracedAppParams
    addresses: dict[str, str]
    out_dir: Path
    pcap: Path
    services: Path
    truth: Path
    summary: Path
    requests_scheduled: int
    requests_sent: int
    requests_completed: int
    request_errors: int
    elapsed_s: float
    lag_p99_ms: float
    rpcs: int
    rpc_errors: int
    endpoints: dict[str, int]
    capture: CaptureStats | None
    packets: int
    packets_by_service: dict[str, int]
    duplicate_packets: int

    def parent_of(self) -> dict[str, str | None]:
        """Per call id in the truth, the id of the request it was made for (None: a root)."""
        return {row["rpc"]: row["parent_rpc"] for _, row in iter_json_lines(self.truth)}

    @property
    def achieved_rate(self) -> float:
        """Requests answered per second of the run."""
        return self.requests_completed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "params": asdict(self.params),
            "files": {k: str(getattr(self, k)) for k in ("pcap", "services", "truth", "summary")},
            "addresses": self.addresses,
            "requests": {
                "scheduled": self.requests_scheduled,
                "sent": self.requests_sent,
                "completed": self.requests_completed,
                "errors": self.request_errors,
                "elapsed_s": self.elapsed_s,
                "offered_per_second": round(self.requests_scheduled / self.params.duration_s, 2),
                "achieved_per_second": round(self.achieved_rate, 2),
                "start_lag_p99_ms": self.lag_p99_ms,
            },
            "rpcs": {"total": self.rpcs, "errors": self.rpc_errors, "by_endpoint": self.endpoints},
            "capture": {
                **(self.capture.as_dict() if self.capture else {}),
                "ip_packets": self.packets,
                "by_service": self.packets_by_service,
                "duplicate_packets": self.duplicate_packets,
            },
        }


def traced_app_unavailable() -> str | None:
    """Why the experiment cannot run here (None: it can): namespaces or tcpdump missing or
    refused (:func:`.netns.namespaces_unavailable`), grpcio not installed, or no bridges."""
    reason = namespaces_unavailable("none")
    if reason:
        return reason
    if importlib.util.find_spec("grpc") is None:
        return "the traced app needs grpcio, which is not installed"
    ns = f"tacit-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
    except ConfigError as e:
        return f"cannot make a bridge: {e}"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    return None


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise ConfigError(f"{' '.join(cmd)}: {done.stderr.strip()}")


def _build(ns: dict[str, str], tag: str, addresses: dict[str, str]) -> None:
    """The hub's bridge, and per role a veth pair: ``eth0`` in the role's namespace (its
    address, transmit offload off), a port of the bridge named after the role in the hub."""
    hub = ns["hub"]
    steps: list[list[str]] = [["ip", "netns", "add", n] for n in ns.values()]
    steps += [
        ["ip", "-n", hub, "link", "add", "br0", "type", "bridge"],
        ["ip", "-n", hub, "link", "set", "br0", "up"],
    ]
    for k, role in enumerate(ROLES):
        inside, port = f"a{tag}{k}", f"b{tag}{k}"
        steps += [
            ["ip", "link", "add", inside, "netns", ns[role], "type", "veth", "peer", "name",
             port, "netns", hub],
            ["ip", "-n", ns[role], "link", "set", inside, "name", "eth0"],
            ["ip", "-n", hub, "link", "set", port, "name", role],
            ["ip", "-n", hub, "link", "set", role, "master", "br0"],
            ["ip", "-n", hub, "link", "set", role, "up"],
            ["ip", "-n", ns[role], "addr", "add", f"{addresses[role]}/24", "dev", "eth0"],
            ["ip", "-n", ns[role], "link", "set", "eth0", "up"],
            ["ip", "-n", ns[role], "link", "set", "lo", "up"],
            ["ip", "netns", "exec", ns[role], sys.executable, "-m", "tacit.experiment.impair",
             "no-tx-checksum", "eth0"],
        ]  # fmt: skip
    for step in steps:
        _run(*step)


def _service(ns: str, role: str, log: Path, args: list[str]) -> ManagedProcess:
    cmd = [sys.executable, "-m", SERVICES_MODULE, role, "--log", str(log), *args]
    return ManagedProcess(["ip", "netns", "exec", ns, *cmd])


def run_traced_app(params: TracedAppParams, out_dir: str | Path) -> TracedAppResult:
    """Build the namespaces, start the capture and the services, run the load generator for
    ``params.duration_s``, stop everything, and write the four files into ``out_dir``.
    Raises :class:`ConfigError` when the machine cannot run it (:func:`traced_app_unavailable`)
    or a service fails; namespaces and processes are always removed."""
    reason = traced_app_unavailable()
    if reason:
        raise ConfigError(f"the traced app cannot run here: {reason}")
    out = output_directory(out_dir)
    with tempfile.TemporaryDirectory(prefix="tacit-traced-app-") as tmp:
        counts, stats = _run_app(params, out / "app.pcap", Path(tmp))
        return _write(params, out, counts, stats, Path(tmp))


def _run_app(
    params: TracedAppParams, pcap: Path, logs: Path
) -> tuple[dict[str, Any], CaptureStats | None]:
    """Run the app in fresh namespaces, capturing into ``pcap`` and logging into ``logs``;
    the load generator's counts and tcpdump's."""
    tag = f"{os.getpid() % 10000:04d}{secrets.token_hex(2)}"
    ns = {role: f"tacit-{tag}-{role}" for role in ("hub", *ROLES)}
    addresses = params.addresses()
    at = {s: f"{addresses[s]}:{PORTS[s]}" for s in SERVICES}
    capture = Capture(pcap, "tcp", "br0", namespace=ns["hub"], nanoseconds=True)
    servers: list[ManagedProcess] = []
    seed = {role: params.seed * len(ROLES) + k for k, role in enumerate(ROLES)}
    try:
        _build(ns, tag, addresses)
        capture.start()
        for role in ("geo", "rate", "front"):
            args = ["--listen", at[role], "--seed", str(seed[role])]
            if role == "front":
                args += ["--peer", f"geo={at['geo']}", "--peer", f"rate={at['rate']}"]
            servers.append(_service(ns[role], role, logs / f"{role}.jsonl", args))
            servers[-1].wait_for("listening on", START_TIMEOUT)
        client = subprocess.run(
            ["ip", "netns", "exec", ns["client"], sys.executable, "-m", SERVICES_MODULE,
             "client", "--log", str(logs / "client.jsonl"), "--peer", f"front={at['front']}",
             "--seconds", str(params.duration_s), "--per-second", str(params.rate),
             "--concurrency", str(params.concurrency), "--seed", str(seed["client"])],
            capture_output=True, text=True, timeout=params.duration_s + 120,
        )  # fmt: skip
        if client.returncode:
            raise ConfigError(f"the load generator failed: {client.stderr.strip()[-300:]}")
        for proc in reversed(servers):  # front first: its channels close before the back ends
            proc.end()
        time.sleep(0.2)  # the last FINs reach the capture
        return json.loads(client.stdout), capture.stop()
    finally:
        capture.stop()
        for proc in servers:
            proc.end()
        for name in ns.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def _write(
    params: TracedAppParams,
    out: Path,
    counts: dict[str, Any],
    stats: CaptureStats | None,
    logs: Path,
) -> TracedAppResult:
    """Merge the call logs into ``truth.jsonl``, write ``services.yaml``, count the capture
    and write ``summary.json``."""
    truth = out / "truth.jsonl"
    calls = merge_logs(logs, truth)
    services = out / "services.yaml"
    addresses = params.addresses()
    names = {addresses[role]: role for role in ROLES}
    write_bytes(services, yaml.safe_dump(names, sort_keys=False).encode())
    packets = read_packets(out / "app.pcap").packets
    hosts, sent = np.unique(
        np.stack([packets.src_hi, packets.src_lo], 1), axis=0, return_counts=True
    )
    senders = {format_address(hi, lo): int(n) for (hi, lo), n in zip(hosts, sent, strict=True)}
    _, seen = np.unique(packets.ident, return_counts=True)
    result = TracedAppResult(
        params=params,
        addresses=addresses,
        out_dir=out,
        pcap=out / "app.pcap",
        services=services,
        truth=truth,
        summary=out / "summary.json",
        requests_scheduled=counts["scheduled"],
        requests_sent=counts["sent"],
        requests_completed=counts["completed"],
        request_errors=counts["errors"],
        elapsed_s=counts["elapsed_s"],
        lag_p99_ms=counts["lag_p99_ms"],
        rpcs=len(calls),
        rpc_errors=sum(c["error"] is not None for c in calls),
        endpoints=dict(sorted(Counter(c["endpoint"] for c in calls).items())),
        capture=stats,
        packets=len(packets),
        packets_by_service={names.get(a, a): n for a, n in sorted(senders.items())},
        duplicate_packets=int(seen[seen > 1].sum()),
    )
    write_bytes(result.summary, json.dumps(result.as_dict(), indent=2).encode())
    return result
