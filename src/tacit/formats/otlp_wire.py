"""Where the fields of each span lie in a binary OTLP export request, found in one compiled
pass over its bytes.

The protobuf encoding (protobuf.dev, "Encoding": a field is a varint tag, field number << 3 |
wire type, then a varint, 8 or 4 bytes, or a varint length and that many bytes) is walked
through ``ExportTraceServiceRequest.resource_spans`` (1), ``ResourceSpans.scope_spans`` (2),
``ScopeSpans.spans`` (2) and ``Span`` (opentelemetry-proto
``collector/trace/v1/trace_service.proto`` and ``trace/v1/trace.proto``): trace_id 1,
span_id 2, parent_span_id 4, name 5, kind 6, start 7 and end 8 (fixed64), attributes 9,
events 11, status 15 (its message 2, its code 3). Trace state, links, flags, the scope and
the dropped counts are stepped over, as :mod:`.otlp` does not keep them. The resource of each
``ResourceSpans`` (1) is found whole, for the caller to decode (once for all the requests that
carry it).

Why not through the message classes alone: reading every field of every span from the decoded
message (``upb``) makes a Python object per field, and a receiver reads thousands of spans a
second. Here only the offsets and numbers are found, by the compiled pass, and the reader makes
each distinct attribute set and name once.

The pass takes the forms protobuf encoders write (the OpenTelemetry SDKs', the Collector's):
a request of any other form is not scanned (:func:`scan_spans` returns None) and is read
through the message classes, which give every form its protobuf meaning:

* a field the reader keeps given twice in one message (protobuf keeps the last value, and
  merges a message given twice);
* the attributes or the events of a span not one after another;
* a known field of another wire type than its own, a group, or bytes that end early.

Unknown fields are stepped over, as protobuf does. The bytes are not checked as UTF-8 here:
the caller decodes the request with the message classes first, which refuses what is not.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

# Columns of WireSpans.fields: offsets into the body, lengths, and values.
RESOURCE = 0  # the index of the span's ResourceSpans
TRACE, TRACE_LEN = 1, 2
SPAN, SPAN_LEN = 3, 4
PARENT, PARENT_LEN = 5, 6
NAME, NAME_LEN = 7, 8
KIND = 9
START, END = 10, 11
ATTRIBUTES, ATTRIBUTES_END = 12, 13  # -1, -1: none
EVENTS, EVENTS_END = 14, 15  # -1, -1: none
STATUS_CODE = 16
MESSAGE, MESSAGE_LEN = 17, 18
_FIELDS = 19

KEY_BYTES = 26
"""A span's key: its trace id (16 bytes, zero-padded), the id's length, a span id (8 bytes,
zero-padded) and that id's length. Equal keys are equal ids, and the last byte is never zero
for a span id, so keys compare as numpy ``S26`` strings (which drop trailing zeros)."""

_LEN, _VARINT, _FIXED64, _FIXED32 = 2, 0, 1, 5
# Tags of the length-delimited fields walked: field number << 3 | wire type.
_RESOURCE_SPANS = 1 << 3 | _LEN  # ExportTraceServiceRequest.resource_spans
_RESOURCE = 1 << 3 | _LEN  # ResourceSpans.resource
_SCOPE_SPANS = 2 << 3 | _LEN  # ResourceSpans.scope_spans
_SPANS = 2 << 3 | _LEN  # ScopeSpans.spans


class WireSpans(NamedTuple):
    """The spans of one request as :func:`scan_spans` found them."""

    fields: np.ndarray
    """int64 (spans, 19): per span, the columns named in this module."""
    resources: np.ndarray
    """int64 (resource spans, 2): the offset and length of each ``ResourceSpans``' resource
    (-1, 0: none)."""
    span_keys: np.ndarray
    """``S26`` per span: its trace id and span id (:data:`KEY_BYTES`)."""
    parent_keys: np.ndarray
    """``S26`` per span: its trace id and parent span id (the last byte zero: none)."""


def scan_spans(body: bytes, count: int, resource_spans: int) -> WireSpans | None:
    """Where each of the ``count`` spans of the ``ExportTraceServiceRequest`` ``body`` lies,
    in the order protobuf reads them, and the resource of each of its ``resource_spans``
    ``ResourceSpans``; None when the body is not of a form the pass takes (see the module's
    docstring) or does not hold that many of each."""
    data = np.frombuffer(body, np.uint8)
    fields = np.zeros((count, _FIELDS), np.int64)
    keys = np.zeros((count, 2, KEY_BYTES), np.uint8)
    resources = np.full((resource_spans, 2), -1, np.int64)
    resources[:, 1] = 0
    if not _scan(data, fields, keys, resources):
        return None
    return WireSpans(
        fields,
        resources,
        np.ascontiguousarray(keys[:, 0]).view(f"S{KEY_BYTES}").ravel(),
        np.ascontiguousarray(keys[:, 1]).view(f"S{KEY_BYTES}").ravel(),
    )


MIN_SPAN_BYTES = 28
"""The fewest bytes a span takes that holds a trace id and a span id: two tags, two lengths,
16 and 8 bytes."""


def request_shape(body: bytes) -> tuple[int, int, int, int] | None:
    """How many ``ResourceSpans``, ``ScopeSpans`` and spans the ``ExportTraceServiceRequest``
    ``body`` holds, and how many of the spans are shorter than :data:`MIN_SPAN_BYTES`,
    counted without decoding it (a compiled walk of its bytes, as :func:`scan_spans` walks
    them): what decoding would build, known before it is built. None for bytes the walk does
    not take (decoding then says what is wrong)."""
    counts = _shape(np.frombuffer(body, np.uint8))
    return (
        None if counts[0] < 0 else (int(counts[0]), int(counts[1]), int(counts[2]), int(counts[3]))
    )


@njit(cache=True, nogil=True)
def _shape(b: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`request_shape`'s counts; the first -1 for bytes the walk does not take."""
    counts = np.zeros(4, np.int64)
    i, end = 0, len(b)
    while True:
        tag, start, stop = _next(b, i, end, _RESOURCE_SPANS, _RESOURCE_SPANS)
        if tag == 0:
            return counts
        if tag < 0 or not _count_scopes(b, start, stop, counts):
            counts[0] = -1
            return counts
        counts[0] += 1
        i = stop


