"""Jaeger JSON: read and write.

Reads one trace per file (``{"traceID", "spans", "processes"}``), the API/UI export
(``{"data": [trace, ...]}``), a list of traces, or a directory of such files, gzip or not.
Writes the API/UI export form, which Jaeger's UI loads with "JSON File".

A span's tags, logs (as events, named by their ``event`` field) and process tags (as its
resource) are kept in its :class:`~tacit.model.span_details.SpanDetail`, with the OpenTelemetry
status its ``otel.status_code``, ``otel.status_description`` and ``error`` tags carry
(:func:`common.status_from_tags`), and written back.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tacit.errors import InputError
from tacit.formats.common import HOST_TAGS as _HOST_TAGS
from tacit.formats.common import PEER_TAGS as _PEER_TAGS
from tacit.formats.common import (
    Traces,
    first_tag,
    hex_ids,
    merged_tags,
    status_from_tags,
    status_tags,
)
from tacit.formats.common import kind_code as _kind
from tacit.formats.common import tag as _tag
from tacit.formats.common import thread_id as _thread
from tacit.formats.fields import RecordReader
from tacit.formats.span_join import join_inputs
from tacit.formats.textio import dump_json, expand_inputs, load_json, write_json
from tacit.model.columns import StringPool
from tacit.model.span_details import NO_DETAIL, SpanDetail, SpanEvent
from tacit.model.spans import (
    KIND_NAMES,
    NONE,
    UNKNOWN,
    SpanInput,
    SpanTable,
    input_from_columns,
)
from tacit.outputs import atomic_output

SUFFIXES = (".json", ".json.gz")


def read_jaeger(paths: str | Path | list[str | Path]) -> SpanTable:
    """Read Jaeger JSON files (or directories of them) into one set of spans
    (:func:`.span_join.join_inputs`)."""
    files = expand_inputs(paths if isinstance(paths, list) else [paths], SUFFIXES)
    return join_inputs([read_input(f) for f in files]).spans


def _traces_of(doc: Any, path: str) -> list:
    if isinstance(doc, dict) and "data" in doc:
        doc = doc["data"]
    if isinstance(doc, dict) and "spans" in doc:
        return [doc]
    if isinstance(doc, list):
        return doc
    raise InputError(
        "not a Jaeger document: expected {'data': [...]}, a trace or a list", path=path
    )


def _tag_map(r: RecordReader, tags: Any) -> dict[str, Any]:
    if tags is None:
        return {}
    if not isinstance(tags, list):
        raise r.fail("tags must be a list")
    out = {}
    for t in tags:
        t = r.obj(t, "tag")
        out[r.string(t, "key")] = t.get("value")
    return out


def read_input(path: Path, doc: Any = None) -> SpanInput:
    """One file's spans with the parent span id each names; ``doc``: its already parsed JSON,
    if at hand.

    Each span is read by :func:`_fast_fields` and, when that finds anything unusual (an inline
    process, a missing or mistyped field, a parent given as ``parentSpanID``), by
    :func:`_checked_fields`, which accepts every documented form and names the record of a bad
    one. Both give the same fields; the columns are built at once.
    """
    src = str(path)
    cols: dict[str, list] = {k: [] for k in _FIELDS}
    record = 0
    for ti, trace in enumerate(_traces_of(load_json(path) if doc is None else doc, src)):
        tr = RecordReader(src, f"trace {ti}")
        trace = tr.obj(trace, "trace")
        spans = tr.get(trace, "spans", list)
        processes = tr.get(trace, "processes", dict, default={})
        known: dict[str, tuple[str, str, dict]] = {}
        for span in spans:
            record += 1
            fields = _fast_fields(span, trace, processes, known)
            if fields is None:
                fields = _checked_fields(RecordReader(src, record), span, trace, processes)
            for k, v in zip(_FIELDS, (*fields, record), strict=True):
                cols[k].append(v)
    start = np.array(cols["start"], dtype=np.int64)
    return input_from_columns(
        src,
        {
            k: cols[k]
            for k in ("service", "instance", "endpoint", "peer", "trace", "span_id", "parent_id")
        },
        kind=np.array(cols["kind"], dtype=np.int8),
        start=start * 1000,
        end=(start + np.array(cols["duration"], dtype=np.int64)) * 1000,
        record=np.array(cols["record"], dtype=np.int64),
        thread=np.array(cols["thread"], dtype=np.int64),
        details=cols["detail"],
    )


MAX_US = (2**63 - 1) // 1000
"""The latest time in µs whose nanoseconds an int64 holds (Jaeger's times are µs)."""

_FIELDS = (
    "service",
    "instance",
    "endpoint",
    "kind",
    "start",
    "duration",
    "peer",
    "thread",
    "trace",
    "span_id",
    "parent_id",
    "detail",
    "record",
)


def _fast_fields(  # noqa: C901, PLR0912
    span: Any, trace: dict, processes: dict, known: dict[str, tuple[str, str, dict]]
) -> tuple | None:
    """The fields of a span in the common shape, or None for :func:`_checked_fields`."""
    if type(span) is not dict:
        return None
    span_id, op = span.get("spanID"), span.get("operationName")
    start, duration = span.get("startTime"), span.get("duration")
    pid, trace_id = span.get("processID"), span.get("traceID", trace.get("traceID"))
    if (
        type(span_id) is not str
        or type(op) is not str
        or type(start) is not int
        or type(duration) is not int
        or duration < 0
        or not -MAX_US <= start <= MAX_US - duration
        or type(pid) is not str
        or type(trace_id) is not str
        or "process" in span
        or span.get("logs")
    ):
        return None
    proc = known.get(pid)
    if proc is None:
        p = processes.get(pid)
        if type(p) is not dict or type(p.get("serviceName")) is not str:
            return None
        ptags = p.get("tags") or []
        if type(ptags) is not list or any(
            type(t) is not dict or type(t.get("key")) is not str for t in ptags
        ):
            return None
        service = p["serviceName"]
        resource = {t["key"]: t.get("value") for t in ptags}
        proc = known[pid] = (service, _instance(resource, service), resource)
    tags = span.get("tags") or []
    if type(tags) is not list:
        return None
    found = {}
    for t in tags:
        if type(t) is not dict or type(t.get("key")) is not str:
            return None
        found[t["key"]] = t.get("value")
    refs = span.get("references") or []
    if type(refs) is not list:
        return None
    parent = None
    for ref in refs:
        if type(ref) is not dict or type(ref.get("spanID")) is not str:
            return None
        if ref.get("refType", "CHILD_OF") in ("CHILD_OF", "FOLLOWS_FROM"):
            parent = ref["spanID"]
            break
    if parent is None and span.get("parentSpanID"):
        return None
    return _span_fields(*proc, op, found, start, duration, trace_id, span_id, parent, ())


def _checked_fields(r: RecordReader, span: Any, trace: dict, processes: dict) -> tuple:
    """The fields of a span in any accepted form; raises InputError naming a bad one."""
    record = r.record
    span = r.obj(span, "span")
    trace_id = r.string(span, "traceID", default=trace.get("traceID"))
    span_id = r.string(span, "spanID")
    r.record = f"{record} (trace {trace_id} span {span_id})"
    proc = span.get("process")
    if proc is None:
        pid = r.string(span, "processID")
        if pid not in processes:
            raise r.fail(f"unknown process {pid!r}")
        proc = processes[pid]
    proc = r.obj(proc, "process")
    service = r.string(proc, "serviceName")
    ptags = _tag_map(r, proc.get("tags"))
    tags = _tag_map(r, span.get("tags"))
    start = r.integer(span, "startTime")
    duration = r.integer(span, "duration")
    if duration < 0:
        raise r.fail(f"negative duration {duration}")
    if not -MAX_US <= start <= MAX_US - duration:
        raise r.fail(
            f"startTime {start} + duration {duration} µs is beyond int64 nanoseconds (about 292 "
            "years from 1970)"
        )
    instance = _instance(ptags, service)
    op = r.string(span, "operationName")
    events = []
    for log in r.get(span, "logs", list, default=[]):
        log = r.obj(log, "log")
        fields = _tag_map(r, log.get("fields"))
        name = fields.pop("event", "")
        events.append(SpanEvent(r.integer(log, "timestamp") * 1000, str(name), fields))
    return _span_fields(
        service,
        instance,
        ptags,
        op,
        tags,
        start,
        duration,
        trace_id,
        span_id,
        _parent(r, span),
        tuple(events),
    )


def _instance(process_tags: dict, service: str) -> str:
    """The host a process names in its tags, or its service when it names none."""
    return next((str(process_tags[k]) for k in _HOST_TAGS if k in process_tags), service)


def _span_fields(
    service: str,
    instance: str,
    resource: dict,
    op: str,
    tags: dict,
    start: int,
    duration: int,
    trace_id: str,
    span_id: str,
    parent: str | None,
    events: tuple[SpanEvent, ...],
) -> tuple:
    """One span's fields in :data:`_FIELDS` order (but the record), kind, peer and thread read
    from its ``tags``, which its detail keeps with its process tags (``resource``), status and
    ``events``."""
    kind = _kind(tags.get("span.kind"))
    peer = next((str(tags[k]) for k in _PEER_TAGS if k in tags), None)
    status, message = status_from_tags(tags)
    detail = SpanDetail(span_id, tags, resource, status, message, events)
    return (
        service,
        instance,
        op,
        kind,
        start,
        duration,
        peer,
        _thread(tags),
        trace_id,
        span_id,
        parent,
        detail,
    )


def _parent(r: RecordReader, span: dict) -> str | None:
    refs = span.get("references") or []
    if not isinstance(refs, list):
        raise r.fail("references must be a list")
    for ref in refs:
        ref = r.obj(ref, "reference")
        if ref.get("refType", "CHILD_OF") in ("CHILD_OF", "FOLLOWS_FROM"):
            return r.string(ref, "spanID")
    return r.string(span, "parentSpanID", default=None) or None


def jaeger_document(spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None) -> dict:
    """The Jaeger API/UI export of ``spans``: :func:`jaeger_traces` under ``data``."""
    return {"data": jaeger_traces(spans, tags), **_EXPORT_FIELDS}


_EXPORT_FIELDS = {"total": 0, "limit": 0, "offset": 0, "errors": None}
"""The fields of the API/UI export beside ``data``."""


def jaeger_traces(
    spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None
) -> list[dict]:
    """The traces of ``spans`` as Jaeger JSON, grouped by their ``trace`` column.

    ``tags`` adds tags to individual rows. Ids that are not hex are replaced (see
    :func:`common.hex_ids`).
    """
    s = spans.strings
    trace_ids, span_ids = hex_ids(spans)
    start, end, parent_of, endpoint = (
        c.tolist() for c in (spans.start, spans.end, spans.parent, spans.endpoint)
    )
    traces: dict[int, list[JaegerSpan]] = {}
    made: dict[Hashable, dict] = {}  # a process of many traces, written once
    for row, (trace, (span_tags, logs, process, key)) in enumerate(
        zip(spans.trace.tolist(), jaeger_parts(spans, tags).rows(), strict=True)
    ):
        if key not in made:
            made[key] = process
        parent = parent_of[row]
        traces.setdefault(trace, []).append(
            JaegerSpan(
                trace_ids[row],
                span_ids[row],
                span_ids[parent] if parent != NONE else None,
                s[endpoint[row]],
                start[row],
                end[row],
                span_tags,
                logs,
                key,
                row,
            )
        )
    return [trace_doc(rows, made) for rows in traces.values()]


class JaegerSpan(NamedTuple):
    """One span of a Jaeger trace document with its parts made (:func:`jaeger_parts`):
    ``process`` names its process among the trace's, ``order`` breaks ties of start times,
    ``links`` are (trace id, span id) of spans of other traces it follows from (a span link)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    operation: str | None
    start_ns: int
    end_ns: int
    tags: list[dict]
    logs: list[dict]
    process: Hashable
    order: int
    links: tuple[tuple[str, str], ...] = ()


@dataclass
class JaegerParts:
    """The parts of the Jaeger spans of a table's rows (:func:`jaeger_parts`).

    Rows with one resource and attribute set and the same columns are one group (most rows of
    an OTLP request share their attribute set): the group's tags (before any row's own), its
    process (``serviceName`` and tags) and the process's key, its JSON, which spans of one
    process share however many copies of its resource the input held (one per OTLP request,
    say). A reader may write a group's tags once for all its rows, and must not change them.
    """

    group: list[int]
    """Each row's group."""
    tags: list[list[dict]]
    process: list[dict]
    key: list[bytes]
    logs: list[list[dict]]
    """Each row's logs (its events)."""
    own: dict[int, list[dict]]
    """The tags of the rows given tags of their own, in full."""

    def rows(self) -> Iterator[tuple[list[dict], list[dict], dict, bytes]]:
        """Per row: its tags, its logs, its process and the process's key."""
        for row, (g, logs) in enumerate(zip(self.group, self.logs, strict=True)):
            yield self.own.get(row) or self.tags[g], logs, self.process[g], self.key[g]


