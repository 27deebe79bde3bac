"""A small app of real services instrumented with the real OpenTelemetry SDK, its trace context
broken the ways deployments break it, and its own logs as the truth of its traces.

The services of :mod:`.otel_app_services` (frontend, search, geo, rate, profile: Flask, the SDK,
its Flask and requests instrumentations) each run as a process on 127.0.0.1 with an ephemeral
port, and export their spans over OTLP to ``otlp_endpoint``, as a deployment points its services
at a collector or at ``tacit serve``. Without an endpoint the run's own receiver
(:class:`.otlp_receiver.OtlpReceiver`) takes them and writes them as OTLP JSON Lines. A load
generator, a thread pool in this process that no instrumentation sees (an external client),
sends ``GET /hotels`` to the frontend at Poisson arrivals, ``concurrency`` requests at most at
once, each with its own ``x-request-id``.

A run writes into its output directory:

- ``spans.jsonl``: the exported spans, one OTLP export request a line (only without
  ``otlp_endpoint``: otherwise they are wherever the endpoint put them);
- ``truth.jsonl``: every span the services know, the schema of :mod:`.otel_app_services`,
  ordered by ``start_ns``;
- ``summary.json``: :meth:`OtelAppResult.as_dict`.

Every process started is ended by its id, on errors too: SIGTERM, which each service answers by
letting its requests end and shutting its tracer provider down, so that its batch span processor
exports its tail; the frontend first, so that nothing calls a service already stopped.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import queue
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.netns import ManagedProcess
from tacit.experiment.otel_app_services import (
    CALLS,
    HOST,
    MODES,
    PROTOCOLS,
    REQUEST_ID,
    ROLES,
    instrumented,
)
from tacit.experiment.otlp_receiver import OtlpReceiver
from tacit.experiment.truth_logs import merge_logs
from tacit.outputs import output_directory, write_bytes

SERVICES_MODULE = "tacit.experiment.otel_app_services"
START_TIMEOUT = 60.0
"""Seconds a service may take to report that it listens (Python, Flask and the SDK starting up,
five at once on a loaded machine)."""
CALL_TIMEOUT_S = 30.0
NEEDED = (
    "flask",
    "requests",
    "opentelemetry.sdk",
    "opentelemetry.instrumentation.flask",
    "opentelemetry.instrumentation.requests",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.exporter.otlp.proto.grpc",
)
"""The modules the services import: the ``otel-app`` extra."""


@dataclass(frozen=True)
class OtelAppParams:
    """The run: ``mode`` (:data:`.otel_app_services.MODES`), the load generator's ``rate``
    (Poisson arrivals per second) for ``duration_s`` with at most ``concurrency`` requests at
    once, ``seed`` of the arrivals and the services' pauses, and where the services export:
    ``otlp_endpoint`` (None: the run's own receiver) over ``otlp_protocol`` (``http``: protobuf
    over HTTP, or ``grpc``), every ``export_delay_s`` (the batch span processor's schedule delay,
    ``OTEL_BSP_SCHEDULE_DELAY``; the SDK's default is 5 s)."""

    mode: str = "full"
    duration_s: float = 5.0
    rate: float = 30.0
    concurrency: int = 4
    seed: int = 0
    otlp_endpoint: str | None = None
    otlp_protocol: str = "http"
    export_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"the mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.otlp_protocol not in PROTOCOLS:
            raise ConfigError(f"the OTLP protocol must be http or grpc, got {self.otlp_protocol!r}")
        if not self.duration_s > 0 or not self.rate > 0 or self.concurrency < 1:
            raise ConfigError("need duration_s > 0, rate > 0 and concurrency ≥ 1")
        if not 0 < self.export_delay_s <= 3600:
            raise ConfigError(f"the export delay must be in (0, 3600] s, got {self.export_delay_s}")
        if self.otlp_endpoint is not None and "://" not in self.otlp_endpoint:
            raise ConfigError(f"the OTLP endpoint must be a URL, got {self.otlp_endpoint!r}")


@dataclass
class OtelAppResult:
    """What a run wrote (paths; ``spans`` None when the spans went to ``otlp_endpoint``) and
    counted: each service's port and whether it ran instrumented, where the spans went; the
    load generator's requests (sent, answered 200, failed) and the seconds from its first
    arrival to its last answer; the truth's spans by kind and its unobserved hops; what the
    run's own receiver took (None: it ran none): the spans, those naming a parent, their
    traces, and the export requests."""

    params: OtelAppParams
    out_dir: Path
    truth: Path
    spans: Path | None
    summary: Path
    services: dict[str, dict[str, Any]]
    endpoint: str
    requests_sent: int
    requests_answered: int
    request_errors: int
    seconds: float
    truth_spans: int
    truth_kinds: dict[str, int]
    unobserved_hops: int
    received: dict[str, int] | None

    def as_dict(self) -> dict[str, Any]:
        files = {"truth": str(self.truth), "summary": str(self.summary)}
        if self.spans is not None:
            files["spans"] = str(self.spans)
        return {
            "mode": self.params.mode,
            "params": asdict(self.params),
            "files": files,
            "services": self.services,
            "otlp": {"endpoint": self.endpoint, "protocol": self.params.otlp_protocol},
            "requests": {
                "sent": self.requests_sent,
                "answered": self.requests_answered,
                "errors": self.request_errors,
                "seconds": self.seconds,
            },
            "truth": {
                "spans": self.truth_spans,
                "by_kind": self.truth_kinds,
                "unobserved_hops": self.unobserved_hops,
            },
            "received": self.received,
        }


def otel_app_unavailable() -> str | None:
    """Why the app cannot run here (None: it can): a module of the ``otel-app`` extra is not
    installed."""
    for name in NEEDED:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{name} is not installed (pip install 'tacit-traces[otel-app]')"
    return None


def run_otel_app(params: OtelAppParams, out_dir: str | Path) -> OtelAppResult:
    """Start the services, run the load for ``params.duration_s``, stop everything and write
    the files into ``out_dir``. Raises :class:`ConfigError` when the app cannot run here
    (:func:`otel_app_unavailable`) or a service fails; every process started is ended."""
    reason = otel_app_unavailable()
    if reason:
        raise ConfigError(f"the OpenTelemetry app cannot run here: {reason}")
    out = output_directory(out_dir)
    with tempfile.TemporaryDirectory(prefix="tacit-otel-app-") as tmp, ExitStack() as stack:
        receiver = None
        endpoint = params.otlp_endpoint
        if endpoint is None:
            receiver = OtlpReceiver(out / "spans.jsonl", params.otlp_protocol)
            endpoint = stack.enter_context(receiver).endpoint
        ports, counts = _run_app(params, endpoint, Path(tmp))
        stack.close()  # the receiver's file complete: every service has exported its tail
        return _write(params, out, ports, endpoint, counts, Path(tmp), receiver)


def _listener() -> socket.socket:
    """A listening socket on an ephemeral port of 127.0.0.1, for a service to inherit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _service_env() -> dict[str, str]:
    """The services' environment: this one without ``OTEL_*`` settings (the run sets what the
    SDK does), and loopback never through a proxy."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for key in ("NO_PROXY", "no_proxy"):
        env[key] = ",".join(filter(None, (env.get(key), HOST, "localhost")))
    return env


