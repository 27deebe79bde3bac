"""Helpers shared by the trace formats (Jaeger, Zipkin, OTLP).

The formats differ in layout but agree on conventions: hex identifiers, OpenTracing/OpenTelemetry
tag names for the host, the peer service and the thread, and the span kinds client/server with
producer/consumer folded into them (a message send is an outgoing request, its delivery an
incoming one).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard, cast

import numpy as np
import orjson

from tacit.digits import ascii_digits
from tacit.errors import InputError
from tacit.formats.textio import expand_inputs
from tacit.model.span_details import (
    STATUS_CODES,
    STATUS_ERROR,
    STATUS_NAMES,
    STATUS_UNSET,
    SpanDetail,
)
from tacit.model.spans import CLIENT, KIND_CODES, NONE, SERVER, UNKNOWN, SpanTable

Paths = str | Path | list[str | Path]
"""One input file or directory, or a list of them."""
Traces = tuple[SpanTable, Mapping[int, Mapping[str, Any]]]
"""Spans with their tags per row, as the trace writers take them."""

HOST_TAGS = ("hostname", "host.name", "k8s.pod.name", "ip")
"""Tags naming the instance a span ran on; the first one present wins."""
THREAD_TAGS = ("thread.id", "thread_id", "thread")
PEER_TAGS = ("peer.service",)
KIND_ALIASES = {"producer": CLIENT, "consumer": SERVER}

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_LOWER_HEX = re.compile("[0-9a-f]*")


def input_files(paths: Paths, suffixes: tuple[str, ...]) -> list[Path]:
    """The files named by ``paths``, directories expanded to their files with ``suffixes``."""
    return expand_inputs(paths if isinstance(paths, list) else [paths], suffixes)


def kind_code(value: Any) -> int:
    """The span kind code of a kind name (case-insensitive); UNKNOWN for anything else."""
    if not isinstance(value, str):
        return UNKNOWN
    v = value.lower()
    return KIND_CODES.get(v, KIND_ALIASES.get(v, UNKNOWN))


def thread_id(tags: Mapping[str, Any]) -> int:
    """The thread id from the first thread tag holding an integer (or digit string)."""
    for k in THREAD_TAGS:
        v = tags.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str) and ascii_digits(v):
            return int(v)
    return NONE


def first_tag(tags: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    """The value of the first of ``keys`` present in ``tags``, as a string."""
    for k in keys:  # a loop, not a generator: readers call this for every span
        if k in tags:
            return str(tags[k])
    return None


def tag(key: str, value: Any) -> dict[str, Any]:
    """A typed tag ``{"key", "type", "value"}`` (Jaeger's JSON model).

    JSON has no infinity or NaN: a float that is not finite is written as a string. Bytes are
    Jaeger's ``binary`` (base64); lists and mappings (OTLP array and key-value list attributes)
    are JSON text, as the OpenTelemetry Jaeger translation writes them.
    """
    if type(value) is str:  # most tags: first, past the checks below
        return {"key": key, "type": "string", "value": value}
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, (int, np.integer)):
        return {"key": key, "type": "int64", "value": int(value)}
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        return {"key": key, "type": "float64", "value": float(value)}
    if isinstance(value, bytes):
        return {"key": key, "type": "binary", "value": base64.b64encode(value).decode()}
    return {"key": key, "type": "string", "value": tag_text(value)}


def tag_text(value: Any) -> str:
    """A tag value as text (Zipkin's tags are strings): JSON for lists and mappings, ``true``
    and ``false`` for booleans, base64 for bytes."""
    if isinstance(value, (list, tuple, Mapping)):
        try:
            return orjson.dumps(value, default=_json_default).decode()
        except TypeError as e:  # orjson writes at most 254 levels of lists and mappings
            raise InputError(f"a tag value that cannot be written as JSON ({e})") from None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(type(value).__name__)


STATUS_CODE_TAG = "otel.status_code"
STATUS_MESSAGE_TAG = "otel.status_description"
ERROR_TAG = "error"
"""The tags that carry an OpenTelemetry span status in Jaeger and Zipkin (OpenTelemetry
specification, "Mapping to non-OTLP formats": ``otel.status_code``, ``otel.status_description``,
and ``error``, which Jaeger sets to true and Zipkin to the description)."""


def status_from_tags(tags: dict[str, Any]) -> tuple[int, str]:
    """The status that Jaeger or Zipkin ``tags`` carry, removing its tags from ``tags``:
    ``otel.status_code`` when present, else ERROR when ``error`` is set (true, or a Zipkin
    description), else UNSET."""
    code = tags.pop(STATUS_CODE_TAG, None)
    message = tags.pop(STATUS_MESSAGE_TAG, None)
    error = tags.get(ERROR_TAG)
    if isinstance(code, str) and code.upper() in STATUS_CODES:
        status = STATUS_CODES[code.upper()]
    elif error is True or (isinstance(error, str) and error.lower() not in ("", "false")):
        status = STATUS_ERROR
    else:
        if code is not None:
            tags[STATUS_CODE_TAG] = code  # not a status name: an attribute like any other
        if message is not None:
            tags[STATUS_MESSAGE_TAG] = message
        return STATUS_UNSET, ""
    if status == STATUS_ERROR and error is not None:
        del tags[ERROR_TAG]
        if message is None and isinstance(error, str) and error.lower() != "true":
            message = error
    return status, "" if message is None else str(message)


def status_tags(detail: SpanDetail, error_value: str | bool) -> dict[str, Any]:
    """The tags of ``detail``'s status (see :func:`status_from_tags`); ``error_value``: what
    ``error`` holds on a failed span without a description (Jaeger: true, Zipkin: "true")."""
    if detail.status == STATUS_UNSET:
        return {}
    out: dict[str, Any] = {STATUS_CODE_TAG: STATUS_NAMES[detail.status]}
    if detail.status_message:
        out[STATUS_MESSAGE_TAG] = detail.status_message
    if detail.status == STATUS_ERROR:
        out[ERROR_TAG] = error_value
    return out


def merged_tags(
    detail: SpanDetail, columns: Mapping[str, Any], extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The tags a writer writes for a row: the input's attributes (its ``detail``, or
    :data:`NO_DETAIL`), overridden by ``columns`` (what the table's columns say: kind, peer,
    thread, status) and then by ``extra`` (the caller's tags, such as a reconstruction's
    evidence)."""
    return {**detail.attributes, **columns, **extra}


def hex_ids(spans: SpanTable) -> tuple[list[str], list[str]]:
    """The (trace id, span id) of every row as 32- and 16-digit hex, for writers.

    The formats need fixed-width hex ids (OTLP: 16-byte trace and 8-byte span ids; Jaeger and
    Zipkin: 64- or 128-bit). Hex ids that fit are lower-cased and zero-padded. Other ids (absent,
    not hex, such as the ``:server`` side of a shared Zipkin span, or too long) are replaced by
    the row number plus one (for a trace id, that of the trace's first row, so that all its
    spans still share one id), or the next number when that one is an id the spans already
    use: a replacement never merges two traces or gives two spans one id.
    """
    s = spans.strings
    trace_codes = spans.trace.tolist()
    first_row: dict[int, int] = {}
    for row, t in enumerate(trace_codes):
        first_row.setdefault(t, row)
    traces = _fixed_ids([s[t] for t in first_row], list(first_row.values()), 32)
    trace_ids = dict(zip(first_row, traces, strict=True))
    span_ids = _fixed_ids(s.names(spans.span_id), range(len(spans)), 16)
    return [trace_ids[t] for t in trace_codes], span_ids


def _fixed_ids(values: list[str | None], rows: Sequence[int], width: int) -> list[str]:
    """Each of ``values`` as a hex id of ``width`` digits (see :func:`hex_ids`); ``rows``: the
    row each replacement is made from, one per value."""
    if _all_fixed(values, width):
        return values
    kept = [_fixed_hex(v, width) for v in values]
    used = {v for v in kept if v is not None}
    out: list[str] = []
    for row, v in zip(rows, kept, strict=True):
        if v is None:
            n = row + 1
            while f"{n:0{width}x}" in used:
                n += 1
            v = f"{n:0{width}x}"
            used.add(v)
        out.append(v)
    return out


def _all_fixed(values: list[str | None], width: int) -> TypeGuard[list[str]]:
    """Whether every one of ``values`` is a lowercase hex id of ``width`` digits already, as
    most are: checked over their joined text, not one by one (:func:`_fixed_hex`)."""
    if None in values:
        return False
    texts = cast(list[str], values)
    return set(map(len, texts)) <= {width} and _LOWER_HEX.fullmatch("".join(texts)) is not None


def _fixed_hex(value: str | None, width: int) -> str | None:
    """``value`` as a lowercase hex id of ``width`` digits, or None when it is not one."""
    if value and len(value) <= width and _HEX_DIGITS.issuperset(value):
        return value.lower().rjust(width, "0")
    return None
