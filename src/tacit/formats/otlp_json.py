"""OTLP/JSON: the checking reader, which names what is wrong with a document, record by
record, and the fast reader of the forms exporters write, which leaves anything else to it
(:mod:`.otlp` says what the encoding is)."""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tacit.formats.common import kind_code
from tacit.formats.fields import RecordReader
from tacit.formats.otlp_rows import (
    KIND_CODES,
    KIND_ENUM,
    RECORD,
    ROW_FIELDS,
    SERVICE_ATTR,
    STATUS_SET,
    Unusual,
    add_spans,
    named_process,
    span_row,
)
from tacit.formats.textio import iter_json_lines
from tacit.model.span_details import STATUS_CODES, STATUS_UNSET, SpanEvent
from tacit.model.spans import SpanTableBuilder

_SCOPE_LISTS = ("scopeSpans", "instrumentationLibrarySpans")

_KIND_PREFIX = "SPAN_KIND_"

_STATUS_PREFIX = "STATUS_CODE_"

_ID_DIGITS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}
"""Hex digits of each id: 16-byte trace ids and 8-byte span ids."""

_HEX = re.compile("[0-9a-fA-F]+")


def resource_spans(
    src: str, where: str, doc: Any
) -> Iterator[tuple[RecordReader, dict, list[Any]]]:
    """Per ``resourceSpans`` entry of one ``ExportTraceServiceRequest`` (``where``: its line or
    message, for messages): a reader naming the entry, the resource's attributes and the spans
    of all its scopes."""
    top = RecordReader(src, f"{where} document" if where else "document")
    doc = top.obj(doc, "OTLP document")
    for ri, rs in enumerate(top.get(doc, "resourceSpans", list)):
        rr = RecordReader(src, f"{where} resourceSpans {ri}" if where else f"resourceSpans {ri}")
        rs = rr.obj(rs, "resourceSpans entry")
        resource = attributes(rr, rr.get(rs, "resource", dict, default={}).get("attributes"))
        key = next((k for k in _SCOPE_LISTS if k in rs), _SCOPE_LISTS[0])
        spans = [
            span
            for scope in rr.get(rs, key, list, default=[])
            for span in rr.get(rr.obj(scope, key), "spans", list, default=[])
        ]
        yield rr, resource, spans


def read_export(builder: SpanTableBuilder, src: str, where: str, doc: Any, record: int) -> int:
    """Add the spans of one ``ExportTraceServiceRequest`` (``where``: its line or message, for
    messages, and ``record``: the records before it); returns the records read so far."""
    try:
        spans = list(_json_spans(doc, record))
    except Unusual:  # read again by the checking path, which names what is wrong
        spans = list(export_spans(src, where, doc, record))
    return add_spans(builder, spans, record)


def _json_spans(doc: Any, record: int) -> Iterator[tuple]:  # noqa: C901
    """The spans of an OTLP/JSON document as :func:`export_spans` reads them (numbered after
    ``record``), for the forms exporters write: ids in hex, times as integers or decimal
    strings, the kind as its number, attribute values of one scalar type, status without or
    with a known code, no events. Anything else, valid or not, raises :class:`Unusual`, and the
    checking path reads the document. The forms taken here are read faster this way than
    through the checking path, which matters for the requests the capture source of ``tacit
    serve`` makes."""
    if not isinstance(doc, dict) or type(doc.get("resourceSpans")) is not list:
        raise Unusual
    for rs in doc["resourceSpans"]:
        if not isinstance(rs, dict) or _SCOPE_LISTS[1] in rs:
            raise Unusual
        resource = rs.get("resource")
        resource = {} if resource is None else resource
        if not isinstance(resource, dict):
            raise Unusual
        process = named_process(_json_attributes(resource.get("attributes")))
        if process is None:
            raise Unusual
        for scope in _json_list(rs.get(_SCOPE_LISTS[0])):
            if not isinstance(scope, dict):
                raise Unusual
            for span in _json_list(scope.get("spans")):
                record += 1
                if not isinstance(span, dict) or span.get("events") not in (None, []):
                    raise Unusual
                parent = span.get("parentSpanId")
                kind = span.get("kind")
                kind = 0 if kind is None else kind
                name = span.get("name")
                name = "" if name is None else name
                if type(name) is not str or type(kind) is not int or not 0 <= kind < len(KIND_ENUM):
                    raise Unusual
                yield span_row(
                    process,
                    record,
                    _json_id(span.get("traceId"), "traceId"),
                    _json_id(span.get("spanId"), "spanId"),
                    None if parent is None or parent == "" else _json_id(parent, "parentSpanId"),
                    name,
                    KIND_CODES[kind],
                    _json_integer(span.get("startTimeUnixNano")),
                    _json_integer(span.get("endTimeUnixNano")),
                    _json_attributes(span.get("attributes")),
                    _json_status(span.get("status")),
                    (),
                )


