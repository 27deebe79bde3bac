"""The ``tacit diagnose`` command group (YTrace): which requests are slow, where, and why."""

from __future__ import annotations

import typer

from tacit.cli import diagnose_rules, diagnose_subsets, diagnose_syslog, diagnose_traces


def register(app: typer.Typer) -> None:
    """Add the ``diagnose`` group and its commands."""
    group = typer.Typer(help="Diagnose slow requests: detect, localize, explain (YTrace).")
    for commands in (diagnose_traces, diagnose_subsets, diagnose_syslog, diagnose_rules):
        commands.register(group)
    app.add_typer(group, name="diagnose")
