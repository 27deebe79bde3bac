"""OTLP JSON documents (:func:`~tacit.formats.otlp.otlp_document`) as OTLP protobuf bytes.

OTLP's JSON is protobuf's JSON mapping but for the ids, which it writes in hex where the mapping
has base64 (OTLP specification, "JSON Protobuf Encoding"): they are turned back, and the
message classes of ``opentelemetry-proto`` build and serialize the request."""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_IDS = ("traceId", "spanId", "parentSpanId")


def encode_request(doc: dict[str, Any]) -> bytes:
    """The ``ExportTraceServiceRequest`` of OTLP JSON ``doc`` in protobuf's wire form."""
    message = {
        "resourceSpans": [
            {
                **resource,
                "scopeSpans": [
                    {**scope, "spans": [_base64_ids(span) for span in scope.get("spans", [])]}
                    for scope in resource.get("scopeSpans", [])
                ],
            }
            for resource in doc.get("resourceSpans", [])
        ]
    }
    return json_format.ParseDict(message, ExportTraceServiceRequest()).SerializeToString()


def _base64_ids(span: dict[str, Any]) -> dict[str, Any]:
    ids = {k: base64.b64encode(bytes.fromhex(span[k])).decode() for k in _IDS if k in span}
    return {**span, **ids}
