"""The subset of Jaeger's HTTP query API that Jaeger UI and Grafana's Jaeger data source use.

``/api/services``, ``/api/services/{service}/operations``, ``/api/operations?service=``,
``/api/traces?service=&operation=&start=&end=&minDuration=&maxDuration=&limit=&lookback=``,
``/api/traces?traceID=&traceID=`` (Jaeger UI's search by id and its trace comparison),
``/api/traces/{id}`` and ``/api/dependencies?endTs=&lookback=``. Times are microseconds since
the epoch (``start``, ``end``) or milliseconds (``endTs``, ``lookback`` of dependencies), and
durations Go duration strings (``1.2ms``, ``500us``, ``2s``), as Jaeger has them; every answer
is ``{"data": ..., "total", "limit", "offset", "errors"}``, an error too (400 for a malformed
parameter or id, 404 for a trace not found, as Jaeger answers). A search by tags (``tags=``, a JSON
object of tag names to values, as Jaeger UI and Grafana send it) keeps the traces with a span
of the service (and operation) that has every one of them (:meth:`Store.find_traces`). tacit
adds ``minProbability=`` (0 to 1) to a search: only the traces at least that likely to be
right (their ``tacit.trace_probability``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import Any

import orjson

from tacit.errors import InputError
from tacit.formats.jaeger import MAX_US
from tacit.serve.store import Store, TraceQuery, tag_value_text

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_LOOKBACK = {
    "1h": 3600,
    "2h": 7200,
    "3h": 10800,
    "6h": 21600,
    "12h": 43200,
    "24h": 86400,
    "2d": 172800,
    "7d": 604800,
}


def go_duration(text: str, name: str) -> int:
    """A Go duration string (``1h2m3.5s``) in nanoseconds."""
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise InputError(f"{name}: {text!r} is not a duration such as 1.2ms, 500us or 2s")
    if not total < INT64_MAX:
        raise InputError(f"{name}: {text!r} is longer than the store can hold (292 years)")
    return round(total)


INT64_MAX = 2**63 - 1
"""The largest integer the store holds (BIGINT)."""


def int_param(params: Mapping[str, str], name: str, maximum: int = INT64_MAX) -> int | None:
    """A query parameter as a whole number from 0 to ``maximum`` (None when absent)."""
    value = params.get(name)
    if value in (None, ""):
        return None
    try:
        out = int(value)
    except ValueError:
        raise InputError(f"{name}: {value!r} is not an integer") from None
    if out < 0:
        raise InputError(f"{name}: {value!r} cannot be negative")
    if out > maximum:
        raise InputError(f"{name}: {value!r} is more than {maximum:,}")
    return out


MAX_LIMIT = 10_000
"""The most traces one search returns; a larger ``limit`` is refused, not cut."""
SPAN_KINDS = ("server", "client", "producer", "consumer", "internal")
_TRACE_ID = re.compile(r"[0-9a-fA-F]{1,32}")


def envelope(data: Any) -> dict[str, Any]:
    """Jaeger's answer around ``data``."""
    total = len(data) if isinstance(data, list) else 0
    return {"data": data, "total": total, "limit": 0, "offset": 0, "errors": None}


def error(code: int, message: str) -> dict[str, Any]:
    """Jaeger's answer of an error: no data, the error with its HTTP status code."""
    return {**envelope(None), "errors": [{"code": code, "msg": message}]}


def trace_id(text: str) -> str:
    """A trace id as Jaeger takes one: 1 to 32 hexadecimal digits (lower case here)."""
    if not _TRACE_ID.fullmatch(text):
        raise InputError(f"traceID: {text!r} is not a trace id (1 to 32 hexadecimal digits)")
    return text.lower()


def span_kind(text: str | None) -> str | None:
    """The ``spanKind`` of an operations query (None: every kind)."""
    if not text:
        return None
    if text not in SPAN_KINDS:
        raise InputError(f"spanKind: {text!r} is not one of {', '.join(SPAN_KINDS)}")
    return text