def _json_list(value: Any) -> list:
    if value is None:
        return []
    if type(value) is not list:
        raise Unusual
    return value


def _json_id(value: Any, key: str) -> str:
    if type(value) is not str or not is_id(value, _ID_DIGITS[key]):
        raise Unusual
    return value.lower()


def _json_integer(value: Any) -> int:
    """As :meth:`RecordReader.integer` reads a present field."""
    if type(value) is int:
        return value
    if type(value) is not str:
        raise Unusual
    try:
        return int(value)
    except ValueError:
        raise Unusual from None


def _json_attributes(kvs: Any) -> dict[str, Any]:
    """As :func:`attributes` reads ``KeyValue`` s of one scalar value each (:func:`_scalar`)."""
    out = {}
    for kv in _json_list(kvs):
        if type(kv) is not dict or len(kv) != 2 or type(key := kv.get("key")) is not str:
            raise Unusual
        value = _scalar(kv.get("value"))
        if value is _NOT_SCALAR:
            raise Unusual
        out[key] = value
    return out


def _json_status(status: Any) -> tuple[int, str]:
    """As :func:`_status` reads a status whose code is a number."""
    if status is None:
        return STATUS_UNSET, ""
    if type(status) is not dict:
        raise Unusual
    code = status.get("code")
    message = status.get("message")
    code = STATUS_UNSET if code is None else code
    message = "" if message is None else message
    if type(code) is not int or code not in STATUS_SET or type(message) is not str:
        raise Unusual
    return code, message


def iter_json_lines_spans(path: Path) -> Iterator[dict[str, Any]]:
    """The spans of a file of OTLP JSON Lines (one export per line), one by one as
    :meth:`SpanTableBuilder.add` takes them, records numbered from the file's start as
    :func:`read_input` numbers them; read line by line: what a reader of a stream needs."""
    src, record = str(path), 0
    for n, doc in iter_json_lines(path):
        for span in export_spans(src, f"line {n}", doc, record):
            record = span[RECORD]
            yield dict(zip(ROW_FIELDS, span, strict=True))


def export_spans(src: str, where: str, doc: Any, record: int) -> Iterator[tuple]:
    """The spans of one export as rows (:func:`span_row`), numbered after
    ``record``."""
    for rr, resource, spans in resource_spans(src, where, doc):
        process = named_process(resource)
        if process is None:
            raise rr.fail(f"resource has no string {SERVICE_ATTR!r} attribute")
        for span in spans:
            record += 1
            at = f"{where}, " if where else ""
            r = RecordReader(src, f"{record} ({where})" if where else record)
            span = r.obj(span, "span")
            trace = _id(r, span, "traceId")
            span_id = _id(r, span, "spanId")
            r.record = f"{record} ({at}trace {trace} span {span_id})"
            yield span_row(
                process,
                record,
                trace,
                span_id,
                _id(r, span, "parentSpanId", default="") or None,
                r.string(span, "name", default=""),
                kind_code(kind_name(r, span)),
                r.integer(span, "startTimeUnixNano"),
                r.integer(span, "endTimeUnixNano"),
                attributes(r, span.get("attributes")),
                _status(r, span),
                _events(r, span),
            )


def is_id(value: str, digits: int) -> bool:
    """Whether ``value`` is an id of OTLP/JSON: hex digits, at least one, at most ``digits``."""
    return len(value) <= digits and _HEX.fullmatch(value) is not None


def _id(r: RecordReader, span: dict, key: str, default: Any = ...) -> str:
    """A trace or span id: hex digits, at most as many as the id has bytes times two."""
    value = r.string(span, key, default=default)
    if value == "" and default == "":
        return value
    if not is_id(value, _ID_DIGITS[key]):
        raise r.fail(
            f"{key} {value!r} is not an id of up to {_ID_DIGITS[key]} hex digits (OTLP/JSON "
            "writes ids as hex, not as the base64 of the generic protobuf JSON mapping)"
        )
    return value.lower()


def kind_name(r: RecordReader, span: dict) -> str:
    """The span's ``SpanKind`` (given as enum number or as ``SPAN_KIND_*`` name) as a lower-case
    name: unspecified, internal, server, client, producer or consumer."""
    kind = r.get(span, "kind", (int, str), default=0)
    if isinstance(kind, int):
        if not 0 <= kind < len(KIND_ENUM):
            raise r.fail(f"unknown span kind {kind}")
        return KIND_ENUM[kind]
    name = kind.removeprefix(_KIND_PREFIX).lower()
    if name not in KIND_ENUM:
        raise r.fail(f"unknown span kind {kind!r}")
    return name


