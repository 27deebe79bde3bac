"""Binary OTLP requests read through the compiled pass over their bytes (``otlp_wire``) as the
message classes read them, and every decoding path as the checking one: generated requests of
every field the reader keeps, forms the pass leaves to the message classes, and refusals made
at the check, before a receiver acknowledges, in the words reading gives them."""

from __future__ import annotations

import base64
from typing import Any
from unittest import mock

import orjson
import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from protobuf_wire import delimited, varint
from tacit.errors import InputError
from tacit.formats import otlp_json, otlp_protobuf, otlp_request, otlp_rows
from tacit.formats.otlp import (
    MAX_REQUEST_SPANS,
    check_export_request,
    read_export_request,
    read_otlp_protobuf,
)
from tacit.formats.otlp_wire import request_shape, scan_spans
from tacit.model.spans import SpanTable, SpanTableBuilder

T0 = 1_700_000_000_000_000_000


def _rows(t: SpanTable) -> list[Any]:
    cols = ("service", "instance", "endpoint", "peer", "trace", "span_id")
    return [
        (
            tuple(t.name(k, r) for k in cols),
            tuple(int(getattr(t, k)[r]) for k in ("kind", "start", "end", "thread", "parent")),
            int(t.record[r]),
            t.detail(r),
        )
        for r in range(len(t))
    ]


def _value(v: Any) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, bytes):
        return AnyValue(bytes_value=v)
    if isinstance(v, list):
        out = AnyValue()
        out.array_value.values.extend(_value(x) for x in v)
        return out
    return AnyValue(string_value=v)


def _attrs(d: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in d.items()]


values = st.one_of(
    st.text(max_size=5),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False),
    st.binary(max_size=4),
    st.lists(st.integers(0, 9), max_size=3),
)
attributes = st.dictionaries(
    st.sampled_from(["peer.service", "thread.id", "http.method", "a", "b"]), values, max_size=3
)


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    """A request of 1-3 resources, each of 1-2 scopes of 0-4 spans, with every field the
    reader keeps, and some it steps over, drawn (ids as the specification has them: full width,
    not all zeros); parents named in the same trace or not."""
    req = ExportTraceServiceRequest()
    traces = [draw(st.binary(min_size=16, max_size=16).filter(any)) for _ in range(2)]
    ids: list[tuple[bytes, bytes]] = []
    for _ in range(draw(st.integers(1, 3))):
        rs = req.resource_spans.add()
        rs.resource.attributes.extend(
            _attrs({"service.name": draw(st.sampled_from(["web", "db"])), "host.name": "h"})
        )
        for _ in range(draw(st.integers(1, 2))):
            scope = rs.scope_spans.add()
            scope.scope.name = "lib"
            for _ in range(draw(st.integers(0, 4))):
                trace = draw(st.sampled_from(traces))
                sid = draw(st.binary(min_size=8, max_size=8).filter(any))
                if (trace, sid) in ids:
                    continue
                start = T0 + draw(st.integers(0, 10**6))
                span = Span(
                    trace_id=trace,
                    span_id=sid,
                    name=draw(st.sampled_from(["GET /", "Get", "é"])),
                    kind=draw(st.integers(0, 5)),
                    start_time_unix_nano=start,
                    end_time_unix_nano=start + draw(st.integers(0, 10**6)),
                    trace_state=draw(st.sampled_from(["", "k=v"])),
                    flags=draw(st.sampled_from([0, 256])),
                    dropped_attributes_count=draw(st.integers(0, 2)),
                )
                named = [s for t, s in ids if t == trace]
                parent = draw(st.sampled_from([b"", b"\x07" * 8, *named]))
                span.parent_span_id = parent
                span.attributes.extend(_attrs(draw(attributes)))
                for _ in range(draw(st.integers(0, 2))):
                    event = span.events.add()
                    event.time_unix_nano = start + 1
                    event.name = "retry"
                    event.attributes.extend(_attrs(draw(attributes)))
                if draw(st.booleans()):
                    span.links.add(trace_id=trace, span_id=b"\x01" * 8)
                span.status.CopyFrom(
                    Status(
                        code=draw(st.integers(0, 2)), message=draw(st.sampled_from(["", "boom"]))
                    )
                )
                scope.spans.append(span)
                ids.append((trace, sid))
    return req


