"""Benchmark: online reconstruction (TraceWeaver §5.3) — flat memory on a growing stream.

Simulates the embedded shop app at a steady 100 requests/s for streams of growing length,
feeds each through :class:`OnlineTraceWeaver` in chunks of 1,000 spans (in order of span end,
finished traces discarded), and prints one JSON object: per stream length, the spans, the most
spans held at once, the peak heap memory (tracemalloc) that one push of a chunk adds on top of
what was allocated before it (the input table and the feeder's arrays excluded), the link
accuracy of the streamed result, and for comparison the offline algorithm's peak memory and
link accuracy on the same spans. Flat memory: the online peak stays the same as the stream
grows while the offline peak grows with it.

Then the same through the command line: ``tacit reconstruct --algorithm traceweaver-online`` in a
subprocess on blind-span files of about 20,000 and 200,000 spans at the same rate, written in
order of span end (streamed) and grouped by instance (read whole, the batch path), with each
run's peak resident memory (``ru_maxrss`` of the child) and the ratio of the long stream's peak
to the short one's. Flat memory: a 10x longer stream streamed in at most 1.2x the memory.

And on OTLP of the same traffic with its trace context, about 80,000 and 320,000 spans (1x and
4x): JSON Lines in order of span end, as the OpenTelemetry Collector's file exporter writes a
stream (streamed trace by trace, :mod:`tacit.reconstruct.trace_stream`), beside the same spans
as one OTLP JSON document (read whole), with each run's link accuracy against the simulator's
ground truth.

``python bench/bench_online.py [PART ...]`` runs only the named parts (``library``, ``cli``,
``cli_otlp``); all by default.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import tacit
from tacit.formats import read_spans, write_otlp
from tacit.formats.blind import write_blind
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, NONE
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.online import OnlineParams, OnlineTraceWeaver, stream_chunks
from tacit.reconstruct.traceweaver import reconstruct_traceweaver
from tacit.simulate import load_app, simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the stream writers
from span_streams import write_otlp_stream

RATE = 100
DURATIONS = (10, 20, 40)
CLI_DURATIONS = (12.5, 125.0)
"""About 20,000 and 200,000 spans of the shop app at :data:`RATE`."""
OTLP_DURATIONS = (50.0, 200.0)
"""About 80,000 and 320,000 spans (1x and 4x): longer than the command line's windows (the
:class:`OnlineParams` defaults, 10 s each) and a trace's hold (11 s), so that the shorter stream
already holds as many spans at once as the longer."""
_PEAK_OF_CHILD = (
    "import json, resource, subprocess, sys; "
    "out = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True).stdout; "
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
    "print(json.dumps({'peak_kib': peak, 'summary': json.loads(out)}))"
)
"""Runs a command (a fresh process per measurement) and prints its peak resident set (KiB)
and its JSON output."""
ONLINE = OnlineParams(
    window_ns=2 * 10**9, lookahead_ns=2 * 10**9, max_request_ns=2 * 10**9, lateness_ns=10**8
)


def online_run(blind, truth_parent_pos, graph) -> dict:
    """Stream ``blind``; count right links on the fly, keep nothing of the finished traces."""
    tw = OnlineTraceWeaver(graph, online=ONLINE)
    right = links = 0
    t0 = time.perf_counter()
    peak = held = 0
    tracemalloc.start()
    for chunk in itertools.chain(stream_chunks(blind, 1000), [None]):  # lazily, as a stream
        tracemalloc.reset_peak()  # the feeder's own arrays grow with the stream: not counted
        base, _ = tracemalloc.get_traced_memory()
        for f in tw.push(chunk) if chunk is not None else tw.close():
            client = f.spans.kind == CLIENT
            links += int(client.sum())
            right += int((f.parent[client] == truth_parent_pos[f.position[client]]).sum())
        current, top = tracemalloc.get_traced_memory()
        peak, held = max(peak, top - base), max(held, current - base)
    tracemalloc.stop()
    return {
        "peak_pending_spans": tw.peak_pending,
        "peak_heap_mb": round(peak / 2**20, 1),
        "held_heap_mb": round(held / 2**20, 1),
        "link_accuracy": round(right / links, 4),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def offline_run(blind, truth_parent, graph) -> dict:
    t0 = time.perf_counter()
    tracemalloc.start()
    rec = reconstruct_traceweaver(blind, graph)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    client = blind.kind == CLIENT
    return {
        "peak_heap_mb": round(peak / 2**20, 1),
        "link_accuracy": round(float(np.mean(rec.parent[client] == truth_parent[client])), 4),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def cli_run(spans_file: Path, graph_file: Path, work: Path, output_format: str = "jaeger") -> dict:
    """``tacit reconstruct --algorithm traceweaver-online`` on ``spans_file`` in a subprocess,
    writing ``work / "traces"`` (replacing the previous run's) as ``output_format``: its peak
    resident memory, time and whether it streamed."""
    cli = "from tacit.cli.main import main; main()"
    args = ["reconstruct", str(spans_file), "--out", str(work / "traces"), "--force"]
    args += ["--format", output_format]
    args += ["--callgraph", str(graph_file), "--algorithm", "traceweaver-online", "--json"]
    src = str(Path(tacit.__file__).parents[1])
    env = os.environ | {"PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, sys.executable, "-c", cli, *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result = json.loads(run.stdout)
    return {
        "spans": result["summary"]["spans"],
        "streamed": result["summary"]["streamed"],
        "peak_rss_mb": round(result["peak_kib"] / 1024, 1),
        "seconds": round(time.perf_counter() - t0, 2),
    }


@contextmanager
def _workdir(graph) -> Iterator[tuple[Path, Path]]:
    """A temporary directory holding ``graph`` saved as a call graph file: (dir, file)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        graph.save(work / "callgraph.yaml")
        yield work, work / "callgraph.yaml"


def _peak_ratios(runs: dict[str, list[dict]]) -> dict:
    """Per way of running, its runs and the peak memory of the longest over the shortest."""
    return {
        name: {"runs": r, "peak_ratio": round(r[-1]["peak_rss_mb"] / r[0]["peak_rss_mb"], 2)}
        for name, r in runs.items()
    }


def cli_rows(app, graph) -> dict:
    """The command line's peak memory, streamed and batch, on a short and a 10x longer stream."""
    runs: dict[str, list[dict]] = {"streamed": [], "batch": []}
    with _workdir(graph) as (work, graph_file):
        for duration in CLI_DURATIONS:
            sim = simulate(app, RATE, duration_s=duration, seed=3, record_threads=False)
            blind = infer_roles(sim).without_truth()
            for name, in_end_order in (("streamed", True), ("batch", False)):
                spans_file = work / f"{name}.jsonl"
                write_blind(spans_file, blind, in_end_order)
                runs[name].append(cli_run(spans_file, graph_file, work))
    return _peak_ratios(runs)


def cli_otlp_rows(app, graph) -> dict:
    """The command line's peak memory and link accuracy on OTLP, streamed (JSON Lines in end
    order) and batch (one document), on a stream and a 4x longer one."""
    runs: dict[str, list[dict]] = {"streamed": [], "batch": []}
    with _workdir(graph) as (work, graph_file):
        for duration in OTLP_DURATIONS:
            sim = simulate(app, RATE, duration_s=duration, seed=3, record_threads=False)
            truth = _parents(sim)
            for name, writer, spans_file in (
                ("streamed", write_otlp_stream, work / "stream.otlp.jsonl"),
                ("batch", write_otlp, work / "whole.otlp.json"),
            ):
                writer(spans_file, sim)
                run = cli_run(spans_file, graph_file, work, "otlp")
                got = _parents(read_spans(work / "traces", format="otlp"))
                clients = [k for k, (kind, _) in truth.items() if kind == CLIENT]
                right = sum(got[k][1] == truth[k][1] for k in clients)
                runs[name].append(run | {"link_accuracy": round(right / len(clients), 4)})
                spans_file.unlink()
    return _peak_ratios(runs)


def _parents(spans) -> dict[tuple, tuple]:
    """Per span (by where it ran, its kind and times): its kind and its parent's key."""
    s = spans.strings
    names = [(s[int(i)], s[int(e)]) for i, e in zip(spans.instance, spans.endpoint, strict=True)]
    key = [
        (*n, t0, t1)
        for n, t0, t1 in zip(names, spans.start.tolist(), spans.end.tolist(), strict=True)
    ]
    return {
        key[r]: (int(spans.kind[r]), None if p == NONE else key[p])
        for r, p in enumerate(spans.parent.tolist())
    }


def main() -> None:
    parts = sys.argv[1:] or ["library", "cli", "cli_otlp"]
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=400, seed=7)).spans)
    result: dict = {"benchmark": "online", "rate": RATE, "params": vars(ONLINE)}
    if "library" in parts:
        result["rows"] = library_rows(app, graph)
    if "cli" in parts:
        result["cli"] = cli_rows(app, graph)
    if "cli_otlp" in parts:
        result["cli_otlp"] = cli_otlp_rows(app, graph)
    print(json.dumps(result))


def library_rows(app, graph) -> list[dict]:
    """The online and offline algorithms' peak heap and link accuracy per stream length."""
    rows = []
    for duration in DURATIONS:
        obs = infer_roles(simulate(app, RATE, duration_s=duration, seed=3, record_threads=False))
        blind = obs.without_truth()
        truth = obs.spans.parent
        order = np.argsort(blind.end, kind="stable")
        position = np.empty(len(blind), dtype=np.int64)
        position[order] = np.arange(len(blind))
        truth_pos = np.where(truth >= 0, position[np.maximum(truth, 0)], NONE)[order]
        rows.append(
            {
                "stream_s": duration,
                "spans": len(blind),
                "online": online_run(blind, truth_pos, graph),
                "offline": offline_run(blind, truth, graph),
            }
        )
    return rows


if __name__ == "__main__":
    main()
