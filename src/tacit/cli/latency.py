"""The ``tacit latency`` command group: response latency from one direction of traffic
(``tacit latency response``, Pirate) and one-way latency between two capture points
(``tacit latency oneway ...``, RDA)."""

from __future__ import annotations

import typer

from tacit.cli import oneway, oneway_agent, response

latency_app = typer.Typer(help="Latencies measured passively from packets.")


def register(app: typer.Typer) -> None:
    response.register(latency_app)
    latency_app.add_typer(oneway.oneway_app, name="oneway")
    oneway_agent.register(oneway.oneway_app)
    app.add_typer(latency_app, name="latency")