_SHARED = attrgetter("resource", "attributes", "status", "status_message", "events")
"""What a row's detail adds to the columns its group is made of (and its events)."""


def jaeger_parts(
    spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None
) -> JaegerParts:
    """The rows of ``spans`` as Jaeger parts: tags (their attributes, what the columns say,
    then ``tags``' for the row), logs (their events) and process. The groups are found by
    the rows' keys in dicts, which Python's own loops run (a key a row made and looked up in
    a Python loop costs a large share of making a finished trace's rows)."""
    s = spans.strings
    n = len(spans)
    # Columns as lists: a row's values are read one by one, which numpy scalars make slow.
    kind_of, service, instance, thread, peer = (
        c.tolist() for c in (spans.kind, spans.service, spans.instance, spans.thread, spans.peer)
    )
    details = [NO_DETAIL] * n if spans.details is None else [d or NO_DETAIL for d in spans.details]
    resource, attributes, status, message, events = (
        zip(*map(_SHARED, details), strict=True) if n else ((),) * 5
    )
    keys = list(
        zip(
            service,
            instance,
            map(id, resource),
            map(id, attributes),
            kind_of,
            thread,
            peer,
            status,
            message,
            strict=True,
        )
    )
    # each group's first row (the earlier rows written over the later), groups in their order
    heads = sorted(dict(zip(reversed(keys), range(n - 1, -1, -1), strict=True)).values())
    group_of = {keys[row]: g for g, row in enumerate(heads)}
    parts = JaegerParts(list(map(group_of.__getitem__, keys)), [], [], [], [], {})
    processes = _Processes(s)
    for row in heads:
        d, kind = details[row], kind_of[row]
        columns: dict[str, Any] = {} if kind == UNKNOWN else {"span.kind": KIND_NAMES[kind]}
        if thread[row] != NONE:
            columns["thread.id"] = thread[row]
        if peer[row] != NONE:
            columns["peer.service"] = s[peer[row]]
        columns |= status_tags(d, True)
        process, key = processes.made(service[row], instance[row], d.resource)
        parts.tags.append([_tag(k, v) for k, v in merged_tags(d, columns, {}).items()])
        parts.process.append(process)
        parts.key.append(key)
    parts.logs = [_logs(e) if e else [] for e in events]
    for row, extra in (tags or {}).items():
        if extra:
            parts.own[row] = with_tags(parts.tags[parts.group[row]], extra)
    return parts


