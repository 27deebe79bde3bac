"""Reconstruction jobs: run an algorithm by name, or reconstruct blind spans into traces.

:func:`run_algorithm` maps the calls of blind spans with one of :data:`ALGORITHMS` (or the
streamed TraceWeaver, :data:`ONLINE`); :func:`reconstruct_blind` also assembles the result into
traces with their evidence as span tags (:func:`.assemble.assemble`): the workflow of
``tacit reconstruct``, of the tail diagnosis and of the demo. :func:`reconstruct_stream` is the
same for the online mode over a stream read incrementally (:func:`stream_source`: blind spans,
OTLP JSON Lines or CSV span tables), yielding traces as they finish, in memory that depends on
the traffic rate, not on the stream's length.
Evaluating against ground truth is :func:`tacit.evaluation.reconstruction.evaluate`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.formats import detect_format, format_names
from tacit.formats.blind import in_stream_order, read_blind_chunks
from tacit.formats.otlp import is_json_lines, is_protobuf, iter_json_lines_spans
from tacit.formats.spancsv import iter_span_rows
from tacit.model.roles import span_accounting
from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.assemble import Evidence, assemble, new_seed
from tacit.reconstruct.baselines import ALGORITHMS as BASELINES
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.online import (
    CHUNK_SIZE,
    Finished,
    OnlineParams,
    reconstruct_online,
    reconstruct_streamed,
)
from tacit.reconstruct.result import Reconstruction
from tacit.reconstruct.scaleout import reconstruct_dask
from tacit.reconstruct.trace_stream import SpanStream, observe_stream
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver

ALGORITHMS = ("traceweaver", *BASELINES)
"""What ``evaluate`` runs by default."""
ONLINE = "traceweaver-online"
"""TraceWeaver over the input streamed in order of span end (:mod:`.online`), on request."""
Progress = Callable[[int], None]


def run_algorithm(
    name: str,
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    progress: Progress | None = None,
    dask: str | None = None,
    window_ns: int | None = None,
) -> Reconstruction:
    """Reconstruct blind ``spans`` with the algorithm called ``name``; ``traceweaver`` on the
    Dask cluster whose scheduler is at ``dask`` when given, its parts cut into windows of at
    least ``window_ns`` (:func:`.scaleout.reconstruct_dask`)."""
    check_algorithm(name, dask is not None)
    if window_ns is not None and dask is None:
        raise ConfigError("windows cut the parts of a run on a Dask cluster: give its scheduler")
    if dask is not None:
        return reconstruct_dask(spans, callgraph, dask, params, window_ns, progress)
    if name == "traceweaver":
        return reconstruct_traceweaver(spans, callgraph, params, progress)
    if name == ONLINE:
        return reconstruct_streamed(spans, callgraph, params)
    return BASELINES[name](spans, callgraph)


def check_algorithm(name: str, distributed: bool = False) -> None:
    """Raise :class:`ConfigError` unless ``name`` is one of :data:`ALGORITHMS` or :data:`ONLINE`,
    or, ``distributed`` (on a Dask cluster), unless it is the offline ``traceweaver``."""
    if name not in (*ALGORITHMS, ONLINE):
        raise ConfigError(
            f"unknown algorithm {name!r}: expected one of {', '.join((*ALGORITHMS, ONLINE))}"
        )
    if distributed and name != "traceweaver":
        raise ConfigError(
            f"only the offline traceweaver runs on a Dask cluster, not {name!r}: its "
            "reconstruction is independent per instance (TraceWeaver §6.6)"
        )


def reconstruct_blind(
    blind: SpanTable,
    callgraph: CallGraph,
    algorithm: str = "traceweaver",
    params: TraceWeaverParams | None = None,
    progress: Progress | None = None,
    seed: int | None = None,
    dask: str | None = None,
    window_ns: int | None = None,
) -> tuple[SpanTable, Evidence, Reconstruction]:
    """Reconstruct ``blind`` spans with ``algorithm`` (on a Dask cluster with ``dask`` and
    ``window_ns``, as :func:`run_algorithm` does) and assemble the traces: the spans with
    their reconstructed parents and a trace per root, their span tags, and the reconstruction.
    ``seed`` makes the new trace ids (:func:`.assemble.assemble`) repeatable; by default they
    are random."""
    rec = run_algorithm(algorithm, blind, callgraph, params, progress, dask, window_ns)
    traces, tags = assemble(blind, rec, seed=seed)
    return traces, tags, rec


STREAM_READ_FORMATS = format_names.STREAM_READ
"""The input formats :func:`stream_source` can stream (the others are read whole)."""


def stream_source(
    paths: list[Path], format: str = "auto", online: OnlineParams | None = None
) -> SpanStream | None:
    """The stream to reconstruct when ``paths`` is one file that can be read as one (read as
    ``format``, or as detected with ``auto``); None when it must be read whole.

    A blind JSON-lines file is streamed when it is in stream order
    (:func:`tacit.formats.blind.in_stream_order`: its chunks are the batch online mode's). OTLP
    JSON Lines (one export per line, as the OpenTelemetry Collector's file exporter writes them)
    and CSV span tables are streamed trace by trace with the windows of ``online``
    (:func:`.trace_stream.observe_stream`): their chunks raise
    :class:`~.trace_stream.NotInStreamOrder` at the first span out of order beyond the
    lateness, for the caller to read the file whole instead. Other inputs (a single JSON
    document, protobuf, several files) are read whole."""
    if len(paths) != 1 or not paths[0].is_file():
        return None
    path = paths[0]
    try:
        detected = detect_format(path)
    except InputError:
        return None
    if format not in ("auto", detected) or detected not in STREAM_READ_FORMATS:
        return None
    if detected == "blind":
        return _blind_stream(path) if in_stream_order(path) else None
    if detected == "csv":
        return observe_stream(iter_span_rows(path), str(path), online)
    if detected == "otlp" and not is_protobuf(path) and is_json_lines(path):
        return observe_stream(iter_json_lines_spans(path), str(path), online)
    return None


def _blind_stream(path: Path) -> SpanStream:
    """A blind file in stream order, read chunk by chunk (:func:`.formats.blind.read_blind_chunks`)
    with the spans of each counted by role as they are read."""
    stream = SpanStream(iter(()))

    def chunks() -> Iterator[SpanTable]:
        for chunk in read_blind_chunks(path, CHUNK_SIZE):
            stream.accounting.update(span_accounting(chunk.kind, 0))
            yield chunk

    stream.chunks = chunks()
    return stream


@dataclass
class StreamTotals:
    """What :func:`reconstruct_stream` has read and written so far."""

    spans: int = 0
    traces: int = 0
    mapped: int = 0
    unmapped: dict[str, int] = field(default_factory=dict)
    accounting: dict[str, int] = field(default_factory=dict)


def reconstruct_stream(
    stream: SpanStream,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    online: OnlineParams | None = None,
    totals: StreamTotals | None = None,
    progress: Progress | None = None,
    seed: int | None = None,
) -> Iterator[tuple[SpanTable, Evidence]]:
    """Reconstruct a stream of blind chunks (see :mod:`.online`; from :func:`stream_source`)
    and yield the traces with their tags as soon as they are final, each batch numbered by
    stream position, with one ``seed`` for the whole stream (default: drawn at random), so that
    the ids of all batches are distinct (:func:`.assemble.assemble`). Spans are dropped once
    their traces are out. ``totals`` is updated as chunks are read and traces come out (its
    accounting is the stream's); ``progress`` gets each chunk's span count.
    The traces are those :func:`reconstruct_blind` makes with :data:`ONLINE` of the same spans
    in the same order, chunked alike."""
    totals = totals if totals is not None else StreamTotals()
    totals.accounting = stream.accounting
    seed = new_seed() if seed is None else seed

    def read() -> Iterator[SpanTable]:
        for chunk in stream.chunks:
            totals.spans += len(chunk)
            if progress is not None:
                progress(len(chunk))
            yield chunk

    for f in reconstruct_online(read(), callgraph, params, online):
        traces, tags = assemble_finished(f, seed)
        totals.traces += int((traces.parent == NONE).sum())
        totals.mapped += int(((traces.kind == CLIENT) & (traces.parent != NONE)).sum())
        for why in f.unmapped.values():
            totals.unmapped[why] = totals.unmapped.get(why, 0) + 1
        yield traces, tags


def finished_parents(f: Finished) -> np.ndarray:
    """The parent of each span of ``f`` as a row of ``f`` (NONE: a root), as
    :func:`assemble_finished` links them."""
    has = f.parent != NONE
    parent = np.full(len(f.spans), NONE, dtype=np.int64)
    parent[has] = np.searchsorted(f.position, f.parent[has])
    return parent


def assemble_finished(f: Finished, seed: int) -> tuple[SpanTable, Evidence]:
    """The traces of ``f`` with their tags, as :func:`.assemble.assemble` makes them with
    ``seed``, numbered by stream position; the parents its senders gave are known calls."""
    parent = finished_parents(f)
    has = parent != NONE
    spans = f.spans.take(np.arange(len(f.spans)))
    spans.parent[f.given] = parent[f.given]
    rec = Reconstruction.start(ONLINE, spans)
    rec.parent[has] = parent[has]
    rec.score[:] = f.score
    rec.probability = f.probability if len(f.probability) else None
    rec.samples = f.samples if len(f.samples) else None
    # A candidate parent in a trace already out, or still to come, is numbered past the rows.
    alts = f.alternatives
    elsewhere = alts.parents(f.position, among=False)
    ids = np.concatenate([f.position, elsewhere])
    by_id = np.argsort(ids, kind="stable")

    def row(positions: np.ndarray) -> np.ndarray:
        return by_id[np.searchsorted(ids, positions, sorter=by_id)]

    unmapped = row(np.fromiter(f.unmapped, np.int64, len(f.unmapped)))
    rec.unmapped = dict(zip(unmapped.tolist(), f.unmapped.values(), strict=True))
    rec.alternatives = Alternatives(row(alts.owner), row(alts.parent), alts.score)
    beyond = [f.named.get(q) for q in elsewhere.tolist()]
    return assemble(spans, rec, ids=ids, seed=seed, beyond=beyond, virtual=f.virtual)