def _run_app(params: OtelAppParams, endpoint: str, logs: Path) -> tuple[dict[str, int], dict]:
    """Run the services, each logging into ``logs``, and the load; each service's port and the
    load generator's counts."""
    sockets = {role: _listener() for role in ROLES}
    ports = {role: s.getsockname()[1] for role, s in sockets.items()}
    procs: dict[str, ManagedProcess] = {}
    env = _service_env()
    try:
        for k, role in enumerate(ROLES):
            fd = sockets[role].fileno()
            cmd = [
                sys.executable, "-m", SERVICES_MODULE, role, "--fd", str(fd),
                "--mode", params.mode, "--truth", str(logs / f"{role}.jsonl"),
                "--otlp-endpoint", endpoint, "--otlp-protocol", params.otlp_protocol,
                "--seed", str(params.seed * len(ROLES) + k),
                "--export-delay-ms", str(round(params.export_delay_s * 1000)),
            ]  # fmt: skip
            for peer in CALLS.get(role, ()):
                cmd += ["--peer", f"{peer}=http://{HOST}:{ports[peer]}"]
            procs[role] = ManagedProcess(cmd, name=f"{role} service", env=env, pass_fds=(fd,))
        for sock in sockets.values():
            sock.close()  # the services hold them now
        for proc in procs.values():
            proc.wait_for("listening on", START_TIMEOUT)
        counts = generate_load(f"{HOST}:{ports['frontend']}", params)
        for role in ROLES:  # the frontend first, its callees after it
            procs[role].end()
            if procs[role].proc.returncode != 0:
                raise ConfigError(
                    f"the {role} service ended with {procs[role].proc.returncode}: "
                    + " | ".join(procs[role].lines[-5:])
                )
        return ports, counts
    finally:
        for sock in sockets.values():
            sock.close()
        for proc in procs.values():
            proc.end()