@settings(deadline=None, max_examples=150)  # the first example compiles the pass
@given(requests())
def test_the_compiled_pass_reads_a_request_as_the_message_classes_do(
    req: ExportTraceServiceRequest,
) -> None:
    body = req.SerializeToString()
    count = sum(len(s.spans) for rs in req.resource_spans for s in rs.scope_spans)
    assert scan_spans(body, count, len(req.resource_spans)) is not None
    not_the_pass = AssertionError("not the pass")
    with mock.patch.object(otlp_request, "read_protobuf", side_effect=not_the_pass):
        spans, parent_ids = read_export_request(body, "protobuf", "req")
    assert _rows(spans) == _rows(read_otlp_protobuf(body, "req"))
    named = [
        span.parent_span_id.hex() or None
        for rs in req.resource_spans
        for scope in rs.scope_spans
        for span in scope.spans
    ]
    assert [spans.strings[int(c)] for c in parent_ids] == named


def _request(span_bytes: bytes) -> bytes:
    resource = ExportTraceServiceRequest()
    rs = resource.resource_spans.add()
    rs.resource.attributes.extend(_attrs({"service.name": "web"}))
    rs_bytes = rs.SerializeToString() + delimited(2, delimited(2, span_bytes))
    return delimited(1, rs_bytes)


def _span(**fields: Any) -> Span:
    given = {
        "trace_id": b"\x01" * 16,
        "span_id": b"\x02" * 8,
        "name": "GET /",
        "kind": 2,
        "start_time_unix_nano": T0,
        "end_time_unix_nano": T0 + 5,
    }
    span = Span(**(given | fields))
    span.attributes.extend(_attrs({"peer.service": "db", "n": 1}))
    return span


@pytest.mark.parametrize(
    ("form", "extra"),
    [
        ("a name given twice: the last is kept", delimited(5, b"POST /")),
        (
            "a status given twice: the two are merged",
            delimited(15, varint(3 << 3) + b"\x01") + delimited(15, delimited(2, b"m")),
        ),
        (
            "attributes apart",
            varint(16 << 3 | 5)
            + bytes(4)
            + delimited(9, KeyValue(key="late", value=_value(2)).SerializeToString()),
        ),
        ("an id of the wrong wire type", varint(2 << 3) + varint(5)),
    ],
)
def test_forms_the_pass_does_not_take_are_read_by_the_message_classes(
    form: str, extra: bytes
) -> None:
    body = _request(_span().SerializeToString() + extra)
    assert scan_spans(body, 1, 1) is None, form
    spans, _ = read_export_request(body, "protobuf", "req")
    assert _rows(spans) == _rows(read_otlp_protobuf(body, "req"))


def test_unknown_fields_are_stepped_over_as_protobuf_does() -> None:
    unknown = delimited(40, b"??") + varint(41 << 3) + varint(300)
    body = _request(_span().SerializeToString() + unknown) + unknown
    assert scan_spans(body, 1, 1) is not None
    spans, _ = read_export_request(body, "protobuf", "req")
    assert _rows(spans) == _rows(read_otlp_protobuf(body, "req"))
    assert spans.name("endpoint", 0) == "GET /" and spans.name("peer", 0) == "db"


def _two_spans(second: dict[str, Any], first: dict[str, Any] | None = None) -> bytes:
    return _request(_span(**(first or {})).SerializeToString()) + _request(
        _span(**second).SerializeToString()
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (_two_spans({}), "duplicate span id"),
        (
            _two_spans(
                {"span_id": b"\x03" * 8, "parent_span_id": b"\x02" * 8},
                {"parent_span_id": b"\x03" * 8},
            ),
            "parent links form a cycle",
        ),
        (_two_spans({"span_id": b"\x03" * 8, "end_time_unix_nano": T0 - 1}), "ends before"),
    ],
)
def test_a_request_reading_would_refuse_is_refused_when_checked(body: bytes, words: str) -> None:
    """What reading refuses is refused before a receiver acknowledges the request: read
    later, it could not be refused any more, and it would stop reconstruction."""
    with pytest.raises(InputError) as checked:
        check_export_request(body, "protobuf", "req")
    with pytest.raises(InputError) as read:
        read_otlp_protobuf(body, "req")
    assert words in str(checked.value) and str(checked.value) == str(read.value)


