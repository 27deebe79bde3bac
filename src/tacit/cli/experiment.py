"""``tacit experiment web|asymmetric|loadbalancer|netns|traced-app|otel-app|scale-out``:
Pirate's live experiments on this machine (loopback, and §5.1's namespaces with asymmetric
routing), its load-balancer simulation, RDA's agents across namespaces, a small multi-service
app captured with its own call logs as the truth of its traces, one instrumented with the
OpenTelemetry SDK, its trace context broken as deployments break it, and ``tacit serve`` run
as roles, with processes killed, against one process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tacit.cli.common import (
    FRACTION,
    PERCENT,
    POSITIVE,
    SEED,
    JsonOpt,
    bounded,
    finite,
    flag,
    out,
    parse_duration,
    print_json,
)
from tacit.errors import ConfigError
from tacit.extras import require_extra

RUN_SECONDS = bounded(0, 3600, lo_open=True)
"""How long an experiment runs: up to an hour."""
CONNECTIONS = bounded(1, 256)
"""Client or load-generator connections (each is a socket, a task and a log)."""
NETEM_MS = bounded(0, 60_000)
"""A delay or jitter netem adds, ms: up to a minute."""


def register(app: typer.Typer) -> None:
    """Add the ``experiment`` group and its commands."""
    group = typer.Typer(help="Experiments that measure tacit against ground truth.")
    group.command()(web)
    group.command()(asymmetric)
    group.command()(loadbalancer)
    group.command()(netns)
    group.command("traced-app")(traced_app)
    group.command("otel-app")(otel_app)
    group.command("scale-out")(scale_out)
    app.add_typer(group, name="experiment")


def _table(title: str, rows: dict) -> Table:
    t = Table(title=title)
    t.add_column("measure")
    t.add_column("value", justify="right")
    for k, v in rows.items():
        t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    return t


def web(
    seconds: Annotated[
        float, typer.Option(callback=RUN_SECONDS, help="How long the clients run (s).")
    ] = 10.0,
    server: Annotated[str, typer.Option(help="http (tacit's server) or memcached.")] = "http",
    clients: Annotated[int, typer.Option(callback=CONNECTIONS, help="Client connections.")] = 8,
    seed: Annotated[
        int, typer.Option(callback=SEED, help="Seed of the site, service times and clients.")
    ] = 0,
    keep: Annotated[
        Path | None, typer.Option(help="Directory to keep the capture and client log in.")
    ] = None,
    pipelining: Annotated[
        bool, flag("--pipelining", help="Estimate with PirateParams.pipelining().")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run a server and clients on loopback, capture the client-to-server packets, estimate the
    response latency with Pirate and score it against the latency every client logged."""
    from tacit.experiment.web import run_web_experiment
    from tacit.response_latency import PirateParams

    params = PirateParams.pipelining() if pipelining else PirateParams()
    result = run_web_experiment(
        seconds, clients=clients, seed=seed, workdir=keep, server=server, params=params
    )
    doc = result.as_dict()
    if json_out:
        print_json(doc)
        return
    flat = {k: v for k, v in doc.items() if not isinstance(v, dict | list)}
    out.print(_table(f"live {server} experiment, {seconds:g} s", flat))


