"""Spans made by the OpenTelemetry SDK and written as its exporters and the Collector write
them, for the tests of the OTLP-reading formats."""

from __future__ import annotations

import base64
import json

from google.protobuf.json_format import MessageToDict
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def provider(service: str, pod: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    p = TracerProvider(
        resource=Resource.create(
            {"service.name": service, "k8s.pod.name": pod, "deployment.environment": "test"}
        )
    )
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p, exporter


def collector_json_line(request) -> bytes:
    """One request as the Collector's file exporter writes it with ``format: json``."""
    doc = MessageToDict(request, use_integers_for_enums=True)
    for rs in doc["resourceSpans"]:
        for scope in rs["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def length_prefixed(messages: list[bytes]) -> bytes:
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)
