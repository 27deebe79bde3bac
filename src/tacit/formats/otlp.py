"""OTLP: read OpenTelemetry trace exports (JSON, JSON Lines, protobuf) and write OTLP JSON.

The document is an ``ExportTraceServiceRequest`` in the OTLP/JSON encoding (OTLP specification,
"JSON Protobuf Encoding"; opentelemetry-proto ``trace/v1/trace.proto``)::

    {"resourceSpans": [{"resource": {"attributes": [KeyValue, ...]},
                        "scopeSpans": [{"scope": {...}, "spans": [Span, ...]}]}]}

Exports older than OTLP 0.15 name ``scopeSpans`` ``instrumentationLibrarySpans``; both are read.
Ids are hex strings: OTLP/JSON departs there from the generic protobuf JSON mapping, which
writes bytes as base64, so a base64 id (what a producer using that mapping writes) is refused
with an error that says so. Times are ``startTimeUnixNano``/``endTimeUnixNano`` (int64, which
the mapping writes as decimal strings), ``kind`` is the ``SpanKind`` enum as a number or as its
name, and attribute values are ``AnyValue`` objects (``{"stringValue": "x"}``,
``{"intValue": "12"}``, ...). The service is the resource's ``service.name``, the instance its
``k8s.pod.name``, ``host.name`` or ``service.instance.id`` (OpenTelemetry semantic conventions).

The OpenTelemetry Collector's file exporter writes one export per line (JSON Lines) with
``format: json``, and with ``format: proto`` binary protobuf messages, each preceded by its
length as a 4-byte big-endian integer (opentelemetry-collector-contrib, exporter/fileexporter).
Both are read, gzip or not, as is a file holding one serialized ``ExportTraceServiceRequest``
(an OTLP/HTTP request body): :func:`read_otlp_protobuf` decodes such bytes with the
``opentelemetry-proto`` message classes and reads them as their OTLP/JSON form, so that both
encodings go through one reader. A receiver's request bodies (:func:`check_export_request`)
are decoded too, and their spans then found by a compiled pass over the bytes
(:mod:`.otlp_wire`), in a fraction of the time.

Every span's attributes, status, events and resource attributes, and its span id, are kept in
its :class:`~tacit.model.span_details.SpanDetail` and written back by :func:`otlp_document`.
Not kept: span links, trace state, flags, the instrumentation scope and dropped-item counts.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import inspect
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson

from tacit.errors import InputError
from tacit.formats import otlp_wire
from tacit.formats.common import (
    PEER_TAGS,
    THREAD_TAGS,
    Paths,
    Traces,
    first_tag,
    hex_ids,
    input_files,
    kind_code,
    merged_tags,
    thread_id,
)
from tacit.formats.fields import RecordReader
from tacit.formats.span_join import join_inputs
from tacit.formats.textio import (
    dump_json,
    iter_json_lines,
    load_json,
    read_bytes,
    read_head,
    write_json,
)
from tacit.model.columns import StringPool
from tacit.model.span_details import (
    NO_DETAIL,
    STATUS_CODES,
    STATUS_UNSET,
    SpanDetail,
    SpanEvent,
)
from tacit.model.spans import (
    CLIENT,
    INTERNAL,
    NONE,
    SERVER,
    UNKNOWN,
    SpanInput,
    SpanTable,
    SpanTableBuilder,
    link_parents,
    table_from_codes,
)
from tacit.outputs import atomic_output
from tacit.runs import contained

PROTOBUF_SUFFIXES = (".pb", ".pb.gz", ".binpb", ".binpb.gz")
"""Names of binary protobuf files (the protobuf project's ``.binpb``, and the older ``.pb``)."""
SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz", *PROTOBUF_SUFFIXES)
SERVICE_ATTR = "service.name"
INSTANCE_ATTRS = ("k8s.pod.name", "host.name", "service.instance.id")
"""Resource attributes naming the instance, first present wins."""
_SCOPE_LISTS = ("scopeSpans", "instrumentationLibrarySpans")
_KIND_ENUM = ("unspecified", "internal", "server", "client", "producer", "consumer")
"""``SpanKind`` names in enum order (``SPAN_KIND_UNSPECIFIED`` = 0, ...)."""
_KIND_NUMBERS = {UNKNOWN: 0, INTERNAL: 1, SERVER: 2, CLIENT: 3}
_KIND_CODES = tuple(kind_code(k) for k in _KIND_ENUM)
"""The kind code of each ``SpanKind`` number."""
_ROW_FIELDS = tuple(inspect.signature(SpanTableBuilder.add).parameters)[1:]
"""The parameters of :meth:`SpanTableBuilder.add` in their order: the fields of a span row."""
_RECORD = _ROW_FIELDS.index("record")
_KIND_PREFIX = "SPAN_KIND_"
_STATUS_PREFIX = "STATUS_CODE_"
_ID_DIGITS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}
"""Hex digits of each id: 16-byte trace ids and 8-byte span ids."""
_HEX = re.compile("[0-9a-fA-F]+")
_STATUS_SET = frozenset(STATUS_CODES.values())
_STATUS_ARRAY = np.array(sorted(_STATUS_SET))
_KIND_ARRAY = np.array(_KIND_CODES, np.int8)
_INT64 = np.iinfo(np.int64)


