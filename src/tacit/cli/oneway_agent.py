"""``tacit latency oneway agent``: one of the two measurement agents of the RDA service."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tacit.cli.common import SEED, bounded, console, finite, flag, out, parse_duration
from tacit.errors import ConfigError
from tacit.outputs import refuse_input_as_output

KEY_ENV = "TACIT_AGENT_KEY"


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port), the host resolved now so that a
    name that does not resolve is refused before the agent starts."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536 or not host:
        raise ConfigError(f"not an address: {text!r} (expected HOST:PORT)")
    host = host.strip("[]")
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConfigError(f"--peer {text}: cannot resolve {host!r} ({e.strerror})") from None
    return host, int(port)


def read_key(key_file: Path | None) -> bytes:
    """The shared key: the file's bytes (whitespace stripped), else ``$TACIT_AGENT_KEY``."""
    if key_file is not None:
        try:
            key = key_file.read_bytes().strip()
        except OSError as e:
            raise ConfigError(f"{key_file}: cannot read the key file: {e.strerror}") from None
    else:
        key = os.environ.get(KEY_ENV, "").encode()
    if not key:
        raise ConfigError(f"no shared key: give --key-file or set ${KEY_ENV}")
    return key


def _line(record: dict[str, Any]) -> str:
    if record.get("summary"):
        return (
            f"summary: {record['intervals_published']} intervals, "
            f"{record['accounting']['records']} records, {record['connections']} connections, "
            f"{record['rejected_total']} refused"
        )
    mean, std = record["mean_ns"], record["std_ns"]
    value = "" if mean is None else f" mean {mean / 1e3:.3f} µs"
    value += "" if std is None else f" std {std / 1e3:.3f} µs"
    return (
        f"interval {record['interval']} {record['status']}:{value} "
        f"sent {record['packets_sender']} matched {record['matched']} "
        f"difference {record['set_difference']}"
    )


def _log_progress() -> None:
    """The agent's progress (``logging`` INFO of the ``tacit`` loggers) as plain lines on
    stderr; warnings and errors keep going to the notices (not printed twice)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(lambda record: record.levelno < logging.WARNING)
    tacit_log = logging.getLogger("tacit")
    tacit_log.setLevel(logging.INFO)
    tacit_log.addHandler(handler)


def register(app: typer.Typer) -> None:
    """Add the ``agent`` command to the ``oneway`` group."""
    app.command()(agent)


def agent(  # noqa: C901
    role: Annotated[str, typer.Option(help="sender or receiver.")],
    peer: Annotated[
        str,
        typer.Option(help="Receiver's HOST:PORT (the sender connects, the receiver listens)."),
    ],
    interface: Annotated[str | None, typer.Option(help="Capture live on this interface.")] = None,
    pcap: Annotated[Path | None, typer.Option(help="Replay this capture file.")] = None,
    bpf: Annotated[str, typer.Option("--filter", help="BPF filter of measured packets.")] = "",
    key_file: Annotated[
        Path | None, typer.Option(help=f"Shared HMAC key file (else ${KEY_ENV}).")
    ] = None,
    interval: Annotated[
        str, typer.Option(help="Interval length δ (RDA §IX: one second), e.g. 10ms.")
    ] = "1s",
    grace: Annotated[str, typer.Option(help="Wait for late packets after an interval.")] = ("50ms"),
    retention: Annotated[
        str, typer.Option(help="How long an interval waits for its peer.")
    ] = "60s",
    buckets: Annotated[
        int | None,
        typer.Option(callback=bounded(1), help="Buckets per bank (default: late binding)."),
    ] = None,
    sampling_rate: Annotated[
        float,
        typer.Option(callback=bounded(0, 1, lo_open=True), help="Flow-hash sampling rate."),
    ] = 1.0,
    seed: Annotated[int, typer.Option(callback=SEED, help="Hash seed (both agents alike).")] = 0,
    duration: Annotated[
        str | None, typer.Option(help="Live capture: stop after this long.")
    ] = None,
    realtime: Annotated[bool, flag(help="Replay the file at the pace of its timestamps.")] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write JSON lines here.")
    ] = None,
    json_out: Annotated[bool, flag("--json", help="JSON lines on stdout.")] = False,
) -> None:
    """Run one agent of the two-point one-way latency service (RDA): capture, exchange
    synopses with the peer, publish each interval's mean and standard deviation."""
    from tacit.oneway_latency.agent import Agent, AgentParams
    from tacit.oneway_latency.capture_sources import LiveSource, PcapSource
    from tacit.oneway_latency.intervals import IntervalParams
    from tacit.oneway_latency.rda import RDAParams

    if (interface is None) == (pcap is None):
        raise ConfigError("give exactly one of --interface and --pcap")
    if role not in ("sender", "receiver"):
        raise ConfigError(f"--role must be sender or receiver, got {role!r}")
    address = parse_address(peer)
    params = AgentParams(
        intervals=IntervalParams(length_ns=parse_duration(interval)),
        rda=RDAParams(buckets_per_bank=buckets, sampling_rate=sampling_rate, seed=seed),
        grace_ns=parse_duration(grace),
        retention_ns=parse_duration(retention),
    )
    source: PcapSource | LiveSource
    if pcap is not None:
        if not pcap.is_file():
            raise ConfigError(f"{pcap}: no such capture file")
        source = PcapSource(pcap, realtime=realtime, bpf_filter=bpf)
    elif interface is not None:
        seconds = None if duration is None else parse_duration(duration) / 1e9
        if seconds == 0:
            raise ConfigError("--duration must be more than 0")
        source = LiveSource(interface, bpf, seconds)
    key = read_key(key_file)
    if output is not None:
        refuse_input_as_output(output, [pcap] if pcap is not None else [])
    _log_progress()
    # Lines are appended as intervals finish (a log, not one document): opened only once
    # every check has passed, so a refused start leaves an existing file alone.
    sink = open(output, "w") if output is not None else None  # noqa: SIM115

    def publish(record: dict[str, Any]) -> None:
        line = json.dumps(finite(record))
        if sink is not None:
            sink.write(line + "\n")
            sink.flush()
        if json_out:
            print(line, flush=True)
        else:
            out.print(_line(record), highlight=False, soft_wrap=True)

    # SIGTERM ends the capture; the agent then finishes the intervals it holds and exits.
    signal.signal(signal.SIGTERM, lambda *_: source.stop())
    try:
        Agent(role, address, key, source, params, publish).run_sync()
    except KeyboardInterrupt:
        console.print("interrupted")
    finally:
        if sink is not None:
            sink.close()
