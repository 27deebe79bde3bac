"""``tacit serve``: OTLP in, traces reconstructed online, stored, served to Jaeger UI, Grafana,
Prometheus and tacit's own web page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
    ) -> None:
        """Receive spans over OTLP, reconstruct their traces online (TraceWeaver §5.3), store
        them, and serve them: the Jaeger query API and a web page on the HTTP address,
        Prometheus metrics at /metrics. Runs until SIGTERM or Ctrl-C, then stops gracefully."""
        from tacit.reconstruct.callgraph import CallGraph
        from tacit.serve import ServeConfig, Service, load_config
        from tacit.serve.logs import configure_logging

        cfg = load_config(config) if config is not None else ServeConfig()
        cfg = cfg.updated(
            callgraph=callgraph, http=http, grpc=grpc, database=database, forward=forward
        )
        if cfg.callgraph is None:
            raise ConfigError(
                "a call graph is required: give --callgraph FILE (from `tacit callgraph`) or "
                "'callgraph:' in the configuration"
            )
        if not cfg.callgraph.exists():
            raise ConfigError(f"{cfg.callgraph}: no such call graph file")
        configure_logging(cfg.json_logs)
        Service(cfg, CallGraph.load(cfg.callgraph)).run()
