"""Malformed inputs for every command, and one in-process run of the ``tacit`` command line.

Each input kind starts from a small valid file (written by tacit's simulators and writers, or
copied from the format tests) and is mutated by Hypothesis: bytes truncated, flipped, inserted or
replaced by garbage; JSON keys dropped or duplicated, values of the wrong type, huge, negative,
NaN or past int64 nanoseconds, identifiers copied elsewhere (parent cycles), deep nesting; text
lines dropped, duplicated or with one field replaced. Option values are drawn from valid values
and from the values the options must refuse.

:func:`run_cli` runs ``tacit.cli.main.main`` with ``sys.argv`` patched, bounded in time by an
interval timer, and classifies what happened (:data:`OUTCOMES`).
"""

from __future__ import annotations

import csv
import faulthandler
import gzip
import hashlib
import io
import json
import re
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from clirun import run_here
from ss_sample import SS
from tacit.causal_paths.from_spans import messages_from_spans
from tacit.formats.blind import write_blind
from tacit.formats.format_names import WRITE
from tacit.formats.jaeger import write_jaeger
from tacit.formats.messagetable import write_message_table
from tacit.formats.otlp import write_otlp
from tacit.formats.pcap_write import write_packets, write_pcap
from tacit.formats.zipkin import write_zipkin
from tacit.model.roles import infer_roles
from tacit.simulate import load_app, simulate
from tacit.simulate.app_packets import app_packets
from tacit.simulate.request_streams import RequestStreamParams, simulate_requests
from tacit.simulate.syslog_cascades import CascadeParams, simulate_cascades

TIMEOUT_S = 20.0
"""Each run must end within this many seconds."""

OUTCOMES = ("ok", "error", "usage", "traceback", "bad exit", "timeout", "input modified")
"""ok: exit 0. error: exit 2 with one ``tacit: error:`` line. usage: exit 2 with typer's usage
text (a refused option value). The rest are defects."""

GOOD = frozenset({"ok", "error", "usage"})

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
PROFILES = {
    # make test: a few derandomized examples per command, the same on every run.
    "ci": settings(
        max_examples=5, derandomize=True, deadline=None, database=None, suppress_health_check=_SLOW
    ),
    # make bench: many random examples.
    "bench": settings(max_examples=100, deadline=None, database=None, suppress_health_check=_SLOW),
}
"""Hypothesis settings of the fuzzing runs, applied per test (never loaded globally)."""

# --- seeds ---------------------------------------------------------------------------------

T0 = 1_661_140_374_351_773_094
STRACE = "\n".join(
    [
        "10:00:00.000100 socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) = 3",
        "10:00:00.000200 connect(3, {sa_family=AF_INET, sin_port=htons(80), "
        'sin_addr=inet_addr("10.0.0.2")}, 16) = 0',
        "10:00:00.000300 getsockname(3, {sa_family=AF_INET, sin_port=htons(45678), "
        'sin_addr=inet_addr("10.0.0.1")}, [16]) = 0',
        '10:00:00.001000 write(3, "GET / HTTP/1.1\\r\\n\\r\\n", 18) = 18',
        '10:00:00.002000 read(3, "HTTP/1.1 200 OK\\r\\n\\r\\n", 4096) = 19 <0.000012>',
        "10:00:00.002300 close(3) = 0",
        "10:00:00.002700 +++ exited with 0 +++",
    ]
)
EVENTS = "\n".join(
    json.dumps(e)
    for e in [
        {"time": T0, "host": "web", "pid": 7, "fd": 3, "call": "connect",
         "local": "10.0.0.1:45678", "remote": "10.0.0.2:80"},
        {"time": T0 + 1000, "host": "web", "pid": 7, "fd": 3, "call": "send", "bytes": 18,
         "local": "10.0.0.1:45678", "remote": "10.0.0.2:80"},
        {"time": T0 + 900, "host": "db", "pid": 9, "fd": 4, "call": "accept",
         "local": "10.0.0.2:80", "remote": "10.0.0.1:45678"},
        {"time": T0 + 1500, "host": "db", "pid": 9, "fd": 4, "call": "recv", "bytes": 18,
         "local": "10.0.0.2:80", "remote": "10.0.0.1:45678"},
    ]
)  # fmt: skip
TCP_RPCS = """id,local,peer,start_s,first_byte_ms,server_ms,slow
lossy,10.0.0.1:443,198.51.100.7:5000,1000.1,1400,10,true
busy,10.0.0.1:443,198.51.100.8:6000,1000.6,60,50,true
"""
FEATURES = (
    json.dumps({"id": "p1", "slow": True, "server_bound": True, "network_bound": False,
                "client_bound": False, "retransmissions": 0, "rtt_ns": 5, "minrtt_ns": 5})
    + "\n" + json.dumps({"id": "p2", "slow": False}) + "\n"
)  # fmt: skip
RULES_DIR = Path(__file__).resolve().parents[2] / "src" / "tacit" / "diagnosis" / "rules"