def read_otlp(paths: Paths) -> SpanTable:
    """Read OTLP trace exports (files or directories of them: JSON, JSON Lines or protobuf,
    gzip or not) into one set of spans (:func:`.span_join.join_inputs`)."""
    return join_inputs([read_input(f) for f in input_files(paths, SUFFIXES)]).spans


def read_input(path: Path, doc: Any = None) -> SpanInput:
    """One file's spans with the parent span id each names; ``doc``: its already parsed JSON,
    if at hand. A file of JSON Lines, one export per line (the OpenTelemetry Collector's file
    exporter), is read line by line, its records numbered from the file's start; a protobuf
    file as :func:`read_otlp_protobuf` reads it."""
    src = str(path)
    builder = SpanTableBuilder(src)
    if doc is None and is_protobuf(path):
        _read_protobuf(builder, read_bytes(path), src)
        return builder.build_input()
    if doc is not None or not is_json_lines(path):
        docs: Iterable[tuple[str, Any]] = [("", load_json(path) if doc is None else doc)]
    else:
        docs = ((f"line {n}", d) for n, d in iter_json_lines(path))
    record = 0
    for where, d in docs:
        record = _read_export(builder, src, where, d, record)
    return builder.build_input()


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


def is_protobuf(path: Path, head: bytes | None = None) -> bool:
    """Whether ``path`` holds OTLP protobuf: its name ends in a protobuf suffix, or its content
    (``head``: its first bytes after gzip, if at hand) starts as the Collector's length-prefixed
    messages do (a zero byte, the high byte of a length under 16 MiB, and after the 4-byte
    length the tag of a ``resource_spans``: a file of zeros is none), or as a serialized export
    does (0x0A, the tag of its first ``resource_spans``) and is not UTF-8 text (ids and times
    are binary), which tells it from a text file starting with a newline."""
    if path.name.endswith(PROTOBUF_SUFFIXES):
        return True
    head = read_head(path, 4096) if head is None else head
    if head[:1] == b"\x00":
        return head[4:5] == b"\n"
    if head[:1] != b"\n":
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head)  # a character may be cut at the end
    except UnicodeDecodeError:
        return True
    return False


def read_otlp_protobuf(data: bytes, source: str) -> SpanTable:
    """The spans of binary OTLP: one serialized ``ExportTraceServiceRequest`` (an OTLP/HTTP
    request body, or a file holding one; ``TracesData`` is the same message on the wire), or a
    sequence of them each preceded by its length as a 4-byte big-endian integer (the
    Collector's file exporter with ``format: proto``). ``source`` names the input in errors,
    which name the message too. Records are numbered across messages."""
    builder = SpanTableBuilder(source)
    _read_protobuf(builder, data, source)
    return builder.build()


def read_export_request(
    body: bytes, encoding: str, source: str, from_sender: bool = True
) -> tuple[SpanTable, np.ndarray]:
    """The spans of one OTLP/HTTP or OTLP/gRPC request body (``encoding``: ``protobuf`` or
    ``json``), and the parent span id each named (codes of the table's strings, -1 for none),
    found in this request or not: a receiver pairs spans across requests by these ids.
    ``from_sender``: its ids are checked as :func:`check_export_request` does; else (a request
    taken before, by a receiver that may have checked less) they are read as they are."""
    return check_export_request(body, encoding, source, from_sender)[1]()


RequestReader = Callable[[], tuple[SpanTable, np.ndarray]]
"""Reads the spans of a checked request (:func:`check_export_request`); cannot fail."""


