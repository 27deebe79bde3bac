"""A receiver's OTLP request bodies: checked before they are acknowledged, read afterwards
(:func:`check_export_request`). Protobuf requests of the forms encoders write are decoded and
their spans found by a compiled pass over their bytes (:mod:`.otlp_wire`); any other request
is read at once by :mod:`.otlp_protobuf` or :mod:`.otlp_json`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from tacit.errors import InputError
from tacit.formats import otlp_wire
from tacit.formats.common import PEER_TAGS, first_tag, thread_id
from tacit.formats.otlp_json import read_export
from tacit.formats.otlp_protobuf import decode_request, pb_attributes, pb_events, read_protobuf
from tacit.formats.otlp_rows import KIND_CODES, KIND_ENUM, STATUS_SET, Process, named_process
from tacit.model.columns import StringPool
from tacit.model.span_details import SpanDetail, SpanEvent
from tacit.model.spans import SpanTable, SpanTableBuilder, link_parents, table_from_codes
from tacit.runs import contained

_INT64 = np.iinfo(np.int64)

_KIND_ARRAY = np.array(KIND_CODES, np.int8)

_STATUS_ARRAY = np.array(sorted(STATUS_SET))


def read_export_request(
    body: bytes, encoding: str, source: str, from_sender: bool = True
) -> tuple[SpanTable, np.ndarray]:
    """The spans of one OTLP/HTTP or OTLP/gRPC request body (``encoding``: ``protobuf`` or
    ``json``), and the parent span id each named (codes of the table's strings, -1 for none),
    found in this request or not: a receiver pairs spans across requests by these ids.
    ``from_sender``: its ids are checked as :func:`check_export_request` does; else (a request
    taken before, by a receiver that may have checked less) they are read as they are."""
    return check_export_request(body, encoding, source, from_sender)[1]()


RequestSpans = tuple[SpanTable, np.ndarray]
"""A request's spans, and the parent span id each named (codes of the table's strings)."""
RequestReader = Callable[[], RequestSpans]
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
        checked = _wire_request(body, decode_request(body, source, ""), source)
        if checked is not None:
            return checked
    builder = SpanTableBuilder(source)
    if encoding == "protobuf":
        read_protobuf(builder, body, source, one=True)
    else:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise InputError(f"not JSON: {e}", path=source) from None
        read_export(builder, source, "", doc, 0)
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
        & (kind < len(KIND_ENUM))
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


def _read_resource(resource: bytes) -> Process | None:
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    return named_process(pb_attributes(Resource.FromString(resource).attributes))


def _read_attributes(span: bytes) -> tuple[dict[str, Any], str | None, int]:
    """The attributes of a serialized span that holds only them, with the peer and thread
    they name."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    attrs = pb_attributes(Span.FromString(span).attributes)
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
    processes: list[Process],
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
        events[r] = pb_events(Span.FromString(body[at:to]).events)
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
