"""The ``tacit latency`` command group: response latency from one direction of traffic
(``tacit latency response``, Pirate) and one-way latency between two capture points
(``tacit latency oneway ...``, RDA)."""

from __future__ import annotations

import typer

from tacit.cli import oneway, response


def register(app: typer.Typer) -> None:
    """Add the ``latency`` group and its commands."""
    group = typer.Typer(help="Latencies measured passively from packets.")
    response.register(group)
    oneway.register(group)
    app.add_typer(group, name="latency")
