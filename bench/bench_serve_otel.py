"""Benchmark: ``tacit serve`` on what stock OpenTelemetry instrumentation sends, context broken
the ways deployments break it.

The services of ``tacit experiment otel-app`` (Flask, the OpenTelemetry SDK, its Flask and
requests instrumentations, one process each) export over OTLP/HTTP to a ``tacit serve`` running
in this process with its default windows, in each mode: ``full`` (W3C propagation), ``threadpool``
(a fan-out that does not copy the context), ``detached`` (every call of the frontend from a thread
without context), ``uninstrumented`` (a middle service without the SDK), ``nopropagation`` (a
propagator that carries nothing) and ``queue`` (a producer and a consumer without context between
them). The call graph is learned (``tacit callgraph``) from a separate ``full`` run's spans, the
test environment of TraceWeaver §5.2.1. The stored traces are scored against the app's own log
(:func:`tacit.evaluation.score_traces`), each span's exported parent read from the store's
``given_parent_id``.

Per mode: links the SDK gave that are kept, links that had to be inferred that are right,
requests whose whole trace is right, spans received and neither stored nor counted with a
reason, and how long a trace took to be searchable after its last span arrived (the store's
``finished_ns`` against the ``received_ns`` of the request that brought its last span), and after
the first request was sent. The SDK's batch span processor exports every 5 s by default
(``OTEL_BSP_SCHEDULE_DELAY``), which bounds the latter from below; the full mode runs again with
the services exporting every 0.5 s.

``python bench/bench_serve_otel.py [--seconds S] [--rate R] [--markdown PATH] [MODE ...]``
prints one JSON object, and with ``--markdown`` writes the table of the targets
(``docs/serve-otel.md``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from report_part import publish
from tacit.evaluation import score_traces
from tacit.experiment import OtelAppParams, run_otel_app
from tacit.experiment.otel_app_services import MODES
from tacit.formats import observe
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.serve import ServeConfig, Service

TARGETS = {
    "inferred_right": 0.95,
    "given_kept": 1.0,
    "requests_right": 0.90,
    "unaccounted": 0,
    "first_trace_s": 2.0,
}


def learn(out: Path, seconds: float, rate: float) -> CallGraph:
    run = run_otel_app(OtelAppParams(mode="full", duration_s=seconds, rate=rate), out)
    assert run.spans is not None
    observed, _ = observe([run.spans])
    return learn_callgraph(observed.spans)


def run_mode(
    mode: str,
    callgraph: CallGraph,
    out: Path,
    seconds: float,
    rate: float,
    export_delay_s: float = 5.0,
) -> dict[str, Any]:
    out.mkdir(parents=True)
    config = ServeConfig(http="127.0.0.1:0", grpc="", database=out / "tacit.duckdb")
    svc = Service(config, callgraph).start()
    first_seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # when the first trace became searchable, by the wall clock
        while not stop.is_set() and not first_seen:
            if svc.store.counts()["traces"]:
                first_seen.append(time.time_ns())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        endpoint = f"http://127.0.0.1:{svc.http_port}"
        run = run_otel_app(
            OtelAppParams(
                mode=mode,
                duration_s=seconds,
                rate=rate,
                otlp_endpoint=endpoint,
                export_delay_s=export_delay_s,
            ),
            out / "app",
        )
        idle = svc.wait_idle(120)
        stop.set()
        watcher.join()
        status = svc.extra("/api/tacit/status", {})
        stored = _stored(svc)
    finally:
        stop.set()
        svc.stop()
    score = score_traces(run.truth, stored["traces"], stored["given"])
    first_request = _first_request_ns(run.truth)
    received = status["received"]
    accounted = status["stored"]["spans"] + status["duplicates"]
    return {
        "mode": mode,
        "requests": run.requests_sent,
        "answered": run.requests_answered,
        "spans_received": received,
        "idle_after_run": idle,
        "unaccounted": received - accounted,
        "duplicates": status["duplicates"],
        "given": score["given"],
        "inferred": score["inferred"],
        "roots": score["roots"],
        "requests_right": score["requests"],
        "missing": score["missing"],
        "unobserved_hops": score["unobserved_hops"],
        "unmapped": stored["unmapped"],
        "searchable_after_last_span_s": stored["delay"],
        "first_trace_after_first_request_s": (
            (first_seen[0] - first_request) / 1e9 if first_seen and first_request else None
        ),
    }


def _stored(svc: Service) -> dict[str, Any]:
    cur = svc.store._cursor()
    ids = [r[0] for r in cur.execute("SELECT DISTINCT trace_id FROM traces").fetchall()]
    traces = [json.loads(doc) for t in ids if (doc := svc.store.trace(t)) is not None]
    given = dict(cur.execute("SELECT span_id, given_parent_id FROM spans").fetchall())
    unmapped = dict(
        cur.execute(
            "SELECT unmapped, count(*) FROM spans WHERE unmapped IS NOT NULL GROUP BY ALL"
        ).fetchall()
    )
    delays = [
        d / 1e9
        for (d,) in cur.execute(
            "SELECT t.finished_ns - max(i.received_ns) FROM traces t "
            "JOIN spans s ON s.trace_id = t.trace_id "
            "JOIN ingest i ON s.seq >= i.first_seq AND s.seq < i.first_seq + i.spans "
            "GROUP BY t.trace_id, t.finished_ns"
        ).fetchall()
    ]
    return {
        "traces": traces,
        "given": given,
        "unmapped": unmapped,
        "delay": _quantiles(delays),
    }


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    q = statistics.quantiles(values, n=20) if len(values) > 1 else values * 19
    return {"median": round(statistics.median(values), 3), "p95": round(q[18], 3)}


def _first_request_ns(truth: Path) -> int | None:
    starts = [
        row["start_ns"]
        for line in truth.read_text().splitlines()
        if (row := json.loads(line)).get("parent_span_id") is None and row.get("span_id")
    ]
    return min(starts) if starts else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("modes", nargs="*", default=list(MODES))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        callgraph = learn(base / "test-environment", args.seconds, args.rate)
        results = []
        for mode in args.modes:
            results.append(run_mode(mode, callgraph, base / mode, args.seconds, args.rate))
        quick = run_mode(
            "full", callgraph, base / "full-500ms", args.seconds, args.rate, export_delay_s=0.5
        )
        quick["mode"] = "full, exported every 0.5 s"
        results.append(quick)
    print(json.dumps({"targets": TARGETS, "results": results}, indent=1))
    if args.markdown is not None:
        publish(_report(results, args), args.markdown, echo=False)


def _report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    def share(part: dict[str, Any], good: str) -> str:
        total = part.get("links", part.get("total"))
        if not total:
            return "—"
        return f"{part[good] / total:.1%} ({part[good]:,} of {total:,})"

    def seconds(q: dict[str, float] | None) -> str:
        return "—" if q is None else f"{q['median']:.2f} / {q['p95']:.2f}"

    rows = [
        "| mode | links given, kept | links inferred, right | requests whole | unaccounted | "
        "searchable after the last span (median / p95 s) | first trace after the first "
        "request (s) |",
        "|---|---|---|---|---|---|---|",
        "| **target** | 100% | ≥ 95% | ≥ 90% | 0 | — | ≤ 2 |",
    ]
    for r in results:
        first = r["first_trace_after_first_request_s"]
        rows.append(
            f"| {r['mode']} | {share(r['given'], 'kept')} | {share(r['inferred'], 'right')} | "
            f"{share(r['requests_right'], 'right')} | {r['unaccounted']} | "
            f"{seconds(r['searchable_after_last_span_s'])} | "
            f"{'—' if first is None else f'{first:.2f}'} |"
        )
    return (
        "# `tacit serve` on what the OpenTelemetry SDK sends\n\n"
        f"Written by `python bench/bench_serve_otel.py --seconds {args.seconds:g} --rate "
        f"{args.rate:g} --markdown docs/serve-otel.md` on {time.strftime('%Y-%m-%d')}: the "
        "services of `tacit experiment otel-app` (Flask, the OpenTelemetry SDK and its Flask and "
        "requests instrumentations) exporting over OTLP/HTTP to `tacit serve` with its default "
        "windows, each mode for the time and rate given, the call graph learned from a "
        "separate run with full propagation. Scored against the app's own log of every span's "
        "parent (`tacit.evaluation.score_traces`). The services export every 5 s (the SDK's "
        "default) but in the last row.\n\n" + "\n".join(rows) + "\n"
    )


if __name__ == "__main__":
    main()
