"""Traces written as OTLP/JSON: one ``ExportTraceServiceRequest`` document, or JSON Lines of
them (:mod:`.otlp`), with every span's details as they were read."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tacit.formats.common import PEER_TAGS, THREAD_TAGS, Traces, first_tag, hex_ids, merged_tags
from tacit.formats.otlp_rows import INSTANCE_ATTRS, SERVICE_ATTR
from tacit.formats.textio import dump_json, write_json
from tacit.model.span_details import NO_DETAIL, STATUS_UNSET
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTable
from tacit.outputs import atomic_output

_KIND_NUMBERS = {UNKNOWN: 0, INTERNAL: 1, SERVER: 2, CLIENT: 3}


def _any(value: Any) -> dict[str, Any]:
    """A Python value as an ``AnyValue`` (the inverse of :func:`.otlp_json._any_value`). JSON has
    no infinity or NaN: a double that is not finite is written as protobuf's JSON mapping writes
    it (``"Infinity"``, ``"-Infinity"``, ``"NaN"``)."""
    kind = type(value)
    if kind is str:  # most attributes: at once, before the checks below
        return {"stringValue": value}
    if kind is int:
        return {"intValue": str(value)}
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, (int, np.integer)):
        return {"intValue": str(int(value))}
    if isinstance(value, (float, np.floating)):
        return {"doubleValue": float(value) if math.isfinite(value) else _float_word(float(value))}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any(v) for v in value]}}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": _key_values(value)}}
    return {"stringValue": str(value)}


def _float_word(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _key_values(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any(v)} for k, v in attrs.items()]


def _resource_attributes(service: str, instance: str, resource: Mapping[str, Any]) -> dict:
    """The attributes of a written resource: the input's, with ``service.name`` and, when they
    would not read back as ``instance``, the instance in the attribute that names it."""
    attrs = {**resource, SERVICE_ATTR: service}
    if (first_tag(attrs, INSTANCE_ATTRS) or service) != instance:
        attrs[next((k for k in INSTANCE_ATTRS if k in attrs), INSTANCE_ATTRS[-1])] = instance
    return attrs


def otlp_document(spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None) -> dict:
    """``spans`` as an OTLP JSON ``ExportTraceServiceRequest``.

    One ``resourceSpans`` per (service, instance, resource attributes), the instance as
    ``service.instance.id`` when it differs from the service and no resource attribute names
    it. Each span has the attributes, status and events its input had (its detail), the
    columns' peer and thread, and ``tags`` for its row, typed by their Python type. Ids that
    are not hex are replaced (see :func:`common.hex_ids`).
    """
    tags = tags or {}
    s = spans.strings
    trace_ids, span_ids = hex_ids(spans)
    resources: dict[tuple[int, int, int], list[int]] = {}
    for row in sorted(range(len(spans)), key=lambda r: spans.start[r]):
        resource = (spans.detail(row) or NO_DETAIL).resource
        key = (int(spans.service[row]), int(spans.instance[row]), id(resource))
        resources.setdefault(key, []).append(row)
    out = []
    for (svc, inst, _), rows in resources.items():
        resource = (spans.detail(rows[0]) or NO_DETAIL).resource
        out_spans = []
        for row in rows:
            d = spans.detail(row) or NO_DETAIL
            columns: dict[str, Any] = {}
            if spans.peer[row] != NONE:
                columns[PEER_TAGS[0]] = s[int(spans.peer[row])]
            if spans.thread[row] != NONE:
                columns[THREAD_TAGS[0]] = int(spans.thread[row])
            span: dict[str, Any] = {"traceId": trace_ids[row], "spanId": span_ids[row]}
            if spans.parent[row] != NONE:
                span["parentSpanId"] = span_ids[int(spans.parent[row])]
            span |= {
                "name": s[int(spans.endpoint[row])],
                "kind": _KIND_NUMBERS[int(spans.kind[row])],
                "startTimeUnixNano": str(int(spans.start[row])),
                "endTimeUnixNano": str(int(spans.end[row])),
                "attributes": _key_values(merged_tags(d, columns, tags.get(row, {}))),
            }
            if d.events:
                span["events"] = [
                    {
                        "timeUnixNano": str(e.time),
                        "name": e.name,
                        "attributes": _key_values(e.attributes),
                    }
                    for e in d.events
                ]
            if d.status != STATUS_UNSET:
                span["status"] = {"code": d.status}
                if d.status_message:
                    span["status"]["message"] = d.status_message
            out_spans.append(span)
        out.append(
            {
                "resource": {
                    "attributes": _key_values(
                        _resource_attributes(s[svc] or "", s[inst] or "", resource)
                    )
                },
                "scopeSpans": [{"scope": {"name": "tacit"}, "spans": out_spans}],
            }
        )
    return {"resourceSpans": out}


def write_otlp(
    path: str | Path, spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None
) -> None:
    """Write ``spans`` as OTLP JSON (gzip when the name ends in .gz)."""
    write_json(path, otlp_document(spans, tags))


def write_otlp_lines(path: str | Path, batches: Iterable[Traces]) -> None:
    """Write batches of traces (spans and their tags) as OTLP JSON Lines, one
    ``ExportTraceServiceRequest`` (:func:`otlp_document`) per batch and line, as the
    OpenTelemetry Collector's file exporter writes them; each written as it comes, the file
    appearing whole when the batches end (:func:`tacit.outputs.atomic_output`)."""
    with atomic_output(path) as f:
        for spans, tags in batches:
            f.write(dump_json(otlp_document(spans, tags)) + b"\n")