KINDS = (
    "jaeger", "zipkin", "otlp", "spancsv", "blind", "messages", "strace", "events", "pcap",
    "syslog", "topology", "syslog_rpcs", "rules", "trace_rules", "features", "ss", "tcp_rpcs",
    "callgraph", "app_pcap", "services",
)  # fmt: skip
SUFFIX = {
    "jaeger": ".json", "zipkin": ".json", "otlp": ".json", "spancsv": ".csv", "blind": ".jsonl",
    "messages": ".csv", "strace": ".strace", "events": ".jsonl", "pcap": ".pcap",
    "syslog": ".log", "topology": ".txt", "syslog_rpcs": ".csv", "rules": ".rules",
    "trace_rules": ".rules", "features": ".jsonl", "ss": ".txt", "tcp_rpcs": ".csv",
    "callgraph": ".yaml", "app_pcap": ".pcap", "services": ".yaml",
}  # fmt: skip
PCAP_KINDS = frozenset({"pcap", "app_pcap"})
JSON_KINDS = frozenset({"jaeger", "zipkin", "otlp"})
JSONL_KINDS = frozenset({"blind", "events", "features"})


class Seeds(dict[str, bytes]):
    """Input kind → a small valid file's bytes (shown short in Hypothesis's reports)."""

    def __repr__(self) -> str:
        return f"Seeds({', '.join(self)})"


def build_seeds(d: Path) -> Seeds:
    """Small valid inputs of every kind, as bytes (``d`` holds the intermediate files)."""
    sim = simulate(load_app(None), 40, n_requests=12, seed=3)
    seeds = Seeds()
    for kind, writer in (("jaeger", write_jaeger), ("zipkin", write_zipkin), ("otlp", write_otlp)):
        writer(d / f"seed.{kind}.json", sim)
        seeds[kind] = (d / f"seed.{kind}.json").read_bytes()
    observed = infer_roles(sim)
    write_blind(d / "seed.blind.jsonl", observed.without_truth())
    seeds["blind"] = (d / "seed.blind.jsonl").read_bytes()
    write_message_table(d / "seed.messages.csv", messages_from_spans(observed.spans).messages)
    seeds["messages"] = (d / "seed.messages.csv").read_bytes()
    seeds["spancsv"] = span_csv(json.loads(seeds["jaeger"]))
    seeds["strace"] = STRACE.encode() + b"\n"
    seeds["events"] = EVENTS.encode() + b"\n"
    stream = simulate_requests(RequestStreamParams(clients=2, duration_ns=150_000_000, seed=3))
    write_packets(d / "seed.pcap", stream.packets)
    seeds["pcap"] = (d / "seed.pcap").read_bytes()
    s = 10**9
    cascades = simulate_cascades(
        CascadeParams(n_agg=2, n_tor=2, duration_ns=1800 * s, n_rpcs=30, seed=5)
    )
    seeds["syslog"] = cascades.text().encode()
    seeds["topology"] = "".join(f"{a} {b}\n" for a, b in cascades.topology.links()).encode()
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["time_ns", "src", "dst", "one_way_ns", "end_to_end_ns"])
    w.writerows(
        zip(
            cascades.rpc_time,
            cascades.rpc_src,
            cascades.rpc_dst,
            cascades.rpc_one_way_ns,
            cascades.rpc_end_to_end_ns,
            strict=True,
        )
    )
    seeds["syslog_rpcs"] = buf.getvalue().encode()
    seeds["rules"] = (RULES_DIR / "default.rules").read_bytes()
    seeds["trace_rules"] = (RULES_DIR / "traces.rules").read_bytes()
    seeds["features"] = FEATURES.encode()
    seeds["ss"] = SS.encode()
    seeds["tcp_rpcs"] = TCP_RPCS.encode()
    code = main_exit(["callgraph", str(d / "seed.jaeger.json"), "--out", str(d / "cg.yaml")])
    assert code == 0, "the seed call graph could not be learned"
    seeds["callgraph"] = (d / "cg.yaml").read_bytes()
    app = app_packets(sim)
    write_pcap(d / "seed.app.pcap", app.frames, app.times)
    seeds["app_pcap"] = (d / "seed.app.pcap").read_bytes()
    seeds["services"] = yaml.safe_dump(app.service_map()).encode()
    return seeds