def traces_by_id(store: Store, ids: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The stored documents of the traces ``ids`` name, and an error (Jaeger's shape, with the
    id) for each not found."""
    docs, errors = [], []
    for wanted in map(trace_id, ids):
        doc = store.trace(wanted)
        if doc is None:
            errors.append({"code": 404, "msg": "trace not found", "traceID": wanted})
        else:
            docs.append(doc)
    return docs, errors


def trace_query(params: Mapping[str, str]) -> TraceQuery:
    """The search that Jaeger's ``/api/traces`` parameters ask for."""
    service = params.get("service")
    if not service:
        raise InputError("service: a service is required to search traces")
    end_us = int_param(params, "end", MAX_US)
    start_us = int_param(params, "start", MAX_US)
    lookback = params.get("lookback")
    if start_us is None and lookback and lookback != "custom":
        seconds = _LOOKBACK.get(lookback)
        if seconds is None:
            seconds = go_duration(lookback, "lookback") // 10**9
        start_us = (end_us if end_us is not None else time.time_ns() // 1000) - seconds * 10**6
    limit = int_param(params, "limit", MAX_LIMIT) or 20
    operation = params.get("operation") or None
    return TraceQuery(
        service=service,
        operation=None if operation == "all" else operation,
        start_ns=None if start_us is None else start_us * 1000,
        end_ns=None if end_us is None else end_us * 1000,
        min_duration_ns=_duration(params, "minDuration"),
        max_duration_ns=_duration(params, "maxDuration"),
        limit=limit,
        tags=tag_filter(params.get("tags")),
        min_probability=_probability(params, "minProbability"),
    )


def _probability(params: Mapping[str, str], name: str) -> float | None:
    value = params.get(name)
    if value in (None, ""):
        return None
    try:
        out = float(value)
    except ValueError:
        out = math.nan
    if not 0.0 <= out <= 1.0:
        raise InputError(f"{name}: {value!r} is not a probability from 0 to 1")
    return out


def tag_filter(text: str | None, name: str = "tags") -> tuple[tuple[str, str], ...]:
    """The tags a search asks for (``name``: the parameter, as its errors say): a JSON object
    of names to values (compared as :func:`~tacit.serve.store.tag_value_text` gives them)."""
    if not text:
        return ()
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise InputError(f'{name}: {text!r} is not a JSON object such as {{"error":"true"}}')
    return tuple(sorted((k, tag_value_text(v)) for k, v in doc.items()))


def _duration(params: Mapping[str, str], name: str) -> int | None:
    value = params.get(name)
    return go_duration(value, name) if value else None


def services(store: Store) -> dict[str, Any]:
    return envelope(store.services())


def operations(
    store: Store, service: str, with_kind: bool, kind: str | None = None
) -> dict[str, Any]:
    """The operation names of ``service`` (``with_kind``: as the newer ``/api/operations``
    answers, ``[{"name", "spanKind"}]``), those of spans of ``kind`` when given."""
    ops = [(name, k) for name, k in store.operations(service) if kind is None or k == kind]
    if with_kind:
        return envelope([{"name": name, "spanKind": kind} for name, kind in ops])
    return envelope(sorted({name for name, _ in ops}))


def traces_json(docs: list[str], errors: list[dict[str, Any]] | None = None) -> bytes:
    """The answer of a trace search or lookup, built from stored documents without parsing
    them again, with ``errors`` (of ids not found) when there are any."""
    body = ",".join(docs)
    told = orjson.dumps(errors).decode() if errors else "null"
    return f'{{"data":[{body}],"total":{len(docs)},"limit":0,"offset":0,"errors":{told}}}'.encode()


def dependencies(store: Store, params: Mapping[str, str]) -> dict[str, Any]:
    end_ms = int_param(params, "endTs") or time.time_ns() // 10**6
    lookback_ms = int_param(params, "lookback") or 24 * 3600 * 1000
    links = store.dependencies((end_ms - lookback_ms) * 10**6, end_ms * 10**6)
    return envelope([{"parent": a, "child": b, "callCount": n} for a, b, n in links])