def _status(r: RecordReader, span: dict) -> tuple[int, str]:
    """``status`` as (code, message); the code as enum number or name (``STATUS_CODE_OK``)."""
    status = r.get(span, "status", dict, default={})
    code = r.get(status, "code", (int, str), default=STATUS_UNSET)
    if isinstance(code, str):
        code = STATUS_CODES.get(code.removeprefix(_STATUS_PREFIX).upper(), code)
    if code not in STATUS_CODES.values():
        raise r.fail(f"unknown status code {code!r}")
    return code, r.string(status, "message", default="")


def _events(r: RecordReader, span: dict) -> tuple[SpanEvent, ...]:
    return tuple(
        SpanEvent(
            time=r.integer(e, "timeUnixNano"),
            name=r.string(e, "name", default=""),
            attributes=attributes(r, e.get("attributes")),
        )
        for e in (r.obj(x, "event") for x in r.get(span, "events", list, default=[]))
    )


def attributes(r: RecordReader, attrs: Any, depth: int = 0) -> dict[str, Any]:
    """A list of ``KeyValue`` as a dict of plain Python values (``depth``: inside how many
    arrays and key-value lists)."""
    if attrs is None:
        return {}
    if not isinstance(attrs, list):
        raise r.fail("attributes must be a list")
    out = {}
    for kv in attrs:
        kv = r.obj(kv, "attribute")
        out[r.string(kv, "key")] = _any_value(r, kv.get("value"), depth)
    return out


MAX_VALUE_DEPTH = 64
"""The most arrays and key-value lists an attribute value is read nested in. Every writer
writes a value this deep (OTLP/JSON takes three JSON levels a level: orjson writes 254), and
protobuf's own decoder refuses an OTLP request nested deeper than 100 messages, two a level;
a deeper JSON value was taken, and failed when its trace was written, after the receiver had
acknowledged it."""


_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
"""The strings protobuf's JSON mapping writes for a double that is not finite."""
_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _double(r: RecordReader, value: int | float | str) -> float:
    """A ``doubleValue``: a number, or a string as protobuf's JSON mapping accepts it (a number,
    ``NaN``, ``Infinity`` or ``-Infinity``: JSON has no other way to write those)."""
    if not isinstance(value, str):
        return float(value)
    if value in _FLOAT_WORDS:
        return _FLOAT_WORDS[value]
    if not _JSON_NUMBER.fullmatch(value):
        raise r.fail(f"doubleValue {value!r} is not a number")
    return float(value)


_NOT_SCALAR = object()


def _scalar(value: Any) -> Any:
    """An ``AnyValue`` of one scalar in the form exporters write it (a string, an integer as a
    number or a decimal string, a double as a number, a boolean) as its Python value, else
    ``_NOT_SCALAR``: the rule both readers share, the fast one taking nothing else."""
    if type(value) is not dict or len(value) != 1:
        return _NOT_SCALAR
    ((which, x),) = value.items()
    kind = type(x)
    if which == "stringValue" and kind is str:
        return x
    if which == "intValue":
        if kind is int:
            return x
        if kind is str:
            try:
                return int(x)
            except ValueError:
                return _NOT_SCALAR
    elif which == "doubleValue" and kind in (int, float):
        return float(x)
    elif which == "boolValue" and kind is bool:
        return x
    return _NOT_SCALAR


def _any_value(r: RecordReader, value: Any, depth: int = 0) -> Any:  # noqa: C901
    """An ``AnyValue`` as a Python value (arrays as lists, key-value lists as dicts, bytes,
    base64 in JSON, as bytes), inside ``depth`` arrays and key-value lists."""
    if (plain := _scalar(value)) is not _NOT_SCALAR:
        return plain
    if value is None:
        return None
    v = r.obj(value, "attribute value")
    if depth >= MAX_VALUE_DEPTH and ("arrayValue" in v or "kvlistValue" in v):
        raise r.fail(f"attribute value nested more than {MAX_VALUE_DEPTH} levels deep")
    if "stringValue" in v:
        return r.string(v, "stringValue")
    if "intValue" in v:
        return r.integer(v, "intValue")
    if "doubleValue" in v:
        return _double(r, r.get(v, "doubleValue", (int, float, str)))
    if "boolValue" in v:
        return r.get(v, "boolValue", bool)
    if "arrayValue" in v:
        array = r.get(v, "arrayValue", dict)
        return [_any_value(r, x, depth + 1) for x in r.get(array, "values", list, default=[])]
    if "kvlistValue" in v:
        return attributes(r, r.get(v, "kvlistValue", dict).get("values"), depth + 1)
    if "bytesValue" in v:
        try:
            return base64.b64decode(r.string(v, "bytesValue"), validate=True)
        except binascii.Error:
            raise r.fail("bytesValue is not base64") from None
    return None
