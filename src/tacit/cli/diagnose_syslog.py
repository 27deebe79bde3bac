"""``tacit diagnose syslog``: device syslog templates, causal rules, problem graphs (YTrace §4)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from tacit.cli.common import COUNT, JsonOpt, bounded, console, out, parse_duration, print_json
from tacit.errors import ConfigError

if TYPE_CHECKING:
    from tacit.formats.syslog import LineFormat, SyslogRead


FilesArg = Annotated[list[Path], typer.Argument(help="Syslog files or directories.")]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        help="auto, rfc5424, rfc3339, rfc3164, bgl, hpc, thunderbird, journal-export "
        "(journalctl -o export) or journal-json (journalctl -o json).",
    ),
]
YearOpt = Annotated[
    int | None,
    typer.Option(
        "--year",
        callback=bounded(1678, 2261),
        help="Year of each file's first RFC 3164 (year-less) time; later lines roll over at "
        "Dec -> Jan. Default: from the file's modification time.",
    ),
]
LineRegexOpt = Annotated[
    str | None,
    typer.Option(
        "--line-regex",
        help="For lines no format reads: a regular expression matching a whole line, with "
        "named groups time and message, and optionally host, app, pid.",
    ),
]
TimeFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--time-format",
        help="How --line-regex's time reads: iso (UTC without an offset), epoch, epoch_ms, or "
        "a strptime format such as '%b %d %H:%M:%S' (UTC without %z). Default: iso.",
    ),
]
ErrorsOpt = Annotated[
    str,
    typer.Option(
        "--errors",
        help="Lines that cannot be read: count (and name the first) or raise (the first ends "
        "the run, named by file and line).",
    ),
]
TopologyOpt = Annotated[
    Path, typer.Option("--topology", help="Links between devices: one 'a b' pair per line.")
]
WindowOpt = Annotated[str, typer.Option("--window", help="Bin of the count series.")]
HorizonOpt = Annotated[str, typer.Option("--horizon", help="How soon an effect follows.")]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``diagnose`` group."""
    group = typer.Typer(help="Network diagnosis from device syslogs (YTrace §4).")
    group.command()(templates)
    group.command()(mine)
    group.command()(problems)
    app.add_typer(group, name="syslog")


@dataclass(frozen=True)
class _Reading:
    """How to read the syslogs: the options every command shares."""

    format: str
    year: int | None
    line_regex: str | None
    time_format: str | None
    errors: str


def _read(files: list[Path], how: _Reading) -> SyslogRead:
    from tacit.formats.syslog import line_format, read_syslog

    fmt: str | LineFormat = how.format
    if how.line_regex is not None:
        if how.format != "auto":
            raise ConfigError("--line-regex describes the format: give no --format with it")
        fmt = line_format(how.line_regex, how.time_format or "iso")
    elif how.time_format is not None:
        raise ConfigError("--time-format says how --line-regex's time reads: give --line-regex")
    read = read_syslog(list(files), fmt, errors=how.errors, year=how.year)
    for path, years in read.years.items():
        console.print(
            f"{path}: year-less times dated {years}", markup=False, highlight=False, soft_wrap=True
        )
    if read.accounting["unparsed"]:
        console.print(
            f"warning: {read.accounting['unparsed']} line(s) not parsed; first: "
            f"{read.unparsed_lines[0]}",
            markup=False,
            soft_wrap=True,
            highlight=False,
        )
    return read


def _summary(read: SyslogRead) -> dict:
    """What every command's JSON says of the reading: accounting, formats, years."""
    return {"accounting": read.accounting, "formats": read.formats, "years": read.years}


def _mine(files: list[Path], how: _Reading, topology: Path, window: str, horizon: str):
    from tacit.diagnosis.syslog_causality import CausalityParams, mine_syslog_rules
    from tacit.formats.textio import read_text
    from tacit.model.topology import Topology

    params = CausalityParams(window_ns=parse_duration(window), horizon_ns=parse_duration(horizon))
    read = _read(files, how)
    topo = Topology.parse(read_text(topology), str(topology))
    return read, topo, params, mine_syslog_rules(read.records, topo.links(), params=params)


def templates(
    files: FilesArg,
    fmt: FormatOpt = "auto",
    year: YearOpt = None,
    line_regex: LineRegexOpt = None,
    time_format: TimeFormatOpt = None,
    errors: ErrorsOpt = "count",
    truth: Annotated[
        Path | None,
        typer.Option(help="loghub *_structured.csv: score grouping accuracy against EventId."),
    ] = None,
    top: Annotated[int, typer.Option(callback=COUNT, help="Templates to show.")] = 20,
    json_out: JsonOpt = False,
) -> None:
    """Group messages into templates (Drain3), optionally scored against loghub's truth."""
    from tacit.diagnosis.syslog_templates import grouping_accuracy, mine_templates
    from tacit.formats.syslog import read_loghub_truth

    read = _read(files, _Reading(fmt, year, line_regex, time_format, errors))
    tpl = mine_templates(read.records.content)
    accuracy = None
    if truth is not None:
        true_ids = read_loghub_truth(truth, read.records.line)
        accuracy = grouping_accuracy(tpl.template, true_ids)
    counts = tpl.counts
    ranked = sorted(range(len(tpl.texts)), key=lambda k: -counts[k])
    if json_out:
        print_json(
            {
                **_summary(read),
                "templates": [{"template": tpl.texts[k], "count": int(counts[k])} for k in ranked],
                "grouping_accuracy": accuracy,
            }
        )
        return
    t = Table(title=f"{len(read.records)} messages, {len(tpl.texts)} templates")
    t.add_column("count", justify="right")
    t.add_column("template")
    for k in ranked[:top]:
        t.add_row(str(counts[k]), tpl.texts[k])
    out.print(t)
    if accuracy is not None:
        out.print(f"grouping accuracy: {accuracy:.3f}")


