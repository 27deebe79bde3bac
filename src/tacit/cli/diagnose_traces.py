"""``tacit diagnose`` commands: detect, critical-path and explain."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from tacit.cli.common import (
    COUNT,
    JsonOpt,
    bounded,
    comma_list,
    console,
    flag,
    id_column,
    label,
    out,
    parse_duration,
    print_json,
)
from tacit.errors import ConfigError
from tacit.formats.format_names import READ, listed
from tacit.outputs import refuse_input_as_output, write_bytes

TracesArg = Annotated[list[Path], typer.Argument(help="Trace files or directories.")]
FormatOpt = Annotated[
    str,
    typer.Option("--format", help=f"Input format: {listed(READ)}."),
]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``diagnose`` group."""
    app.command("detect")(detect)
    app.command("critical-path")(critical_path)
    app.command("explain")(explain)


def _paths(traces: list[Path], input_format: str, blind: bool = False, weigh: bool = False):
    """Critical paths of the input's traces; with ``blind``, of the traces TraceWeaver
    reconstructs once they are blinded (link uncertainty weighed with ``weigh``)."""
    from tacit.diagnosis.critical_path import critical_paths
    from tacit.formats import read_spans

    if not blind:
        return critical_paths(read_spans(list(traces), input_format))
    from tacit.diagnosis.tail import blind_and_reconstruct
    from tacit.formats import observe

    observed, _ = observe(list(traces), input_format)
    rebuilt, rec = blind_and_reconstruct(observed.spans)
    return critical_paths(rebuilt, rec=rec if weigh else None)


BlindOpt = Annotated[
    bool,
    flag("--blind", help="Blind the traces and reconstruct them with TraceWeaver first."),
]
WeighOpt = Annotated[
    bool,
    flag(
        "--weigh-links/--no-weigh-links",
        help="With --blind: expected contributions over the alternatives of uncertain links "
        "(off by default: on HotelReservation it agreed with the truth no better than the "
        "chosen links; bench/bench_diagnosis.py measures both).",
    ),
]


def _detect(cp, by: str, k: float, history_fraction: float, min_history: int, bucket: str):
    """Detection on ``cp``'s traces: (confounder names, key labels, params, Detection)."""
    from tacit.diagnosis.detect import DetectParams, confounder_keys, history_window
    from tacit.diagnosis.detect import detect as run

    params = DetectParams(k=k, min_history=min_history, bucket_ns=parse_duration(bucket))
    confounders = comma_list(by)
    key, labels = confounder_keys(cp.graph.spans, cp.root, confounders, params)
    history = history_window(cp.start, history_fraction)
    evaluate = ~history if history_fraction < 1 else history
    return confounders, labels, params, run(cp.latency, key, history, evaluate, params, labels)


ByOpt = Annotated[
    str, typer.Option(help="Comma-separated confounders: endpoint, service, client, hour.")
]
KOpt = Annotated[float, typer.Option(callback=COUNT, help="IQR fence multiplier (Tukey's 1.5).")]
HistoryOpt = Annotated[
    float,
    typer.Option(
        callback=bounded(0, 1, lo_open=True, hi_open=True),
        help="The first fraction of the time span is the history.",
    ),
]
MinHistoryOpt = Annotated[
    int, typer.Option(callback=COUNT, help="History a key needs for a baseline.")
]
BucketOpt = Annotated[str, typer.Option(help="Time-of-day bucket of 'hour' (e.g. 1h, 15m).")]