@njit(cache=True, nogil=True)
def _count_scopes(b: np.ndarray, i: int, end: int, counts: np.ndarray) -> bool:  # pragma: no cover
    """Count the ``ScopeSpans`` of one ``ResourceSpans`` (``b[i:end]``) and their spans into
    ``counts``; False for bytes the walk does not take."""
    while True:
        tag, start, stop = _next(b, i, end, _SCOPE_SPANS, _SCOPE_SPANS)
        if tag <= 0:
            return tag == 0
        counts[1] += 1
        if not _count_spans(b, start, stop, counts):
            return False
        i = stop


@njit(cache=True, nogil=True)
def _count_spans(b: np.ndarray, i: int, end: int, counts: np.ndarray) -> bool:  # pragma: no cover
    """Count the spans of one ``ScopeSpans`` (``b[i:end]``), and those shorter than
    :data:`MIN_SPAN_BYTES`, into ``counts``; False for bytes the walk does not take."""
    while True:
        tag, start, stop = _next(b, i, end, _SPANS, _SPANS)
        if tag <= 0:
            return tag == 0
        counts[2] += 1
        counts[3] += stop - start < MIN_SPAN_BYTES
        i = stop


@njit(cache=True, nogil=True)
def _varint(b: np.ndarray, i: int, end: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """The varint at ``i`` as an int64 (two's complement above 2**63), and the offset after
    it; -1 for that offset when it runs past ``end`` or over 10 bytes."""
    x = np.uint64(0)
    for k in range(10):
        if i >= end:
            return 0, -1
        c = b[i]
        i += 1
        x |= np.uint64(c & 0x7F) << np.uint64(7 * k)
        if c < 0x80:
            return int(np.int64(x)), i
    return 0, -1


@njit(cache=True, nogil=True)
def _skip(b: np.ndarray, i: int, end: int, wire: int) -> int:  # pragma: no cover - compiled
    """The offset after a field of wire type ``wire`` whose value starts at ``i``; -1 for
    a group, an unknown wire type, or a value running past ``end``."""
    if wire == _VARINT:
        return _varint(b, i, end)[1]
    if wire == _FIXED64:
        return i + 8 if i + 8 <= end else -1
    if wire == _FIXED32:
        return i + 4 if i + 4 <= end else -1
    if wire == _LEN:
        return _length(b, i, end)[1]
    return -1


@njit(cache=True, nogil=True)
def _length(b: np.ndarray, i: int, end: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """Where the value of a length-delimited field whose length starts at ``i`` lies:
    (start, stop); stop -1 when it runs past ``end``."""
    n, i = _varint(b, i, end)
    return (i, i + n) if i >= 0 and 0 <= n <= end - i else (0, -1)


@njit(cache=True, nogil=True)
def _next(
    b: np.ndarray, i: int, end: int, one: int, other: int
) -> tuple[int, int, int]:  # pragma: no cover
    """The next length-delimited field in ``b[i:end]`` tagged ``one`` or ``other``, other
    fields stepped over: its tag and where its value lies, (tag, start, stop); tag 0 when
    none is left, -1 for bytes the pass does not take."""
    while i < end:
        tag, i = _varint(b, i, end)
        if i < 0:
            return -1, 0, 0
        if tag in (one, other):
            start, stop = _length(b, i, end)
            return (tag, start, stop) if stop >= 0 else (-1, 0, 0)
        i = _skip(b, i, end, tag & 7)
        if i < 0:
            return -1, 0, 0
    return 0, end, end


@njit(cache=True, nogil=True)
def _key(
    b: np.ndarray, key: np.ndarray, at: int, trace: int, trace_len: int, n: int
) -> None:  # pragma: no cover
    """Fill ``key`` with the trace id of ``trace_len`` bytes at ``trace`` and the id of ``n``
    bytes at ``at`` (:data:`KEY_BYTES`); ids longer than a key holds are left to the caller."""
    for k in range(min(trace_len, 16)):
        key[k] = b[trace + k]
    key[16] = min(trace_len, 255)
    for k in range(min(n, 8)):
        key[17 + k] = b[at + k]
    key[25] = min(n, 255)


@njit(cache=True, nogil=True)
def _status(b: np.ndarray, i: int, end: int, row: np.ndarray) -> bool:  # pragma: no cover
    """Fill ``row``'s status from the ``Status`` message in ``b[i:end]``."""
    seen = 0
    while i < end:
        tag, i = _varint(b, i, end)
        if i < 0:
            return False
        field, wire = tag >> 3, tag & 7
        if field == 2 or field == 3:
            if seen & (1 << field) or wire != (_LEN if field == 2 else _VARINT):
                return False
            seen |= 1 << field
            if field == 3:
                row[STATUS_CODE], i = _varint(b, i, end)
            else:
                start, i = _length(b, i, end)
                row[MESSAGE], row[MESSAGE_LEN] = start, i - start
        else:
            i = _skip(b, i, end, wire)
        if i < 0:
            return False
    return True


@njit(cache=True, nogil=True)
def _span(b: np.ndarray, i: int, end: int, row: np.ndarray) -> bool:  # pragma: no cover  # noqa: C901, PLR0912
    """Fill ``row`` from the ``Span`` message in ``b[i:end]``; False for a form left to the
    message classes."""
    row[ATTRIBUTES] = row[ATTRIBUTES_END] = row[EVENTS] = row[EVENTS_END] = -1
    seen = 0  # the singular fields read so far, a bit each
    last = 0  # the field before this one
    while i < end:
        at = i
        tag, i = _varint(b, i, end)
        if i < 0:
            return False
        field, wire = tag >> 3, tag & 7
        if field == 9 or field == 11:  # attributes, events: repeated, kept one after another
            first = ATTRIBUTES if field == 9 else EVENTS
            if wire != _LEN or (row[first] >= 0 and last != field):
                return False
            if row[first] < 0:
                row[first] = at
            i = _skip(b, i, end, wire)
            row[first + 1] = i
        elif (1 <= field <= 8 and field != 3) or field == 15:
            if seen & (1 << field):
                return False
            seen |= 1 << field
            if field == 6:
                if wire != _VARINT:
                    return False
                row[KIND], i = _varint(b, i, end)
            elif field == 7 or field == 8:
                if wire != _FIXED64 or i + 8 > end or b[i + 7] >= 0x80:  # not above int64
                    return False
                v = np.int64(0)
                for k in range(8):
                    v |= np.int64(b[i + k]) << (8 * k)
                row[START if field == 7 else END] = v
                i += 8
            else:
                if wire != _LEN:
                    return False
                start, i = _length(b, i, end)
                if i < 0:
                    return False
                if field == 15:
                    if not _status(b, start, i, row):
                        return False
                else:
                    col = (
                        TRACE
                        if field == 1
                        else SPAN
                        if field == 2
                        else PARENT
                        if field == 4
                        else NAME
                    )
                    row[col], row[col + 1] = start, i - start
        else:  # trace state, links, dropped counts, flags, unknown fields
            i = _skip(b, i, end, wire)
        if i < 0:
            return False
        last = field
    return True


@njit(cache=True, nogil=True)
def _scan(  # noqa: C901, PLR0912
    b: np.ndarray, fields: np.ndarray, keys: np.ndarray, resources: np.ndarray
) -> bool:  # pragma: no cover
    """Fill ``fields``, ``keys`` and ``resources`` (sized for the spans and resource spans
    expected); False when the body is not of a form the pass takes or holds other counts."""
    count = len(fields)
    spans = 0
    n_resources = 0
    i = 0
    while True:
        tag, i, resource_end = _next(b, i, len(b), _RESOURCE_SPANS, _RESOURCE_SPANS)
        if tag < 0 or (tag > 0 and n_resources >= len(resources)):
            return False
        if tag == 0:
            break
        while True:
            tag, j, stop = _next(b, i, resource_end, _RESOURCE, _SCOPE_SPANS)
            if tag < 0:
                return False
            if tag == 0:
                break
            if tag == _RESOURCE:  # given twice, protobuf merges the two
                if resources[n_resources, 0] >= 0:
                    return False
                resources[n_resources, 0], resources[n_resources, 1] = j, stop - j
            else:
                while True:
                    tag, k, span_end = _next(b, j, stop, _SPANS, _SPANS)
                    if tag < 0 or (tag > 0 and spans >= count):
                        return False
                    if tag == 0:
                        break
                    row = fields[spans]
                    row[RESOURCE] = n_resources
                    if not _span(b, k, span_end, row):
                        return False
                    _key(b, keys[spans, 0], row[SPAN], row[TRACE], row[TRACE_LEN], row[SPAN_LEN])
                    _key(
                        b, keys[spans, 1], row[PARENT], row[TRACE], row[TRACE_LEN], row[PARENT_LEN]
                    )
                    spans += 1
                    j = span_end
            i = stop
        n_resources += 1
        i = resource_end
    return n_resources == len(resources) and spans == count
