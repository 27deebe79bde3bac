"""``tacit latency response``: client-visible response latency from the client-to-server
packets of a capture (Pirate)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``response`` command to the ``latency`` group."""