def mine(
    files: FilesArg,
    topology: TopologyOpt,
    fmt: FormatOpt = "auto",
    year: YearOpt = None,
    line_regex: LineRegexOpt = None,
    time_format: TimeFormatOpt = None,
    errors: ErrorsOpt = "count",
    window: WindowOpt = "60s",
    horizon: HorizonOpt = "60s",
    json_out: JsonOpt = False,
) -> None:
    """Mine causal rules between templates: lagged correlation, then a quasi-experiment."""
    read, _, _, mined = _mine(
        files, _Reading(fmt, year, line_regex, time_format, errors), topology, window, horizon
    )
    rules = mined.named()
    if json_out:
        print_json({**_summary(read), "rules": rules})
        return
    t = Table(title=f"{len(rules)} rules from {len(read.records)} messages")
    for col in ("scope", "cause", "effect", "corr", "treated", "control", "pairs", "p"):
        t.add_column(col, justify="left" if col in ("scope", "cause", "effect") else "right")
    for r in rules:
        t.add_row(
            r["scope"],
            r["cause"],
            r["effect"],
            f"{r['correlation']:.2f}",
            f"{r['treated_rate']:.2f}",
            f"{r['control_rate']:.2f}",
            str(r["pairs"]),
            f"{r['p_value']:.1e}",
        )
    out.print(t)


def problems(
    files: FilesArg,
    topology: TopologyOpt,
    fmt: FormatOpt = "auto",
    year: YearOpt = None,
    line_regex: LineRegexOpt = None,
    time_format: TimeFormatOpt = None,
    errors: ErrorsOpt = "count",
    window: WindowOpt = "60s",
    horizon: HorizonOpt = "60s",
    rpcs: Annotated[
        Path | None,
        typer.Option(help="RPC CSV (time_ns,src,dst,one_way_ns,end_to_end_ns): flag queueing."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Problem graphs per window; with --rpcs, those on the path of each RPC that queued."""
    from tacit.diagnosis.problem_graphs import ProblemParams, graphs_for_rpcs, problem_graphs
    from tacit.diagnosis.queueing import queueing_delay
    from tacit.formats.syslog import read_rpc_csv

    read, topo, params, mined = _mine(
        files, _Reading(fmt, year, line_regex, time_format, errors), topology, window, horizon
    )
    rec = read.records
    graphs = problem_graphs(
        rec.time,
        rec.device,
        mined.templates.template,
        rec.devices,
        mined.rules,
        topo,
        ProblemParams(horizon_ns=params.horizon_ns),
    )
    texts = mined.templates.texts
    flagged_rows: list[dict] = []
    if rpcs is not None:
        r = read_rpc_csv(rpcs)
        q = queueing_delay(r.time, r.src, r.dst, r.one_way_ns, r.end_to_end_ns)
        f = q.flagged.nonzero()[0]
        attached = graphs_for_rpcs(r.time[f], r.src[f], r.dst[f], graphs, topo)
        flagged_rows = [
            {
                "row": int(i),
                "time_ns": int(r.time[i]),
                "src": str(r.src[i]),
                "dst": str(r.dst[i]),
                "queueing_ns": int(q.queueing_ns[i]),
                "share": float(q.share[i]),
                "problem_graphs": ids,
            }
            for i, ids in zip(f, attached, strict=True)
        ]
    if json_out:
        print_json(
            {
                **_summary(read),
                "rules": mined.named(),
                "problem_graphs": [g.as_dict(texts) for g in graphs],
                "flagged_rpcs": flagged_rows,
            }
        )
        return
    t = Table(title=f"{len(graphs)} problem graphs ({len(mined.rules)} rules)")
    for col in ("id", "start ns", "devices", "events", "root causes"):
        t.add_column(col)
    for g in graphs:
        roots = "; ".join(f"{g.nodes[i][0]}: {texts[g.nodes[i][1]]}" for i in g.roots)
        t.add_row(str(g.id), str(g.start_ns), ",".join(sorted(g.devices)), str(len(g.nodes)), roots)
    out.print(t)
    if rpcs is not None:
        explained = sum(bool(x["problem_graphs"]) for x in flagged_rows)
        out.print(f"{len(flagged_rows)} RPCs flagged for queueing, {explained} with problem graphs")
