"""OTLP JSON: read and write OpenTelemetry trace exports.

The document is an ``ExportTraceServiceRequest`` in the OTLP/JSON encoding (OTLP specification,
"JSON Protobuf Encoding"; opentelemetry-proto ``trace/v1/trace.proto``)::

    {"resourceSpans": [{"resource": {"attributes": [KeyValue, ...]},
                        "scopeSpans": [{"scope": {...}, "spans": [Span, ...]}]}]}

Exports older than OTLP 0.15 name ``scopeSpans`` ``instrumentationLibrarySpans``; both are read.
Ids are hex strings, times are ``startTimeUnixNano``/``endTimeUnixNano`` (int64, which the
protobuf JSON mapping writes as decimal strings), ``kind`` is the ``SpanKind`` enum as a number
or as its name, and attribute values are ``AnyValue`` objects (``{"stringValue": "x"}``,
``{"intValue": "12"}``, ...). The service is the resource's ``service.name``, the instance its
``k8s.pod.name``, ``host.name`` or ``service.instance.id`` (OpenTelemetry semantic conventions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tacit.errors import InputError
from tacit.formats.common import (
    PEER_TAGS,
    THREAD_TAGS,
    Paths,
    Traces,
    first_tag,
    hex_ids,
    input_files,
    kind_code,
    tag,
    thread_id,
)
from tacit.formats.fields import RecordReader
from tacit.formats.textio import (
    dump_json,
    iter_json_lines,
    load_json,
    write_json,
)
from tacit.model.spans import (
    CLIENT,
    INTERNAL,
    NONE,
    SERVER,
    UNKNOWN,
    SpanTable,
    SpanTableBuilder,
    concat,
)
from tacit.outputs import atomic_output

SUFFIXES = (".json", ".json.gz")
SERVICE_ATTR = "service.name"
INSTANCE_ATTRS = ("k8s.pod.name", "host.name", "service.instance.id")
"""Resource attributes naming the instance, first present wins."""
_SCOPE_LISTS = ("scopeSpans", "instrumentationLibrarySpans")
_KIND_ENUM = ("unspecified", "internal", "server", "client", "producer", "consumer")
"""``SpanKind`` names in enum order (``SPAN_KIND_UNSPECIFIED`` = 0, ...)."""
_KIND_NUMBERS = {UNKNOWN: 0, INTERNAL: 1, SERVER: 2, CLIENT: 3}
_KIND_PREFIX = "SPAN_KIND_"
_ANY_VALUE_KEYS = {
    "bool": "boolValue",
    "int64": "intValue",
    "float64": "doubleValue",
    "string": "stringValue",
}
"""``AnyValue`` field for each type of :func:`common.tag`."""


def read_otlp(paths: Paths) -> SpanTable:
    """Read OTLP JSON trace exports (or directories of .json/.json.gz files) into one table."""
    return concat([read_document(f) for f in input_files(paths, SUFFIXES)])


def read_document(path: Path, doc: Any = None) -> SpanTable:
    """One file's spans; ``doc``: its already parsed JSON, if at hand. A file of JSON Lines,
    one export per line (the OpenTelemetry Collector's file exporter), is read line by line,
    its records numbered from the file's start."""
    src = str(path)
    builder = SpanTableBuilder(src)
    if doc is not None or not is_json_lines(path):
        docs: Iterable[tuple[str, Any]] = [("", load_json(path) if doc is None else doc)]
    else:
        docs = ((f"line {n} ", d) for n, d in iter_json_lines(path))
    record = 0
    for where, d in docs:
        record = _read_export(builder, src, where, d, record)
    return builder.build()


def is_json_lines(path: Path) -> bool:
    """Whether ``path`` holds JSON Lines: a first line that is a whole JSON object, and a second
    line (only those two are parsed)."""
    lines = iter_json_lines(path)
    try:
        _, first = next(lines)
        next(lines)
    except (StopIteration, InputError):
        return False
    finally:
        lines.close()
    return isinstance(first, dict)


def _read_export(builder: SpanTableBuilder, src: str, where: str, doc: Any, record: int) -> int:
    """Add the spans of one ``ExportTraceServiceRequest`` (``where``: its line, for messages,
    and ``record``: the records before it); returns the records read so far."""
    top = RecordReader(src, f"{where}document")
    doc = top.obj(doc, "OTLP document")
    for ri, rs in enumerate(top.get(doc, "resourceSpans", list)):
        rr = RecordReader(src, f"{where}resourceSpans {ri}")
        rs = rr.obj(rs, "resourceSpans entry")
        resource = _attributes(rr, rr.get(rs, "resource", dict, default={}).get("attributes"))
        service = resource.get(SERVICE_ATTR)
        if not isinstance(service, str):
            raise rr.fail(f"resource has no string {SERVICE_ATTR!r} attribute")
        instance = first_tag(resource, INSTANCE_ATTRS) or service
        key = next((k for k in _SCOPE_LISTS if k in rs), _SCOPE_LISTS[0])
        for scope in rr.get(rs, key, list, default=[]):
            for span in rr.get(rr.obj(scope, key), "spans", list, default=[]):
                record += 1
                r = RecordReader(src, record)
                span = r.obj(span, "span")
                trace = r.string(span, "traceId")
                span_id = r.string(span, "spanId")
                r.record = f"{record} (trace {trace} span {span_id})"
                attrs = _attributes(r, span.get("attributes"))
                builder.add(
                    service=service,
                    instance=instance,
                    endpoint=r.string(span, "name"),
                    kind=_kind(r, span),
                    start=r.integer(span, "startTimeUnixNano"),
                    end=r.integer(span, "endTimeUnixNano"),
                    record=record,
                    peer=first_tag(attrs, PEER_TAGS),
                    thread=thread_id(attrs),
                    trace=trace,
                    span_id=span_id,
                    parent_id=r.string(span, "parentSpanId", default="") or None,
                )
    return record


def _kind(r: RecordReader, span: dict) -> int:
    """``kind`` as enum number or name; producer/consumer fold into client/server."""
    kind = r.get(span, "kind", (int, str), default=0)
    if isinstance(kind, int):
        if not 0 <= kind < len(_KIND_ENUM):
            raise r.fail(f"unknown span kind {kind}")
        return kind_code(_KIND_ENUM[kind])
    name = kind.removeprefix(_KIND_PREFIX).lower()
    if name not in _KIND_ENUM:
        raise r.fail(f"unknown span kind {kind!r}")
    return kind_code(name)


def _attributes(r: RecordReader, attrs: Any) -> dict[str, Any]:
    """A list of ``KeyValue`` as a dict of plain Python values."""
    if attrs is None:
        return {}
    if not isinstance(attrs, list):
        raise r.fail("attributes must be a list")
    out = {}
    for kv in attrs:
        kv = r.obj(kv, "attribute")
        out[r.string(kv, "key")] = _any_value(r, kv.get("value"))
    return out


def _any_value(r: RecordReader, value: Any) -> Any:
    """An ``AnyValue`` as a Python value (arrays as lists, key-value lists as dicts)."""
    if value is None:
        return None
    v = r.obj(value, "attribute value")
    if "stringValue" in v:
        return r.string(v, "stringValue")
    if "intValue" in v:
        return r.integer(v, "intValue")
    if "doubleValue" in v:
        return float(r.get(v, "doubleValue", (int, float)))
    if "boolValue" in v:
        return r.get(v, "boolValue", bool)
    if "arrayValue" in v:
        array = r.get(v, "arrayValue", dict)
        return [_any_value(r, x) for x in r.get(array, "values", list, default=[])]
    if "kvlistValue" in v:
        return _attributes(r, r.get(v, "kvlistValue", dict).get("values"))
    if "bytesValue" in v:
        return r.string(v, "bytesValue")
    return None


def _attribute(key: str, value: Any) -> dict[str, Any]:
    t = tag(key, value)
    v = str(t["value"]) if t["type"] == "int64" else t["value"]
    return {"key": key, "value": {_ANY_VALUE_KEYS[t["type"]]: v}}


def otlp_document(spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None) -> dict:
    """``spans`` as an OTLP JSON ``ExportTraceServiceRequest``.

    One ``resourceSpans`` per (service, instance), the instance as ``service.instance.id`` when
    it differs from the service. ``tags`` adds attributes to individual rows, typed by their
    Python type. Ids that are not hex are replaced (see :func:`common.hex_ids`).
    """
    tags = tags or {}
    s = spans.strings
    trace_ids, span_ids = hex_ids(spans)
    resources: dict[tuple[int, int], list[int]] = {}
    for row in sorted(range(len(spans)), key=lambda r: spans.start[r]):
        resources.setdefault((int(spans.service[row]), int(spans.instance[row])), []).append(row)
    out = []
    for (svc, inst), rows in resources.items():
        attrs = [_attribute(SERVICE_ATTR, s[svc])]
        if inst != svc:
            attrs.append(_attribute(INSTANCE_ATTRS[-1], s[inst]))
        out_spans = []
        for row in rows:
            span_attrs = []
            if spans.peer[row] != NONE:
                span_attrs.append(_attribute(PEER_TAGS[0], s[int(spans.peer[row])]))
            if spans.thread[row] != NONE:
                span_attrs.append(_attribute(THREAD_TAGS[0], int(spans.thread[row])))
            span_attrs.extend(_attribute(k, v) for k, v in tags.get(row, {}).items())
            span: dict[str, Any] = {"traceId": trace_ids[row], "spanId": span_ids[row]}
            if spans.parent[row] != NONE:
                span["parentSpanId"] = span_ids[int(spans.parent[row])]
            span |= {
                "name": s[int(spans.endpoint[row])],
                "kind": _KIND_NUMBERS[int(spans.kind[row])],
                "startTimeUnixNano": str(int(spans.start[row])),
                "endTimeUnixNano": str(int(spans.end[row])),
                "attributes": span_attrs,
            }
            out_spans.append(span)
        out.append(
            {
                "resource": {"attributes": attrs},
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
