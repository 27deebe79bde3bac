"""Span files in every supported format, behind one reader and one writer.

:func:`read_spans` reads Jaeger JSON, Zipkin v2 JSON, OTLP (JSON, JSON Lines and protobuf), CSV
span tables and JSON-lines "blind" spans, telling them apart by content (after gzip) rather than
by file name, since all the JSON formats share the ``.json`` suffix; :func:`observe` reads them
and infers each span's role (:func:`tacit.model.roles.infer_roles`). Spans from per-service
agents, eBPF (OTLP as Beyla exports it) or sidecar access logs (Envoy, Istio), are read only when
named (:data:`AGENT_FORMATS`, :func:`read_agent_spans`), with their RPCs paired.
:func:`write_traces` writes Jaeger, OTLP or Zipkin; :func:`write_traces_stream` writes Jaeger or
OTLP (JSON Lines) batch by batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.formats import format_names, jaeger, otlp, spancsv, zipkin
from tacit.formats.address_pairing import ADDRESS_PAIRS, pair_by_address
from tacit.formats.capture_spans import ServiceMap
from tacit.formats.common import Paths, Traces, input_files
from tacit.formats.ebpf_spans import read_ebpf_spans
from tacit.formats.envoy_access_log import read_envoy_logs
from tacit.formats.jaeger import write_jaeger
from tacit.formats.otlp import write_otlp
from tacit.formats.rpc_pairing import AgentSpans
from tacit.formats.span_join import Joined, join_inputs
from tacit.formats.spancsv import COLUMNS
from tacit.formats.textio import load_json, parse_json, read_head, read_text, refuse_repeated
from tacit.formats.zipkin import write_zipkin
from tacit.model.roles import Observed, infer_roles
from tacit.model.spans import NONE, SpanInput, SpanTable

log = logging.getLogger(__name__)

SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz", ".csv", ".csv.gz", *otlp.PROTOBUF_SUFFIXES)
"""The files :func:`read_spans` takes from a directory when the format is detected."""

_INPUT_READERS: dict[str, tuple[tuple[str, ...], Callable[[Path], SpanInput]]] = {
    "jaeger": (jaeger.SUFFIXES, jaeger.read_input),
    "zipkin": (zipkin.SUFFIXES, zipkin.read_input),
    "otlp": (otlp.SUFFIXES, otlp.read_input),
    "csv": (spancsv.SUFFIXES, spancsv.read_input),
}
"""Per format, the files it takes from a directory and the reader of one file."""
_DOCUMENT_READERS: dict[str, Callable[[Path, Any], SpanInput]] = {
    "jaeger": jaeger.read_input,
    "zipkin": zipkin.read_input,
    "otlp": otlp.read_input,
}
_WRITERS = {"jaeger": write_jaeger, "otlp": write_otlp, "zipkin": write_zipkin}
_STREAM_WRITERS = {"jaeger": jaeger.write_jaeger_stream, "otlp": otlp.write_otlp_lines}
_AGENT_READERS: dict[str, Callable[[Paths, ServiceMap | None], AgentSpans]] = {
    "ebpf": read_ebpf_spans,
    "envoy": read_envoy_logs,
}
AGENT_FORMATS = format_names.AGENT
"""Spans from per-service agents: OTLP JSON from eBPF agents (:mod:`.ebpf_spans`) and sidecar
access logs (:mod:`.envoy_access_log`); never detected, always named."""
READ_FORMATS = format_names.READ
WRITE_FORMATS = format_names.WRITE
STREAM_WRITE_FORMATS = format_names.STREAM_WRITE


def read_spans(
    paths: Paths,
    format: str = "auto",
    skipped: list[Path] | None = None,
    services: ServiceMap | None = None,
) -> SpanTable:
    """Read span files (or directories of them) into one set of spans.

    ``format`` is one of :data:`READ_FORMATS`; with ``auto`` each file's format is detected by
    :func:`detect_format`, so one call may mix formats. A JSON document is parsed only once.
    The files are one input (:func:`.span_join.join_inputs`): a span's parent may be in
    another file (one file per service, as per-service exporters write them), and a span in
    two files is read once (:func:`read_span_set` counts them).
    With ``skipped`` given, a file in a named directory whose content is no span format (a
    fault list beside the traces, say) is left out and appended to ``skipped``, instead of
    ending the run; a file named directly, or a broken file of a span format, is an error.
    ``services`` names addresses for the :data:`AGENT_FORMATS` (:func:`read_agent_spans`).
    """
    if format in AGENT_FORMATS:
        return read_agent_spans(paths, format, services).spans
    return read_span_set(paths, format, skipped, services).spans


def read_span_set(
    paths: Paths,
    format: str = "auto",
    skipped: list[Path] | None = None,
    services: ServiceMap | None = None,
) -> Joined:
    """What :func:`read_spans` reads (in any format but the :data:`AGENT_FORMATS`), with the
    number of spans left out because an earlier file has them too (the same trace id and span
    id), which :func:`observe` counts as :data:`DUPLICATE_SPANS`."""
    if format not in READ_FORMATS or format in AGENT_FORMATS:
        raise ConfigError(f"unknown trace format {format!r}: expected one of {READ_FORMATS}")
    if services is not None:
        raise ConfigError(f"a service map goes with the formats {', '.join(AGENT_FORMATS)}")
    named = paths if isinstance(paths, list) else [paths]
    if format != "auto":
        read = _input_reader(format)
        suffixes = _INPUT_READERS[format][0] if format in _INPUT_READERS else _blind_suffixes()
        return _joined([read(f) for f in input_files(named, suffixes)])
    inputs = []
    files = [(f, Path(p).is_dir()) for p in named for f in input_files([p], SUFFIXES)]
    refuse_repeated([f for f, _ in files])
    for f, in_dir in files:
        try:
            fmt, doc = _detect(f)
        except _NotSpans:
            if skipped is None or not in_dir:
                raise
            skipped.append(f)
            log.warning("%s: holds no spans, skipped", f)
            continue
        if doc is not None:
            inputs.append(_DOCUMENT_READERS[fmt](f, doc))
        else:
            inputs.append(_input_reader(fmt, f)(f))
    if not inputs:
        raise InputError(
            "no span files among the inputs", path=", ".join(map(str, skipped or [])) or None
        )
    return _joined(inputs)


def _joined(inputs: list[SpanInput]) -> Joined:
    joined = join_inputs(inputs)
    if joined.duplicates:
        log.warning(
            "%d spans are in more than one input file (the same trace and span id): each is "
            "read once",
            joined.duplicates,
        )
    return joined


SKIPPED_FILES = "files in the input directories that hold no spans (skipped)"
"""The :attr:`Observed.accounting` key of the files :func:`observe` left out."""
DUPLICATE_SPANS = "spans in more than one input file (read once)"
"""The :attr:`Observed.accounting` key of the spans :func:`observe` found in more than one file
(:func:`.span_join.join_inputs`), counted beside ``input``, which counts each once."""


def observe(
    paths: list[str | Path] | SpanTable,
    format: str = "auto",
    services: ServiceMap | None = None,
) -> tuple[Observed, float]:
    """Read (unless given a table) and infer roles; returns the observation and seconds taken.
    The files are one set of spans (:func:`read_spans`), their calls whose context did not
    cross paired by address (:func:`.address_pairing.pair_by_address`, counted as
    :data:`~.address_pairing.ADDRESS_PAIRS`). Files in input directories that hold
    no spans are left out and counted in the accounting (:data:`SKIPPED_FILES`), as are spans
    found in more than one file (:data:`DUPLICATE_SPANS`) and what the :data:`AGENT_FORMATS`
    readers made of every record.
    """
    t0 = time.perf_counter()
    skipped: list[Path] = []
    read: dict[str, int] = {}
    if isinstance(paths, SpanTable):
        spans = paths
    elif format in AGENT_FORMATS:
        agent = read_agent_spans(list(paths), format, services)
        spans, read = agent.spans, agent.accounting
    else:
        spans, duplicates = read_span_set(list(paths), format, skipped, services)
        if duplicates:
            read[DUPLICATE_SPANS] = duplicates
        if paired := pair_by_address(spans):
            read[ADDRESS_PAIRS] = paired
    observed = infer_roles(spans)
    observed.accounting |= read
    if skipped:
        observed.accounting[SKIPPED_FILES] = len(skipped)
    return observed, time.perf_counter() - t0


def read_agent_spans(paths: Paths, format: str, services: ServiceMap | None = None) -> AgentSpans:
    """Blind spans from per-service agents, their RPCs paired, with the accounting of every
    record: ``format`` ``ebpf`` reads OTLP JSON from eBPF agents
    (:func:`.ebpf_spans.read_ebpf_spans`), ``envoy`` sidecar access logs, one file per sidecar
    (:func:`.envoy_access_log.read_envoy_logs`); ``services`` names addresses."""
    reader = _AGENT_READERS.get(format)
    if reader is None:
        raise ConfigError(f"unknown agent span format {format!r}: expected one of {AGENT_FORMATS}")
    return reader(paths, services)


def detect_format(path: str | Path) -> str:
    """The format of one span file, from its content: csv, blind, otlp, jaeger or zipkin.

    A CSV span table starts with its header; a blind-spans JSON-lines file with an object that
    has ``rpc`` and ``kind`` but no ``traceID``. A JSON document is OTLP if it is an object with
    ``resourceSpans``, Jaeger if it is an object with ``data``, ``spans`` or ``traceID`` or a list
    of traces (objects with ``spans``), and Zipkin if it is a list of spans (objects with
    ``traceId``) or of such lists. Binary OTLP protobuf is otlp (:func:`otlp.is_protobuf`).
    """
    return _detect(path)[0]


def _detect(path: str | Path) -> tuple[str, Any]:
    """The format, and for a JSON document its parsed content (None otherwise). CSV, blind
    spans and OTLP JSON Lines are told from the file's head, without reading it whole; so is
    a file that is none of them and whose head does not start a JSON document (a gzip file of
    zeros is refused from its first megabyte, not inflated to its bound first)."""
    start = read_head(path)
    if otlp.is_protobuf(Path(path), start):
        return "otlp", None
    try:
        first = start.split(b"\n", 1)[0].decode("utf-8").strip()
    except UnicodeDecodeError:
        first = ""  # not text, or a line cut in the middle of a character: read it all
    if first.startswith("TraceID,") or set(COLUMNS) <= set(first.split(",")):
        return "csv", None
    head = _first_object(first)
    if isinstance(head, dict) and {"rpc", "kind"} <= head.keys() and "traceID" not in head:
        return "blind", None
    if isinstance(head, dict) and "resourceSpans" in head and otlp.is_json_lines(Path(path)):
        return "otlp", None
    if start.lstrip()[:1] not in (b"", b"{", b"["):  # no JSON document: not read on
        raise _NotSpans(_UNKNOWN, path=str(path))
    text = read_text(path)
    if text.lstrip()[:1] in ("{", "["):
        first = text.split("\n", 1)[0].strip()
        head = _first_object(first)
        if isinstance(head, dict) and "resourceSpans" in head and first != text.strip():
            return "otlp", None  # JSON Lines whose first line is longer than the head
        doc = head if head is not None and first == text.strip() else load_json(path, text)
        fmt = _json_format(doc)
        if fmt is not None:
            return fmt, doc
    raise _NotSpans(_UNKNOWN, path=str(path))


_UNKNOWN = (
    "unknown span format: expected a CSV span table, blind-span JSON lines, "
    "or a Jaeger, Zipkin v2 or OTLP JSON document"
)


class _NotSpans(InputError):
    """A file whose content is none of the span formats."""


def _first_object(line: str) -> Any:
    """The JSON value on a file's first line, or None when it is not one."""
    if line[:1] not in ("{", "["):
        return None
    try:
        return parse_json(line)
    except ValueError:
        return None