def span_csv(jaeger: dict) -> bytes:
    """The spans of a Jaeger document as a span CSV (the Nezha export's columns)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["TraceID", "SpanID", "ParentID", "PodName", "OperationName",
                "StartTimeUnixNano", "EndTimeUnixNano", "Duration"])  # fmt: skip
    for trace in jaeger["data"]:
        # Deployment pods: <service>-<template hash>-<suffix>, as Kubernetes names them.
        hosts = {
            p: f"{proc['serviceName']}-579b9bff58-t{p[1:]:0>4}"
            for p, proc in trace["processes"].items()
        }
        for span in trace["spans"]:
            parent = span["references"][0]["spanID"] if span["references"] else ""
            start, duration = span["startTime"] * 1000, span["duration"] * 1000
            w.writerow([span["traceID"], span["spanID"], parent, hosts[span["processID"]],
                        span["operationName"], start, start + duration, duration])  # fmt: skip
    return buf.getvalue().encode()


def main_exit(argv: list[str]) -> int:
    """Exit code of one in-process run (no timeout, output discarded)."""
    return run_cli(argv, timeout_s=None).exit


# --- mutations -----------------------------------------------------------------------------

BAD_NUMBERS: list[Any] = [
    0, -1, -(2**63), 2**63, 2**64, 2**63 - 1, 10**30, 1e23, -1e23, 1e308, 0.5, -0.0,
    float("nan"), float("inf"), float("-inf"),
]  # fmt: skip
BAD_VALUES: list[Any] = [
    *BAD_NUMBERS, None, True, "", "x", "é\u0000\ud7ff", "1e23", "NaN", "-1", [], {}, [None],
    {"": None},
]  # fmt: skip
BAD_TOKENS = [
    "", "nan", "inf", "-inf", "-1", "0", "9223372036854775808", "18446744073709551616", "1e23",
    "-1e23", "1e309", "99999999999999999999999999", "x", "é", "\u0000", "\ufeff", ",", '"', "\t",
    "0x10", "1_000", "[]", "{}",
]  # fmt: skip


def deep(n: int) -> str:
    """A placeholder :func:`dump_json` writes as a list nested ``n`` deep."""
    return f"\u0000deep:{n}"


def _paths(doc: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _strings(doc: Any) -> list[str]:
    out: list[str] = []
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return out


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


@st.composite
def json_mutation(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with one structural change at a random place."""
    paths = list(_paths(doc))
    path = draw(st.sampled_from(paths))
    op = draw(
        st.sampled_from(["replace", "drop", "duplicate", "copy string", "deep", "bad number"])
    )
    if not path:
        if op == "deep":
            return deep(draw(st.integers(100, 100_000)))
        return draw(st.sampled_from(BAD_VALUES))
    parent, key = _get(doc, path[:-1]), path[-1]
    if op == "replace":
        parent[key] = draw(st.sampled_from(BAD_VALUES))
    elif op == "bad number":
        parent[key] = draw(st.sampled_from(BAD_NUMBERS))
    elif op == "drop":
        del parent[key]
    elif op == "duplicate":
        if isinstance(parent, list):
            parent.insert(key, parent[key])
        else:
            parent[f"{key}"] = parent[key]
            parent[f"{key}_"] = parent[key]
    elif op == "copy string":  # an id copied over another: duplicates and parent cycles
        strings = _strings(doc)
        parent[key] = draw(st.sampled_from(strings)) if strings else ""
    else:
        parent[key] = deep(draw(st.integers(10, 3000)))
    return doc


