"""``tacit latency response``: client-visible response latency from the client-to-server
packets of a capture (Pirate)."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from tacit.cli.common import (
    LIVE_SECONDS,
    JsonOpt,
    check_packet_source,
    console,
    flag,
    label,
    ms,
    out,
    parse_duration,
    percent,
    print_json,
    working,
)
from tacit.errors import ConfigError
from tacit.runs import distinct


def register(app: typer.Typer) -> None:
    """Add the ``response`` command to the ``latency`` group."""
    app.command()(response)


def response(
    capture: Annotated[
        Path | None, typer.Argument(help="A pcap or pcapng file (gzip or not).")
    ] = None,
    interface: Annotated[
        str | None, typer.Option(help="Capture live on this interface instead (libpcap).")
    ] = None,
    bpf: Annotated[str, typer.Option("--filter", help="Live capture: a BPF filter.")] = "",
    seconds: Annotated[
        float, typer.Option(callback=LIVE_SECONDS, help="Live capture: how long.")
    ] = 10.0,
    server: Annotated[
        str | None,
        typer.Option(help="The server as ADDR:PORT, ADDR or PORT (default: from handshakes)."),
    ] = None,
    truth: Annotated[
        bool,
        flag(
            "--truth",
            help="Score against the truth parsed from the other direction (HTTP/1.1, HTTP/2 "
            "and gRPC, Redis, memcached) and show the RTT baselines.",
        ),
    ] = False,
    algorithm: Annotated[
        str,
        typer.Option(
            help="modes (Algorithm 2, the proportional mode sum), centres (tacit's "
            "centre-tracking histogram) or threshold (Algorithm 1)."
        ),
    ] = "modes",
    gap_threshold: Annotated[
        str | None,
        typer.Option(help="The gap threshold δ, e.g. 1ms or 50us (default: 1ms, tacit's choice)."),
    ] = None,
    epoch: Annotated[str | None, typer.Option(help="Epoch length, e.g. 1s.")] = None,
    pipelining: Annotated[
        bool,
        flag(
            "--pipelining",
            help="For clients with several requests in flight: gaps from a burst's first packet "
            "and an adaptive floor (not in the paper; see PirateParams).",
        ),
    ] = False,
    rows: Annotated[
        bool, flag("--rows", help="With --json: every estimate (connection, epoch).")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Estimate response latency per connection per epoch from the client-to-server packets."""
    from tacit.formats.pcap import read_packets
    from tacit.response_latency import ALGORITHMS, PirateParams, estimate_response_latency
    from tacit.response_latency.evaluate import score_capture
    from tacit.response_latency.live import estimate_live

    params = PirateParams.pipelining() if pipelining else PirateParams()
    if gap_threshold is not None:
        params = replace(params, gap_threshold_ns=parse_duration(gap_threshold))
    if epoch is not None:
        params = replace(params, epoch_ns=parse_duration(epoch))
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {algorithm!r}: expected {', '.join(ALGORITHMS)}")
    check_packet_source(capture, interface, bpf)
    if truth and capture is None:
        raise ConfigError("--truth needs a capture file (it parses both directions)")
    t0 = time.perf_counter()
    if capture is not None:
        with working("reading the capture and estimating", not json_out):
            read = read_packets(capture, payloads=truth)
            t1 = time.perf_counter()
            estimates = estimate_response_latency(read.packets, params, server, algorithm)
        n, accounting, source = len(read.packets), read.accounting, str(capture)
    elif interface is not None:
        with working(f"capturing on {interface} for {seconds:g} s", not json_out):
            live = estimate_live(interface, bpf, seconds, params, server, algorithm)
        estimates, n, accounting = live.estimates, live.packets, live.accounting
        t1 = time.perf_counter() - live.busy_seconds  # the estimation alone, not the wait
        source = f"{interface} (live, {seconds:g} s)"
    t2 = time.perf_counter()
    doc: dict = {
        "capture": source,
        "algorithm": algorithm,
        "packets": n,
        "packets_per_second": n / (t2 - t1) if t2 > t1 else None,
        "end_to_end_packets_per_second": n / (t2 - t0) if t2 > t0 else None,
        "connections": len(estimates.connections),
        "estimates": len(estimates),
        "state_bytes_per_connection": _state_bytes(params, algorithm),
        "direction_decided_by": estimates.connections.decided_counts(),
        "capture_accounting": accounting.as_dict(),
        "packet_accounting": estimates.accounting.as_dict(),
        "gaps_in_estimates": int(estimates.gap_samples.sum()),
        "gaps_discarded": int(estimates.discarded_gaps.sum()),
    }
    if truth:
        with working("parsing the truth from both directions", not json_out):
            doc.update(score_capture(read, estimates, server))
    doc["warnings"] = _warnings(doc, params)
    if rows:
        doc["rows"] = estimates.as_rows()
    if json_out:
        print_json(doc)
        return
    _print(doc, estimates)


