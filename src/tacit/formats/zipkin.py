"""Zipkin v2 JSON: read and write.

The Zipkin v2 span model (zipkin2-api.yaml, https://zipkin.io/zipkin-api/) is a flat JSON list
of spans: ``traceId``, ``id``, ``parentId``, ``name``, ``timestamp`` and ``duration`` in epoch
microseconds, ``kind`` (CLIENT, SERVER, PRODUCER, CONSUMER), ``localEndpoint`` and
``remoteEndpoint`` (``serviceName``, ``ipv4``, ``ipv6``, ``port``) and string ``tags``. The
query API's list of traces (a list of such lists) is read too.

Two details of the model need care:

* An RPC may be recorded as one *shared* span: the server side reuses the client's ``id`` and sets
  ``shared: true``. Here every span needs its own id, so the server side of a shared span (or a
  server span whose id is also used by a non-server span of the trace, as instrumentation written
  before ``shared`` existed does) becomes ``ID:server``, child of the client span ``ID``. Spans
  whose ``parentId`` is ``ID`` are the server's work and become children of ``ID:server``.
* A span without ``kind`` is local or incomplete. It reads as UNKNOWN, or INTERNAL when it carries
  the ``lc`` (local component) tag, which is how the v1 to v2 conversion marks local spans and how
  :func:`zipkin_document` writes internal spans.

A span's tags and annotations (as events named by their value) are kept in its
:class:`~tacit.model.span_details.SpanDetail`, with the OpenTelemetry status its
``otel.status_code``, ``otel.status_description`` and ``error`` tags carry
(:func:`common.status_from_tags`), and written back; Zipkin has no resource, so resource
attributes are written as tags (as the OpenTelemetry Zipkin exporter does), and an event with
attributes as the annotation ``{"NAME": {attributes}}`` (JSON), as that exporter writes it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from tacit.errors import InputError
from tacit.formats.common import (
    HOST_TAGS,
    THREAD_TAGS,
    Paths,
    first_tag,
    hex_ids,
    input_files,
    kind_code,
    merged_tags,
    status_from_tags,
    status_tags,
    tag_text,
    thread_id,
)
from tacit.formats.fields import RecordReader
from tacit.formats.span_join import SHARED_SERVER, join_inputs
from tacit.formats.textio import load_json, write_json
from tacit.model.span_details import NO_DETAIL, SpanDetail, SpanEvent
from tacit.model.spans import (
    CLIENT,
    INTERNAL,
    NONE,
    SERVER,
    UNKNOWN,
    SpanInput,
    SpanTable,
    SpanTableBuilder,
)

SUFFIXES = (".json", ".json.gz")
LOCAL_COMPONENT = "lc"
"""The tag that marks a Zipkin span without ``kind`` as local (in-process)."""
_KIND_NAMES = {SERVER: "SERVER", CLIENT: "CLIENT"}


def read_zipkin(paths: Paths) -> SpanTable:
    """Read Zipkin v2 JSON files (or directories of .json/.json.gz files) into one set of
    spans (:func:`.span_join.join_inputs`, which pairs the sides of a shared span in two
    files)."""
    return join_inputs([read_input(f) for f in input_files(paths, SUFFIXES)]).spans


def read_input(path: Path, doc: Any = None) -> SpanInput:
    """One file's spans with the parent span id each names; ``doc``: its already parsed
    JSON, if at hand."""
    src = str(path)
    doc = load_json(path) if doc is None else doc
    if not isinstance(doc, list):
        raise InputError("not a Zipkin v2 document: expected a list of spans", path=src)
    spans = [s for item in doc for s in (item if isinstance(item, list) else [item])]
    parsed = [_parse(RecordReader(src, record), span) for record, span in enumerate(spans, 1)]
    non_server = {(a["trace"], a["span_id"]) for a, _ in parsed if a["kind"] != SERVER}
    shared = {
        (a["trace"], a["span_id"])
        for a, flag in parsed
        if a["kind"] == SERVER and (flag or (a["trace"], a["span_id"]) in non_server)
    }
    builder = SpanTableBuilder(src)
    for a, _ in parsed:
        if a["kind"] == SERVER and (a["trace"], a["span_id"]) in shared:
            a["parent_id"] = a["span_id"]
            a["span_id"] += SHARED_SERVER
            a["detail"] = replace(a["detail"], span_id=a["span_id"])
        elif (a["trace"], a["parent_id"]) in shared:
            a["parent_id"] += SHARED_SERVER
        builder.add(**a)
    return builder.build_input()


def _parse(r: RecordReader, span: Any) -> tuple[dict[str, Any], bool]:
    """The :meth:`SpanTableBuilder.add` arguments of one span, and its ``shared`` flag."""
    record = r.record
    span = r.obj(span, "span")
    trace = r.string(span, "traceId")
    span_id = r.string(span, "id")
    r.record = f"{record} (trace {trace} span {span_id})"
    local = r.get(span, "localEndpoint", dict)
    service = r.string(local, "serviceName")
    remote = r.get(span, "remoteEndpoint", dict, default={})
    tags = r.get(span, "tags", dict, default={})
    kind = r.string(span, "kind", default=None)
    if kind is None:
        code = INTERNAL if LOCAL_COMPONENT in tags else UNKNOWN
    else:
        code = kind_code(kind)
        if code == UNKNOWN:
            raise r.fail(f"unknown kind {kind!r}")
    start = r.integer(span, "timestamp")
    duration = r.integer(span, "duration")
    if duration < 0:
        raise r.fail(f"negative duration {duration}")
    events = tuple(
        SpanEvent(r.integer(a, "timestamp") * 1000, r.string(a, "value"))
        for a in (r.obj(x, "annotation") for x in r.get(span, "annotations", list, default=[]))
    )
    attributes = dict(tags)
    status, message = status_from_tags(attributes)
    args = {
        "service": service,
        "instance": _address(r, local) or first_tag(tags, HOST_TAGS) or service,
        "endpoint": r.string(span, "name", default=""),
        "kind": code,
        "start": start * 1000,
        "end": (start + duration) * 1000,
        "record": record,
        "peer": r.string(remote, "serviceName", default=None),
        "thread": thread_id(tags),
        "trace": trace,
        "span_id": span_id,
        "parent_id": r.string(span, "parentId", default="") or None,
        "detail": SpanDetail(
            span_id, attributes, status=status, status_message=message, events=events
        ),
    }
    return args, r.get(span, "shared", bool, default=False)


def _address(r: RecordReader, endpoint: dict) -> str | None:
    """``ip`` or ``ip:port`` (``[ipv6]:port``) of an endpoint, None when it has no address."""
    return _address_text(
        r.string(endpoint, "ipv4", default=None),
        r.string(endpoint, "ipv6", default=None),
        r.integer(endpoint, "port", default=None),
    )


def _address_text(ipv4: str | None, ipv6: str | None, port: int | None) -> str | None:
    ip = ipv4 or ipv6
    if ip is None or port is None:
        return ip
    return f"{ip}:{port}" if ipv4 else f"[{ip}]:{port}"


def _endpoint_fields(instance: str) -> dict[str, Any] | None:
    """The ``ipv4``/``ipv6``/``port`` fields for an instance that is an address, else None.

    Only an address written as the reader writes it back (:func:`_address_text`) qualifies, so
    that the instance reads back unchanged: ``0:0::1`` or ``10.0.0.1:080`` is not one.
    """
    host, sep, port = instance.rpartition(":")
    candidates = [(instance, "")]
    if sep and port.isdigit():
        candidates.append((host.removeprefix("[").removesuffix("]"), port))
    for host, port in candidates:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            continue
        fields: dict[str, Any] = {f"ipv{ip.version}": str(ip)}
        if port:
            fields["port"] = int(port)
        if _address_text(fields.get("ipv4"), fields.get("ipv6"), fields.get("port")) == instance:
            return fields
    return None


def zipkin_document(spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None) -> list:  # noqa: C901
    """``spans`` as a Zipkin v2 span list, ordered by trace and start time.

    Each span has the tags and annotations its input had (its detail, resource attributes
    among the tags), and ``tags`` for its row (Zipkin tag values are strings). An instance that
    is an IP address (with optional port) goes into ``localEndpoint``, any other instance into
    the ``hostname`` tag. Ids that are not hex are replaced (see :func:`common.hex_ids`); durations
    are rounded up to whole microseconds, at least one, as the model asks.
    """
    tags = tags or {}
    s = spans.strings
    trace_ids, span_ids = hex_ids(spans)
    out = []
    for row in sorted(range(len(spans)), key=lambda r: (trace_ids[r], spans.start[r])):
        service = s[int(spans.service[row])] or "?"
        instance = s[int(spans.instance[row])] or service
        local: dict[str, Any] = {"serviceName": service}
        d = spans.detail(row) or NO_DETAIL
        columns: dict[str, Any] = {}
        if instance != service:
            address = _endpoint_fields(instance)
            if address is None:
                columns[HOST_TAGS[0]] = instance
            else:
                local.update(address)
        kind = int(spans.kind[row])
        if kind == INTERNAL:
            columns[LOCAL_COMPONENT] = service
        if spans.thread[row] != NONE:
            columns[THREAD_TAGS[0]] = int(spans.thread[row])
        columns |= status_tags(d, d.status_message or "true")
        merged = {**d.resource, **merged_tags(d, columns, tags.get(row, {}))}
        span_tags = {k: tag_text(v) for k, v in merged.items()}
        start_us = int(spans.start[row]) // 1000
        end_us = -(-int(spans.end[row]) // 1000)
        z: dict[str, Any] = {"traceId": trace_ids[row], "id": span_ids[row]}
        if spans.parent[row] != NONE:
            z["parentId"] = span_ids[int(spans.parent[row])]
        z |= {
            "name": s[int(spans.endpoint[row])],
            "timestamp": start_us,
            "duration": max(1, end_us - start_us),
            "localEndpoint": local,
        }
        if kind in _KIND_NAMES:
            z["kind"] = _KIND_NAMES[kind]
        if spans.peer[row] != NONE:
            z["remoteEndpoint"] = {"serviceName": s[int(spans.peer[row])]}
        if d.events:
            z["annotations"] = [
                {"timestamp": e.time // 1000, "value": _annotation(e)} for e in d.events
            ]
        if span_tags:
            z["tags"] = span_tags
        out.append(z)
    return out


def _annotation(event: SpanEvent) -> str:
    """An event as an annotation value: its name, or with attributes ``{"NAME": {...}}``."""
    if not event.attributes:
        return event.name
    return orjson.dumps({event.name: event.attributes}, default=tag_text).decode()


def write_zipkin(
    path: str | Path, spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None
) -> None:
    """Write ``spans`` as Zipkin v2 JSON (gzip when the name ends in .gz)."""
    write_json(path, zipkin_document(spans, tags))
