"""One set of traces made by the OpenTelemetry SDK, written as one file and as one file per
service, as per-service exporters write them (the Collector's file exporter per pipeline, one SDK
per process): in each format a reader of several files must read as one set of spans.

Three services (front, stock, price) serve overlapping requests: front's server span calls
stock and then price, each through a client span of front's whose callee's server span is in the
callee's file; stock calls redis (a leaf client span), front renders in-process. As HTTP client
instrumentation writes them, the client spans are named by the method alone (``GET``) and name no
peer (``peer.service``): which service a call went to is known only from the server span the
client span is the parent of, which is in another file.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, set_span_in_context

from otel_sdk import collector_json_line, length_prefixed, provider
from tacit.formats import read_spans, write_traces

SERVICES = ("front", "stock", "price")
REQUESTS = 24
MS = 1_000_000
GAP = 3 * MS
"""A new request every 3 ms, each about 12 ms long."""
FORMATS = ("otlp-pb", "otlp-json", "otlp-jsonl", "otlp-collector-pb", "jaeger", "zipkin")
"""OTLP protobuf (a request body per file), OTLP JSON (a document per file), OTLP JSON Lines
and the Collector's length-prefixed protobuf (two exports per file), Jaeger and Zipkin JSON."""
SUFFIX = {
    "otlp-pb": ".pb",
    "otlp-json": ".json",
    "otlp-jsonl": ".jsonl",
    "otlp-collector-pb": ".binpb",
    "jaeger": ".json",
    "zipkin": ".json",
}


def sdk_spans() -> dict[str, list[ReadableSpan]]:
    """The spans each service's SDK finished, with times set so that requests overlap
    (:data:`GAP`)."""
    made = {s: provider(s, f"{s}-{i}f7c") for i, s in enumerate(SERVICES)}
    tracer = {s: p.get_tracer(f"shop.{s}") for s, (p, _) in made.items()}
    t0 = 1_700_000_000_000_000_000
    for i in range(REQUESTS):
        t = t0 + i * GAP + (i % 4) * MS // 3
        root = tracer["front"].start_span(
            "GET /item", kind=SpanKind.SERVER, start_time=t, attributes={"http.route": "/item"}
        )
        ctx = set_span_in_context(root)
        render = tracer["front"].start_span("render", ctx, start_time=t + MS // 10)
        render.end(t + MS // 2)
        at = t + MS
        for callee in ("stock", "price"):
            call = tracer["front"].start_span("GET", ctx, SpanKind.CLIENT, start_time=at)
            served = tracer[callee].start_span(
                f"GET /{callee}",
                set_span_in_context(call),
                SpanKind.SERVER,
                start_time=at + MS // 5,
            )
            length = (3 + (i * 7 + len(callee)) % 4) * MS
            if callee == "stock":
                db = tracer["stock"].start_span(
                    "HGET",
                    set_span_in_context(served),
                    SpanKind.CLIENT,
                    start_time=at + MS // 2,
                    attributes={"db.system": "redis"},
                )
                db.end(at + MS)
            served.end(at + length - MS // 5)
            call.end(at + length)
            at += length + MS // 4
        root.end(at + MS // 2)
    return {s: list(out.get_finished_spans()) for s, (_, out) in made.items()}


def write_exports(spans: dict[str, list[ReadableSpan]], out: Path) -> dict[str, dict]:
    """Per format, the single file holding every span (``all``) and the per-service files
    (``split``: one per service, in :data:`SERVICES` order), written under ``out``."""
    every = [s for service in SERVICES for s in spans[service]]
    made: dict[str, dict] = {}
    for fmt in FORMATS:
        d = out / fmt
        (d / "split").mkdir(parents=True)
        made[fmt] = {"all": d / f"all{SUFFIX[fmt]}", "split": []}
    for name, part in [("all", every), *((s, spans[s]) for s in SERVICES)]:
        request = encode_spans(part)
        half = len(part) // 2
        halves = [encode_spans(part[:half]), encode_spans(part[half:])]
        data = {
            "otlp-pb": request.SerializeToString(),
            "otlp-json": collector_json_line(request),
            "otlp-jsonl": b"".join(collector_json_line(r) for r in halves),
            "otlp-collector-pb": length_prefixed([r.SerializeToString() for r in halves]),
        }
        for fmt, content in data.items():
            path = made[fmt]["all"] if name == "all" else out / fmt / "split" / name
            path = path if name == "all" else path.with_suffix(SUFFIX[fmt])
            path.write_bytes(content)
            if name != "all":
                made[fmt]["split"].append(path)
    # Jaeger and Zipkin as tacit writes them, then cut per service as their exporters would.
    read = read_spans(made["otlp-pb"]["all"])
    for fmt in ("jaeger", "zipkin"):
        write_traces(made[fmt]["all"], read, format=fmt)
        doc = json.loads(made[fmt]["all"].read_text())
        for service in SERVICES:
            path = out / fmt / "split" / f"{service}.json"
            path.write_text(json.dumps(_only(fmt, doc, service)))
            made[fmt]["split"].append(path)
    return made


def _only(fmt: str, doc: object, service: str) -> object:
    """The part of a Jaeger or Zipkin document that ``service`` recorded."""
    if fmt == "zipkin":
        assert isinstance(doc, list)
        return [s for s in doc if s["localEndpoint"]["serviceName"] == service]
    assert isinstance(doc, dict)
    traces = []
    for trace in doc["data"]:
        mine = {p for p, proc in trace["processes"].items() if proc["serviceName"] == service}
        kept = [s for s in trace["spans"] if s["processID"] in mine]
        if kept:
            processes = {p: trace["processes"][p] for p in mine}
            traces.append({**trace, "spans": kept, "processes": processes})
    return {**doc, "data": traces}
