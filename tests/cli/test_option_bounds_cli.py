"""Option values that once ran without end, ate memory or ended in a traceback are refused in
one line naming the option, before any work (found by a sweep of bad inputs)."""

from __future__ import annotations

from pathlib import Path

from clirun import one_error_line, run_here

HUGE = "99999999999999999999999"
AGENT = ["latency", "oneway", "agent", "--role", "receiver", "--peer"]
CASES = {
    "rate nan": (["latency", "oneway", "simulate", "--packets", "1000", "--rate", "nan"], "--rate"),
    "rate tiny": (
        ["latency", "oneway", "simulate", "--packets", "9", "--rate", "1e-300"],
        "--rate",
    ),
    "seed": (["latency", "oneway", "simulate", "--packets", "1000", "--seed", HUGE], "--seed"),
    "seeds": (["latency", "oneway", "simulate", "--sweep", "--seeds", HUGE], "--seeds"),
    "difference": (
        [
            "latency",
            "oneway",
            "simulate",
            "--packets",
            "9",
            "--sweep",
            "--differences",
            "99999999999",
        ],
        "set difference of 99999999999 packets",
    ),
    "memory": (["latency", "oneway", "simulate", "--memory", "2000000000"], "--memory"),
    "inject inf": (["diagnose", "tail", "t.json", "--inject", "front:inf"], "--inject"),
    "inject huge": (["diagnose", "tail", "t.json", "--inject", f"front:{HUGE}"], "--inject"),
    "http port": (["serve", "--callgraph", "cg.yaml", "--http", "127.0.0.1:99999"], "http:"),
    "grpc port": (["serve", "--callgraph", "cg.yaml", "--grpc", "127.0.0.1:99999"], "grpc:"),
    "demo port": (["demo", "--serve", "--seconds", "1", "--http", ""], "http:"),
    "seconds": (["experiment", "asymmetric", "--seconds", "1e30"], "--seconds"),
    "connections": (["experiment", "asymmetric", "--connections", "99999999999"], "--connections"),
    "clients": (["experiment", "web", "--clients", HUGE], "--clients"),
    "netem delay": (["experiment", "netns", "--delay", "1e30"], "--delay"),
    # A filter on a capture file was ignored: every packet counted.
    "capture filter": (
        ["capture", "c.pcap", "--out", "s.jsonl", "--filter", "tcp"],
        "--filter goes with --interface",
    ),
    "response filter": (["latency", "response", "c.pcap", "--filter", "tcp"], "--filter goes"),
    # Nonsense that was accepted while it had no effect.
    "capture algorithm": (
        ["capture", "c.pcap", "--out", "s.jsonl", "--algorithm", "nope"],
        "unknown algorithm 'nope'",
    ),
    "capture format": (["capture", "c.pcap", "--out", "s.jsonl", "--format", "nope"], "--format"),
    "no algorithm": (["evaluate", "t.json", "--algorithm", ""], "no algorithm to evaluate"),
    "demo rate": (["demo", "--rate", "5", "--out", "d"], "go with --serve"),
    "demo requests": (["demo", "--requests", "99999999999", "--out", "d"], "--requests"),
    "live seconds": (
        ["capture", "--interface", "lo", "--seconds", "1e30", "--out", "s"],
        "--seconds",
    ),
    "response live seconds": (
        ["latency", "response", "--interface", "lo", "--seconds", "1e30"],
        "--seconds",
    ),
    "response bytes": (["experiment", "asymmetric", "--response-bytes", "ack"], "--server quic"),
    # An agent with a source it cannot read used to wait for its peer, then fail.
    "agent capture": ([*AGENT, "127.0.0.1:1", "--pcap", "c.pcap"], "not a pcap or pcapng file"),
    "agent duration": (
        [*AGENT, "127.0.0.1:1", "--interface", "lo", "--duration", "0"],
        "--duration",
    ),
    "agent peer": (
        [*AGENT, "nosuch.invalid:1", "--pcap", "c.pcap"],
        "cannot resolve 'nosuch.invalid'",
    ),
    # Options of a source that is not there had no effect.
    "capture filter alone": (
        ["serve", "--callgraph", "cg.yaml", "--capture-filter", "tcp"],
        "capture_filter (--capture-filter) goes with capture_interface or capture_pcap",
    ),
    "pirate server alone": (
        ["serve", "--callgraph", "cg.yaml", "--pirate-server", "10.0.0.5:443"],
        "pirate_server (--pirate-server) goes with pirate_interface or pirate_pcap",
    ),
    "rda directory": (
        ["serve", "--callgraph", "cg.yaml", "--rda-results", ".", "--http", "127.0.0.1:0"],
        "a directory, not an RDA agent's results file",
    ),
}


def test_out_of_range_options_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "cg.yaml").write_text("{}\n")
    (tmp_path / "t.json").write_text('{"data": []}\n')
    (tmp_path / "c.pcap").write_bytes(b"")
    for name, (args, words) in CASES.items():
        assert one_error_line(run_here(*args, cwd=tmp_path), words), name
