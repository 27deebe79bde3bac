"""``tacit serve``: OTLP in, traces reconstructed online, stored, served to Jaeger UI, Grafana,
Prometheus and tacit's own web page."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from tacit.cli.common import out, parse_duration, print_json
from tacit.errors import ConfigError
from tacit.extras import require_extra


def register(app: typer.Typer) -> None:
    app.command()(serve)


def serve(
    config: Annotated[
        Path | None, typer.Option(help="A YAML configuration (see docs/serve.md).")
    ] = None,
    callgraph: Annotated[
        Path | None,
        typer.Option(help="The call graph (what `tacit callgraph` writes); overrides the file's."),
    ] = None,
    http: Annotated[
        str | None, typer.Option(help="HOST:PORT of OTLP/HTTP, the query API and the page.")
    ] = None,
    grpc: Annotated[str | None, typer.Option(help='HOST:PORT of OTLP/gRPC ("" for none).')] = None,
    database: Annotated[Path | None, typer.Option(help="The DuckDB store file.")] = None,
    forward: Annotated[
        str | None, typer.Option(help="Send finished traces to this OTLP/HTTP URL.")
    ] = None,
    pirate_interface: Annotated[
        str | None,
        typer.Option(help="Pirate: response latency from a live capture on this interface."),
    ] = None,
    pirate_pcap: Annotated[
        Path | None,
        typer.Option(help="Pirate: response latency from this capture file, read once."),
    ] = None,
    pirate_server: Annotated[
        str | None,
        typer.Option(help="Pirate: the server, ADDR:PORT, ADDR or PORT (default: all)."),
    ] = None,
    pirate_filter: Annotated[
        str | None, typer.Option(help="Pirate: a BPF filter of the captured packets.")
    ] = None,
    pirate_epoch: Annotated[
        str | None,
        typer.Option(help="Pirate: one estimate per connection per epoch, e.g. 1s."),
    ] = None,
    rda_results: Annotated[
        list[Path] | None,
        typer.Option(help="RDA: an agent's --output file, followed as it grows (may repeat)."),
    ] = None,
    envoy_logs: Annotated[
        list[Path] | None,
        typer.Option(
            help="Envoy/Istio sidecar access logs: a file per sidecar, or a directory of "
            "them, followed as they grow (may repeat); --capture-services names the pods."
        ),
    ] = None,
    capture_interface: Annotated[
        str | None,
        typer.Option(help="Spans from every exchange captured live on this interface."),
    ] = None,
    capture_pcap: Annotated[
        Path | None,
        typer.Option(help="Spans from every exchange in this capture file, read once."),
    ] = None,
    capture_filter: Annotated[
        str | None, typer.Option(help="With --capture-*: a BPF filter of the packets.")
    ] = None,
    capture_services: Annotated[
        Path | None,
        typer.Option(
            help="Service names of addresses (as `tacit capture --services`): of the spans "
            "made from packets, of the server ends OTLP spans name, to pair them, and of "
            "the pods of --envoy-logs."
        ),
    ] = None,
    capture_protocol: Annotated[
        str | None,
        typer.Option(help="With --capture-*: auto, http, http2, redis or memcached."),
    ] = None,
    ingest_token_file: Annotated[
        Path | None,
        typer.Option(
            help="Require senders to give 'Authorization: Bearer TOKEN', the file's first "
            "line (OTLP exports and RDA records; the query side stays open)."
        ),
    ] = None,
    retention: Annotated[
        str | None,
        typer.Option(help="Delete what was taken in longer ago than this, e.g. 72h."),
    ] = None,
    query_token_file: Annotated[
        Path | None,
        typer.Option(
            help="Require readers (query API, page, /metrics) to give the file's first line "
            "as a bearer token or a Basic password."
        ),
    ] = None,
    tls_cert_file: Annotated[
        Path | None,
        typer.Option(help="Serve HTTPS and gRPC over TLS with this PEM certificate (chain)."),
    ] = None,
    tls_key_file: Annotated[
        Path | None, typer.Option(help="With --tls-cert-file: its PEM private key.")
    ] = None,
    role: Annotated[
        str | None,
        typer.Option(
            help="all (one process), ingest (a replica taking spans into --nats), "
            "reconstruct (the process reading --nats) or query (a replica reading --blocks); "
            "see docs/scale-out.md."
        ),
    ] = None,
    nats: Annotated[
        str | None,
        typer.Option(
            help="The NATS server (nats://HOST:PORT) whose JetStream holds the shared log."
        ),
    ] = None,
    blocks: Annotated[
        Path | None,
        typer.Option(
            help="A shared directory of finished traces as Parquet blocks: written "
            "where traces are stored, read by --role query (with those of every role "
            "writing in a directory of its own under it)."
        ),
    ] = None,
    dask: Annotated[
        str | None,
        typer.Option(
            help="Reconstruct each round's instances on the Dask cluster of this "
            "scheduler address (tcp://HOST:PORT)."
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="debug, info (the default), warning or error.")
    ] = None,
    check_config: Annotated[
        bool,
        typer.Option(
            "--check-config",
            help="Read and check the configuration and the files it names, print what "
            "would start, and exit (0, or 2 with the problem) without starting.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --check-config: as a JSON object.")
    ] = False,
) -> None:
    """Receive spans over OTLP, reconstruct their traces online (TraceWeaver §5.3), store
    them, and serve them: the Jaeger query API and a web page on the HTTP address,
    Prometheus metrics at /metrics. With --pirate-* it also estimates response latency from
    captured client-to-server packets (Pirate), with --rda-results it takes the one-way
    latency of RDA agents, with --capture-* it makes spans of the request/response
    exchanges in captured packets and reconstructs them with the spans received. Runs
    until SIGTERM or Ctrl-C, then stops gracefully. Every setting of the configuration
    file can also be given as an environment variable, TACIT_ and its name in capitals
    (TACIT_HTTP, TACIT_ONLINE_WINDOW_S); options override variables, which override the
    file."""
    require_extra("serve", "tacit serve")
    from tacit.serve import Service, load_config
    from tacit.serve.logs import configure_logging
    from tacit.serve.preflight import preflight

    epoch_ns = None if pirate_epoch is None else parse_duration(pirate_epoch)
    retention_s = None if retention is None else parse_duration(retention) / 1e9
    given = dict(
        callgraph=callgraph,
        http=http,
        grpc=grpc,
        database=database,
        forward=forward,
        pirate_interface=pirate_interface,
        pirate_pcap=pirate_pcap,
        pirate_server=pirate_server,
        pirate_filter=pirate_filter,
        pirate_epoch_ns=epoch_ns,
        rda_results=tuple(rda_results) if rda_results else None,
        envoy_logs=tuple(envoy_logs) if envoy_logs else None,
        retention_s=retention_s,
        capture_interface=capture_interface,
        capture_pcap=capture_pcap,
        capture_filter=capture_filter,
        capture_services=capture_services,
        capture_protocol=capture_protocol,
        ingest_token_file=ingest_token_file,
        query_token_file=query_token_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        dask=dask,
        blocks=blocks,
        role=role,
        nats=nats,
        log_level=log_level,
    )
    cfg = load_config(config, os.environ, given)
    checked = preflight(cfg)
    if check_config:
        if as_json:
            print_json(checked.summary())
        else:
            out.print("the configuration is valid; tacit serve would start with:")
            for key, value in checked.summary().items():
                out.print(f"  {key}: {value}")
        return
    if as_json:
        raise ConfigError("--json goes with --check-config")
    configure_logging(cfg.json_logs, cfg.log_level)
    if cfg.role in ("ingest", "query"):
        from tacit.serve.replicas import REPLICAS

        REPLICAS[cfg.role](cfg).run()
    else:
        Service(cfg, checked.callgraph).run()