def test_a_thread_id_an_int64_cannot_hold_is_refused_when_checked() -> None:
    span = _span()
    span.attributes.extend(_attrs({"thread.id": "9" * 30}))
    body = _request(span.SerializeToString())
    with pytest.raises(InputError) as checked:
        check_export_request(body, "protobuf", "req")
    with pytest.raises(InputError) as read:
        read_otlp_protobuf(body, "req")
    assert str(checked.value) == str(read.value)


def test_a_thread_tag_of_other_digits_is_no_thread_id() -> None:
    """``str.isdigit`` takes "²", which ``int`` refuses: not a thread id, not an error."""
    span = _span()
    span.attributes.extend(_attrs({"thread.id": "²"}))
    spans, _ = read_export_request(_request(span.SerializeToString()), "protobuf", "req")
    assert int(spans.thread[0]) == -1 and spans.detail(0).attributes["thread.id"] == "²"


@pytest.mark.parametrize("field", [5, 3])  # the name, which the reader decodes; trace state
def test_text_that_is_not_utf8_is_refused_when_checked(field: int) -> None:
    """The pass does not look at the text it finds: the message classes' decoding, which the
    check does first, refuses what is not UTF-8, so that decoding it later cannot fail."""
    span = _span(name="")
    body = _request(span.SerializeToString() + delimited(field, b"\xff\xfe"))
    with pytest.raises(InputError, match="not a protobuf OTLP"):
        check_export_request(body, "protobuf", "req")


def test_a_resource_given_twice_is_merged_as_protobuf_does() -> None:
    """A second ``resource`` field of one ``ResourceSpans`` is merged into the first: left
    to the message classes; the same resource in the next request is read once."""
    web, host = (ExportTraceServiceRequest().resource_spans.add() for _ in range(2))
    web.resource.attributes.extend(_attrs({"service.name": "web"}))
    host.resource.attributes.extend(_attrs({"host.name": "node-1"}))
    span = delimited(2, delimited(2, _span().SerializeToString()))
    body = delimited(1, web.SerializeToString() + span + host.SerializeToString())
    assert scan_spans(body, 1, 1) is None
    spans, _ = read_export_request(body, "protobuf", "req")
    assert _rows(spans) == _rows(read_otlp_protobuf(body, "req"))
    assert spans.name("instance", 0) == "node-1"
    again, _ = read_export_request(_request(_span().SerializeToString()), "protobuf", "req")
    assert again.name("service", 0) == "web" and again.name("instance", 0) == "web"


@settings(deadline=None, max_examples=120)
@given(requests(), st.data())
def test_damaged_bytes_are_refused_at_the_check_or_read_as_the_message_classes_read_them(
    req: ExportTraceServiceRequest, data: st.DataObject
) -> None:
    """Bytes changed, cut or added anywhere: the check refuses the request, or its reader
    (which cannot fail) gives what the message classes give."""
    body = bytearray(req.SerializeToString())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, max(len(body) - 1, 0)))
        what = data.draw(st.sampled_from(["set", "cut", "add"]))
        if what == "set" and body:
            body[at] = data.draw(st.integers(0, 255))
        elif what == "cut":
            del body[at : at + data.draw(st.integers(1, 4))]
        else:
            body[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    try:
        count, read = check_export_request(bytes(body), "protobuf", "req")
    except InputError:
        return
    spans, _ = read()
    assert count == len(spans)
    if body[:1] == b"\n":  # else a file reader takes it as length-prefixed messages
        assert _rows(spans) == _rows(read_otlp_protobuf(bytes(body), "req"))


def _resource_spans(spans: list[bytes], scopes: int = 1) -> bytes:
    rs = ExportTraceServiceRequest().resource_spans.add()
    rs.resource.attributes.extend(_attrs({"service.name": "web"}))
    per = -(-len(spans) // scopes) if spans else 0
    body = rs.SerializeToString()
    for k in range(scopes):
        body += delimited(2, b"".join(delimited(2, s) for s in spans[k * per : (k + 1) * per]))
    return delimited(1, body)


def test_the_shape_of_a_request_is_what_decoding_it_builds() -> None:
    spans = [_span(span_id=bytes([k + 1]) * 8).SerializeToString() for k in range(7)]
    body = _resource_spans(spans[:4], scopes=2) + _resource_spans(spans[4:]) + delimited(1, b"")
    decoded = ExportTraceServiceRequest.FromString(body)
    scopes = [ss for rs in decoded.resource_spans for ss in rs.scope_spans]
    assert request_shape(body) == (len(decoded.resource_spans), len(scopes), 7, 0)
    assert request_shape(delimited(1, delimited(2, delimited(2, b"\x0a\x01")))) == (1, 1, 1, 1)
    assert request_shape(b"\x0a\x05\x12") is None  # runs past its end: decoding says so


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"\x0a\x00" * 1_000_000, "1,000,000 ResourceSpans and 0 ScopeSpans hold 0 spans"),
        (delimited(1, b"\x12\x00" * 100_000), "100,000 ScopeSpans hold 0 spans"),
        (delimited(1, delimited(2, b"\x12\x00" * 100_000)), "100,000 of 100,000 spans are shorter"),
        (
            _resource_spans([_span().SerializeToString()] * (MAX_REQUEST_SPANS + 1)),
            "100,001 spans in one request; at most 100,000",
        ),
    ],
)
def test_what_reading_would_build_is_bounded_before_it_is_built(body: bytes, words: str) -> None:
    """Containers without spans, spans without room for their ids and more spans than a
    request may hold are refused from the bytes' shape, not after decoding millions of
    objects (the first body, 2 MB, gzips to 2 KB)."""
    with pytest.raises(InputError, match=words):
        check_export_request(body, "protobuf", "req")


