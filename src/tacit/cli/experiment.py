"""``tacit experiment web|loadbalancer``: Pirate's live experiment on this machine and its
load-balancer simulation."""

from __future__ import annotations

import typer

experiment_app = typer.Typer(help="Experiments that measure tacit against ground truth.")


def register(app: typer.Typer) -> None:
    app.add_typer(experiment_app, name="experiment")