MAX_REQUEST_SPANS = 100_000
"""Spans one request may hold. The SDKs' batch span processors export 512 at a time and the
Collector's batch processor 8,192 by default; the memory reading takes grows with the span
count, and a body of 32 MiB can hold a million of the smallest spans."""
MAX_JSON_OBJECTS = 2_000_000
"""Objects (``{``) a JSON request may hold: a body of 32 MiB of the SDKs' spans holds about a
million, and each object parsed takes memory, so a body of empty ones is bounded here."""
MAX_EMPTY_CONTAINERS = 64
"""``ResourceSpans`` and ``ScopeSpans`` a request may hold beyond two for each of its spans:
an empty one costs as much to decode as a span, and a body of them is all cost."""


def check_export_request(
    body: bytes, encoding: str, source: str, from_sender: bool = True
) -> tuple[int, RequestReader]:
    """Check one request body as reading it does (raising its :class:`InputError`), and
    return its span count and a function that reads it as :func:`read_export_request` does,
    which cannot fail. Its ids must be of the widths the OTLP specification gives, and not all
    zeros (:func:`_check_received_ids`), unless not ``from_sender``.

    What reading would build is bounded before it is built (:func:`_check_size`): at most
    :data:`MAX_REQUEST_SPANS` spans, and no body of empty containers or of spans too short
    to hold their ids, which cost to decode what spans do and compress a thousandfold (an
    8 KB gzip body of empty ``ResourceSpans`` decodes to millions of objects).

    A protobuf request of the forms encoders write is decoded, its spans found by a compiled
    pass over its bytes (:mod:`.otlp_wire`), and everything that reading it could refuse
    checked (:func:`_wire_request`): a receiver acknowledges the request once it is checked
    and durable, and reads its spans on the thread that reconstructs them, so that an exporter,
    which waits for each answer, waits for the check and not for the reading. Any other
    request is read at once."""
    _check_size(body, encoding, source)
    if encoding == "protobuf" and body[:1] in (b"", b"\n"):
        checked = _wire_request(body, _decode_request(body, source, ""), source)
        if checked is not None:
            return checked
    builder = SpanTableBuilder(source)
    if encoding == "protobuf":
        _read_protobuf(builder, body, source, one=True)
    else:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise InputError(f"not JSON: {e}", path=source) from None
        _read_export(builder, source, "", doc, 0)
    spans = builder.build()
    if from_sender:
        _check_received_ids(spans, builder.parent_ids(), source)
    return len(spans), read_already(spans, builder.parent_ids())


def _check_received_ids(spans: SpanTable, parent_ids: np.ndarray, source: str) -> None:
    """Refuse a request whose trace ids are not 16 bytes, whose span ids (and parent span ids,
    where given) are not 8, or which are all zeros: the OTLP specification holds such ids
    invalid (trace.proto, ``trace_id``, ``span_id``). Files are read with ids as short as their
    writers made them; a receiver answers senders that the specification binds."""
    names = spans.strings.values
    for key, codes, digits in (
        ("traceId", spans.trace, 32),
        ("spanId", spans.span_id, 16),
        ("parentSpanId", parent_ids, 16),
    ):
        for code in np.unique(codes[codes >= 0]).tolist():
            value = names[code]
            if len(value) != digits or not value.strip("0"):
                row = int(np.flatnonzero(codes == code)[0])
                raise InputError(
                    f"{key} {value!r} is not an id of {digits} hex digits, not all zeros, as "
                    "OTLP requires",
                    path=source,
                    record=int(spans.record[row]),
                )


def _check_size(body: bytes, encoding: str, source: str) -> None:
    """Refuse a request whose spans, or whose containers of spans, are more than reading it
    is bounded to (:func:`check_export_request`), counted without reading it: the protobuf
    form by a compiled walk of its bytes, the JSON form by its ``spanId`` keys and its
    objects' opening braces (strings may hold some too: a bound, not a count)."""
    if encoding != "protobuf":
        spans, objects = body.count(b'"spanId"'), body.count(b"{")
        if spans > MAX_REQUEST_SPANS or objects > MAX_JSON_OBJECTS:
            raise InputError(
                f"{spans:,} spans and {objects:,} JSON objects in one request; at most "
                f"{MAX_REQUEST_SPANS:,} and {MAX_JSON_OBJECTS:,} are taken: send them in "
                "smaller batches",
                path=source,
            )
        return
    shape = otlp_wire.request_shape(body)
    if shape is None:
        return  # decoding says what is wrong
    resource_spans, scope_spans, spans, short = shape
    if short:
        raise InputError(
            f"{short:,} of {spans:,} spans are shorter than {otlp_wire.MIN_SPAN_BYTES} bytes, "
            "too short to hold a trace id and a span id",
            path=source,
        )
    if spans > MAX_REQUEST_SPANS:
        raise InputError(
            f"{spans:,} spans in one request; at most {MAX_REQUEST_SPANS:,} are taken: send "
            "them in smaller batches",
            path=source,
        )
    if resource_spans + scope_spans > 2 * spans + MAX_EMPTY_CONTAINERS:
        raise InputError(
            f"{resource_spans:,} ResourceSpans and {scope_spans:,} ScopeSpans hold {spans:,} "
            f"spans; more than {MAX_EMPTY_CONTAINERS} empty ones are not taken",
            path=source,
        )