def generate_load(frontend: str, params: OtelAppParams) -> dict[str, Any]:
    """Send ``GET /hotels`` to ``frontend`` (HOST:PORT) at Poisson arrivals of ``params.rate``
    for ``params.duration_s``, from ``params.concurrency`` threads with a persistent connection
    each (an arrival waits for a free one), each request with a fresh ``x-request-id``; the
    counts: requests sent, answered 200, failed, and the seconds from the first arrival to the
    last answer. Plain ``http.client``, which no instrumentation patches: an outside client."""
    rng = np.random.default_rng(params.seed)
    n = int(params.duration_s * params.rate * 1.5) + 16
    arrivals = np.cumsum(rng.exponential(1 / params.rate, n))
    arrivals = arrivals[arrivals < params.duration_s]
    coords = rng.uniform((37.7, -122.5), (37.8, -122.4), (len(arrivals), 2))
    jobs: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    host, port = frontend.rsplit(":", 1)
    tally: Counter[str] = Counter()
    lock = threading.Lock()

    def work() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=CALL_TIMEOUT_S)
        while (target := jobs.get()) is not None:
            outcome = "answered"
            try:
                conn.request("GET", target, headers={REQUEST_ID: uuid.uuid4().hex})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    outcome = "errors"
            except (OSError, http.client.HTTPException):
                outcome = "errors"
                conn.close()  # reconnects on the next request
            with lock:
                tally["sent"] += 1
                tally[outcome] += 1
        conn.close()

    workers = [threading.Thread(target=work) for _ in range(params.concurrency)]
    for w in workers:
        w.start()
    t0 = time.monotonic()
    try:
        for at, (lat, lon) in zip(arrivals.tolist(), coords.tolist(), strict=True):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            jobs.put(f"/hotels?lat={lat:.4f}&lon={lon:.4f}")
    finally:
        for _ in workers:
            jobs.put(None)
        for w in workers:
            w.join()
    return {
        "sent": tally["sent"],
        "answered": tally["answered"],
        "errors": tally["errors"],
        "seconds": round(time.monotonic() - t0, 3),
    }


def _write(
    params: OtelAppParams,
    out: Path,
    ports: dict[str, int],
    endpoint: str,
    counts: dict[str, Any],
    logs: Path,
    receiver: OtlpReceiver | None,
) -> OtelAppResult:
    """Merge the services' logs into ``truth.jsonl`` and write ``summary.json``."""
    truth = out / "truth.jsonl"
    rows = merge_logs(logs, truth)
    kinds = Counter(r["kind"] for r in rows)
    hops = kinds.pop("unobserved", 0)
    result = OtelAppResult(
        params=params,
        out_dir=out,
        truth=truth,
        spans=None if receiver is None else receiver.path,
        summary=out / "summary.json",
        services={
            role: {"port": ports[role], "instrumented": instrumented(role, params.mode)}
            for role in ROLES
        },
        endpoint=endpoint,
        requests_sent=counts["sent"],
        requests_answered=counts["answered"],
        request_errors=counts["errors"],
        seconds=counts["seconds"],
        truth_spans=sum(kinds.values()),
        truth_kinds=dict(sorted(kinds.items())),
        unobserved_hops=hops,
        received=None if receiver is None else receiver.counts(),
    )
    write_bytes(result.summary, json.dumps(result.as_dict(), indent=2).encode())
    return result
