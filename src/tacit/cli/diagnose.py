"""The ``tacit diagnose`` command group (YTrace): which requests are slow, where, and why."""

from __future__ import annotations

import typer

from tacit.cli import diagnose_rules, diagnose_subsets, diagnose_syslog, diagnose_traces

diagnose_app = typer.Typer(help="Diagnose slow requests: detect, localize, explain (YTrace).")


def register(app: typer.Typer) -> None:
    for group in (diagnose_traces, diagnose_subsets, diagnose_syslog, diagnose_rules):
        group.register(diagnose_app)
    app.add_typer(diagnose_app, name="diagnose")
