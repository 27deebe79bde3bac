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
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tacit.errors import InputError
from tacit.formats.common import (
    HOST_TAGS,
    THREAD_TAGS,
    Paths,
    first_tag,
    hex_ids,
    input_files,
    kind_code,
    thread_id,
)
from tacit.formats.fields import RecordReader
from tacit.formats.textio import load_json, write_json
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

SUFFIXES = (".json", ".json.gz")
LOCAL_COMPONENT = "lc"
"""The tag that marks a Zipkin span without ``kind`` as local (in-process)."""
SHARED_SERVER = ":server"
"""Appended to the id of the server side of a shared span."""
_KIND_NAMES = {SERVER: "SERVER", CLIENT: "CLIENT"}


def read_zipkin(paths: Paths) -> SpanTable:
    """Read Zipkin v2 JSON files (or directories of .json/.json.gz files) into one table."""
    return concat([read_document(f) for f in input_files(paths, SUFFIXES)])


def read_document(path: Path, doc: Any = None) -> SpanTable:
    """One file's spans; ``doc``: its already parsed JSON, if at hand."""
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
        elif (a["trace"], a["parent_id"]) in shared:
            a["parent_id"] += SHARED_SERVER
        builder.add(**a)
    return builder.build()


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


def zipkin_document(spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None) -> list:
    """``spans`` as a Zipkin v2 span list, ordered by trace and start time.

    ``tags`` adds tags to individual rows (Zipkin tag values are strings). An instance that is
    an IP address (with optional port) goes into ``localEndpoint``, any other instance into the
    ``hostname`` tag. Ids that are not hex are replaced (see :func:`common.hex_ids`); durations
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
        span_tags: dict[str, str] = {}
        if instance != service:
            address = _endpoint_fields(instance)
            if address is None:
                span_tags[HOST_TAGS[0]] = instance
            else:
                local.update(address)
        kind = int(spans.kind[row])
        if kind == INTERNAL:
            span_tags[LOCAL_COMPONENT] = service
        if spans.thread[row] != NONE:
            span_tags[THREAD_TAGS[0]] = str(int(spans.thread[row]))
        for k, v in tags.get(row, {}).items():
            span_tags[k] = str(v).lower() if isinstance(v, bool) else str(v)
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
        if span_tags:
            z["tags"] = span_tags
        out.append(z)
    return out


def write_zipkin(
    path: str | Path, spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None
) -> None:
    """Write ``spans`` as Zipkin v2 JSON (gzip when the name ends in .gz)."""
    write_json(path, zipkin_document(spans, tags))