def _logs(events: Iterable[SpanEvent]) -> list[dict]:
    """Jaeger ``logs`` of a span's events."""
    return [
        {
            "timestamp": e.time // 1000,
            "fields": [_tag("event", e.name), *(_tag(k, v) for k, v in e.attributes.items())],
        }
        for e in events
    ]


def with_tags(tags: list[dict], extra: Mapping[str, Any]) -> list[dict]:
    """Jaeger ``tags`` with ``extra``'s merged in as :func:`.common.merged_tags` merges them:
    one of ``extra`` replaces a tag of its key in its place, the others follow in their order.
    A new list; ``tags`` is not changed."""
    out = list(tags)
    at = {t["key"]: i for i, t in enumerate(tags)}
    for k, v in extra.items():
        if k in at:
            out[at[k]] = _tag(k, v)
        else:
            out.append(_tag(k, v))
    return out


def trace_doc(spans: Iterable[JaegerSpan], processes: Mapping[Hashable, dict]) -> dict:
    """One trace's Jaeger document: its ``spans`` by start time, each process (``processes``
    by the spans' keys) named ``p1``, ``p2``, ... in the order they first appear."""
    ordered = sorted(spans, key=lambda sp: (sp.start_ns, sp.order))
    trace_id = ordered[0].trace_id
    pids: dict[Hashable, str] = {}
    out = []
    for sp in ordered:
        refs = []
        if sp.parent_id is not None:
            refs = [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": sp.parent_id}]
        refs += [{"refType": "FOLLOWS_FROM", "traceID": t, "spanID": s} for t, s in sp.links]
        start_us = sp.start_ns // 1000
        out.append(
            {
                "traceID": trace_id,
                "spanID": sp.span_id,
                "operationName": sp.operation,
                "references": refs,
                "startTime": start_us,
                "duration": max(0, -(-sp.end_ns // 1000) - start_us),
                "tags": sp.tags,
                "logs": sp.logs,
                "processID": pids.setdefault(sp.process, f"p{len(pids) + 1}"),
                "warnings": None,
            }
        )
    procs = {pid: processes[key] for key, pid in pids.items()}
    return {"traceID": trace_id, "spans": out, "processes": procs, "warnings": None}


class _Processes:
    """The Jaeger processes of spans (``strings``: their string pool), each made once however
    many copies of its resource the input held: an OTLP receiver gets one per request (32 in
    each of the shop app's), and would otherwise make the JSON of each again."""

    def __init__(self, strings: StringPool) -> None:
        self.strings = strings
        self.by_key: dict[bytes, dict] = {}
        self.by_content: dict[tuple, tuple[dict, bytes]] = {}

    def made(self, service: int, instance: int, resource: Mapping[str, Any]) -> tuple[dict, bytes]:
        """The process of a span of ``service`` and ``instance`` (codes), recorded by a process
        with ``resource``, and its key (its JSON)."""
        try:
            # with the values' types, since True == 1 == 1.0 and a tag says which it was
            content: tuple | None = (
                service,
                instance,
                *resource.items(),
                *map(type, resource.values()),
            )
            made = self.by_content.get(content)  # type: ignore[arg-type]
        except TypeError:  # a value that is a list or a mapping: made each time
            content, made = None, None
        if made is None:
            svc, inst = self.strings[service], self.strings[instance]
            ptags = _process_tags(svc or "", inst or "", resource)
            process = {"serviceName": svc, "tags": [_tag(k, v) for k, v in ptags.items()]}
            key = dump_json(process)
            made = (self.by_key.setdefault(key, process), key)
            if content is not None:
                self.by_content[content] = made
        return made


def _process_tags(service: str, instance: str, resource: Mapping[str, Any]) -> dict:
    """A written process's tags: the input's, with ``hostname`` the instance when they would
    not read back as ``instance`` (:func:`_instance`)."""
    ptags = dict(resource)
    if (first_tag(ptags, _HOST_TAGS) or service) != instance:
        ptags[_HOST_TAGS[0]] = instance
    return ptags


def write_jaeger(
    path: str | Path, spans: SpanTable, tags: Mapping[int, Mapping[str, Any]] | None = None
) -> None:
    """Write ``spans`` as a Jaeger API/UI export (gzip when the name ends in .gz)."""
    write_json(path, jaeger_document(spans, tags))


def write_jaeger_stream(path: str | Path, batches: Iterable[Traces]) -> None:
    """Write batches of traces (spans and their tags) as one Jaeger API/UI export, each batch
    written as it comes, the same document :func:`write_jaeger` writes of them all at once;
    the file appears whole when the batches end (:func:`tacit.outputs.atomic_output`)."""
    head, tail = dump_json({"data": [], **_EXPORT_FIELDS}).split(b"[]", 1)
    with atomic_output(path) as f:
        f.write(head + b"[")
        sep = b""
        for spans, tags in batches:
            for trace in jaeger_traces(spans, tags):
                f.write(sep + dump_json(trace))
                sep = b","
        f.write(b"]" + tail)