def read_already(spans: SpanTable, parent_ids: np.ndarray) -> RequestReader:
    """The reader of a request whose spans are read already."""
    return lambda: (spans, parent_ids)


def _wire_request(body: bytes, request: Any, source: str) -> tuple[int, RequestReader] | None:
    """The span count and reader of the decoded ``request`` (``body``) when the compiled pass
    finds its spans (:func:`.otlp_wire.scan_spans`) and they pass every check that reading
    them makes, so that the reader cannot fail: those of :func:`_usual_span`, a service per
    resource, starts not before 1970 and ends not before starts, span ids unique within a
    trace and parent links without a cycle, thread ids that an int64 holds. None otherwise:
    the request is read the usual way, which names what is wrong, if anything.

    Only the offsets are found here, and each distinct attribute set decoded (once for the
    requests that carry it: :data:`_known_attributes`); the rest
    (ids as hex, names, details, the table) is left to the reader. Checking and reading this
    way take a fraction of the time of reading through the message classes (the decoded
    message's fields one by one), which makes Python objects field by field."""
    count = sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
    wire = otlp_wire.scan_spans(body, count, len(request.resource_spans))
    if wire is None:
        return None
    processes = [
        p
        for at, n in wire.resources.tolist()
        if (p := _known_process(body[at : at + n] if at >= 0 else b"")) is not None
    ]
    f = wire.fields
    trace_len, span_len, parent_len = (
        f[:, otlp_wire.TRACE_LEN],
        f[:, otlp_wire.SPAN_LEN],
        f[:, otlp_wire.PARENT_LEN],
    )
    kind = f[:, otlp_wire.KIND]
    usual = (
        (trace_len == 16)
        & (span_len == 8)
        & ((parent_len == 0) | (parent_len == 8))
        & _nonzero(body, f[:, otlp_wire.TRACE], 16)
        & _nonzero(body, f[:, otlp_wire.SPAN], 8)
        & ((parent_len == 0) | _nonzero(body, f[:, otlp_wire.PARENT], 8))
        & (kind >= 0)
        & (kind < len(_KIND_ENUM))
        & contained(f[:, otlp_wire.STATUS_CODE], _STATUS_ARRAY)
        & (f[:, otlp_wire.END] >= f[:, otlp_wire.START])
        & (f[:, otlp_wire.START] >= 0)
    )
    if len(processes) != len(wire.resources) or not usual.all():
        return None
    linked = link_parents(wire.span_keys, span_len > 0, wire.parent_keys, parent_len > 0)
    if linked.duplicate >= 0 or linked.cycle >= 0:
        return None
    # each span's attribute set by its bytes: a dictionary look-up for most spans, cheaper than
    # a call of the memo shared by requests (:data:`_known_attributes`), which reads the others
    seen: dict[bytes, tuple[dict[str, Any], str | None, int]] = {}
    attributes = []
    for begin, end in f[:, [otlp_wire.ATTRIBUTES, otlp_wire.ATTRIBUTES_END]].tolist():
        key = body[begin:end] if begin >= 0 else b""
        made = seen.get(key)
        if made is None:
            made = seen[key] = _known_attributes(key)
            if not _INT64.min <= made[2] <= _INT64.max:
                return None
        attributes.append(made)
    return count, lambda: _wire_spans(body, wire, processes, attributes, linked.parent, source)


class _ReadOnce:
    """What ``read`` makes of each serialized message, made once for every request that carries
    the same bytes while held (at most ``most`` messages; emptied when full). Receivers'
    threads share one: a look-up and an assignment are each atomic."""

    def __init__(self, read: Callable[[bytes], Any], most: int = 4096) -> None:
        self._read, self._most = read, most
        self._made: dict[bytes, Any] = {}

    def __call__(self, message: bytes) -> Any:
        try:  # one look-up, not a test and then a look-up
            return self._made[message]
        except KeyError:
            pass
        if len(self._made) >= self._most:
            self._made.clear()
        made = self._made[message] = self._read(message)
        return made


