"""OTLP as the OpenTelemetry libraries write it: spans made by the Python SDK, encoded by its
OTLP exporter, read as protobuf and as the Collector's file-exporter output, and carried
through Jaeger, Zipkin and OTLP output and through reconstruction without losing what the SDK
recorded.

The protobuf files are the exporter's own ``ExportTraceServiceRequest`` bytes
(``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans``): a request body as
one file, and the Collector's ``format: proto`` file (each message after its length as a
4-byte big-endian integer, opentelemetry-collector-contrib exporter/fileexporter). The JSON
Lines file is the Collector's ``format: json`` output as its OTLP/JSON marshaller writes it:
protobuf's JSON mapping (``MessageToDict``) of the same requests, with the two departures the
OTLP/JSON specification makes, hex ids and enums as integers, one request per line.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from otel_sdk import collector_json_line, length_prefixed, provider
from tacit.errors import InputError
from tacit.formats import detect_format, read_spans, write_traces
from tacit.formats.otlp import read_otlp_protobuf
from tacit.model.roles import infer_roles
from tacit.model.span_details import STATUS_ERROR, STATUS_OK, STATUS_UNSET
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, SpanTable
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.pipeline import reconstruct_blind

KINDS = {SpanKind.SERVER: SERVER, SpanKind.CLIENT: CLIENT, SpanKind.INTERNAL: INTERNAL}
STATUS = {StatusCode.UNSET: STATUS_UNSET, StatusCode.OK: STATUS_OK, StatusCode.ERROR: STATUS_ERROR}


@pytest.fixture(scope="module")
def sdk_spans() -> list[ReadableSpan]:
    """Three requests through frontend → cart → redis, made by the SDK: nested spans with
    attributes of every type, events, an error status with a recorded exception, an OK one."""
    front, front_out = provider("frontend", "frontend-7d9f")
    cart, cart_out = provider("cart", "cart-5c2a")
    ft, ct = front.get_tracer("shop.frontend", "1.2"), cart.get_tracer("shop.cart")
    for i in range(3):
        with ft.start_as_current_span(
            "GET /checkout",
            kind=SpanKind.SERVER,
            attributes={"http.method": "GET", "http.status_code": 200, "request": i},
        ) as root:
            with ft.start_as_current_span("render", attributes={"items": ["a", "b"]}) as work:
                work.add_event("template loaded", {"template": "cart.html", "bytes": 2048})
            with (
                ft.start_as_current_span(
                    "cart.Add",
                    kind=SpanKind.CLIENT,
                    attributes={"peer.service": "cart", "rpc.system": "grpc", "retry": False},
                ) as call,
                ct.start_as_current_span(
                    "cart.Add",
                    context=set_span_in_context(call),
                    kind=SpanKind.SERVER,
                    attributes={"cart.size": 2.5, "user.id": f"u{i}"},
                ) as server,
            ):
                with ct.start_as_current_span(
                    "HSET", kind=SpanKind.CLIENT, attributes={"db.system": "redis"}
                ):
                    pass
                if i == 1:
                    server.record_exception(ValueError("cart is full"))
                    server.set_status(Status(StatusCode.ERROR, "cart is full"))
            root.set_status(Status(StatusCode.OK))
    return [*front_out.get_finished_spans(), *cart_out.get_finished_spans()]


@pytest.fixture(scope="module")
def files(sdk_spans, tmp_path_factory) -> dict[str, Path]:
    """The same spans in every OTLP form, in two exports (the frontend's, then the cart's)."""
    d = tmp_path_factory.mktemp("otlp")
    front = [s for s in sdk_spans if s.resource.attributes["service.name"] == "frontend"]
    cart = [s for s in sdk_spans if s not in front]
    half = [encode_spans(front), encode_spans(cart)]
    out = {
        "request body": (d / "body.binpb", encode_spans(sdk_spans).SerializeToString()),
        "collector proto": (d / "traces", length_prefixed([r.SerializeToString() for r in half])),
        "collector json": (d / "traces.jsonl", b"".join(collector_json_line(r) for r in half)),
    }
    for name, (path, data) in list(out.items()):
        out[f"{name}, gzip"] = (path.with_name(path.name + ".gz"), gzip.compress(data))
    for path, data in out.values():
        path.write_bytes(data)
    return {name: path for name, (path, _) in out.items()}


def by_id(spans: SpanTable) -> dict[str, int]:
    return {spans.name("span_id", r): r for r in range(len(spans))}


def check_against_sdk(got: SpanTable, sdk_spans: list[ReadableSpan], us: bool = False) -> None:
    """Every SDK span is in ``got`` with its ids, parent, timing (to the µs when ``us``), kind,
    service, pod, status, events and every attribute of its own and of its resource."""
    rows = by_id(got)
    assert len(got) == len(sdk_spans) == len(rows)
    unit = 1000 if us else 1
    for s in sdk_spans:
        r = rows[f"{s.context.span_id:016x}"]
        assert got.name("trace", r) == f"{s.context.trace_id:032x}"
        parent = int(got.parent[r])
        want = None if s.parent is None else f"{s.parent.span_id:016x}"
        assert (None if parent == NONE else got.name("span_id", parent)) == want
        assert int(got.start[r]) // unit == s.start_time // unit
        assert -(-int(got.end[r]) // unit) == -(-s.end_time // unit)
        assert int(got.kind[r]) == KINDS[s.kind]
        assert got.name("endpoint", r) == s.name
        assert got.name("service", r) == s.resource.attributes["service.name"]
        assert got.name("instance", r) == s.resource.attributes["k8s.pod.name"]
        d = got.detail(r)
        assert d is not None
        assert d.span_id == f"{s.context.span_id:016x}"
        assert d.status == STATUS[s.status.status_code]
        assert d.status_message == (s.status.description or "")
        for k, v in s.attributes.items():
            assert plain(d.attributes[k]) == plain(v), k
        for k, v in s.resource.attributes.items():
            assert plain(d.resource[k]) == plain(v), k
        assert [e.name for e in d.events] == [e.name for e in s.events]
        for e, want_e in zip(d.events, s.events, strict=True):
            assert e.time // unit == want_e.timestamp // unit
            assert {k: plain(v) for k, v in e.attributes.items()} == {
                k: plain(v) for k, v in want_e.attributes.items()
            }


def plain(v: object) -> object:
    """A value as JSON would hold it: sequences as lists; JSON text (what Jaeger makes of a
    list attribute) decoded."""
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, str) and v[:1] == "[":
        return json.loads(v)
    return v


@pytest.mark.parametrize(
    "form",
    [
        "request body",
        "collector proto",
        "collector json",
        "request body, gzip",
        "collector proto, gzip",
        "collector json, gzip",
    ],
)
def test_every_form_reads_what_the_sdk_recorded(files, sdk_spans, form: str) -> None:
    path = files[form]
    assert detect_format(path) == "otlp"
    got = read_spans(path)
    check_against_sdk(got, sdk_spans)
    assert got.record.tolist() == list(range(1, len(sdk_spans) + 1))


def test_a_request_body_reads_from_bytes(sdk_spans) -> None:
    body = encode_spans(sdk_spans).SerializeToString()
    check_against_sdk(read_otlp_protobuf(body, "POST /v1/traces"), sdk_spans)


@pytest.mark.parametrize(("fmt", "us"), [("otlp", False), ("jaeger", True)])
def test_written_traces_read_back_with_everything(files, sdk_spans, tmp_path, fmt, us) -> None:
    """OTLP and Jaeger output keep every id, attribute, status, event and resource attribute
    (Jaeger's times are microseconds)."""
    spans = read_spans(files["collector proto"])
    write_traces(tmp_path / "out.json", spans, format=fmt)
    check_against_sdk(read_spans(tmp_path / "out.json"), sdk_spans, us=us)


def test_zipkin_output_keeps_attributes_status_and_events(files, sdk_spans, tmp_path) -> None:
    """Zipkin has a place for span attributes (string tags, resource attributes among them),
    the status (OpenTelemetry's tags) and event names and times (annotations)."""
    write_traces(tmp_path / "z.json", read_spans(files["request body"]), format="zipkin")
    got = read_spans(tmp_path / "z.json")
    rows = by_id(got)
    for s in sdk_spans:
        d = got.detail(rows[f"{s.context.span_id:016x}"])
        assert d is not None
        for k, v in [*s.attributes.items(), *s.resource.attributes.items()]:
            want = str(v).lower() if isinstance(v, bool) else v
            assert plain(d.attributes[k]) == plain(want if isinstance(v, tuple) else str(want))
        assert d.status == STATUS[s.status.status_code]
        assert d.status_message == (s.status.description or "")
        assert [e.time // 1000 for e in d.events] == [e.timestamp // 1000 for e in s.events]
        assert [annotation(e.name) for e in d.events] == [
            (e.name, {k: plain(v) for k, v in e.attributes.items()}) for e in s.events
        ]


def annotation(value: str) -> tuple[str, dict]:
    """An event's name and attributes from its annotation: the name, or ``{name: attributes}``
    in JSON (as the OpenTelemetry Zipkin exporter writes an event with attributes)."""
    if value[:1] != "{":
        return value, {}
    ((name, attrs),) = json.loads(value).items()
    return name, attrs


@pytest.fixture(scope="module")
def reconstructed(files) -> tuple[SpanTable, SpanTable]:
    """The SDK's spans read, made blind and reconstructed: (observed, reconstructed)."""
    observed = infer_roles(read_spans(files["collector json"]))
    graph = learn_callgraph(observed.spans)
    traces, _, _ = reconstruct_blind(observed.without_truth(), graph, seed=1)
    return observed.spans, traces


def test_reconstruction_keeps_span_ids_and_details(reconstructed, tmp_path) -> None:
    """A reconstructed trace names the spans the tracer recorded: every span keeps its id and
    its attributes, status and events, in OTLP output too; its parents are right here."""
    observed, traces = reconstructed
    assert observed.detail(0) is not None
    assert sorted(traces.strings[c] for c in traces.span_id.tolist()) == sorted(
        observed.strings[c] for c in observed.span_id.tolist()
    )
    write_traces(tmp_path / "r.json", traces, format="otlp")
    got = read_spans(tmp_path / "r.json")
    want, have = by_id(observed), by_id(got)
    assert want.keys() == have.keys()
    for sid, r in want.items():
        g = have[sid]
        d, w = got.detail(g), observed.detail(r)
        assert d is not None and w is not None
        assert (d.span_id, d.resource, d.status, d.status_message, d.events) == (
            w.span_id,
            w.resource,
            w.status,
            w.status_message,
            w.events,
        )
        assert w.attributes.items() <= d.attributes.items()  # and the columns' peer.service
        p, q = int(observed.parent[r]), int(got.parent[g])
        assert (p == NONE) == (q == NONE)
        if p != NONE:
            assert got.name("span_id", q) == observed.name("span_id", p)


def test_new_trace_ids_are_random_unless_seeded(reconstructed) -> None:
    observed, _ = reconstructed
    blind = infer_roles(observed).without_truth()
    graph = learn_callgraph(observed)

    def ids(seed: int | None) -> list[str | None]:
        t, _, _ = reconstruct_blind(blind, graph, seed=seed)
        return [t.strings[c] for c in t.trace.tolist()]

    first, second = ids(None), ids(None)
    assert len(set(first)) == 3 and all(len(i or "") == 32 for i in first)
    assert not set(first) & set(second)
    assert ids(7) == ids(7) != ids(8)
    original = {observed.strings[c] for c in observed.trace.tolist()}
    assert not original & set(first)  # new traces, not the tracer's


def test_truncated_protobuf_names_the_file(files, tmp_path) -> None:
    data = files["request body"].read_bytes()
    cut = tmp_path / "cut.binpb"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut\.binpb: not a protobuf OTLP"):
        read_spans(cut)


def test_truncated_collector_file_names_the_message(files, tmp_path) -> None:
    data = gzip.decompress(files["collector proto, gzip"].read_bytes())
    cut = tmp_path / "cut"
    cut.write_bytes(data[:-10])
    with pytest.raises(InputError, match=r"cut: message 1: truncated \(\d+ bytes announced"):
        read_spans(cut)
    first = int.from_bytes(data[:4], "big")
    garbled = bytearray(data)
    garbled[4 + first + 4] = 0xFF  # the second message's first tag: no valid field
    (tmp_path / "bad").write_bytes(bytes(garbled))
    with pytest.raises(InputError, match=r"bad: message 1: not a protobuf OTLP"):
        read_spans(tmp_path / "bad")


def test_bad_json_line_names_file_and_line(files, tmp_path) -> None:
    lines = files["collector json"].read_bytes().splitlines(keepends=True)
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(lines[0] + lines[1][:-40] + b"\n")
    with pytest.raises(InputError, match=r"broken\.jsonl: .*line 2"):
        read_spans(broken)


def test_base64_ids_are_refused_naming_line_and_record(sdk_spans, tmp_path) -> None:
    """OTLP/JSON ids are hex; protobuf's generic JSON mapping writes base64, which some
    producers send: refused, saying so, at the line and record where it occurs."""
    good = collector_json_line(encode_spans(sdk_spans[:3]))
    doc = MessageToDict(encode_spans(sdk_spans[3:5]), use_integers_for_enums=True)
    path = tmp_path / "b64.jsonl"
    path.write_bytes(good + json.dumps(doc).encode() + b"\n")
    with pytest.raises(InputError) as e:
        read_spans(path)
    text = str(e.value)
    assert text.startswith(f"{path}: record 4 (line 2): traceId ")
    assert "hex" in text and "base64" in text
    assert len(text.splitlines()) == 1


def test_protobuf_is_told_by_content_not_name(files, tmp_path) -> None:
    (tmp_path / "export.json").write_bytes(files["request body"].read_bytes())
    (tmp_path / "notes.txt").write_text("\nnot spans\n")
    assert detect_format(tmp_path / "export.json") == "otlp"
    assert len(read_spans(tmp_path / "export.json")) == len(read_spans(files["request body"]))
    assert detect_format(files["collector proto"]) == "otlp"  # no suffix at all
    with pytest.raises(InputError, match="unknown span format"):
        detect_format(tmp_path / "notes.txt")  # text starting with a newline is no protobuf