def dump_json(doc: Any) -> bytes:
    """JSON as Python writes it (NaN and infinities as bare words, as some exporters do), with
    each :func:`deep` placeholder written as nested lists."""
    text = json.dumps(doc)
    return re.sub(
        r'"\\u0000deep:(\d+)"', lambda m: "[" * int(m[1]) + "]" * int(m[1]), text
    ).encode()


@st.composite
def text_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with one line dropped, duplicated, moved, or one of its fields replaced."""
    lines = data.split(b"\n")
    i = draw(st.integers(0, len(lines) - 1))
    op = draw(st.sampled_from(["drop", "duplicate", "swap", "field", "field", "field"]))
    if op == "drop":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        parts = re.split(rb"([,\s:=/()]+)", lines[i])
        k = draw(st.integers(0, len(parts) - 1))
        parts[k] = draw(st.sampled_from(BAD_TOKENS)).encode()
        lines[i] = b"".join(parts)
    return b"\n".join(lines)


@st.composite
def byte_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` truncated, with bytes flipped or inserted, emptied, or replaced by garbage."""
    op = draw(st.sampled_from(["truncate", "flip", "insert", "empty", "garbage", "gzip"]))
    n = len(data)
    if op == "truncate":
        return data[: draw(st.integers(0, max(n - 1, 0)))]
    if op == "flip":
        b = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            if b:
                i = draw(st.integers(0, len(b) - 1))
                b[i] ^= draw(st.integers(1, 255))
        return bytes(b)
    if op == "insert":
        i = draw(st.integers(0, n))
        return data[:i] + draw(st.binary(min_size=1, max_size=16)) + data[i:]
    if op == "empty":
        return b""
    if op == "gzip":  # the right magic, a cut stream
        z = gzip.compress(data)
        return z[: draw(st.integers(0, len(z)))]
    return draw(st.binary(max_size=256))


@st.composite
def mutated(draw: st.DrawFn, kind: str, seed: bytes) -> bytes:
    """A malformed file of ``kind`` grown from ``seed`` (sometimes still valid)."""
    data = seed
    for _ in range(draw(st.integers(1, 3))):
        layer = draw(st.sampled_from(["structure", "structure", "text", "bytes"]))
        if layer == "structure" and kind in JSON_KINDS:
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError):
                continue
            data = dump_json(draw(json_mutation(doc)))
        elif layer == "structure" and kind in JSONL_KINDS:
            lines = data.split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            try:
                doc = json.loads(lines[i])
            except (ValueError, RecursionError):
                continue
            lines[i] = dump_json(draw(json_mutation(doc)))
            data = b"\n".join(lines)
        elif layer in ("structure", "text") and kind not in PCAP_KINDS:
            data = draw(text_mutation(data))
        else:
            data = draw(byte_mutation(data))
    return data


# --- option values -------------------------------------------------------------------------

COUNT_VALUES = ["0", "1", "3", "-1", "nan", "1e9", "9223372036854775808", "x", ""]
FLOAT_VALUES = ["0", "0.5", "1", "1.5", "-0.5", "nan", "inf", "-inf", "1e308", "1e-320", "x"]
DURATION_VALUES = ["1s", "250ms", "0", "0s", "-1s", "nan", "1e30s", "5 parsecs", "", "1ns", "9e9h"]