def _read_resource(resource: bytes) -> _Process | None:
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    return _process(_pb_attributes(Resource.FromString(resource).attributes))


def _read_attributes(span: bytes) -> tuple[dict[str, Any], str | None, int]:
    """The attributes of a serialized span that holds only them, with the peer and thread
    they name."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    attrs = _pb_attributes(Span.FromString(span).attributes)
    return attrs, first_tag(attrs, PEER_TAGS), thread_id(attrs)


_known_process = _ReadOnce(_read_resource)
"""An exporter sends the same resources in each request (the shop app's 32 in each request of
512 spans), and reading one costs far more than looking it up."""
_known_attributes = _ReadOnce(_read_attributes)
"""Most spans carry one of a few attribute sets (the shop app's 512 spans a request, 7), and
rows that share one dict share their tags when written (:func:`.jaeger.jaeger_parts`)."""


def _wire_spans(
    body: bytes,
    wire: otlp_wire.WireSpans,
    processes: list[_Process],
    attributes: list[tuple[dict[str, Any], str | None, int]],
    parent: np.ndarray,
    source: str,
) -> tuple[SpanTable, np.ndarray]:
    """The table and parent span ids of a request :func:`_wire_request` checked (and whose
    spans' ``parent`` rows it found). Strings are interned as they are read, those shared by
    many spans (services, names, peers) once; ids are made hex a column at a time."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    pool = StringPool()
    code = pool.code
    f = wire.fields
    by_resource = np.array(
        [(code(p.service), code(p.instance)) for p in processes], np.int64
    ).reshape(-1, 2)[f[:, otlp_wire.RESOURCE]]
    names: dict[bytes, int] = {}
    endpoint = []
    for at, n in f[:, [otlp_wire.NAME, otlp_wire.NAME_LEN]].tolist():
        name = body[at : at + n]
        name_code = names.get(name)
        if name_code is None:
            name_code = names[name] = code(name.decode())
        endpoint.append(name_code)
    peers = {name: code(name) for name in dict.fromkeys(a[1] for a in attributes)}
    trace = _hex_ids(body, f[:, otlp_wire.TRACE], f[:, otlp_wire.TRACE_LEN], 16)
    span_id = _hex_ids(body, f[:, otlp_wire.SPAN], f[:, otlp_wire.SPAN_LEN], 8)
    parent_id = _hex_ids(body, f[:, otlp_wire.PARENT], f[:, otlp_wire.PARENT_LEN], 8)
    messages = [""] * len(f)
    for r in np.flatnonzero(f[:, otlp_wire.MESSAGE_LEN]).tolist():
        at = int(f[r, otlp_wire.MESSAGE])
        messages[r] = body[at : at + int(f[r, otlp_wire.MESSAGE_LEN])].decode()
    events: list[tuple[SpanEvent, ...]] = [()] * len(f)
    for r in np.flatnonzero(f[:, otlp_wire.EVENTS] >= 0).tolist():
        at, to = int(f[r, otlp_wire.EVENTS]), int(f[r, otlp_wire.EVENTS_END])
        events[r] = _pb_events(Span.FromString(body[at:to]).events)
    resources = [processes[r].resource for r in f[:, otlp_wire.RESOURCE].tolist()]
    details = list(
        map(
            SpanDetail,
            span_id,
            [a[0] for a in attributes],
            resources,
            f[:, otlp_wire.STATUS_CODE].tolist(),
            messages,
            events,
        )
    )
    parent_codes = np.array(pool.codes(parent_id), np.int64)
    spans = table_from_codes(
        source,
        pool,
        {
            "service": by_resource[:, 0],
            "instance": by_resource[:, 1],
            "endpoint": endpoint,
            "peer": [peers[a[1]] for a in attributes],
            "trace": pool.codes(trace),
            "span_id": pool.codes(span_id),
            "parent_id": parent_codes,
        },
        kind=_KIND_ARRAY[f[:, otlp_wire.KIND]],
        start=f[:, otlp_wire.START],
        end=f[:, otlp_wire.END],
        record=np.arange(1, len(f) + 1),
        thread=np.array([a[2] for a in attributes], np.int64),
        details=details,
        parent=parent,
    )
    return spans, parent_codes


def _nonzero(body: bytes, at: np.ndarray, width: int) -> np.ndarray:
    """Whether each id of ``width`` bytes at ``at`` in ``body`` has a byte other than zero."""
    if not len(at):
        return np.zeros(0, bool)
    ids = np.frombuffer(body, np.uint8).take(at[:, None] + np.arange(width), mode="clip")
    return np.asarray(ids.any(axis=1))


def _hex_ids(body: bytes, at: np.ndarray, length: np.ndarray, width: int) -> list[Any]:
    """The ids of ``length`` bytes at ``at`` in ``body`` as hex (None for none), made from
    one hex text of them all: ids of ``width`` bytes, as most are, are cut out of it, the
    others made one by one."""
    if not len(at):
        return []
    digits = (
        np.frombuffer(body, np.uint8)
        .take(at[:, None] + np.arange(width), mode="clip")
        .tobytes()
        .hex()
    )
    step = 2 * width
    out: list[Any] = [digits[i : i + step] for i in range(0, len(digits), step)]
    for r in np.flatnonzero(length != width).tolist():
        out[r] = body[at[r] : at[r] + length[r]].hex() or None
    return out


def _decode_request(message: bytes, source: str, where: str) -> Any:
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


def _read_protobuf(builder: SpanTableBuilder, data: bytes, source: str, one: bool = False) -> None:
    """The spans of ``data`` into ``builder``: one message (``one``: a request body), or
    those of a file (:func:`_messages`)."""
    record = 0
    for where, message in [("", data)] if one else _messages(data, source):
        request = _decode_request(message, source, where)
        try:
            spans = list(_protobuf_spans(request, record))
        except _Unusual:  # read again by the checking path, which names what is wrong
            spans = list(_export_spans(source, where, _request_doc(request), record))
        record = _add_spans(builder, spans, record)


class _Unusual(Exception):
    """A decoded request :func:`_protobuf_spans` leaves to the checking path."""


def _resource_process(resource_spans: Any) -> _Process | None:
    return _process(_pb_attributes(resource_spans.resource.attributes))


def _usual_span(span: Any) -> bool:
    """Whether a protobuf span passes what protobuf's types leave to check: ids of the right
    length, a known kind and status code."""
    return (
        0 < len(span.trace_id) <= 16
        and 0 < len(span.span_id) <= 8
        and len(span.parent_span_id) <= 8
        and 0 <= span.kind < len(_KIND_ENUM)
        and span.status.code in _STATUS_SET
    )


def _protobuf_spans(request: Any, record: int) -> Iterator[tuple]:
    """The spans of a decoded ``ExportTraceServiceRequest`` as :func:`_export_spans` reads them
    (numbered after ``record``), taken from the message directly: faster than through its
    JSON form, which a receiver taking thousands of spans a second notices.

    Protobuf has typed the fields already; what is left to check (a service name,
    :func:`_usual_span`) raises :class:`_Unusual` when it fails, and the request is read again
    the checking way, so that every refusal is worded in one place."""
    for rs in request.resource_spans:
        process = _resource_process(rs)
        if process is None:
            raise _Unusual
        for scope in rs.scope_spans:
            for span in scope.spans:
                record += 1
                if not _usual_span(span):
                    raise _Unusual
                yield _span_row(
                    process,
                    record,
                    span.trace_id.hex(),
                    span.span_id.hex(),
                    span.parent_span_id.hex() or None,
                    span.name,
                    _KIND_CODES[span.kind],
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                    _pb_attributes(span.attributes),
                    (span.status.code, span.status.message),
                    _pb_events(span.events),
                )


def _pb_events(events: Any) -> tuple[SpanEvent, ...]:
    return tuple(SpanEvent(e.time_unix_nano, e.name, _pb_attributes(e.attributes)) for e in events)


def _pb_attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value) for kv in kvs}


