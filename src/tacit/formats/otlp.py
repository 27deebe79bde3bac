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

The readers are split by encoding: :mod:`.otlp_json` (the checking reader and the fast one),
:mod:`.otlp_protobuf` (the message classes), :mod:`.otlp_request` (a receiver's request
bodies, through :mod:`.otlp_wire`) and :mod:`.otlp_write`; each path ends in
:func:`.otlp_rows.span_row`. This module reads files, and gives the names the rest of tacit
uses.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tacit.errors import InputError
from tacit.formats.common import Paths, input_files
from tacit.formats.otlp_json import (
    attributes,
    is_id,
    iter_json_lines_spans,
    kind_name,
    read_export,
    resource_spans,
)
from tacit.formats.otlp_protobuf import read_otlp_protobuf, read_protobuf
from tacit.formats.otlp_request import (
    MAX_EMPTY_CONTAINERS,
    MAX_JSON_OBJECTS,
    MAX_REQUEST_SPANS,
    RequestReader,
    check_export_request,
    read_already,
    read_export_request,
)
from tacit.formats.otlp_rows import INSTANCE_ATTRS, SERVICE_ATTR
from tacit.formats.otlp_write import otlp_document, write_otlp, write_otlp_lines
from tacit.formats.span_join import join_inputs
from tacit.formats.textio import iter_json_lines, load_json, read_bytes, read_head
from tacit.model.spans import SpanInput, SpanTable, SpanTableBuilder

__all__ = [
    "INSTANCE_ATTRS",
    "MAX_EMPTY_CONTAINERS",
    "MAX_JSON_OBJECTS",
    "MAX_REQUEST_SPANS",
    "PROTOBUF_SUFFIXES",
    "SERVICE_ATTR",
    "SUFFIXES",
    "RequestReader",
    "attributes",
    "check_export_request",
    "is_id",
    "is_json_lines",
    "is_protobuf",
    "iter_json_lines_spans",
    "kind_name",
    "otlp_document",
    "read_already",
    "read_export_request",
    "read_input",
    "read_otlp",
    "read_otlp_protobuf",
    "resource_spans",
    "write_otlp",
    "write_otlp_lines",
]

PROTOBUF_SUFFIXES = (".pb", ".pb.gz", ".binpb", ".binpb.gz")
"""Names of binary protobuf files (the protobuf project's ``.binpb``, and the older ``.pb``)."""

SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz", *PROTOBUF_SUFFIXES)


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
        read_protobuf(builder, read_bytes(path), src)
        return builder.build_input()
    if doc is not None or not is_json_lines(path):
        docs: Iterable[tuple[str, Any]] = [("", load_json(path) if doc is None else doc)]
    else:
        docs = ((f"line {n}", d) for n, d in iter_json_lines(path))
    record = 0
    for where, d in docs:
        record = read_export(builder, src, where, d, record)
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