def option_values(kind: str) -> st.SearchStrategy[str]:
    """Values for an option taking a ``kind`` (count, float, duration, or a list of choices)."""
    pools = {"count": COUNT_VALUES, "float": FLOAT_VALUES, "duration": DURATION_VALUES}
    return st.sampled_from(pools[kind])


# --- commands ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command: its words, the inputs it takes (``{kind}`` placeholders in ``args``), and
    the options whose values are fuzzed (name → ``count``/``float``/``duration`` or choices)."""

    name: str
    args: tuple[str, ...]
    options: dict[str, str | tuple[str, ...]] = field(default_factory=dict)

    def inputs(self) -> list[str]:
        return [a[1:-1] for a in self.args if a.startswith("{") and a[1:-1] in KINDS]


TRACE_KINDS = ("jaeger", "zipkin", "otlp", "spancsv")
DETECT_OPTS: dict[str, str | tuple[str, ...]] = {
    "--k": "float",
    "--history-fraction": "float",
    "--min-history": "count",
    "--bucket": "duration",
    "--top": "count",
    "--by": ("endpoint", "service,client,hour", "nope", ""),
}
COMMANDS = [
    Command(
        "evaluate",
        ("evaluate", "{traces}", "--algorithm", "traceweaver,wap5,fcfs,vpath", "--json"),
        {"--sample": "float", "--instrumented": ("frontend", "", "nope,,x")},
    ),
    Command(
        "reconstruct",
        ("reconstruct", "{blind}", "--callgraph", "{callgraph}", "--out", "{out}/t.json"),
        {
            "--algorithm": ("traceweaver", "wap5", "fcfs", "vpath", "nope"),
            "--format": WRITE,
        },
    ),
    Command("reconstruct-learn", ("reconstruct", "{traces}", "--out", "{out}/t.json")),
    Command("blind", ("blind", "{traces}", "--out", "{out}/b.jsonl")),
    Command("callgraph", ("callgraph", "{traces}", "--out", "{out}/cg.yaml", "--json")),
    Command(
        "capture",
        ("capture", "{app_pcap}", "--services", "{services}", "--out", "{out}/s.jsonl", "--json"),
        {"--protocol": ("auto", "http", "http2", "redis", "memcached", "nope")},
    ),
    Command(
        "capture reconstruct",
        (
            "capture",
            "{app_pcap}",
            "--reconstruct",
            "--callgraph",
            "{callgraph}",
            "--out",
            "{out}/t.json",
        ),
        {"--algorithm": ("traceweaver", "fcfs", "nope"), "--format": (*WRITE, "nope")},
    ),
    Command(
        "paths link",
        ("paths", "link", "{messages}", "--json"),
        {
            "--top": "count",
            "--rank": ("expected", "count", "mean_latency", "nope"),
            "--input-format": ("auto", "table", "strace", "events", "spans", "nope"),
        },
    ),
    Command("paths link strace", ("paths", "link", "{strace}", "{events}", "--json")),
    Command("paths link spans", ("paths", "link", "{traces}", "--top", "3")),
    Command(
        "paths evaluate",
        ("paths", "evaluate", "{traces}", "--json"),
        {"--clock-offset-max": "duration", "--seed": "count"},
    ),
    Command(
        "latency response",
        ("latency", "response", "{pcap}", "--json", "--rows"),
        {
            "--gap-threshold": "duration",
            "--epoch": "duration",
            "--algorithm": ("modes", "centres", "threshold", "nope"),
            "--server": ("10.1.0.1:443", "443", "10.1.0.1", "x:y", "::1:99999", ""),
        },
    ),
    Command(
        "latency oneway simulate",
        ("latency", "oneway", "simulate", "{pcap}", "--packets", "3000", "--memory", "20000"),
        {
            "--loss": "float",
            "--reorder": "float",
            "--seed": "count",
            "--memory": "count",
            "--rate": "float",
            "--packets": "count",
        },
    ),
    Command("diagnose detect", ("diagnose", "detect", "{traces}", "--json"), DETECT_OPTS),
    Command(
        "diagnose critical-path",
        ("diagnose", "critical-path", "{traces}", "--json", "--html", "{out}/r.html"),
        {"--slowest": "count", "--top": "count", "--blind": ("",)},
    ),
    Command(
        "diagnose explain",
        ("diagnose", "explain", "{traces}", "--rules", "{trace_rules}", "--json"),
        DETECT_OPTS,
    ),
    Command(
        "diagnose tail",
        ("diagnose", "tail", "{traces}", "--json"),
        {
            "--percent": "float",
            "--inject-share": "float",
            "--seed": "count",
            "--inject": ("frontend:5", "frontend:-5", "nope:1", "frontend:nan", ":", "x"),
        },
    ),
    Command(
        "diagnose abtest",
        ("diagnose", "abtest", "{traces}", "--service", "frontend", "--share", "0.5", "--json"),
        {
            "--share": "float",
            "--effect": "float",
            "--seed": "count",
            "--basis": ("self", "e2e", "e2e-mean", "nope"),
            "--service": ("frontend", "nope", ""),
        },
    ),
    Command("diagnose rules", ("diagnose", "rules", "{features}", "--rules", "{rules}", "--json")),
    Command(
        "diagnose tcp",
        ("diagnose", "tcp", "{ss}", "--rpcs", "{tcp_rpcs}", "--rules", "{rules}", "--json"),
        {"--network-share": "float"},
    ),
    Command(
        "diagnose syslog templates",
        ("diagnose", "syslog", "templates", "{syslog}", "--json"),
        {"--top": "count", "--format": ("auto", "rfc5424", "rfc3164", "bgl", "hpc", "nope")},
    ),
    Command(
        "diagnose syslog mine",
        ("diagnose", "syslog", "mine", "{syslog}", "--topology", "{topology}", "--json"),
        {"--window": "duration", "--horizon": "duration"},
    ),
    Command(
        "diagnose syslog problems",
        (
            "diagnose",
            "syslog",
            "problems",
            "{syslog}",
            "--topology",
            "{topology}",
            "--rpcs",
            "{syslog_rpcs}",
            "--json",
        ),
        {"--window": "duration", "--horizon": "duration"},
    ),
]


@dataclass
class Case:
    """One drawn case: the command line and the inputs it names (path → bytes)."""

    command: str
    argv: list[str]
    files: dict[Path, bytes]
    note: str


def materialize(
    command: Command,
    kinds: dict[str, str],
    data: dict[str, bytes],
    d: Path,
    options: list[str] | None = None,
    note: str = "valid inputs",
) -> Case:
    """The case of ``command`` whose input ``name`` is a ``kinds[name]`` file holding
    ``data[name]`` in ``d``, with ``options`` appended."""
    (d / "out").mkdir(exist_ok=True)
    files: dict[Path, bytes] = {}
    argv: list[str] = []
    for a in command.args:
        if not (a.startswith("{") and a.endswith("}")):
            argv.append(a.replace("{out}", str(d / "out")))
            continue
        name = a[1:-1]
        path = d / f"{name}{SUFFIX[kinds[name]]}"
        files[path] = data[name]
        argv.append(str(path))
    return Case(command.name, argv + (options or []), files, note)


def input_kinds(command: Command, traces: str = "jaeger") -> dict[str, str]:
    """Each input of ``command`` → its kind, the traces being of kind ``traces``."""
    kinds = {a: a for a in command.inputs()}
    if "{traces}" in command.args:
        kinds["traces"] = traces
    return kinds


@st.composite
def cases(draw: st.DrawFn, command: Command, seeds: dict[str, bytes], d: Path) -> Case:
    """A case of ``command`` with inputs in ``d``: one input mutated, options fuzzed, or both."""
    kinds = input_kinds(command, draw(st.sampled_from(TRACE_KINDS)))
    data = {name: seeds[kind] for name, kind in kinds.items()}
    what = draw(st.sampled_from(["input", "input", "option", "both", "valid"]))
    if not command.options and what in ("option", "both"):
        what = "input"
    notes = []
    if what in ("input", "both"):
        victim = draw(st.sampled_from(sorted(kinds)))
        data[victim] = draw(mutated(kinds[victim], data[victim]))
        notes.append(f"{victim}={kinds[victim]} mutated")
    options: list[str] = []
    if what in ("option", "both"):
        chosen = draw(
            st.lists(st.sampled_from(sorted(command.options)), min_size=1, max_size=2, unique=True)
        )
        for opt in chosen:
            spec = command.options[opt]
            value = draw(option_values(spec) if isinstance(spec, str) else st.sampled_from(spec))
            options += [opt] if spec == ("",) else [opt, value]
            notes.append(f"{opt}={value!r}")
    return materialize(command, kinds, data, d, options, "; ".join(notes) or "valid inputs")


# --- running -------------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised in the running command when its time is up (not an Exception: nothing catches)."""