def asymmetric(
    seconds: Annotated[
        float, typer.Option(callback=RUN_SECONDS, help="How long the clients run (s).")
    ] = 20.0,
    server: Annotated[
        str,
        typer.Option(
            help="http (the web workload), memcached (memtier-style clients) or quic "
            "(HTTP/3, aioquic)."
        ),
    ] = "http",
    connections: Annotated[int, typer.Option(callback=CONNECTIONS, help="Client connections.")] = 8,
    outstanding: Annotated[
        int,
        typer.Option(
            callback=CONNECTIONS, help="Requests in flight per connection (quic: streams)."
        ),
    ] = 4,
    response_bytes: Annotated[
        str | None,
        typer.Option(
            help="quic: response sizes, noack (30-130 B, the default) or ack (1600-15100 B)."
        ),
    ] = None,
    loss: Annotated[
        float, typer.Option(callback=FRACTION, help="§5.4: loss from client to vantage point.")
    ] = 0.0,
    reorder: Annotated[
        float,
        typer.Option(callback=FRACTION, help="§5.4: share reordered from client to vantage point."),
    ] = 0.0,
    cpu_period: Annotated[
        int, typer.Option(callback=POSITIVE, help="The cgroup's CFS period, µs.")
    ] = 100_000,
    seed: Annotated[
        int, typer.Option(callback=SEED, help="Seed of the site, CPU series and clients.")
    ] = 0,
    keep: Annotated[
        Path | None, typer.Option(help="Directory to keep the capture and client log in.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Pirate §5.1: client, vantage point and server in network namespaces (responses
    bypass the vantage point), the server's CPU following a per-second series through a
    cgroup; the error of every response's estimate against the client's log (§5.2). With
    --loss or --reorder, also on the client's own capture of the same traffic (§5.4: the
    change the impairment makes)."""
    import tempfile

    from tacit.experiment.asymmetric import (
        AsymmetricParams,
        quic_estimators,
        run_asymmetric_experiment,
    )
    from tacit.experiment.quic import SCENARIOS

    if response_bytes is not None and server != "quic":
        raise ConfigError("--response-bytes goes with --server quic")
    response_bytes = response_bytes or "noack"
    if response_bytes not in SCENARIOS:
        raise ConfigError(f"--response-bytes must be one of {sorted(SCENARIOS)}")
    params = AsymmetricParams(
        seconds=seconds,
        server=server,
        connections=connections,
        max_outstanding=outstanding,
        response_bytes=SCENARIOS[response_bytes],
        loss=loss,
        reorder=reorder,
        client_capture=loss > 0 or reorder > 0,
        cfs_period_us=cpu_period,
        seed=seed,
    )
    estimators = quic_estimators() if server == "quic" else None
    with tempfile.TemporaryDirectory() as tmp:
        doc = run_asymmetric_experiment(params, keep or tmp, estimators).as_dict()
    if json_out:
        print_json(doc)
        return
    t = Table(title=f"Pirate, {server}, {seconds:g} s, {doc['requests_per_second']} requests/s")
    for col in ("", "median error (paper's sign)", "median |error|", "p5", "p95", "responses"):
        t.add_column(col, justify="right" if col else "left")
    rows = {f"Pirate {k}": v for k, v in doc["pirate"].items()}
    at_client = doc["pirate_at_client"] or {}
    rows |= {f"Pirate {k}, client's capture": v for k, v in at_client.items()}
    rows["req-to-req"] = doc["req_to_req"]
    for name, s in rows.items():
        t.add_row(
            name,
            f"{s['median_error_paper_sign']:+.2%}",
            f"{s['median_relative_error']:.2%}",
            f"{-s['p95_signed_error']:+.1%}",
            f"{-s['p5_signed_error']:+.1%}",
            str(s["samples"]),
        )
    out.print(t)
    out.print(f"server packets seen at the vantage point: {doc['server_packets_at_vantage']}")


def loadbalancer(
    seed: Annotated[int, typer.Option(callback=SEED, help="Seed of the simulation.")] = 0,
    source: Annotated[
        str,
        typer.Option(help="What the controller is fed: pirate (estimates) or truth (oracle)."),
    ] = "pirate",
    json_out: JsonOpt = False,
) -> None:
    """Simulate 2 clients and 4 servers behind Maglev, one server losing CPU for a while, with
    and without Pirate's watermark controller; p50 and p99 latency of both."""
    from tacit.experiment.loadbalancer import LoadBalancerParams, run_loadbalancer_experiment

    params = replace(LoadBalancerParams(), seed=seed, latency_source=source)
    doc = run_loadbalancer_experiment(params).as_dict()
    if json_out:
        print_json(doc)
        return
    t = Table(title=f"load balancer simulation (seed {seed}, controller fed by {source})")
    for col in ("", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right" if col else "left")
    for name in ("unweighted", "controlled"):
        s = doc[name]
        t.add_row(name, f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}")
    out.print(t)
    out.print(f"p99 reduction: {doc['p99_reduction']:.1%}")


def netns(
    seconds: Annotated[
        float, typer.Option(callback=RUN_SECONDS, help="How long the generator sends (s).")
    ] = 2.0,
    delay: Annotated[float, typer.Option(callback=NETEM_MS, help="One-way delay added, ms.")] = 5.0,
    jitter: Annotated[float, typer.Option(callback=NETEM_MS, help="Jitter (normal), ms.")] = 1.0,
    loss: Annotated[float, typer.Option(callback=PERCENT, help="Loss, percent.")] = 1.0,
    reorder: Annotated[
        float, typer.Option(callback=PERCENT, help="Packets sent ahead, percent.")
    ] = 5.0,
    rate: Annotated[
        float, typer.Option(callback=bounded(0, 1e6, lo_open=True), help="Datagrams per second.")
    ] = 1000.0,
    impairment: Annotated[
        str, typer.Option(help="auto, netem, relay (userspace) or none (kernel forwarding).")
    ] = "auto",
    keep: Annotated[
        Path | None, typer.Option(help="Directory to keep the captures and agent output in.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Two RDA agents in network namespaces measure the one-way latency across an impaired
    path; their per-interval mean and standard deviation against per-packet truth."""
    import tempfile

    from tacit.experiment.netns import NetnsParams, run_netns_experiment

    params = NetnsParams(
        delay_ms=delay,
        jitter_ms=jitter,
        loss_percent=loss,
        reorder_percent=reorder,
        rate_pps=rate,
        duration_s=seconds,
        impairment=impairment,
    )
    with tempfile.TemporaryDirectory() as tmp:
        result = run_netns_experiment(params, keep or tmp)
    doc = result.as_dict()
    if json_out:
        print_json(doc)
        return
    rows = {
        k: v for k, v in finite(doc).items() if not isinstance(v, dict | list) and v is not None
    }
    out.print(_table(f"one-way latency across namespaces ({result.impairment})", rows))


def traced_app(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Directory for app.pcap, services.yaml, truth.jsonl.")
    ],
    seconds: Annotated[
        float, typer.Option(callback=RUN_SECONDS, help="How long the load runs (s).")
    ] = 10.0,
    rate: Annotated[
        float,
        typer.Option(callback=bounded(0, 10_000, lo_open=True), help="Requests per second."),
    ] = 100.0,
    concurrency: Annotated[
        int, typer.Option(callback=CONNECTIONS, help="Load-generator connections.")
    ] = 8,
    seed: Annotated[
        int, typer.Option(callback=SEED, help="Seed of the arrivals and service times.")
    ] = 0,
    test_seconds: Annotated[
        float,
        typer.Option(
            callback=bounded(0, 3600),
            help="First run a test environment this long (requests one at a time, into "
            "OUT/test/) to learn the call graph from; 0: none.",
        ),
    ] = 3.0,
    json_out: JsonOpt = False,
) -> None:
    """Run a small hotel-search app (HTTP/1.1 front, gRPC geo and rate, a load generator) in
    network namespaces, capture every packet between them with tcpdump, and write the capture,
    the address-to-service map and the calls every service logged (the truth of its traces)."""
    from tacit.experiment.traced_app import TracedAppParams, run_traced_app

    params = TracedAppParams(duration_s=seconds, rate=rate, concurrency=concurrency, seed=seed)
    test = None
    if test_seconds > 0:
        test = run_traced_app(params.test_environment(test_seconds), out_dir / "test").as_dict()
    doc = run_traced_app(params, out_dir).as_dict() | {"test_environment": test}
    if json_out:
        print_json(doc)
        return
    req, rpcs, cap = doc["requests"], doc["rpcs"], doc["capture"]
    rows = {
        "requests sent": req["sent"],
        "request errors": req["errors"],
        "offered requests/s": req["offered_per_second"],
        "achieved requests/s": req["achieved_per_second"],
        "start lag p99, ms": req["start_lag_p99_ms"],
        **{f"calls {e}": n for e, n in rpcs["by_endpoint"].items()},
        "call errors": rpcs["errors"],
        "packets captured": cap.get("captured"),
        "packets dropped by kernel": cap.get("dropped"),
        "packets captured twice": cap["duplicate_packets"],
    }
    out.print(_table(f"traced app, {seconds:g} s at {rate:g} requests/s", rows))
    out.print(f"written to {out_dir}: " + ", ".join(Path(f).name for f in doc["files"].values()))
    if test is not None:
        out.print(
            f"test environment: {test['requests']['completed']} requests one at a time, "
            f"captured in {test['files']['pcap']}"
        )


def otel_app(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Directory for spans.jsonl, truth.jsonl, summary.json.")
    ],
    mode: Annotated[
        str,
        typer.Option(
            help="How the trace context breaks: full (it does not), threadpool, detached, "
            "uninstrumented, nopropagation or queue."
        ),
    ] = "full",
    seconds: Annotated[
        float, typer.Option(callback=RUN_SECONDS, help="How long the load runs (s).")
    ] = 5.0,
    rate: Annotated[
        float,
        typer.Option(callback=bounded(0, 10_000, lo_open=True), help="Requests per second."),
    ] = 30.0,
    concurrency: Annotated[
        int, typer.Option(callback=CONNECTIONS, help="Requests in flight at most.")
    ] = 4,
    seed: Annotated[
        int, typer.Option(callback=SEED, help="Seed of the arrivals and the services' pauses.")
    ] = 0,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            help="Where the services export (a collector, tacit serve), e.g. "
            "http://127.0.0.1:4318 (http) or http://127.0.0.1:4317 (grpc); default: the run's "
            "own receiver, into OUT/spans.jsonl."
        ),
    ] = None,
    otlp_protocol: Annotated[str, typer.Option(help="http (protobuf over HTTP) or grpc.")] = "http",
    export_delay: Annotated[
        str,
        typer.Option(
            help="How often each service exports (the batch span processor's schedule delay): "
            "5s, 500ms.",
        ),
    ] = "5s",
    json_out: JsonOpt = False,
) -> None:
    """Run five Flask services (frontend, search, geo, rate, profile), each a process
    instrumented with the OpenTelemetry SDK and exporting over OTLP, under a load generator;
    write the spans they exported (without --otlp-endpoint) and the truth of every span's parent
    that the services logged themselves."""
    from tacit.experiment.otel_app import OtelAppParams, run_otel_app

    params = OtelAppParams(
        mode=mode,
        duration_s=seconds,
        rate=rate,
        concurrency=concurrency,
        seed=seed,
        otlp_endpoint=otlp_endpoint,
        otlp_protocol=otlp_protocol,
        export_delay_s=parse_duration(export_delay) / 1e9,
    )
    doc = run_otel_app(params, out_dir).as_dict()
    if json_out:
        print_json(doc)
        return
    req, truth, received = doc["requests"], doc["truth"], doc["received"]
    rows = {
        "requests sent": req["sent"],
        "requests answered": req["answered"],
        "request errors": req["errors"],
        "seconds": req["seconds"],
        **{f"truth {kind} spans": n for kind, n in truth["by_kind"].items()},
        "truth unobserved hops": truth["unobserved_hops"],
    }
    if received is not None:
        rows |= {
            "spans received": received["spans"],
            "spans naming a parent": received["with_parent"],
            "traces received": received["traces"],
            "export requests": received["export_requests"],
        }
    out.print(_table(f"otel app, {mode}, {seconds:g} s at {rate:g} requests/s", rows))
    ports = ", ".join(f"{r} :{s['port']}" for r, s in doc["services"].items())
    out.print(f"services: {ports}; spans exported to {doc['otlp']['endpoint']}")
    out.print(f"written to {out_dir}: " + ", ".join(Path(f).name for f in doc["files"].values()))


def scale_out(
    out_dir: Annotated[
        Path,
        typer.Option("--out", help="Directory for the stores, the log and each process's log."),
    ],
    seconds: Annotated[
        float, typer.Option(callback=RUN_SECONDS, help="Length of the simulated stream (s).")
    ] = 10.0,
    rate: Annotated[
        float,
        typer.Option(callback=bounded(0, 2000, lo_open=True), help="Requests per second."),
    ] = 100.0,
    kill: Annotated[
        str,
        typer.Option(
            help="What to kill -9 mid-stream, comma-separated: replica, worker, reconstruct "
            "(the last started again); empty for nothing."
        ),
    ] = "replica,worker",
    seed: Annotated[int, typer.Option(callback=SEED, help="Seed of the simulated stream.")] = 2,
    lost_context: Annotated[
        bool,
        typer.Option(
            "--lost-context",
            help="Every call's trace context lost, as from a thread pool that does not carry "
            "it: each round then has every call to infer, on the Dask workers.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run tacit serve as roles, each a process (NATS JetStream, a Dask scheduler and two
    workers, two ingest replicas, the reconstruct role), send a simulated stream over both
    replicas with processes killed mid-stream, and compare what is stored with what one
    process stores given the same requests."""
    require_extra("serve", "tacit experiment scale-out")
    require_extra("dask", "tacit experiment scale-out")
    require_extra("cluster", "tacit experiment scale-out")
    from tacit.experiment.scale_out import ScaleOutParams, run_scale_out

    params = ScaleOutParams(
        seconds=seconds,
        rate=rate,
        seed=seed,
        kill=tuple(k.strip() for k in kill.split(",") if k.strip()),
        lost=lost_context,
    )
    run = run_scale_out(out_dir, params, tell=lambda line: typer.echo(line, err=True))
    if json_out:
        print_json(run.summary())
        return
    out.print(_table("tacit serve as roles against one process", run.summary()))