def detect(
    traces: TracesArg,
    by: ByOpt = "endpoint",
    k: KOpt = 1.5,
    history_fraction: HistoryOpt = 0.5,
    min_history: MinHistoryOpt = 20,
    bucket: BucketOpt = "3600s",
    top: Annotated[int, typer.Option(callback=COUNT, help="Flagged traces to list.")] = 20,
    input_format: FormatOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Flag traces slower or faster than their key's history (YTrace detection)."""
    from tacit.diagnosis.detect import FASTER, VERDICT_NAMES

    if top < 0:
        raise ConfigError(f"--top must be 0 or more, got {top}")
    cp = _paths(traces, input_format)
    confounders, labels, params, d = _detect(cp, by, k, history_fraction, min_history, bucket)
    flagged = d.ranked()
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
    id_column(t, "trace", (r["trace"] for r in rows))
    for col in ("key", "latency ms", "Q1 ms", "Q3 ms", "verdict", "top contributor"):
        t.add_column(col, justify="right" if "ms" in col else "left", overflow="fold")
    for i, r in zip(flagged[:top], rows, strict=True):
        best = r["top"][0] if r["top"] else None
        t.add_row(
            r["trace"],
            " ".join(map(str, r["key"].values())),
            f"{r['latency_ms']:.3f}",
            f"{r['q1_ms']:.3f}",
            f"{r['q3_ms']:.3f}",
            "faster" if d.verdict[i] == FASTER else "slower",
            f"{best['service']} {100 * best['share']:.0f}%" if best else "–",
        )
    out.print(t)
    for name, count in {**d.accounting, **cp.warnings}.items():
        console.print(f"{label(name)}: {count}")


def critical_path(
    traces: TracesArg,
    slowest: Annotated[
        int, typer.Option(callback=COUNT, help="Traces to show, slowest first.")
    ] = 10,
    top: Annotated[int, typer.Option(callback=COUNT, help="Contributors to list per trace.")] = 3,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write an HTML report of those traces.")
    ] = None,
    blind: BlindOpt = False,
    weigh_links: WeighOpt = False,
    input_format: FormatOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Critical paths of the slowest traces and each service's contribution (YTrace)."""
    if html is not None:
        refuse_input_as_output(html, traces)
    cp = _paths(traces, input_format, blind, weigh_links)
    chosen = np.argsort(-cp.latency, kind="stable")[:slowest]
    if html is not None:
        from tacit.diagnosis.report import render_report

        report = render_report(cp, chosen, f"Critical paths: {slowest} slowest traces")
        write_bytes(html, report.encode())
    share = cp.contribution.sum(axis=0) / max(int(cp.latency.sum()), 1)
    if json_out:
        print_json(
            {
                "traces": len(cp),
                "spans": len(cp.graph),
                "blind": blind,
                "weigh_links": blind and weigh_links,
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
    id_column(t, "trace", (cp.trace_name(int(i)) for i in chosen))
    for col in ("latency ms", "top contributors (share of end-to-end)"):
        t.add_column(col, justify="right" if "ms" in col else "left", overflow="fold")
    for i in chosen:
        tops = ", ".join(f"{s} {100 * sh:.0f}%" for s, _, sh in cp.top(int(i), top))
        t.add_row(cp.trace_name(int(i)), f"{cp.latency[i] / 1e6:.3f}", tops)
    out.print(t)
    for name, count in cp.warnings.items():
        console.print(f"warning: {name}: {count}")
    if html is not None:
        console.print(f"report: {html}")


def explain(
    traces: TracesArg,
    rules: Annotated[
        Path | None,
        typer.Option("--rules", help="Rule file (default: the packaged traces.rules)."),
    ] = None,
    by: ByOpt = "endpoint",
    k: KOpt = 1.5,
    history_fraction: HistoryOpt = 0.5,
    min_history: MinHistoryOpt = 20,
    bucket: BucketOpt = "3600s",
    blind: BlindOpt = False,
    weigh_links: WeighOpt = False,
    top: Annotated[int, typer.Option(callback=COUNT, help="Slow traces to list.")] = 20,
    input_format: FormatOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Detect slow traces, localize them and evaluate root-cause rules on their features."""
    from tacit.diagnosis.explain import explain as run
    from tacit.diagnosis.explain import trace_rules

    rule_set = trace_rules(rules)  # a malformed rule file fails before the (long) read
    cp = _paths(traces, input_format, blind, weigh_links)
    confounders, _, _, d = _detect(cp, by, k, history_fraction, min_history, bucket)
    problems = run(cp, d, rule_set)
    counts: dict[str, int] = {}
    for p in problems:
        for name in p["holds"]:
            counts[name] = counts.get(name, 0) + 1
    if json_out:
        print_json(
            {
                "traces": len(cp),
                "confounders": confounders,
                "rules": rule_set.path,
                "blind": blind,
                "accounting": d.accounting,
                "warnings": cp.warnings,
                "pathologies": counts,
                "slow_total": len(problems),
                "slow": problems[:top],
            }
        )
        return
    t = Table(title=f"{len(cp)} traces; {len(problems)} slower than their baseline")
    id_column(t, "trace", (p["trace"] for p in problems[:top]))
    for col in ("latency ms", "top contributor", "grew most", "network", "pathologies"):
        right = col in ("latency ms", "network")
        t.add_column(col, justify="right" if right else "left", overflow="fold")
    for p in problems[:top]:
        f = p["features"]
        t.add_row(
            p["trace"],
            f"{f['latency_ms']:.3f}",
            f"{f['top_service']} {100 * f['top_share']:.0f}%",
            f"{f['grew_edge'] or f['grew_service']} +{f['grew_ms']:.1f} ms"
            if f["grew_service"]
            else "–",
            f"{100 * f['network_share']:.0f}%",
            ", ".join(p["holds"]) or "–",
        )
    out.print(t)
    for name, count in counts.items():
        out.print(f"{name}: {count}")
    for name, count in {**d.accounting, **cp.warnings}.items():
        console.print(f"{label(name)}: {count}")
