"""Jaeger v2's query API over HTTP, ``/api/v3``, as Jaeger's HTTP gateway answers it: the
services, a service's operations (``service=``, ``spanKind=``), a trace search
(``query.serviceName``, ``query.operationName``, ``query.startTimeMin`` and ``...Max`` as RFC
3339 times, both required, ``query.durationMin``/``...Max`` as Go durations,
``query.searchDepth`` (100 by default), ``query.attributes`` as a JSON object), a trace by id
and the dependencies (``startTime``, ``endTime``). Each parameter is also taken under its
earlier snake_case name (``query.service_name``, ``span_kind``, ...). Traces are OTLP JSON in
``{"result": {"resourceSpans": [...]}}``, tacit's links and probabilities among their
attributes; a search that finds none is 404 "No traces found"; an error is
``{"error": {"httpCode", "message"}}``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from tacit.errors import InputError
from tacit.formats.jaeger import read_input
from tacit.formats.otlp import otlp_document
from tacit.serve.jaeger_api import MAX_LIMIT, go_duration, span_kind, tag_filter, trace_id
from tacit.serve.store import Store, TraceQuery

SEARCH_DEPTH = 100
"""Traces a search returns when ``query.searchDepth`` does not say (Jaeger's default)."""
_RFC3339 = re.compile(
    r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", re.IGNORECASE
)


class NotFound(Exception):
    """What was asked for is not stored (404)."""


def error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"httpCode": code, "message": message}}


def services(store: Store) -> dict[str, Any]:
    return {"services": store.services()}


def operations(store: Store, params: Mapping[str, str]) -> dict[str, Any]:
    kind = span_kind(_param(params, "spanKind", "span_kind") or None)
    ops = store.operations(params.get("service", ""))
    return {
        "operations": [
            {"name": name, "spanKind": k} for name, k in ops if kind is None or k == kind
        ]
    }


def find_traces(store: Store, params: Mapping[str, str]) -> dict[str, Any]:
    """The traces a search asks for, as one OTLP document."""
    return _result(store.find_traces(trace_query(params)))


def trace(store: Store, wanted: str) -> dict[str, Any]:
    doc = store.trace(trace_id(wanted))
    if doc is None:
        raise NotFound("trace not found")
    return _result([doc])


def dependencies(store: Store, params: Mapping[str, str]) -> dict[str, Any]:
    start = _param(params, "startTime", "start_time")
    end = _param(params, "endTime", "end_time")
    for name, value in (("startTime", start), ("endTime", end)):
        if not value:
            raise InputError(f"missing required parameter: {name}")
    start_ns, end_ns = rfc3339_ns(start, "startTime"), rfc3339_ns(end, "endTime")
    if end_ns <= start_ns:
        raise InputError("endTime must be after startTime")
    links = store.dependencies(start_ns, end_ns)
    return {"dependencies": [{"parent": a, "child": b, "callCount": n} for a, b, n in links]}


def trace_query(params: Mapping[str, str]) -> TraceQuery:
    """The search the ``query.*`` parameters ask for."""
    service = _param(params, "query.serviceName", "query.service_name")
    if not service:
        raise InputError("query.serviceName: a service is required to search traces")
    start = _param(params, "query.startTimeMin", "query.start_time_min")
    end = _param(params, "query.startTimeMax", "query.start_time_max")
    if not start or not end:
        raise InputError("query.startTimeMin and query.startTimeMax are required")
    start_ns = rfc3339_ns(start, "query.startTimeMin")
    end_ns = rfc3339_ns(end, "query.startTimeMax")
    if start_ns >= end_ns:
        raise InputError("query.startTimeMin must be before query.startTimeMax")
    depth = _param(params, "query.searchDepth", "query.search_depth") or params.get(
        "query.num_traces", ""
    )
    if depth and not (depth.isdigit() and 0 < int(depth) <= MAX_LIMIT):
        raise InputError(f"malformed parameter query.searchDepth: {depth!r} (1 to {MAX_LIMIT:,})")
    operation = _param(params, "query.operationName", "query.operation_name")
    return TraceQuery(
        service=service,
        operation=operation or None,
        start_ns=start_ns,
        end_ns=end_ns,
        min_duration_ns=_duration(params, "query.durationMin", "query.duration_min"),
        max_duration_ns=_duration(params, "query.durationMax", "query.duration_max"),
        limit=int(depth) if depth else SEARCH_DEPTH,
        tags=tag_filter(params.get("query.attributes"), "malformed parameter query.attributes"),
    )


def rfc3339_ns(text: str, name: str) -> int:
    """An RFC 3339 time (``2026-11-30T02:00:00.5Z``, nanoseconds at most) in nanoseconds."""
    m = _RFC3339.fullmatch(text)
    try:
        if m is None:
            raise ValueError
        offset = "+00:00" if m.group(3).upper() == "Z" else m.group(3)
        whole = datetime.fromisoformat(m.group(1) + offset)
    except ValueError:
        raise InputError(
            f"malformed parameter {name}: {text!r} is not an RFC 3339 time such as "
            "2026-11-30T02:00:00Z"
        ) from None
    return int(whole.timestamp()) * 10**9 + int((m.group(2) or "").ljust(9, "0"))


def _result(docs: list[str]) -> dict[str, Any]:
    if not docs:
        raise NotFound("No traces found")
    jaeger = {"data": [orjson.loads(d) for d in docs]}
    return {"result": otlp_document(read_input(Path("store"), jaeger).spans)}


def _param(params: Mapping[str, str], canonical: str, deprecated: str) -> str:
    return params.get(canonical) or params.get(deprecated) or ""


def _duration(params: Mapping[str, str], canonical: str, deprecated: str) -> int | None:
    value = _param(params, canonical, deprecated)
    return go_duration(value, canonical) if value else None
