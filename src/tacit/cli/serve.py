"""``tacit serve``: OTLP in, traces reconstructed online, stored, served to Jaeger UI, Grafana,
Prometheus and tacit's own web page."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from tacit.cli.common import parse_duration
from tacit.errors import ConfigError


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        config: Annotated[
            Path | None, typer.Option(help="A YAML configuration (see docs/serve.md).")
        ] = None,
        callgraph: Annotated[
            Path | None,
            typer.Option(
                help="The call graph (what `tacit callgraph` writes); overrides the file's."
            ),
        ] = None,
        http: Annotated[
            str | None, typer.Option(help="HOST:PORT of OTLP/HTTP, the query API and the page.")
        ] = None,
        grpc: Annotated[
            str | None, typer.Option(help='HOST:PORT of OTLP/gRPC ("" for none).')
        ] = None,
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
    ) -> None:
        """Receive spans over OTLP, reconstruct their traces online (TraceWeaver §5.3), store
        them, and serve them: the Jaeger query API and a web page on the HTTP address,
        Prometheus metrics at /metrics. With --pirate-* it also estimates response latency from
        captured client-to-server packets (Pirate), with --rda-results it takes the one-way
        latency of RDA agents, with --capture-* it makes spans of the request/response
        exchanges in captured packets and reconstructs them with the spans received. Runs
        until SIGTERM or Ctrl-C, then stops gracefully."""
        from tacit.reconstruct.callgraph import CallGraph
        from tacit.serve import ServeConfig, Service, load_config
        from tacit.serve.logs import configure_logging

        epoch_ns = None if pirate_epoch is None else parse_duration(pirate_epoch)
        retention_s = None if retention is None else parse_duration(retention) / 1e9
        cfg = load_config(config) if config is not None else ServeConfig()
        cfg = cfg.updated(
            callgraph=callgraph,
            http=http,
            grpc=grpc,
            database=database,
            forward=forward,
            pirate_interface=pirate_interface,
            pirate_pcap=pirate_pcap,
            pirate_server=pirate_server,
            pirate_filter=pirate_filter,
            pirate=None if epoch_ns is None else replace(cfg.pirate, epoch_ns=epoch_ns),
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
        )
        for pcap in (cfg.pirate_pcap, cfg.capture_pcap):
            if pcap is not None and not pcap.is_file():
                raise ConfigError(f"{pcap}: no such capture file")
        for logs in cfg.envoy_logs:
            if not logs.exists():
                raise ConfigError(f"{logs}: no such sidecar log file or directory")
        for followed in cfg.rda_results:
            if followed.is_dir():
                raise ConfigError(f"{followed}: a directory, not an RDA agent's results file")
        if cfg.callgraph is not None and not cfg.callgraph.exists():
            raise ConfigError(f"{cfg.callgraph}: no such call graph file")
        configure_logging(cfg.json_logs)
        Service(cfg, CallGraph.load(cfg.callgraph) if cfg.callgraph else None).run()