def _state_bytes(params, algorithm: str) -> int:
    from tacit.response_latency import StreamingEstimator

    return StreamingEstimator(params, algorithm=algorithm).state_bytes_per_connection


def _print(doc: dict, estimates) -> None:
    t = Table(
        title=f"{doc['capture']}: {doc['packets']} packets, {doc['connections']} connections, "
        f"{doc['estimates']} estimates ({doc['algorithm']})"
    )
    for col in ("client", "server", "epochs", "median estimate ms", "gaps"):
        t.add_column(col, justify="left" if col in ("client", "server") else "right")
    for c in distinct(estimates.connection).tolist():
        sel = estimates.connection == c
        t.add_row(
            estimates.connections.client(c),
            estimates.connections.server(c),
            str(int(sel.sum())),
            ms(float(np.median(estimates.latency_ns[sel]))),
            str(int(estimates.samples[sel].sum())),
        )
    out.print(t)
    buckets = Table("packets", "count", title="what became of every packet")
    for name, count in doc["packet_accounting"].items():
        if count:
            buckets.add_row(label(name), str(count))
    out.print(buckets)
    if "median_relative_error" in doc:
        c = doc["causal_pairs"]
        errors = Table(
            "against", "samples", "median error", "p5", "p95",
            title=f"relative error against the truth (median true latency "
            f"{ms(doc['median_true_latency_ns'])} ms)",
        )  # fmt: skip
        errors.add_row(
            "response latency, per connection-epoch",
            str(doc["samples"]),
            *(percent(doc[f"{q}_relative_error"]) for q in ("median", "p5", "p95")),
        )
        errors.add_row(
            "causal pairs (Pirate §3)",
            str(c["samples"]),
            percent(c["median_relative_error"]),
            "",
            "",
        )
        out.print(errors)
        rtt = Table("RTT baseline", "samples", "median ms")
        for name, b in doc["rtt_baselines"].items():
            rtt.add_row(name, str(b["samples"]), ms(b["median_rtt_ns"]))
        out.print(rtt)
    for warning in doc["warnings"]:
        console.print(f"warning: {warning}")


GAP_THRESHOLD_ALGORITHMS = ("threshold", "centres")
"""The algorithms that take only gaps longer than δ (Algorithm 1; the centre histogram)."""
THINK_TIME_ERROR = 0.5
"""A median error above this against the truth says the estimate measures something else."""


def _warnings(doc: dict, params) -> list[str]:
    """Where the estimates are likely wrong, and why."""
    out = []
    delta = params.gap_threshold_ns
    if doc["packets"] and not doc["estimates"] and doc["algorithm"] in GAP_THRESHOLD_ALGORITHMS:
        out.append(
            f"no estimates: {doc['algorithm']} counts only gaps between a connection's client "
            f"packets longer than the gap threshold δ = {ms(delta)} ms, and none was: every "
            f"response came faster (as on loopback or one host); a smaller --gap-threshold "
            f"(e.g. {delta // 50 // 1000} us) or the default algorithm would see them"
        )
    elif doc["packets"] and not doc["estimates"]:
        out.append(
            "no estimates: no connection sent client packets with a gap between them that "
            "could be a wait for a response (see 'packets' for where every packet went)"
        )
    error = doc.get("median_relative_error")
    if error is not None and math.isfinite(error) and error > THINK_TIME_ERROR:
        out.append(
            f"the median error against the truth is {error:.0%}: the time from a response to "
            "the client's next request is not short here (think time, or a client that waits), "
            "which Pirate's proxy counts as latency (§3: a request and the one its response "
            "triggered); compare the causal-pair error, which measures the proxy itself"
        )
    return out