@dataclass
class Run:
    """What one in-process run did."""

    outcome: str
    exit: int
    stdout: str
    stderr: str
    seconds: float


WATCHDOG_S = 60.0
"""Past the timeout, how long a run may still go on before the whole process is ended."""


@contextmanager
def _alarm(timeout_s: float | None) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the run after ``timeout_s``. The timer's signal is handled
    only when the interpreter runs again, never inside a compiled (numba) loop; so that such a
    loop cannot hang the suite, a watchdog thread of the C runtime (``faulthandler``) prints
    every thread's stack and ends the process ``WATCHDOG_S`` later."""
    if timeout_s is None:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    faulthandler.dump_traceback_later(timeout_s + WATCHDOG_S, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _classify(code: int, stderr: str) -> str:
    if code == 0:
        return "ok"
    if code != 2 or "Traceback" in stderr:
        return "bad exit"
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if lines and lines[-1].startswith("tacit: error: ") and len(lines[-1]) < 2000:
        return "error"
    if "Usage:" in stderr:
        return "usage"
    return "bad exit"


def run_cli(argv: list[str], timeout_s: float | None = TIMEOUT_S) -> Run:
    """Run ``tacit ARGV`` in this process as the console script does, bounded in time."""
    t0 = time.perf_counter()
    try:
        with _alarm(timeout_s):
            done = run_here(*argv)
        outcome, code, stdout, stderr = "", done.returncode, done.stdout, done.stderr
    except CaseTimeout:
        outcome, code, stdout, stderr = "timeout", -1, "", ""
    except BaseException:
        outcome, code, stdout, stderr = "traceback", 1, "", traceback.format_exc()
    seconds = time.perf_counter() - t0
    return Run(outcome or _classify(code, stderr), code, stdout, stderr, seconds)


def digest(files: dict[Path, bytes]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def run_case(case: Case, timeout_s: float | None = TIMEOUT_S) -> Run:
    """Write the case's inputs, run it, and check the inputs are byte-identical afterwards."""
    for path, data in case.files.items():
        path.write_bytes(data)
    before = {p: hashlib.sha256(b).hexdigest() for p, b in case.files.items()}
    run = run_cli(case.argv, timeout_s)
    if run.outcome in GOOD and digest(case.files) != before:
        run.outcome = "input modified"
    return run


def describe(case: Case, run: Run) -> dict[str, Any]:
    """A failing case for a report: the command line, what was mutated, the input heads."""
    return {
        "command": case.command,
        "argv": case.argv,
        "mutation": case.note,
        "outcome": run.outcome,
        "exit": run.exit,
        "stderr_tail": run.stderr.strip().splitlines()[-6:],
        "inputs": {p.name: repr(b[:300]) for p, b in case.files.items()},
    }
