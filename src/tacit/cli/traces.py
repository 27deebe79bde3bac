"""Commands for request traces: evaluate, reconstruct, blind, callgraph, demo."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tacit.cli.common import (
    LEARNED,
    POSITIVE,
    SEED,
    JsonOpt,
    bounded,
    comma_list,
    console,
    flag,
    input_callgraph,
    label,
    load_callgraph,
    out,
    parse_duration,
    percent,
    print_json,
    print_unmapped,
    progress_bar,
)
from tacit.errors import ConfigError, InputError
from tacit.extras import require_extra
from tacit.formats.format_names import WRITE, listed
from tacit.outputs import STDIO, refuse_input_as_output, write_bytes

_REPORT_COLUMNS = {
    "unassigned": "unassigned",
    "not top": "not_top_choice",
    "calls unmapped": "unmapped_calls",
    "fallback": "fallback_calls",
}
"""The per-service report columns (:attr:`Reconstruction.service_report` keys)."""


InputFormatOpt = Annotated[
    str,
    typer.Option(
        "--input-format",
        help="auto (Jaeger, Zipkin, OTLP, CSV or blind spans, told by content), ebpf (OTLP "
        "JSON from eBPF agents such as Beyla) or envoy (Envoy/Istio sidecar access logs, one "
        "file per sidecar, named after its service or its pod).",
    ),
]
ServicesOpt = Annotated[
    Path | None,
    typer.Option(
        help="With ebpf or envoy: service names of addresses, a YAML/JSON mapping of ADDR, "
        "ADDR:PORT or :PORT to names, or a Kubernetes pod list (kubectl get pods -o json)."
    ),
]


def _observe(inputs: list[Path], input_format: str, services: Path | None):
    """Read the inputs as ``input_format`` (options checked first) and infer roles."""
    from tacit.formats import READ_FORMATS, observe
    from tacit.formats.capture_spans import read_service_map

    if input_format not in READ_FORMATS:
        raise ConfigError(f"--input-format must be one of {', '.join(READ_FORMATS)}")
    names = read_service_map(services) if services is not None else None
    return observe(list(inputs), input_format, names)[0]


def _serve_demo(out_dir: Path, rate: float, seconds: float | None, http: str) -> None:
    require_extra("serve", "tacit demo --serve")
    from tacit.serve import ServeConfig
    from tacit.serve.demo import demo_service
    from tacit.serve.logs import configure_logging

    configure_logging(json_logs=False)
    svc, load = demo_service(out_dir, ServeConfig(http=http, grpc=""), rate)
    base = f"http://{http.rpartition(':')[0]}:{svc.http_port}"
    out.print(
        f"tacit serve is reconstructing the simulated shop app's traces ({rate:g} requests/s):\n"
        f"  web page        {base}/\n"
        f"  Jaeger API      {base}/api/services   (Jaeger UI or Grafana: a Jaeger data source "
        f"at {base})\n"
        f"  metrics         {base}/metrics\n"
        f"  latency         Pirate over {out_dir / 'requests.pcap'}, RDA agents' records in "
        f"{out_dir / 'rda.jsonl'} (the page's charts, {base}/api/tacit/latency/*)\n"
        f"  store           {out_dir / 'tacit.duckdb'}\n"
        + ("Ctrl-C stops it." if seconds is None else f"Stops after {seconds:g} s.")
    )
    try:
        svc.run(seconds, before_stop=load.stop)
    finally:
        load.stop()
    out.print(f"{load.sent} spans sent and acknowledged")


def register(app: typer.Typer) -> None:
    app.command()(evaluate)
    app.command()(reconstruct)
    app.command()(blind)
    app.command(name="callgraph")(callgraph_cmd)
    app.command()(demo)


def evaluate(
    traces: Annotated[list[Path], typer.Argument(help="Trace files or directories.")],
    algorithm: Annotated[
        str,
        typer.Option(help="Comma-separated: traceweaver,wap5,fcfs,vpath,traceweaver-online."),
    ] = "traceweaver,wap5,fcfs,vpath",
    callgraph: Annotated[
        str,
        typer.Option(
            help="'learn' (from the input's ground truth), 'blind' (from its spans, their "
            "context removed: the requests whose calls were told apart) or a YAML file."
        ),
    ] = "learn",
    sample: Annotated[
        float,
        typer.Option(
            callback=bounded(0, 1, lo_open=True),
            help="Fraction of traces the call graph is learned from.",
        ),
    ] = 1.0,
    instrumented: Annotated[
        str,
        typer.Option(
            help="Comma-separated services that propagate trace context: their calls keep "
            "their parents and only the others are reconstructed."
        ),
    ] = "",
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write the reliability diagrams of the link and trace probabilities.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Blind ground-truth traces, reconstruct them with each algorithm, and score them."""
    from tacit.evaluation.reconstruction import evaluate as run
    from tacit.reconstruct.result import instrument_next

    if html is not None:
        refuse_input_as_output(html, traces)

    algos = comma_list(algorithm)
    with progress_bar(None, "spans reconstructed", not json_out) as cb:
        ev = run(
            list(traces),
            algos,
            callgraph=load_callgraph(callgraph),
            callgraph_sample=sample,
            blind_callgraph=callgraph == "blind",
            instrumented=comma_list(instrumented),
            progress=cb,
        )
    if html is not None:
        from tacit.evaluation.reliability import render_reliability

        page = render_reliability(ev.results, f"Calibration: {ev.traces} traces")
        write_bytes(html, page.encode())
    if json_out:
        print_json(ev.as_dict() | {"html": str(html) if html else None})
        return
    t = Table(title=f"{ev.traces} traces, {ev.spans} spans; call graph {ev.callgraph}")
    t.add_column("algorithm", no_wrap=True)
    for col in ("accuracy", "link accuracy", "top-5", "artifact scope", "seconds", "spans/s"):
        t.add_column(col, justify="right")
    for r in ev.results:
        t.add_row(
            r["algorithm"],
            percent(r["accuracy"]),
            percent(r["link_accuracy"]),
            percent(r["top5_accuracy"]),
            percent(r["artifact_scope_accuracy"]),
            f"{r['seconds']:.2f}",
            f"{r['spans_per_second']:.0f}",
        )
    out.print(t)
    out.print(
        "accuracy: traces with every link right; artifact scope: only the links the "
        "TraceWeaver artifact scores (calls between traced services, from services with "
        "one caller)"
    )
    tw = next((r for r in ev.results if r["per_service"]), None)
    if tw:
        s = Table(title=f"per service ({tw['algorithm']})")
        longest = max(len(name) for name in tw["per_service"])
        s.add_column("service", no_wrap=True, min_width=min(longest, 40))
        for col in ("incoming", "accuracy", "confidence", *_REPORT_COLUMNS):
            s.add_column(col, justify="right", overflow="fold")
        for name, v in tw["per_service"].items():
            conf = v["confidence"]
            report = v.get("report") or {}
            s.add_row(
                name,
                str(v["incoming"]),
                percent(v["accuracy"]),
                "–" if conf is None else percent(conf),
                *(str(report.get(k, "–")) for k in _REPORT_COLUMNS.values()),
            )
        out.print(s)
        out.print(
            "confidence: the mean probability that a link of the service's calls is right "
            "(a call left unmapped counts 0); unassigned and not top: its requests left "
            "without a mapping or given another than their best"
        )
        out.print(instrument_next({k: v["confidence"] for k, v in tw["per_service"].items()}))