def _pb_value(value: Any) -> Any:
    """An ``AnyValue`` as :func:`_any_value` reads its JSON form."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_pb_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values)
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
    """A decoded ``ExportTraceServiceRequest`` as its OTLP/JSON form (ids in hex, fields at
    their default left out), which :func:`_read_export` reads and checks.

    Written out for the OTLP messages rather than left to protobuf's generic ``MessageToDict``,
    which would take most of the time spent reading a request.
    """
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _key_values_doc(rs.resource.attributes)},
                "scopeSpans": [
                    {"spans": [_span_doc(span) for span in scope.spans]} for scope in rs.scope_spans
                ],
            }
            for rs in request.resource_spans
        ]
    }


def _span_doc(span: Any) -> dict:
    doc: dict[str, Any] = {
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "name": span.name,
        "startTimeUnixNano": span.start_time_unix_nano,
        "endTimeUnixNano": span.end_time_unix_nano,
    }
    if span.parent_span_id:
        doc["parentSpanId"] = span.parent_span_id.hex()
    if span.kind:
        doc["kind"] = span.kind
    if span.attributes:
        doc["attributes"] = _key_values_doc(span.attributes)
    if span.status.code or span.status.message:
        doc["status"] = {"code": span.status.code, "message": span.status.message}
    if span.events:
        doc["events"] = [
            {
                "timeUnixNano": e.time_unix_nano,
                "name": e.name,
                "attributes": _key_values_doc(e.attributes),
            }
            for e in span.events
        ]
    return doc


def _key_values_doc(kvs: Any) -> list[dict[str, Any]]:
    return [{"key": kv.key, "value": _any_value_doc(kv.value)} for kv in kvs]


def _any_value_doc(value: Any) -> dict[str, Any]:
    which = value.WhichOneof("value")
    if which == "string_value":
        return {"stringValue": value.string_value}
    if which == "int_value":
        return {"intValue": value.int_value}
    if which == "double_value":
        return {"doubleValue": value.double_value}
    if which == "bool_value":
        return {"boolValue": value.bool_value}
    if which == "array_value":
        return {"arrayValue": {"values": [_any_value_doc(v) for v in value.array_value.values]}}
    if which == "kvlist_value":
        return {"kvlistValue": {"values": _key_values_doc(value.kvlist_value.values)}}
    if which == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode()}
    return {}


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


def _read_export(builder: SpanTableBuilder, src: str, where: str, doc: Any, record: int) -> int:
    """Add the spans of one ``ExportTraceServiceRequest`` (``where``: its line or message, for
    messages, and ``record``: the records before it); returns the records read so far."""
    try:
        spans = list(_json_spans(doc, record))
    except _Unusual:  # read again by the checking path, which names what is wrong
        spans = list(_export_spans(src, where, doc, record))
    return _add_spans(builder, spans, record)


def _json_spans(doc: Any, record: int) -> Iterator[tuple]:  # noqa: C901
    """The spans of an OTLP/JSON document as :func:`_export_spans` reads them (numbered after
    ``record``), for the forms exporters write: ids in hex, times as integers or decimal
    strings, the kind as its number, attribute values of one scalar type, status without or
    with a known code, no events. Anything else, valid or not, raises :class:`_Unusual`, and the
    checking path reads the document. The forms taken here are read faster this way than
    through the checking path, which matters for the requests the capture source of ``tacit
    serve`` makes."""
    if not isinstance(doc, dict) or type(doc.get("resourceSpans")) is not list:
        raise _Unusual
    for rs in doc["resourceSpans"]:
        if not isinstance(rs, dict) or _SCOPE_LISTS[1] in rs:
            raise _Unusual
        resource = rs.get("resource")
        resource = {} if resource is None else resource
        if not isinstance(resource, dict):
            raise _Unusual
        process = _process(_json_attributes(resource.get("attributes")))
        if process is None:
            raise _Unusual
        for scope in _json_list(rs.get(_SCOPE_LISTS[0])):
            if not isinstance(scope, dict):
                raise _Unusual
            for span in _json_list(scope.get("spans")):
                record += 1
                if not isinstance(span, dict) or span.get("events") not in (None, []):
                    raise _Unusual
                parent = span.get("parentSpanId")
                kind = span.get("kind")
                kind = 0 if kind is None else kind
                name = span.get("name")
                name = "" if name is None else name
                if (
                    type(name) is not str
                    or type(kind) is not int
                    or not 0 <= kind < len(_KIND_ENUM)
                ):
                    raise _Unusual
                yield _span_row(
                    process,
                    record,
                    _json_id(span.get("traceId"), "traceId"),
                    _json_id(span.get("spanId"), "spanId"),
                    None if parent is None or parent == "" else _json_id(parent, "parentSpanId"),
                    name,
                    _KIND_CODES[kind],
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
        raise _Unusual
    return value


def _json_id(value: Any, key: str) -> str:
    if type(value) is not str or not is_id(value, _ID_DIGITS[key]):
        raise _Unusual
    return value.lower()


def _json_integer(value: Any) -> int:
    """As :meth:`RecordReader.integer` reads a present field."""
    if type(value) is int:
        return value
    if type(value) is not str:
        raise _Unusual
    try:
        return int(value)
    except ValueError:
        raise _Unusual from None


def _json_attributes(kvs: Any) -> dict[str, Any]:
    """As :func:`attributes` reads ``KeyValue`` s of one scalar value each."""
    out = {}
    for kv in _json_list(kvs):
        if type(kv) is not dict or len(kv) != 2 or type(key := kv.get("key")) is not str:
            raise _Unusual
        value = kv.get("value")
        if type(value) is not dict or len(value) != 1:
            raise _Unusual
        ((which, x),) = value.items()
        kind = type(x)
        if which == "stringValue" and kind is str:
            out[key] = x
        elif which == "intValue" and kind in (int, str):
            out[key] = _json_integer(x)
        elif which == "doubleValue" and kind in (int, float):
            out[key] = float(x)
        elif which == "boolValue" and kind is bool:
            out[key] = x
        else:
            raise _Unusual
    return out


def _json_status(status: Any) -> tuple[int, str]:
    """As :func:`_status` reads a status whose code is a number."""
    if status is None:
        return STATUS_UNSET, ""
    if type(status) is not dict:
        raise _Unusual
    code = status.get("code")
    message = status.get("message")
    code = STATUS_UNSET if code is None else code
    message = "" if message is None else message
    if type(code) is not int or code not in _STATUS_SET or type(message) is not str:
        raise _Unusual
    return code, message


def _add_spans(builder: SpanTableBuilder, spans: Sequence[tuple], record: int) -> int:
    """Add ``spans`` (as :func:`_span_row` gives them) after ``record`` records; returns the
    records read so far."""
    add = builder.add
    for span in spans:
        add(*span)
    return spans[-1][_RECORD] if spans else record


def iter_json_lines_spans(path: Path) -> Iterator[dict[str, Any]]:
    """The spans of a file of OTLP JSON Lines (one export per line), one by one as
    :meth:`SpanTableBuilder.add` takes them, records numbered from the file's start as
    :func:`read_input` numbers them; read line by line: what a reader of a stream needs."""
    src, record = str(path), 0
    for n, doc in iter_json_lines(path):
        for span in _export_spans(src, f"line {n}", doc, record):
            record = span[_RECORD]
            yield dict(zip(_ROW_FIELDS, span, strict=True))


def _export_spans(src: str, where: str, doc: Any, record: int) -> Iterator[tuple]:
    """The spans of one export as rows (:func:`_span_row`), numbered after
    ``record``."""
    for rr, resource, spans in resource_spans(src, where, doc):
        process = _process(resource)
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
            yield _span_row(
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


class _Process(NamedTuple):
    """The process a resource names: its service, its instance and all its attributes."""

    service: str
    instance: str
    resource: dict[str, Any]


def _process(resource: dict[str, Any]) -> _Process | None:
    """The process of a resource's attributes; None without a string service name."""
    service = resource.get(SERVICE_ATTR)
    if not isinstance(service, str):
        return None
    return _Process(service, first_tag(resource, INSTANCE_ATTRS) or service, resource)


