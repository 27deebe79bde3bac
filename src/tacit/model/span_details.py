"""What a tracer recorded about a span beyond the columns of :class:`~tacit.model.spans.SpanTable`.

The algorithms work on the columns alone; the attributes, the status, the events, the resource
and the id the input gave a span are only carried from reader to writer, so that a trace read,
reconstructed and written keeps everything its input had.

Design: a table holds them in one optional numpy *object* column, ``SpanTable.details``, one
:class:`SpanDetail` reference per row (None where the input recorded nothing beyond the
columns, and no column at all for inputs that never do: simulations, blind spans). A detail is
immutable and shared, not copied: selecting rows (``SpanTable.take``) or concatenating tables
(``spans.concat``) moves references, as numpy moves the other columns, and the spans of one
resource share one ``resource`` mapping. Nothing per span is parsed again or converted until a
writer asks for it.

The fields follow the OpenTelemetry span data model (OTLP ``trace.proto``): attribute values are
``str``, ``int``, ``float``, ``bool``, ``bytes``, lists of them and string-keyed mappings
(``AnyValue``); the status code is OTLP's ``Status.StatusCode``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STATUS_UNSET = 0
"""OTLP ``STATUS_CODE_UNSET``: the span's outcome was not recorded."""
STATUS_OK = 1
"""OTLP ``STATUS_CODE_OK``: marked successful by the application."""
STATUS_ERROR = 2
"""OTLP ``STATUS_CODE_ERROR``: the operation failed."""
STATUS_NAMES = {STATUS_UNSET: "UNSET", STATUS_OK: "OK", STATUS_ERROR: "ERROR"}
STATUS_CODES = {v: k for k, v in STATUS_NAMES.items()}


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A timestamped annotation of a span (OTLP ``Span.Event``, a Jaeger log, a Zipkin
    annotation); ``time`` in int64 nanoseconds since the epoch."""

    time: int
    name: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SpanDetail:
    """One span's record beyond the columns.

    ``span_id`` is the id the input gave the span, kept here because blind views clear the
    ``span_id`` column (:meth:`tacit.model.roles.Observed.without_truth`) and reconstructed
    traces give it back. ``attributes`` are all the span's attributes (tags) as read, including
    those the columns were read from; writers let the columns win, since role inference may
    have changed a kind or a peer. ``resource`` is the attributes of the process that recorded
    the span (an OTLP resource, a Jaeger process).
    """

    span_id: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    resource: Mapping[str, Any] = field(default_factory=dict)
    status: int = STATUS_UNSET
    status_message: str = ""
    events: tuple[SpanEvent, ...] = ()

    def __reduce__(self) -> tuple[type[SpanDetail], tuple[Any, ...]]:
        """Pickled as its fields in order: a table's details go to another process (a Dask
        worker, the service's row builder) a span at a time, and the default for a class with
        slots, a state dict per object, costs several times more."""
        return SpanDetail, (
            self.span_id,
            self.attributes,
            self.resource,
            self.status,
            self.status_message,
            self.events,
        )


NO_DETAIL = SpanDetail()
"""What a writer takes for a row without a detail."""


def status_codes(details: np.ndarray | None, n: int) -> np.ndarray:
    """The OTLP status code of each of a table's ``n`` rows, from its ``details`` column
    (unset where a row, or the whole table, has no detail)."""
    if details is None:
        return np.full(n, STATUS_UNSET, np.int64)
    return np.fromiter((STATUS_UNSET if d is None else d.status for d in details), np.int64, n)


def detail_column(details: Sequence[SpanDetail | None]) -> np.ndarray | None:
    """``details`` as a table's object column, or None when no row has one."""
    if all(d is None for d in details):
        return None
    out = np.empty(len(details), dtype=object)
    out[:] = details
    return out


def concat_details(parts: Sequence[tuple[int, np.ndarray | None]]) -> np.ndarray | None:
    """The detail columns of concatenated tables (each given as its length and its column),
    None when none of them has one."""
    if all(col is None for _, col in parts):
        return None
    return np.concatenate(
        [np.full(n, None, dtype=object) if col is None else col for n, col in parts]
    )
