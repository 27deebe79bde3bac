"""Commands for causal paths (WAP5): ``tacit paths link`` and ``tacit paths evaluate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tacit.cli.common import (
    COUNT,
    SEED,
    JsonOpt,
    console,
    ms,
    out,
    parse_duration,
    percent,
    print_json,
    working,
)


def register(app: typer.Typer) -> None:
    """Add the ``paths`` group and its commands."""
    group = typer.Typer(help="Causal path patterns from black-box message traces (WAP5).")
    group.command()(link)
    group.command()(evaluate)
    app.add_typer(group, name="paths")


def link(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            help="strace logs, socket-event JSON lines, message tables (CSV/JSONL/Parquet), "
            "or traces/blind spans (each RPC a request and a response message)."
        ),
    ],
    input_format: Annotated[
        str, typer.Option("--input-format", help="auto, strace, events, table or spans.")
    ] = "auto",
    host: Annotated[
        str | None, typer.Option(help="Host of a single strace log (default: from its name).")
    ] = None,
    top: Annotated[int, typer.Option(callback=COUNT, help="Patterns to show (and to draw).")] = 10,
    rank: Annotated[
        str,
        typer.Option(
            help="expected (WAP5 §6.6: the most useful), count, expected_per_count, "
            "expected_per_sqrt_count, max_probability, total_time or mean_latency."
        ),
    ] = "expected",
    timeline: Annotated[
        Path | None, typer.Option("--timeline", help="Directory for timeline pictures.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Link messages to their causes and list the causal path patterns."""
    from tacit.causal_paths.analysis import analyze_paths
    from tacit.causal_paths.inputs import read_any_messages

    with working("reading and linking messages", not json_out):
        messages, accounting = read_any_messages(list(inputs), input_format, host=host)
        analysis = analyze_paths(messages)
    ranked = analysis.patterns.ranked(rank, top)
    drawn = []
    if timeline is not None:
        from tacit.causal_paths.timeline import draw_timelines

        drawn = [str(p) for p in draw_timelines(ranked, timeline, top=top)]
    if json_out:
        doc = {
            "messages": len(messages),
            "accounting": {**accounting, **analysis.accounting},
            "clock_offsets_ns": analysis.offsets.offset,
            "clock_reference": analysis.offsets.reference,
            "mean_causal_delay_ns": {
                f"{a} -> {b} -> {c}": v for (a, b, c), v in analysis.links.mean_delay.items()
            },
            "patterns": [p.as_dict() for p in ranked],
            "pattern_total": len(analysis.patterns),
            "timelines": drawn,
            "seconds": analysis.seconds,
        }
        print_json(doc)
        return
    t = Table(title=f"{len(messages)} messages, {len(analysis.patterns)} patterns (by {rank})")
    for col in ("#", "count", "expected", "max p", "latency ms", "hops", "root"):
        t.add_column(col, justify="right" if col not in ("root",) else "left", overflow="fold")
    for i, p in enumerate(ranked, start=1):
        root = p.hops[0]
        t.add_row(
            str(i),
            str(p.count),
            f"{p.expected:.1f}",
            f"{p.max_probability:.3f}",
            ms(p.mean_latency_ns),
            str(len(p.hops)),
            f"{root.src} -> {root.dst}",
        )
    out.print(t)
    for i, p in enumerate(ranked[:3], start=1):
        out.print(f"\npattern {i} (count {p.count}):")
        out.print(p.text_tree(), markup=False, highlight=False)
    if drawn:
        console.print(f"timelines: {', '.join(drawn)}")


def evaluate(
    traces: Annotated[list[Path], typer.Argument(help="Trace files or directories.")],
    clock_offset_max: Annotated[
        str, typer.Option("--clock-offset-max", help="Bound of each host's random clock offset.")
    ] = "5s",
    seed: Annotated[int, typer.Option(callback=SEED, help="Seed of the clock offsets.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Turn real traces into message traces, link them and score them against the truth."""
    from tacit.causal_paths.analysis import evaluate_paths
    from tacit.formats import observe

    observed, read_seconds = observe(list(traces))
    ev = evaluate_paths(observed.spans, parse_duration(clock_offset_max), seed=seed)
    ev.seconds += read_seconds
    if json_out:
        print_json(ev.as_dict())
        return
    t = Table(title=f"{ev.messages} messages from {len(traces)} input(s)")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("meaning", overflow="fold")
    rows = [
        (
            "parent accuracy",
            percent(ev.parent_accuracy),
            "messages whose most likely cause is right",
        ),
        (
            "pattern precision",
            percent(ev.pattern_precision),
            "found patterns with a true shape and a count within 10% of its true count",
        ),
        (
            "pattern recall",
            percent(ev.pattern_recall),
            "true patterns found with a count within 10%",
        ),
        (
            "true patterns found",
            percent(ev.patterns_found),
            "true shapes found at all, whatever their count",
        ),
        ("true / found patterns", f"{ev.true_patterns} / {ev.found_patterns}", ""),
        (
            "clock offset error",
            "–" if ev.clock_offset_error_ms is None else f"{ev.clock_offset_error_ms:.3f} ms",
            "mean error of the estimated host clock offsets",
        ),
        ("hosts with estimated offsets", str(ev.hosts_estimated), ""),
        ("seconds", f"{ev.seconds:.2f}", ""),
        ("messages/s", f"{ev.messages_per_second or 0:.0f}", ""),
    ]
    if ev.nesting is not None and ev.call_parent_accuracy is not None:
        rows += [
            ("call parent accuracy: WAP5", percent(ev.call_parent_accuracy), "calls linked right"),
            (
                "call parent accuracy: nesting",
                percent(ev.nesting["call_parent_accuracy"]),
                "the same for Project 5's nesting algorithm, the baseline",
            ),
        ]
    for r in rows:
        t.add_row(*r)
    out.print(t)
