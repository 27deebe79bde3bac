"""What every OTLP reader makes of a span: the row :class:`~tacit.model.spans.SpanTableBuilder`
takes, with the process its resource names (:mod:`.otlp`).

Each decoding path (:mod:`.otlp_json`, :mod:`.otlp_protobuf`, :mod:`.otlp_request`) ends in
:func:`span_row`, so that what a span becomes is decided in one place."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, NamedTuple

from tacit.formats.common import PEER_TAGS, first_tag, kind_code, thread_id
from tacit.model.span_details import STATUS_CODES, SpanDetail, SpanEvent
from tacit.model.spans import SpanTableBuilder

SERVICE_ATTR = "service.name"

INSTANCE_ATTRS = ("k8s.pod.name", "host.name", "service.instance.id")
"""Resource attributes naming the instance, first present wins."""

KIND_ENUM = ("unspecified", "internal", "server", "client", "producer", "consumer")
"""``SpanKind`` names in enum order (``SPAN_KIND_UNSPECIFIED`` = 0, ...)."""

KIND_CODES = tuple(kind_code(k) for k in KIND_ENUM)
"""The kind code of each ``SpanKind`` number."""

ROW_FIELDS = tuple(inspect.signature(SpanTableBuilder.add).parameters)[1:]
"""The parameters of :meth:`SpanTableBuilder.add` in their order: the fields of a span row."""

RECORD = ROW_FIELDS.index("record")

STATUS_SET = frozenset(STATUS_CODES.values())


class Unusual(Exception):
    """A decoded request :func:`_protobuf_spans` leaves to the checking path."""


def add_spans(builder: SpanTableBuilder, spans: Sequence[tuple], record: int) -> int:
    """Add ``spans`` (as :func:`span_row` gives them) after ``record`` records; returns the
    records read so far."""
    add = builder.add
    for span in spans:
        add(*span)
    return spans[-1][RECORD] if spans else record


class Process(NamedTuple):
    """The process a resource names: its service, its instance and all its attributes."""

    service: str
    instance: str
    resource: dict[str, Any]


def named_process(resource: dict[str, Any]) -> Process | None:
    """The process of a resource's attributes; None without a string service name."""
    service = resource.get(SERVICE_ATTR)
    if not isinstance(service, str):
        return None
    return Process(service, first_tag(resource, INSTANCE_ATTRS) or service, resource)


def span_row(
    process: Process,
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
    """One span as :meth:`SpanTableBuilder.add` takes it, positionally (:data:`ROW_FIELDS`),
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
