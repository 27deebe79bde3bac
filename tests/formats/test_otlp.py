"""OTLP JSON: resources, kinds, AnyValue attributes, written documents, errors located; OTLP
protobuf requests read straight from the decoded message as their JSON form is read, and
refused in the same words."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tacit.errors import InputError
from tacit.formats.jaeger import jaeger_document
from tacit.formats.otlp import (
    check_export_request,
    otlp_document,
    read_export_request,
    read_otlp,
    read_otlp_protobuf,
)
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTable

T0 = 1_661_140_374_351_773_094
TRACE = "0087f677c0a2cf3f80a551987167911b"


def attr(key: str, **value) -> dict:
    return {"key": key, "value": value}


def otlp_span(sid: str, parent: str = "", kind: object = 2, **fields) -> dict:
    return {
        "traceId": TRACE,
        "spanId": sid,
        "parentSpanId": parent,
        "name": f"op-{sid}",
        "kind": kind,
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0 + 1000),
        **fields,
    }


def resource(attrs: list[dict], spans: list[dict], key: str = "scopeSpans") -> dict:
    return {"resource": {"attributes": attrs}, key: [{"scope": {"name": "x"}, "spans": spans}]}


def with_full_ids(doc: dict) -> dict:
    """``doc``, changed in place: its ids zero-padded to their full width, as the senders
    that the OTLP specification binds write them (a receiver refuses shorter ones)."""
    for resource_spans in doc["resourceSpans"]:
        scopes = resource_spans.get("scopeSpans") or resource_spans["instrumentationLibrarySpans"]
        for scope_spans in scopes:
            for span in scope_spans["spans"]:
                for key, digits in (("traceId", 32), ("spanId", 16), ("parentSpanId", 16)):
                    if span.get(key):
                        span[key] = span[key].rjust(digits, "0")
    return doc


def shop_document() -> dict:
    return {
        "resourceSpans": [
            resource(
                [
                    attr("service.name", stringValue="frontend"),
                    attr("host.name", stringValue="node-3"),
                    attr("k8s.pod.name", stringValue="frontend-579b9bff58-t2dbm"),
                ],
                [
                    otlp_span("a1", kind="SPAN_KIND_SERVER"),
                    otlp_span(
                        "a2",
                        "a1",
                        3,
                        startTimeUnixNano=T0 + 10,
                        endTimeUnixNano=T0 + 500,
                        attributes=[
                            attr("peer.service", stringValue="cart"),
                            attr("thread.id", intValue="12"),
                            attr("retry", boolValue=False),
                            attr("weight", doubleValue=0.5),
                            attr("tags", arrayValue={"values": [{"intValue": 1}]}),
                            attr("ctx", kvlistValue={"values": [attr("k", stringValue="v")]}),
                            attr("raw", bytesValue="AAE="),
                            attr("empty"),
                        ],
                    ),
                    otlp_span("a3", "a1", "SPAN_KIND_INTERNAL"),
                ],
            ),
            resource(
                [
                    attr("service.name", stringValue="cart"),
                    attr("service.instance.id", stringValue="cart-1"),
                ],
                [
                    otlp_span("b1", "a2", kind=5),
                    otlp_span("b2", "b1", kind=4),
                    otlp_span("b3", "b1", kind="SPAN_KIND_CONSUMER"),
                    otlp_span("b4", "b1", kind="SPAN_KIND_PRODUCER"),
                ],
                key="instrumentationLibrarySpans",  # OTLP before 0.15
            ),
            resource(
                [attr("service.name", stringValue="redis")],
                [otlp_span("c1", "b2", kind=0), otlp_span("c2", "b2", kind=1)],
            ),
            resource([attr("service.name", stringValue="mail")], [otlp_span("d1", "b9")]),
        ]
    }


def write(tmp_path: Path, doc: object, name: str = "otlp.json") -> Path:
    path = tmp_path / name
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("name", ["otlp.json", "otlp.json.gz"])
def test_every_field_is_read(tmp_path: Path, name: str) -> None:
    t = read_otlp(write(tmp_path, shop_document(), name))
    rows = {t.name("span_id", r): r for r in range(len(t))}
    assert {k: int(t.kind[r]) for k, r in rows.items()} == {
        "a1": SERVER,
        "a2": CLIENT,
        "a3": INTERNAL,
        "b1": SERVER,  # 5 = consumer
        "b2": CLIENT,  # 4 = producer
        "b3": SERVER,
        "b4": CLIENT,
        "c1": UNKNOWN,  # 0 = unspecified
        "c2": INTERNAL,
        "d1": SERVER,
    }
    instance = {k: t.name("instance", r) for k, r in rows.items()}
    assert instance["a1"] == "frontend-579b9bff58-t2dbm"  # k8s.pod.name before host.name
    assert instance["b1"] == "cart-1" and instance["c1"] == "redis"
    assert t.name("service", rows["b2"]) == "cart"
    assert t.name("endpoint", rows["b2"]) == "op-b2"
    a2 = rows["a2"]
    assert int(t.start[a2]) == T0 + 10 and int(t.end[a2]) == T0 + 500
    assert t.start.dtype.name == "int64"
    assert t.name("peer", a2) == "cart" and t.peer[rows["a1"]] == NONE
    assert int(t.thread[a2]) == 12 and t.thread[rows["a1"]] == NONE
    assert t.name("trace", a2) == TRACE
    parents = {
        k: t.name("span_id", p) if (p := int(t.parent[r])) != NONE else None
        for k, r in rows.items()
    }
    assert parents == {
        "a1": None,
        "a2": "a1",
        "a3": "a1",
        "b1": "a2",
        "b2": "b1",
        "b3": "b1",
        "b4": "b1",
        "c1": "b2",
        "c2": "b2",
        "d1": None,  # parent b9 is not in the file
    }
    assert list(t.record) == list(range(1, 11))


def test_written_document_follows_the_model(tmp_path: Path) -> None:
    t = read_otlp(write(tmp_path, shop_document()))
    a2 = next(r for r in range(len(t)) if t.name("span_id", r) == "a2")
    doc = otlp_document(t, tags={a2: {"ok": True, "n": 3, "x": 0.25, "s": "y"}})
    resources = doc["resourceSpans"]
    assert len(resources) == 4
    assert resources[0]["resource"]["attributes"] == [  # the input's, naming the instance
        attr("service.name", stringValue="frontend"),
        attr("host.name", stringValue="node-3"),
        attr("k8s.pod.name", stringValue="frontend-579b9bff58-t2dbm"),
    ]
    assert resources[2]["resource"]["attributes"] == [attr("service.name", stringValue="redis")]
    spans = {s["name"]: s for r in resources for sc in r["scopeSpans"] for s in sc["spans"]}
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans.values())
    client = spans["op-a2"]
    assert client["parentSpanId"] == spans["op-a1"]["spanId"]
    assert "parentSpanId" not in spans["op-a1"]
    assert client["startTimeUnixNano"] == str(T0 + 10)
    assert client["endTimeUnixNano"] == str(T0 + 500)
    assert [spans[f"op-{k}"]["kind"] for k in ("a1", "a2", "a3", "c1")] == [2, 3, 1, 0]
    assert client["attributes"] == [  # the input's, then the tags given
        attr("peer.service", stringValue="cart"),
        attr("thread.id", intValue="12"),
        attr("retry", boolValue=False),
        attr("weight", doubleValue=0.5),
        attr("tags", arrayValue={"values": [{"intValue": "1"}]}),
        attr("ctx", kvlistValue={"values": [attr("k", stringValue="v")]}),
        attr("raw", bytesValue="AAE="),
        attr("empty"),
        attr("ok", boolValue=True),
        attr("n", intValue="3"),
        attr("x", doubleValue=0.25),
        attr("s", stringValue="y"),
    ]


def error_of(tmp_path: Path, doc: object) -> str:
    path = write(tmp_path, doc)
    with pytest.raises(InputError) as e:
        read_otlp(path)
    assert str(e.value).startswith(str(path))
    return str(e.value)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"spanId": None}, "record 2: missing field 'spanId'"),
        ({"name": 7}, "field 'name' must be str, got int"),
        ({"startTimeUnixNano": True}, "field 'startTimeUnixNano' must be int or str, got bool"),
        ({"endTimeUnixNano": "later"}, "field 'endTimeUnixNano' must be an integer, got 'later'"),
        ({"kind": 9}, "unknown span kind 9"),
        ({"kind": "SPAN_KIND_SIDEWAYS"}, "unknown span kind 'SPAN_KIND_SIDEWAYS'"),
        ({"attributes": {"a": 1}}, "attributes must be a list"),
        ({"attributes": [attr("n", intValue="x")]}, "field 'intValue' must be an integer"),
        ({"attributes": [attr("n", boolValue="yes")]}, "field 'boolValue' must be bool, got str"),
    ],
)
def test_bad_span_names_file_and_record(tmp_path: Path, bad: dict, message: str) -> None:
    spans = [otlp_span("e1"), {**otlp_span("e2"), **bad}]
    doc = {"resourceSpans": [resource([attr("service.name", stringValue="web")], spans)]}
    text = error_of(tmp_path, doc)
    assert "record 2" in text and message in text


def test_end_before_start_names_the_record(tmp_path: Path) -> None:
    spans = [otlp_span("e1"), otlp_span("e2", endTimeUnixNano=str(T0 - 1))]
    doc = {"resourceSpans": [resource([attr("service.name", stringValue="web")], spans)]}
    assert "record 2: span ends before it starts" in error_of(tmp_path, doc)


def test_a_start_before_1970_names_the_record_in_a_file_and_a_request(tmp_path: Path) -> None:
    spans = [otlp_span("e1"), otlp_span("e2", startTimeUnixNano="-1000")]
    doc = with_full_ids({"resourceSpans": [resource(WEB, spans)]})
    assert "record 2: span starts before 1970" in error_of(tmp_path, doc)
    with pytest.raises(InputError, match="record 2: span starts before 1970"):
        check_export_request(orjson.dumps(doc), "json", "req")
    spans[1]["startTimeUnixNano"] = str(2**64 - 1000)  # -1000 as protobuf's fixed64 holds it
    with pytest.raises(InputError, match="record 2: "):
        check_export_request(as_protobuf(doc), "protobuf", "req")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "document: OTLP document must be an object, got list"),
        ({"resourceSpans": {}}, "document: field 'resourceSpans' must be list, got dict"),
        ({"resourceSpans": [resource([], [])]}, "resourceSpans 0: resource has no string"),
        (
            {"resourceSpans": [resource([attr("service.name", intValue="1")], [])]},
            "resource has no string 'service.name' attribute",
        ),
    ],
)
def test_bad_document_names_file_and_place(tmp_path: Path, doc: object, message: str) -> None:
    assert message in error_of(tmp_path, doc)


def as_protobuf(doc: dict) -> bytes:
    """An OTLP/JSON document as the protobuf request it stands for (ids from hex to the
    base64 of protobuf's JSON mapping; the pre-0.15 scope list under its current name)."""
    doc = copy.deepcopy(doc)
    for rs in doc["resourceSpans"]:
        rs["scopeSpans"] = rs.pop("instrumentationLibrarySpans", rs.get("scopeSpans"))
        for scope in rs["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()


def read(body: bytes, encoding: str) -> tuple[list[Any], list[Any]]:
    table, parent_ids = read_export_request(body, encoding, "req")
    return _rows(table), [table.strings[int(c)] for c in parent_ids]


def _rows(t: SpanTable) -> list[Any]:
    return [
        (
            {k: t.name(k, r) for k in ("service", "instance", "endpoint", "peer", "trace")},
            {k: int(getattr(t, k)[r]) for k in ("kind", "start", "end", "thread", "parent")},
            t.detail(r),
        )
        for r in range(len(t))
    ]


def test_a_protobuf_request_reads_as_its_json_form() -> None:
    doc = with_full_ids(shop_document())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[1]["status"] = {"code": 2, "message": "boom"}
    spans[1]["events"] = [
        {"timeUnixNano": str(spans[1]["startTimeUnixNano"] + 5), "name": "retry", "attributes": []}
    ]
    got = read(as_protobuf(doc), "protobuf")
    assert got == read(orjson.dumps(doc), "json")
    details = [d for _, _, d in got[0]]
    assert details[1].attributes["raw"] == b"\x00\x01" and details[1].attributes["empty"] is None
    assert details[1].events[0].name == "retry" and details[1].status_message == "boom"


WEB = [attr("service.name", stringValue="web")]


@pytest.mark.parametrize(
    ("attrs", "bad"),
    [
        (WEB, {"kind": 9}),
        (WEB, {"traceId": "00" * 20}),
        (WEB, {"spanId": "00" * 9}),
        (WEB, {"parentSpanId": "00" * 9}),
        (WEB, {"status": {"code": 7}}),
        ([attr("service.name", intValue="1")], {}),
        ([], {}),
    ],
)
def test_what_a_check_refuses_is_refused_in_the_same_words(attrs: list, bad: dict) -> None:
    doc = {"resourceSpans": [resource(attrs, [otlp_span("e1"), {**otlp_span("e2"), **bad}])]}
    with pytest.raises(InputError) as as_json:
        read_export_request(orjson.dumps(doc), "json", "req")
    with pytest.raises(InputError) as as_protobuf_body:
        read_export_request(as_protobuf(doc), "protobuf", "req")
    with pytest.raises(InputError) as checked:  # a receiver's check refuses it before the ack
        check_export_request(as_protobuf(doc), "protobuf", "req")
    assert str(as_protobuf_body.value) == str(as_json.value) == str(checked.value)


@pytest.mark.parametrize(
    "bad",
    [
        {"spanId": "0b" * 3},
        {"traceId": "01" * 8},
        {"spanId": "00" * 8},
        {"traceId": "00" * 16},
        {"parentSpanId": "00" * 8},
        {"parentSpanId": "0c"},
    ],
)
def test_a_receiver_refuses_ids_that_otlp_holds_invalid(bad: dict) -> None:
    """Ids not of 16 (trace) or 8 bytes (span, parent), or all zeros, are refused in a request,
    the span named; a file of them is read as its writer made it."""
    doc = with_full_ids({"resourceSpans": [resource(WEB, [otlp_span("e1"), otlp_span("e2")])]})
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][1].update(bad)
    key = next(iter(bad))
    for body, encoding in ((orjson.dumps(doc), "json"), (as_protobuf(doc), "protobuf")):
        with pytest.raises(InputError, match=f"req: record 2: {key} .* not an id of"):
            check_export_request(body, encoding, "req")
    assert len(read_otlp_protobuf(as_protobuf(doc), "file")) == 2


def test_equal_resources_share_a_process_and_typed_values_stay_apart():
    """Each request brings its own copy of a resource; a written trace names one process for
    equal copies, and a true attribute is not taken for the integer 1 that equals it."""
    web = attr("service.name", stringValue="web")
    doc = {
        "resourceSpans": [
            resource([web, attr("x", boolValue=True)], [otlp_span("e1")]),
            resource([web, attr("x", boolValue=True)], [otlp_span("e2")]),
            resource([web, attr("x", intValue="1")], [otlp_span("e3")]),
        ]
    }
    spans, _ = read_export_request(json.dumps(with_full_ids(doc)).encode(), "json", "request")
    (trace,) = jaeger_document(spans)["data"]
    process_of = {s["spanID"][-2:]: s["processID"] for s in trace["spans"]}
    assert process_of["e1"] == process_of["e2"] != process_of["e3"]
    x = {
        pid: next(t for t in p["tags"] if t["key"] == "x") for pid, p in trace["processes"].items()
    }
    assert x[process_of["e1"]] == {"key": "x", "type": "bool", "value": True}
    assert x[process_of["e3"]] == {"key": "x", "type": "int64", "value": 1}


def _nested(levels: int) -> dict:
    value: dict = {"stringValue": "x"}
    for k in range(levels):
        value = (
            {"arrayValue": {"values": [value]}}
            if k % 2
            else {"kvlistValue": {"values": [attr("k", **value)]}}
        )
    return value


def test_a_value_nested_too_deep_to_write_is_refused_when_checked() -> None:
    """A receiver acknowledges a request once checked, and writes its traces later: what
    could not be written is refused at the check, and what is taken can be written."""
    deep = {**otlp_span("e1"), "attributes": [{"key": "deep", "value": _nested(65)}]}
    doc = with_full_ids({"resourceSpans": [resource(WEB, [deep])]})
    with pytest.raises(InputError, match="nested more than 64 levels"):
        check_export_request(json.dumps(doc).encode(), "json", "req")
    deep["attributes"][0]["value"] = _nested(64)
    spans, _ = read_export_request(json.dumps(doc).encode(), "json", "req")
    assert orjson.dumps(jaeger_document(spans)) and orjson.dumps(otlp_document(spans))


def test_a_double_that_is_not_finite_is_read_and_written_as_protobufs_json_mapping_has_it(
    tmp_path: Path,
) -> None:
    """JSON has no infinity or NaN: the mapping writes them as strings, which readers take,
    and so a string that is a number; any other string is refused."""
    doc = with_full_ids(shop_document())
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"] = [
        attr("up", doubleValue="Infinity"),
        attr("down", doubleValue="-Infinity"),
        attr("half", doubleValue="0.5"),
    ]
    table = read_otlp(write(tmp_path, doc))
    attrs = next(d.attributes for r in range(len(table)) if (d := table.detail(r)).attributes)
    assert attrs == {"up": math.inf, "down": -math.inf, "half": 0.5}
    written = otlp_document(table)["resourceSpans"]
    values = [
        kv["value"] for rs in written for s in rs["scopeSpans"] for sp in s["spans"]
        for kv in sp["attributes"] if kv["key"] in ("up", "down")
    ]  # fmt: skip
    assert values == [{"doubleValue": "Infinity"}, {"doubleValue": "-Infinity"}]
    span["attributes"] = [attr("bad", doubleValue="fast")]
    with pytest.raises(InputError, match="doubleValue 'fast' is not a number"):
        read_otlp(write(tmp_path, doc))
