"""``tacit latency oneway agent``: one of the two measurement agents of the RDA service."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``agent`` command to the ``oneway`` group."""
