"""``tacit capture``: spans from a packet capture, with no instrumentation in the services, as
blind spans or (``--reconstruct``) straight to traces."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tacit.cli.common import (
    LIVE_SECONDS,
    JsonOpt,
    check_packet_source,
    flag,
    load_callgraph,
    out,
    print_json,
    print_unmapped,
    progress_bar,
    working,
)
from tacit.errors import ConfigError
from tacit.formats.format_names import WRITE, listed
from tacit.outputs import refuse_input_as_output

_PROTOCOLS = "auto (by port, else by the first bytes), http, http2, redis or memcached"


def register(app: typer.Typer) -> None:
    app.command()(capture)


def capture(  # noqa: C901, PLR0912
    out_path: Annotated[
        Path,
        typer.Option(
            "--out", help="Blind spans (.jsonl[.gz]), or traces with --reconstruct (.json)."
        ),
    ],
    pcap: Annotated[
        Path | None, typer.Argument(help="A pcap or pcapng file (gzip or not).")
    ] = None,
    interface: Annotated[
        str | None, typer.Option(help="Capture live on this interface instead (libpcap).")
    ] = None,
    seconds: Annotated[
        float, typer.Option(callback=LIVE_SECONDS, help="With --interface: how long.")
    ] = 10.0,
    bpf: Annotated[
        str, typer.Option("--filter", help="With --interface: a BPF filter (tcpdump's).")
    ] = "",
    services: Annotated[
        Path | None,
        typer.Option(
            help="Service names of addresses: a YAML/JSON mapping of ADDR, ADDR:PORT or "
            ":PORT to names, or a Kubernetes pod list (kubectl get pods -o json)."
        ),
    ] = None,
    protocol: Annotated[str, typer.Option(help=f"Application protocol: {_PROTOCOLS}.")] = ("auto"),
    reconstruct: Annotated[
        bool, flag(help="Reconstruct traces from the spans and write those instead.")
    ] = False,
    callgraph: Annotated[
        str | None,
        typer.Option(
            help="With --reconstruct: the call graph (YAML), or 'blind' to learn it from "
            "the capture's own requests whose calls were told apart."
        ),
    ] = None,
    test_capture: Annotated[
        Path | None,
        typer.Option(
            help="With --reconstruct: learn the call graph from a capture of requests sent "
            "one at a time (TraceWeaver §5.2) instead of --callgraph."
        ),
    ] = None,
    algorithm: Annotated[
        str, typer.Option(help="With --reconstruct: traceweaver, wap5, fcfs or vpath.")
    ] = "traceweaver",
    output_format: Annotated[
        str, typer.Option("--format", help=f"With --reconstruct: {listed(WRITE)}.")
    ] = "jaeger",
    json_out: JsonOpt = False,
) -> None:
    """Turn every request/response exchange in a capture (HTTP/1.1, HTTP/2 and gRPC, Redis,
    memcached) into a client span at the caller and a server span at the callee."""
    from tacit.formats import WRITE_FORMATS, write_traces
    from tacit.formats.blind import write_blind
    from tacit.formats.capture_spans import (
        ServiceMap,
        read_capture_spans,
        read_service_map,
        spans_from_read,
    )
    from tacit.formats.live import capture_for
    from tacit.reconstruct.blind_callgraph import learn_blind
    from tacit.reconstruct.isolated import callgraph_from_test_capture
    from tacit.reconstruct.pipeline import check_algorithm, reconstruct_blind

    check_packet_source(pcap, interface, bpf)
    inputs = [p for p in (pcap, services, callgraph, test_capture) if p is not None]
    refuse_input_as_output(out_path, inputs)
    check_algorithm(algorithm)
    if output_format not in WRITE_FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(WRITE_FORMATS)}")
    if reconstruct:
        if (callgraph is None) == (test_capture is None):
            raise ConfigError(
                "--reconstruct needs the call graph: give --callgraph FILE (or 'blind') or "
                "--test-capture PCAP (requests sent one at a time)"
            )
    elif callgraph or test_capture:
        raise ConfigError("--callgraph and --test-capture go with --reconstruct")
    names = read_service_map(services) if services else ServiceMap()
    if pcap is not None:
        with working("reading the capture into spans", not json_out):
            got = read_capture_spans(pcap, names, protocol)
    else:
        with working(f"capturing on {interface} for {seconds:g} s", not json_out):
            read, stats = capture_for(str(interface), seconds, bpf, payloads=True)
        got = spans_from_read(read, names, protocol)
    summary: dict[str, object] = {
        "packets": got.exchanges.accounting.as_dict(),
        "exchanges": got.accounting.as_dict(),
        "services": _services(got.spans),
        "out": str(out_path),
    }
    if interface is not None:
        summary["live"] = {"interface": interface, "seconds": seconds, **asdict(stats)}
    if reconstruct:
        if test_capture is not None:
            cg, summary["test_capture"] = callgraph_from_test_capture(test_capture, names, protocol)
        elif callgraph == "blind":
            cg, support = learn_blind(got.spans)
            summary["callgraph"] = support.as_dict()
        else:
            cg = load_callgraph(str(callgraph))
        with progress_bar(len(got.spans), "reconstructing", not json_out) as cb:
            traces, tags, rec = reconstruct_blind(got.spans, cg, algorithm, progress=cb)
        write_traces(out_path, traces, tags, format=output_format)
        summary["traces"] = len(set(traces.trace.tolist()))
        summary["unmapped"] = rec.unmapped_counts()
        summary["confidence"] = rec.confidence
    else:
        write_blind(out_path, got.spans)
    if json_out:
        print_json(summary)
    else:
        _show(summary)


def _services(spans) -> dict[str, dict[str, int]]:
    """Per service, its server and client spans."""
    from tacit.model.spans import KIND_NAMES

    s = spans.strings
    per: dict[str, dict[str, int]] = {}
    for svc, kind in zip(spans.service.tolist(), spans.kind.tolist(), strict=True):
        row = per.setdefault(s[svc], {"server": 0, "client": 0})
        row[KIND_NAMES[kind]] += 1
    return dict(sorted(per.items()))


def _show(summary: dict) -> None:
    p, x = summary["packets"], summary["exchanges"]
    conns = ", ".join(f"{n} {k}" for k, n in sorted(p["connections"].items()))
    out.print(f"{p['packets']} packets ({p['other_packets']} not TCP); connections: {conns or 0}")
    out.print(f"{x['exchanges']} exchanges -> {x['spans']} spans in {summary['out']}")
    for reason, n in {**x["left_out"], **p["unparsed"]}.items():
        out.print(f"  left out: {n} ({reason})")
    t = Table("service", "server spans", "client spans")
    for name, row in summary["services"].items():
        t.add_row(name, str(row["server"]), str(row["client"]))
    out.print(t)
    if "traces" in summary:
        out.print(f"{summary['traces']} traces")
        print_unmapped(summary["unmapped"])