def _json_format(doc: Any) -> str | None:
    if isinstance(doc, dict):
        if "resourceSpans" in doc:
            return "otlp"
        if doc.keys() & {"data", "spans", "traceID"}:
            return "jaeger"
    elif isinstance(doc, list):
        item = doc[0] if doc else None
        if isinstance(item, list):  # Zipkin's query API: a list of traces, each a list of spans
            item = item[0] if item else None
        if item is None or (isinstance(item, dict) and "traceId" in item):
            return "zipkin"
        if isinstance(item, dict) and "spans" in item:
            return "jaeger"
    return None


def _input_reader(format: str, path: Path | None = None) -> Callable[[Path], SpanInput]:
    if format != "blind":
        return _INPUT_READERS[format][1]
    try:  # written separately; imported on demand so that the other formats work without it
        from tacit.formats.blind import read_blind
    except ImportError as e:
        raise InputError(
            f"blind-span JSON lines cannot be read: {e}", path=None if path is None else str(path)
        ) from None

    def read(f: Path) -> SpanInput:
        # Blind spans have no ids: their parents are for reconstruction to find.
        spans = read_blind([f])
        return SpanInput(spans, np.full(len(spans), NONE, np.int64))

    return read


def _blind_suffixes() -> tuple[str, ...]:
    """The files the blind format takes from a directory."""
    from tacit.formats.blind import SUFFIXES as blind

    return blind


def write_traces(
    path: str | Path,
    spans: SpanTable,
    tags: Mapping[int, Mapping[str, Any]] | None = None,
    format: str = "jaeger",
) -> None:
    """Write ``spans`` as ``format`` (one of :data:`WRITE_FORMATS`), gzip when ``.gz``."""
    writer = _WRITERS.get(format)
    if writer is None:
        raise ConfigError(f"unknown trace format {format!r}: expected one of {WRITE_FORMATS}")
    writer(path, spans, tags)


def write_traces_stream(
    path: str | Path, batches: Iterable[Traces], format: str = "jaeger"
) -> None:
    """Write batches of traces as ``format`` (one of :data:`STREAM_WRITE_FORMATS`) as they come:
    Jaeger as one export document, OTLP as JSON Lines (one export per batch); gzip when ``.gz``."""
    writer = _STREAM_WRITERS.get(format)
    if writer is None:
        raise ConfigError(
            f"traces cannot be streamed as {format!r}: expected one of {STREAM_WRITE_FORMATS}"
        )
    writer(path, batches)