def reconstruct(  # noqa: C901, PLR0915
    spans: Annotated[list[Path], typer.Argument(help="Blind spans (or traces) to reconstruct.")],
    out_path: Annotated[Path, typer.Option("--out", help="Output file (.json[.gz]).")],
    callgraph: Annotated[
        str,
        typer.Option(
            help="'learn' (from the input, needs ground truth), 'blind' (from the input's "
            "requests whose calls were told apart or that kept their context) or a YAML file."
        ),
    ] = "learn",
    algorithm: Annotated[
        str, typer.Option(help="traceweaver, wap5, fcfs, vpath or traceweaver-online.")
    ] = ("traceweaver"),
    output_format: Annotated[str, typer.Option("--format", help=f"{listed(WRITE)}.")] = "jaeger",
    input_format: InputFormatOpt = "auto",
    services: ServicesOpt = None,
    seed: Annotated[
        int | None,
        typer.Option(
            callback=SEED,
            help="Seed of the new trace ids (default: random, so that the traces of two "
            "runs never share an id).",
        ),
    ] = None,
    dask: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            help="Run traceweaver on the Dask cluster whose scheduler is at ADDRESS "
            "(tcp://HOST:PORT), one part per instance; the same results.",
        ),
    ] = None,
    dask_window: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="With --dask: also cut each instance where no request is open, at least "
            "DURATION (e.g. 1s) apart; each window learns its own timing (TraceWeaver §6.5).",
        ),
    ] = None,
    keep_context: Annotated[
        bool,
        typer.Option(
            "--keep-context",
            help="Keep every call's parent that the input's trace context gives, and "
            "infer only the calls that lost theirs (a thread pool, a new trace); the "
            "input is read whole.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Reconstruct traces from spans without identifiers and write them out.

    traceweaver-online streams one file of blind JSON lines in order of span end (as
    ``blind --in-end-order`` writes it), of OTLP JSON Lines or a CSV span table, when given
    a call graph file and jaeger or otlp output: traces are written as they finish, in
    memory that does not grow with the stream. OTLP and CSV spans may come late by up to
    the online lateness (1 s); a file that is not in order of span end within it is read
    whole instead (an error when writing to the standard output, where the traces before
    the first late span are out already), as is any other input, with the same results."""
    from tacit.formats import (
        AGENT_FORMATS,
        STREAM_WRITE_FORMATS,
        write_traces,
        write_traces_stream,
    )
    from tacit.model.spans import CLIENT
    from tacit.reconstruct.pipeline import (
        ONLINE,
        STREAM_READ_FORMATS,
        StreamTotals,
        check_algorithm,
        reconstruct_blind,
        reconstruct_stream,
        stream_source,
    )
    from tacit.reconstruct.result import instrument_next
    from tacit.reconstruct.scaleout import check_window
    from tacit.reconstruct.trace_stream import NotInStreamOrder

    cg_file = [callgraph] if callgraph not in LEARNED else []
    refuse_input_as_output(out_path, [*spans, *cg_file, *([services] if services else [])])
    check_algorithm(algorithm, dask is not None)
    if dask_window is not None and dask is None:
        raise ConfigError("--dask-window cuts the parts of a --dask run: give --dask too")
    window_ns = parse_duration(dask_window) if dask_window is not None else None
    check_window(window_ns)
    if input_format in AGENT_FORMATS and callgraph == "learn":
        raise ConfigError(
            f"spans read as {input_format} have no trace ids to learn a call graph from: "
            "give --callgraph FILE, or --callgraph blind"
        )
    stream = None
    if (
        algorithm == ONLINE
        and not keep_context
        and callgraph not in LEARNED
        and output_format in STREAM_WRITE_FORMATS
        and input_format in ("auto", *STREAM_READ_FORMATS)
    ):
        stream = stream_source(list(spans), input_format)
    summary: dict | None = None
    confidence: Mapping[str, float | None] = {}
    if stream is not None:
        totals = StreamTotals()
        try:
            with progress_bar(None, "reconstructing (streamed)", not json_out) as cb:
                traces = reconstruct_stream(
                    stream, load_callgraph(callgraph), totals=totals, progress=cb, seed=seed
                )
                write_traces_stream(out_path, traces, format=output_format)
        except NotInStreamOrder as e:
            if str(out_path) == STDIO:  # what was written cannot be taken back
                raise InputError(
                    f"{e.message}; the traces before it are written: write to a file to "
                    "have such an input read whole",
                    path=e.path,
                    record=e.record,
                ) from None
            console.print(f"{e}; reading the input whole instead", markup=False)
        else:
            reasons = totals.unmapped
            summary = {
                "spans": totals.spans,
                "traces": totals.traces,
                "mapped": totals.mapped,
                "unmapped": reasons,
                "accounting": totals.accounting,
                "confidence": {},
                "service_report": {},
                "fallback": 0,
                "streamed": True,
                "out": str(out_path),
            }
    if summary is None:
        observed = _observe(spans, input_format, services)
        cg = input_callgraph(callgraph, observed)
        blind = observed.without_truth(given=keep_context)
        with progress_bar(len(blind), "reconstructing", not json_out) as cb:
            rec_traces, tags, rec = reconstruct_blind(
                blind, cg, algorithm, progress=cb, seed=seed, dask=dask, window_ns=window_ns
            )
        write_traces(out_path, rec_traces, tags, format=output_format)
        reasons = rec.unmapped_counts()
        summary = {
            "spans": len(blind),
            "traces": len(set(rec_traces.trace.tolist())),
            "mapped": int(((blind.kind == CLIENT) & (rec.parent >= 0)).sum()),
            "unmapped": reasons,
            "accounting": observed.accounting,
            "confidence": rec.confidence,
            "service_report": rec.service_report,
            "fallback": len(rec.fallback),
            "streamed": False,
            "out": str(out_path),
        }
        confidence = rec.confidence
    if json_out:
        print_json(summary)
    else:
        out.print(f"{summary['spans']} spans -> {summary['traces']} traces in {out_path}")
        print_unmapped(reasons)
        if confidence:
            out.print(instrument_next(confidence))


def blind(
    traces: Annotated[list[Path], typer.Argument(help="Trace files or directories.")],
    out_path: Annotated[Path, typer.Option("--out", help="Blind spans (.jsonl[.gz]).")],
    in_end_order: Annotated[
        bool,
        flag(
            help="Sorted by span end, as a collector streams them (what "
            "'reconstruct --algorithm traceweaver-online' streams), not grouped by instance."
        ),
    ] = False,
    input_format: InputFormatOpt = "auto",
    services: ServicesOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write what a non-intrusive collector sees: spans per instance, no identifiers."""
    from tacit.formats.blind import write_blind

    refuse_input_as_output(out_path, [*traces, *([services] if services else [])])
    observed = _observe(traces, input_format, services)
    write_blind(out_path, observed.without_truth(), in_end_order)
    summary = {
        "spans": len(observed.spans),
        "accounting": observed.accounting,
        "out": str(out_path),
    }
    if json_out:
        print_json(summary)
    else:
        out.print(f"{summary['spans']} blind spans in {out_path}")
        for k, v in observed.accounting.items():
            out.print(f"  {label(k)}: {v}")


def callgraph_cmd(
    traces: Annotated[
        list[Path],
        typer.Argument(help="Test traces with ground truth; with --blind, any spans."),
    ],
    out_path: Annotated[Path | None, typer.Option("--out", help="YAML file.")] = None,
    blind: Annotated[
        bool,
        typer.Option(
            "--blind",
            help="Learn from spans without (or with partial) trace context: from the "
            "requests whose calls nothing else at their instance could have made (they ran "
            "alone, or their calls were apart in time) or that kept their context.",
        ),
    ] = False,
    input_format: InputFormatOpt = "auto",
    services: ServicesOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Learn call graphs and dependency order from isolated test traces (§5.2.2), or with
    --blind from production's own spans."""
    from tacit.formats import AGENT_FORMATS
    from tacit.reconstruct.blind_callgraph import learn_blind
    from tacit.reconstruct.callgraph import learn_callgraph

    if out_path:
        refuse_input_as_output(out_path, [*traces, *([services] if services else [])])
    if input_format in AGENT_FORMATS and not blind:
        raise ConfigError(
            f"spans read as {input_format} have no trace ids to learn a call graph from: "
            "give --blind"
        )
    observed = _observe(traces, input_format, services)
    support = None
    if blind:
        cg, support = learn_blind(observed.without_truth(given=True))
    else:
        cg = learn_callgraph(observed.spans)
    if out_path:
        cg.save(out_path)
    if json_out:
        import yaml

        doc = yaml.safe_load(cg.to_yaml()) or {}
        print_json(doc if support is None else {"callgraph": doc, "support": support.as_dict()})
        return
    if not out_path:
        out.print(cg.to_yaml(), end="")
    if support is not None:
        left = support.left_out()
        learned = len(support.seen) - len(left)
        console.print(
            f"{learned} of {len(support.seen)} endpoints learned from requests whose calls "
            "were told apart (alone) or kept their context",
            markup=False,
        )
        for (svc, ep), n in left.items():
            console.print(f"  left out: {svc} {ep} ({n} requests, none told apart)", markup=False)


def demo(
    out_dir: Annotated[Path, typer.Option("--out", help="Where traces and report go.")] = Path(
        "demo-output"
    ),
    requests: Annotated[
        int,
        typer.Option(callback=bounded(1, 1_000_000), help="Requests per load level."),
    ] = 400,
    json_out: JsonOpt = False,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Instead: start tacit serve with the simulated app sending it spans live.",
        ),
    ] = False,
    rate: Annotated[
        float | None,
        typer.Option(
            callback=bounded(0, 10_000, lo_open=True),
            help="With --serve: requests per second (default 50).",
        ),
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option(
            callback=POSITIVE, help="With --serve: stop after this long (default: at Ctrl-C)."
        ),
    ] = None,
    http: Annotated[
        str | None, typer.Option(help="With --serve: the HTTP address (127.0.0.1:4318).")
    ] = None,
) -> None:
    """Simulate a small app under rising load, reconstruct, score every algorithm, report;
    or (--serve) watch tacit serve reconstruct the app's traces live."""
    if serve:
        _serve_demo(
            out_dir,
            50.0 if rate is None else rate,
            seconds,
            "127.0.0.1:4318" if http is None else http,
        )
        return
    if rate is not None or seconds is not None or http is not None:
        raise ConfigError("--rate, --seconds and --http go with --serve")
    if not out.force and (out_dir / "report.html").exists():
        raise ConfigError(f"{out_dir}: holds a demo's output; add --force to replace it")
    from tacit.evaluation.demo import run_demo

    res = run_demo(out_dir, requests=requests)
    if json_out:
        print_json(res)
        return
    t = Table(title=f"End-to-end accuracy, simulated app '{res['app']}', {requests} requests/load")
    t.add_column("load (req/s)", justify="right")
    for a in res["algorithms"]:
        t.add_column(a, justify="right")
    for row in res["loads"]:
        t.add_row(str(row["rate"]), *[percent(row["accuracy"][a]) for a in res["algorithms"]])
    out.print(t)
    out.print(f"traces: {res['traces']}\nreport: {res['report']}")
    cap = res["capture"]
    accuracy = ", ".join(f"{a} {percent(v)}" for a, v in cap["accuracy"].items())
    out.print(f"from packets alone ({cap['pcap']}, {cap['rate']} req/s): {accuracy}")
    out.print(  # one line that pastes whole, however the terminal shows it
        f"  tacit capture {cap['pcap']} --services {cap['services']} --reconstruct "
        f"--test-capture {cap['test_pcap']} --out traces-from-packets.json",
        soft_wrap=True,
        highlight=False,
    )
