"""``tacit latency oneway simulate``: the RDA paper's §VII comparison of one-way latency
synopses on a replayed or simulated packet stream."""

from __future__ import annotations

import typer

oneway_app = typer.Typer(help="One-way latency between two capture points (RDA, LDA, FineComb).")
