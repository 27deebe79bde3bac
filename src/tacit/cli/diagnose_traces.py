"""``tacit diagnose`` commands: detect and critical-path."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from tacit.cli.jsonout import print_json
from tacit.cli.paths import parse_duration
from tacit.cli.traces import JsonOpt, console, out

TracesArg = Annotated[list[Path], typer.Argument(help="Trace files or directories.")]
FormatOpt = Annotated[str, typer.Option("--format", help="Input format (auto, jaeger, ...).")]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``diagnose`` group."""
    app.command("detect")(detect)
    app.command("critical-path")(critical_path)


def _paths(traces: list[Path], input_format: str):
    from tacit.diagnosis.critical_path import critical_paths
    from tacit.formats import read_spans

    return critical_paths(read_spans(list(traces), input_format))


def detect(
    traces: TracesArg,
    by: Annotated[
        str, typer.Option(help="Comma-separated confounders: endpoint, service, client, hour.")
    ] = "endpoint",
    k: Annotated[float, typer.Option(help="IQR fence multiplier (Tukey's 1.5).")] = 1.5,
    history_fraction: Annotated[
        float, typer.Option(help="The first fraction of the time span is the history.")
    ] = 0.5,
    min_history: Annotated[int, typer.Option(help="History a key needs for a baseline.")] = 20,
    bucket: Annotated[str, typer.Option(help="Time-of-day bucket of 'hour' (e.g. 1h, 15m).")] = (
        "3600s"
    ),
    top: Annotated[int, typer.Option(help="Flagged traces to list.")] = 20,
    input_format: FormatOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Flag traces slower or faster than their key's history (YTrace detection)."""
    from tacit.diagnosis.detect import (
        FASTER,
        VERDICT_NAMES,
        DetectParams,
        confounder_keys,
        history_window,
    )
    from tacit.diagnosis.detect import detect as run

    params = DetectParams(k=k, min_history=min_history, bucket_ns=parse_duration(bucket))
    cp = _paths(traces, input_format)
    confounders = [c.strip() for c in by.split(",") if c.strip()]
    key, labels = confounder_keys(cp.graph.spans, cp.root, confounders, params)
    history = history_window(cp.start, history_fraction)
    evaluate = ~history if history_fraction < 1 else history
    d = run(cp.latency, key, history, evaluate, params, labels)
    flagged = d.flagged()
    flagged = flagged[np.argsort(-np.abs(d.latency[flagged] - (d.q1[flagged] + d.q3[flagged]) / 2))]
    rows = [
        {
            "trace": cp.trace_name(int(i)),
            "key": dict(zip(confounders, labels[int(d.key[i])], strict=True)),
            "latency_ms": d.latency[i] / 1e6,
            "q1_ms": d.q1[i] / 1e6,
            "q3_ms": d.q3[i] / 1e6,
            "verdict": VERDICT_NAMES[int(d.verdict[i])],
            "top": [
                {"service": s, "ms": ns / 1e6, "share": share} for s, ns, share in cp.top(int(i))
            ],
        }
        for i in flagged[:top]
    ]
    if json_out:
        print_json(
            {
                "traces": len(cp),
                "confounders": confounders,
                "params": {"k": k, "min_history": min_history, "bucket_ns": params.bucket_ns},
                "accounting": d.accounting,
                "warnings": cp.warnings,
                "flagged": rows,
                "flagged_total": len(flagged),
            }
        )
        return
    t = Table(title=f"{len(cp)} traces; {len(flagged)} flagged (by {', '.join(confounders)})")
    for col in ("trace", "key", "latency ms", "Q1 ms", "Q3 ms", "verdict", "top contributor"):
        t.add_column(col, justify="right" if "ms" in col else "left")
    for i, r in zip(flagged[:top], rows, strict=True):
        best = r["top"][0] if r["top"] else None
        t.add_row(
            r["trace"][:16],
            " ".join(map(str, r["key"].values())),
            f"{r['latency_ms']:.3f}",
            f"{r['q1_ms']:.3f}",
            f"{r['q3_ms']:.3f}",
            "faster" if d.verdict[i] == FASTER else "slower",
            f"{best['service']} {100 * best['share']:.0f}%" if best else "–",
        )
    out.print(t)
    for name, count in {**d.accounting, **cp.warnings}.items():
        console.print(f"{name}: {count}")


def critical_path(
    traces: TracesArg,
    slowest: Annotated[int, typer.Option(help="Traces to show, slowest first.")] = 10,
    top: Annotated[int, typer.Option(help="Contributors to list per trace.")] = 3,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write an HTML report of those traces.")
    ] = None,
    input_format: FormatOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Critical paths of the slowest traces and each service's contribution (YTrace)."""
    cp = _paths(traces, input_format)
    chosen = np.argsort(-cp.latency, kind="stable")[:slowest]
    if html is not None:
        from tacit.diagnosis.report import render_report

        html.write_text(render_report(cp, chosen, f"Critical paths: {slowest} slowest traces"))
    share = cp.contribution.sum(axis=0) / max(int(cp.latency.sum()), 1)
    if json_out:
        print_json(
            {
                "traces": len(cp),
                "spans": len(cp.graph),
                "warnings": cp.warnings,
                "overall_share": dict(zip(cp.services, share.tolist(), strict=True)),
                "slowest": [
                    {
                        "trace": cp.trace_name(int(i)),
                        "latency_ms": cp.latency[i] / 1e6,
                        "path": [cp.graph.spans.describe(int(r)) for r in cp.path_rows(int(i))],
                        "top": [
                            {"service": s, "ms": ns / 1e6, "share": sh}
                            for s, ns, sh in cp.top(int(i), top)
                        ],
                    }
                    for i in chosen
                ],
                "html": str(html) if html else None,
            }
        )
        return
    t = Table(title=f"{len(cp)} traces: the {len(chosen)} slowest")
    for col in ("trace", "latency ms", "top contributors (share of end-to-end)"):
        t.add_column(col, justify="right" if "ms" in col else "left")
    for i in chosen:
        tops = ", ".join(f"{s} {100 * sh:.0f}%" for s, _, sh in cp.top(int(i), top))
        t.add_row(cp.trace_name(int(i))[:16], f"{cp.latency[i] / 1e6:.3f}", tops)
    out.print(t)
    for name, count in cp.warnings.items():
        console.print(f"warning: {name}: {count}")
    if html is not None:
        console.print(f"report: {html}")
