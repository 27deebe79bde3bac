"""``tacit latency oneway simulate``: the RDA paper's §VII comparison of one-way latency
synopses on a replayed or simulated packet stream."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from tacit.cli import oneway_agent
from tacit.cli.common import (
    FRACTION,
    SEED,
    JsonOpt,
    bounded,
    console,
    flag,
    out,
    print_json,
    progress_bar,
)
from tacit.errors import ConfigError

SIMULATED_RATE = 1e6
"""Packets per second of a simulated single run (the simulator's default)."""
SWEEP_RATE = 10e6
"""Packets per second of a sweep's sender (10^5 packets per 10 ms interval)."""
SWEEP_INTERVALS = 5
MAX_PACKETS = 10**8
"""The longest stream --packets asks for: its packet table alone takes gigabytes."""
MAX_RATE = 1e10
"""The fastest sender --rate asks for: a 10 ms interval of it holds 10^8 packets."""
MAX_SEEDS = 1000
"""The most seeds per set difference a sweep runs (each run simulates a stream)."""
MAX_MEMORY = 2**30
"""The largest synopsis --memory asks for (the paper's is 100 kB): a run holds about five at
once (:data:`tacit.oneway_latency.comparison.SYNOPSES_HELD`), 5 GiB at this size."""


def register(app: typer.Typer) -> None:
    """Add the ``oneway`` group and its commands."""
    group = typer.Typer(help="One-way latency between two capture points (RDA, LDA, FineComb).")
    group.command()(simulate)
    oneway_agent.register(group)
    app.add_typer(group, name="oneway")


def simulate(
    pcap: Annotated[
        Path | None,
        typer.Argument(help="Capture (pcap/pcapng, gzip or not) replayed as the sender."),
    ] = None,
    packets: Annotated[
        int | None,
        typer.Option(
            "--packets",
            callback=bounded(1, MAX_PACKETS),
            help="Packets: of a simulated Poisson sender, or of the capture repeated to this "
            "many (fresh identifiers per repetition); at most 10^8.",
        ),
    ] = None,
    loss: Annotated[
        float, typer.Option(callback=FRACTION, help="Loss probability per packet.")
    ] = 1e-3,
    reorder: Annotated[
        float,
        typer.Option(
            callback=FRACTION,
            help="Probability that a packet sent in the last 100 µs of an interval is held "
            "past the boundary.",
        ),
    ] = 0.1,
    seed: Annotated[
        int, typer.Option(callback=SEED, help="Seed of the path (and of the simulated sender).")
    ] = 0,
    memory: Annotated[
        int | None,
        typer.Option(
            callback=bounded(0, MAX_MEMORY, lo_open=True),
            help="Bytes per synopsis, the same for every method (at most 2^30); by default the "
            "RDA paper's configuration, 5,000 buckets of 20 bytes.",
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            callback=bounded(1, MAX_RATE),
            help="Sender packets per second, 1 to 10^10 (default: the capture's own timing; "
            "simulated 1 M, or 10 M with --sweep).",
        ),
    ] = None,
    sweep: Annotated[
        bool,
        flag("--sweep", help="Error against set difference (0 … 10,000) instead of one run."),
    ] = False,
    differences: Annotated[
        str | None,
        typer.Option(help="Sweep: comma-separated set differences per interval."),
    ] = None,
    seeds: Annotated[
        int,
        typer.Option(callback=bounded(1, MAX_SEEDS), help="Sweep: seeds per set difference."),
    ] = 3,
    plots: Annotated[
        Path | None, typer.Option("--plots", help="Sweep: directory for the PNG figures.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Run RDA, sRDA, LDA and FineComb at equal memory on a stream through a simulated path."""
    if pcap is None and packets is None:
        raise ConfigError("give a capture to replay or --packets N for a simulated stream")
    if not sweep and (plots is not None or differences is not None):
        raise ConfigError("--plots and --differences go with --sweep")
    if memory is None:
        from tacit.oneway_latency.sweep import PAPER_MEMORY_BYTES

        memory = PAPER_MEMORY_BYTES
    if sweep:
        _sweep(pcap, packets, seed, memory, rate, differences, seeds, plots, json_out)
    else:
        _single(pcap, packets, loss, reorder, seed, memory, rate, json_out)


def _sender(pcap: Path | None, packets: int | None, rate: float | None, seed: int):
    """The sender stream and, for a capture, what its replay did (None when simulated)."""
    if pcap is None:
        from tacit.oneway_latency.simulate import StreamParams, poisson_sender

        assert packets is not None
        pps = rate or SIMULATED_RATE
        duration = math.ceil(packets / pps * 1e9)
        return poisson_sender(StreamParams(packets=packets, duration_ns=duration, seed=seed)), None
    from tacit.formats.pcap import read_packets
    from tacit.oneway_latency.replay import ReplayParams, replay_capture

    if not pcap.is_file():
        raise ConfigError(f"{pcap}: no such capture file")
    replay = replay_capture(
        read_packets(pcap).packets, ReplayParams(packets=packets, rate_pps=rate, seed=seed)
    )
    return replay.stream, replay


def _single(
    pcap: Path | None,
    packets: int | None,
    loss: float,
    reorder: float,
    seed: int,
    memory: int,
    rate: float | None,
    json_out: bool,
) -> None:
    from tacit.oneway_latency.simulate import StreamParams
    from tacit.oneway_latency.sweep import run_once

    path = StreamParams(loss_rate=loss, reorder_rate=reorder, seed=seed)
    sender, replay = _sender(pcap, packets, rate, seed)
    run = run_once(sender, path, memory)
    doc = {**run.as_dict(), "replay": replay.as_dict() if replay else None}
    if json_out:
        print_json(doc)
        return
    if replay is not None:
        console.print(replay.describe())
    t = Table(
        title=f"{doc['packets']} packets, {doc['intervals']} intervals, {doc['lost']} lost, "
        f"{doc['reordered']} reordered; set difference {doc['set_difference']:.1f} per "
        f"interval; {memory} bytes per synopsis"
    )
    for col in ("method", "mean rel. error", "std rel. error", "useful packets", "memory B"):
        t.add_column(col, justify="left" if col == "method" else "right", overflow="fold")
    for r in doc["results"]:
        t.add_row(
            r["method"],
            _err(r["mean_relative_error"]),
            _err(r["std_relative_error"]),
            f"{r['useful_packets']} / {r['matched_packets']}",
            str(r["memory_bytes"]),
        )
    out.print(t)
    out.print(
        f"RDA insertion {doc['insert_packets_per_second'] / 1e6:.1f} M packets/s; decoding "
        f"{1e3 * doc['decode_seconds']:.3f} ms per interval (FineComb stash repair "
        f"{1e3 * doc['finecomb_repair_seconds']:.3f} ms)"
    )


def _sweep(
    pcap: Path | None,
    packets: int | None,
    seed: int,
    memory: int,
    rate: float | None,
    differences: str | None,
    seeds: int,
    plots: Path | None,
    json_out: bool,
) -> None:
    from tacit.oneway_latency.sweep import SweepParams, plot_sweep, run_sweep

    pps = rate or SWEEP_RATE
    length = SweepParams().intervals.length_ns
    wanted = packets or round(pps * SWEEP_INTERVALS * length / 1e9)
    options: dict[str, Any] = {
        "memory_bytes": memory,
        "seeds": tuple(range(seed, seed + seeds)),
        "rate_pps": pps,
        "intervals_per_run": max(1, round(wanted / (pps * length / 1e9))),
    }
    if differences is not None:
        options["differences"] = _int_list(differences)
    params = SweepParams(**options)
    replay = None
    sender = None
    if pcap is not None:
        sender, replay = _sender(pcap, wanted, pps, seed)
    source = replay.source if replay else "simulated Poisson stream"
    runs = len(params.differences) * len(params.seeds)
    with progress_bar(runs, "sweep", not json_out) as advance:
        result = run_sweep(params, sender, source, advance)
    drawn = [str(p) for p in plot_sweep(result, plots)] if plots is not None else []
    if json_out:
        doc = {**result.as_dict(), "replay": replay.as_dict() if replay else None, "plots": drawn}
        print_json(doc)
        return
    if replay is not None:
        console.print(replay.describe())
    t = Table(title=f"{source}: {memory} bytes per synopsis, {seeds} seed(s) per point")
    for col in (
        "set difference",
        "method",
        "mean rel. error",
        "std rel. error",
        "useful",
        "decoded",
        "memory B",
        "decode ms",
    ):
        t.add_column(col, justify="left" if col == "method" else "right", overflow="fold")
    for p in result.points:
        for i, m in enumerate(p.methods.values()):
            t.add_row(
                f"{p.target} ({p.set_difference:.0f})" if i == 0 else "",
                m.method,
                _err(m.mean_relative_error),
                _err(m.std_relative_error),
                f"{100 * m.useful_fraction:.1f}%",
                "" if m.decoded_fraction is None else f"{100 * m.decoded_fraction:.0f}%",
                str(m.memory_bytes),
                "" if m.method == "lda" else f"{1e3 * m.decode_seconds:.3f}",
            )
        t.add_section()
    out.print(t)
    if drawn:
        console.print(f"plots: {', '.join(drawn)}")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"not a comma-separated list of integers: {text!r}") from None
    if not values:
        raise ConfigError("--differences is empty")
    return values


def _err(value: float | None) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    return f"{value:.3g}"
