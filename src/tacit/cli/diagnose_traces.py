"""``tacit diagnose`` commands: detect and critical-path."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``diagnose`` group."""