def test_a_json_request_of_too_many_spans_or_objects_is_refused_before_it_is_parsed() -> None:
    span = b'{"traceId":"01","spanId":"02"}'
    body = (
        b'{"resourceSpans":[{"scopeSpans":[{"spans":['
        + b",".join([span] * (MAX_REQUEST_SPANS + 1))
        + b"]}]}]}"
    )
    parsed = mock.patch.object(otlp_request.orjson, "loads", side_effect=AssertionError("parsed"))
    with parsed, pytest.raises(InputError, match="100,001 spans and 100,004 JSON objects"):
        check_export_request(body, "json", "req")
    empty = b'{"resourceSpans":[' + b",".join([b"{}"] * 2_000_000) + b"]}"
    with parsed, pytest.raises(InputError, match="0 spans and 2,000,001 JSON objects"):
        check_export_request(empty, "json", "req")


def test_a_request_body_is_one_message_not_a_file_of_them() -> None:
    """Zero bytes are no request (field number 0 does not exist); read as a file's
    length-prefixed messages, each four of them were an empty message, and 32 MiB of them took
    a minute to accept as a request of no spans."""
    with pytest.raises(InputError, match="not a protobuf OTLP ExportTraceServiceRequest"):
        check_export_request(b"\0" * 1_000_000, "protobuf", "req")


def _json_form(req: ExportTraceServiceRequest) -> dict:
    """A request's OTLP/JSON form, made by protobuf's own JSON mapping with the ids turned from
    its base64 into OTLP/JSON's hex: a reference none of tacit's readers made."""
    doc = MessageToDict(req)
    for rs in doc.get("resourceSpans", []):
        for scope in rs.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return doc


@settings(deadline=None, max_examples=60)
@given(requests())
def test_every_decoding_path_reads_a_request_as_the_checking_path_does(
    req: ExportTraceServiceRequest,
) -> None:
    """One request, read five ways: the compiled pass over its bytes, the message classes, the
    message classes through the JSON form they make, and its JSON form the fast way; each gives
    what the checking path (every field checked, the JSON form) gives."""
    body, doc = req.SerializeToString(), _json_form(req)
    checking = SpanTableBuilder("req")
    for row in otlp_json.export_spans("req", "", doc, 0):
        checking.add(*row)
    expected = _rows(checking.build())
    classes = SpanTableBuilder("req")
    for row in otlp_json.export_spans("req", "", otlp_protobuf._request_doc(req), 0):
        classes.add(*row)
    with mock.patch.object(otlp_json, "_json_spans", side_effect=otlp_rows.Unusual):
        checked_json = _rows(read_export_request(orjson.dumps(doc), "json", "req")[0])
    paths = {
        "compiled pass": _rows(read_export_request(body, "protobuf", "req")[0]),
        "message classes": _rows(read_otlp_protobuf(body, "req")),
        "message classes, JSON form": _rows(classes.build()),
        "JSON, fast": _rows(read_export_request(orjson.dumps(doc), "json", "req")[0]),
        "JSON, checking reader of a request": checked_json,
    }
    for path, rows in paths.items():
        assert rows == expected, path