def _span_row(
    process: _Process,
    record: int,
    trace: str,
    span_id: str,
    parent_id: str | None,
    name: str,
    kind: int,
    start: int,
    end: int,
    attrs: dict[str, Any],
    status: tuple[int, str],
    events: tuple[SpanEvent, ...],
) -> tuple:
    """One span as :meth:`SpanTableBuilder.add` takes it, positionally (:data:`_ROW_FIELDS`),
    from what either reader (JSON or protobuf) took out of the span; ``kind``: its code. A
    tuple, not a dict of keywords: a receiver reads thousands of spans a second, and a
    keyword call costs more a span."""
    return (
        process.service,
        process.instance,
        name,
        kind,
        start,
        end,
        record,
        first_tag(attrs, PEER_TAGS),
        thread_id(attrs),
        trace,
        span_id,
        parent_id,
        SpanDetail(
            span_id=span_id,
            attributes=attrs,
            resource=process.resource,
            status=status[0],
            status_message=status[1],
            events=events,
        ),
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
        if not 0 <= kind < len(_KIND_ENUM):
            raise r.fail(f"unknown span kind {kind}")
        return _KIND_ENUM[kind]
    name = kind.removeprefix(_KIND_PREFIX).lower()
    if name not in _KIND_ENUM:
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


def _any_value(r: RecordReader, value: Any, depth: int = 0) -> Any:  # noqa: C901
    """An ``AnyValue`` as a Python value (arrays as lists, key-value lists as dicts, bytes,
    base64 in JSON, as bytes), inside ``depth`` arrays and key-value lists."""
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
        return float(r.get(v, "doubleValue", (int, float)))
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


def _any(value: Any) -> dict[str, Any]:
    """A Python value as an ``AnyValue`` (the inverse of :func:`_any_value`). JSON has no
    infinity or NaN: a float that is not finite is written as a string."""
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
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        return {"doubleValue": float(value)}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any(v) for v in value]}}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": _key_values(value)}}
    return {"stringValue": str(value)}


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
