"""Binary OTLP read through the ``opentelemetry-proto`` message classes: files of one
serialized export or of the Collector's length-prefixed messages, and the requests the
compiled pass (:mod:`.otlp_request`) does not take. A message's spans are read from it
directly where protobuf has typed them; anything unusual is read again through its OTLP/JSON
form by the checking reader (:mod:`.otlp_json`), so that every refusal is worded in one
place."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from tacit.errors import InputError
from tacit.formats.otlp_json import export_spans
from tacit.formats.otlp_rows import (
    KIND_CODES,
    KIND_ENUM,
    STATUS_SET,
    Process,
    Unusual,
    add_spans,
    named_process,
    span_row,
)
from tacit.model.span_details import SpanEvent
from tacit.model.spans import SpanTable, SpanTableBuilder


def read_otlp_protobuf(data: bytes, source: str) -> SpanTable:
    """The spans of binary OTLP: one serialized ``ExportTraceServiceRequest`` (an OTLP/HTTP
    request body, or a file holding one; ``TracesData`` is the same message on the wire), or a
    sequence of them each preceded by its length as a 4-byte big-endian integer (the
    Collector's file exporter with ``format: proto``). ``source`` names the input in errors,
    which name the message too. Records are numbered across messages."""
    builder = SpanTableBuilder(source)
    read_protobuf(builder, data, source)
    return builder.build()


def decode_request(message: bytes, source: str, where: str) -> Any:
    """``message`` decoded as an ``ExportTraceServiceRequest`` (``where``: the message's place
    in ``source``, if it is one of several)."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    try:
        return ExportTraceServiceRequest.FromString(message)
    except DecodeError as e:
        place = f"{where}: " if where else ""
        raise InputError(
            f"{place}not a protobuf OTLP ExportTraceServiceRequest ({e})", path=source
        ) from None


def read_protobuf(builder: SpanTableBuilder, data: bytes, source: str, one: bool = False) -> None:
    """The spans of ``data`` into ``builder``: one message (``one``: a request body), or
    those of a file (:func:`_messages`)."""
    record = 0
    for where, message in [("", data)] if one else _messages(data, source):
        request = decode_request(message, source, where)
        try:
            spans = list(_protobuf_spans(request, record))
        except Unusual:  # read again by the checking path, which names what is wrong
            spans = list(export_spans(source, where, _request_doc(request), record))
        record = add_spans(builder, spans, record)


def _resource_process(resource_spans: Any) -> Process | None:
    return named_process(pb_attributes(resource_spans.resource.attributes))


def _usual_span(span: Any) -> bool:
    """Whether a protobuf span passes what protobuf's types leave to check: ids of the right
    length, a known kind and status code."""
    return (
        0 < len(span.trace_id) <= 16
        and 0 < len(span.span_id) <= 8
        and len(span.parent_span_id) <= 8
        and 0 <= span.kind < len(KIND_ENUM)
        and span.status.code in STATUS_SET
    )


def _protobuf_spans(request: Any, record: int) -> Iterator[tuple]:
    """The spans of a decoded ``ExportTraceServiceRequest`` as :func:`export_spans` reads them
    (numbered after ``record``), taken from the message directly: faster than through its
    JSON form, which a receiver taking thousands of spans a second notices.

    Protobuf has typed the fields already; what is left to check (a service name,
    :func:`_usual_span`) raises :class:`Unusual` when it fails, and the request is read again
    the checking way, so that every refusal is worded in one place."""
    for rs in request.resource_spans:
        process = _resource_process(rs)
        if process is None:
            raise Unusual
        for scope in rs.scope_spans:
            for span in scope.spans:
                record += 1
                if not _usual_span(span):
                    raise Unusual
                yield span_row(
                    process,
                    record,
                    span.trace_id.hex(),
                    span.span_id.hex(),
                    span.parent_span_id.hex() or None,
                    span.name,
                    KIND_CODES[span.kind],
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                    pb_attributes(span.attributes),
                    (span.status.code, span.status.message),
                    pb_events(span.events),
                )


def pb_events(events: Any) -> tuple[SpanEvent, ...]:
    return tuple(SpanEvent(e.time_unix_nano, e.name, pb_attributes(e.attributes)) for e in events)


def pb_attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value) for kv in kvs}


def _pb_value(value: Any) -> Any:
    """An ``AnyValue`` as :func:`.otlp_json._any_value` reads its JSON form, read from the
    typed message: protobuf has checked what the JSON reader checks, and going through the
    JSON form would double what the typed pass spends on attributes, the pass's reason to be.
    The test of every decoding path against the checking one holds the two to each other."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_pb_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return pb_attributes(value.kvlist_value.values)
    return getattr(value, which)  # str, int, float, bool or bytes


def _messages(data: bytes, source: str) -> Iterator[tuple[str, bytes]]:
    """(place, message) of each message in ``data``: the whole of it when it starts as an
    export does (or is empty), else the length-prefixed messages."""
    if data[:1] in (b"", b"\n"):
        yield "", data
        return
    at, i = 0, 0
    while at < len(data):
        where = f"message {i}"
        if len(data) - at < 4:
            raise InputError(
                f"{where}: truncated length prefix ({len(data) - at} of 4 bytes)", path=source
            )
        size = int.from_bytes(data[at : at + 4], "big")
        at += 4
        if size > len(data) - at:
            raise InputError(
                f"{where}: truncated ({size} bytes announced, {len(data) - at} left)",
                path=source,
            )
        yield where, data[at : at + size]
        at += size
        i += 1


def _request_doc(request: Any) -> dict:
    """A decoded ``ExportTraceServiceRequest`` in its OTLP/JSON form, which :func:`read_export`
    reads and checks: protobuf's own JSON mapping, with the ids in hex, as OTLP/JSON writes
    them, where the mapping writes bytes in base64."""
    from google.protobuf.json_format import MessageToDict

    doc = MessageToDict(request)
    for rs in doc.get("resourceSpans", ()):
        for scope in rs.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                for key in _ID_KEYS.intersection(span):
                    span[key] = base64.b64decode(span[key]).hex()
    return doc


_ID_KEYS = frozenset(("traceId", "spanId", "parentSpanId"))
