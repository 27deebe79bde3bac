"""Span files written as a collector streams them, in order of span end, and the traces
reconstructed from them compared with the batch path's."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from spanrows import span_key
from tacit.formats import observe
from tacit.formats.common import hex_ids
from tacit.formats.otlp import otlp_document
from tacit.formats.textio import dump_json
from tacit.model.roles import Observed
from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.outputs import write_bytes
from tacit.reconstruct.assemble import assemble
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.online import OnlineParams, reconstruct_streamed
from tacit.reconstruct.pipeline import StreamTotals, reconstruct_stream, stream_source

TIMES = ("StartTimeUnixNano", "EndTimeUnixNano")


def write_otlp_stream(path: Path, spans: SpanTable, per_line: int = 200) -> None:
    """``spans`` as OTLP JSON Lines (the Collector's file exporter), ``per_line`` spans per
    export taken in order of span end, grouped by resource within it as an exporter does."""
    doc = otlp_document(spans)
    items = [
        (rs["resource"], span)
        for rs in doc["resourceSpans"]
        for scope in rs["scopeSpans"]
        for span in scope["spans"]
    ]
    items.sort(key=lambda item: int(item[1]["endTimeUnixNano"]))
    lines = []
    for a in range(0, len(items), per_line):
        by_resource: dict[int, tuple[dict, list]] = {}
        for resource, span in items[a : a + per_line]:
            by_resource.setdefault(id(resource), (resource, []))[1].append(span)
        lines.append(
            dump_json(
                {
                    "resourceSpans": [
                        {"resource": resource, "scopeSpans": [{"spans": group}]}
                        for resource, group in by_resource.values()
                    ]
                }
            )
        )
    write_bytes(path, b"\n".join(lines) + b"\n")


def write_csv_stream(path: Path, spans: SpanTable) -> None:
    """``spans`` as a CSV span table (instances as pods), in order of span end."""
    s = spans.strings
    traces, ids = hex_ids(spans)
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow([*("TraceID", "SpanID", "ParentID", "PodName", "OperationName"), *TIMES])
    for r in np.argsort(spans.end, kind="stable").tolist():
        p = int(spans.parent[r])
        w.writerow(
            [
                *(traces[r], ids[r], "root" if p == NONE else ids[p]),
                *(s[int(spans.instance[r])], s[int(spans.endpoint[r])]),
                *(int(spans.start[r]), int(spans.end[r])),
            ]
        )
    write_bytes(path, text.getvalue().encode())


def canonical(batches: list[tuple[SpanTable, dict[int, dict]]]) -> dict:
    """Per span (by content): its parent's key, its trace's spans, and its tags with the
    alternatives' span ids replaced by the spans they name."""
    by_id: dict[str, tuple] = {}
    rows = []
    for t, tags in batches:
        for r in range(len(t)):
            by_id[t.name("span_id", r)] = span_key(t, r)
            rows.append((t, r, tags[r]))
    trace_of: dict[tuple, set] = {}
    for t, r, _ in rows:
        trace_of.setdefault((id(t), int(t.trace[r])), set()).add(span_key(t, r))
    out = {}
    for t, r, tag in rows:
        tag = dict(tag)
        alts = json.loads(tag.pop("tacit.alternatives", "[]"))
        tag["alternatives"] = [(by_id[a], *rest) for a, *rest in alts]
        p = int(t.parent[r])
        out[span_key(t, r)] = (
            None if p == NONE else span_key(t, p),
            frozenset(trace_of[(id(t), int(t.trace[r]))]),
            tag,
        )
    return out


def streamed_and_batch(path: Path, online: OnlineParams) -> tuple[dict, dict, Observed, dict]:
    """The canonical traces of ``path`` streamed and of the batch online mode on it, the batch
    observation, and the streamed totals' accounting."""
    observed, _ = observe([path])
    graph = learn_callgraph(observed.spans)
    blind = observed.without_truth()
    traces, tags = assemble(blind, reconstruct_streamed(blind, graph, None, online), seed=3)
    stream = stream_source([path], online=online)
    assert stream is not None
    totals = StreamTotals()
    batches = list(reconstruct_stream(stream, graph, online=online, totals=totals, seed=3))
    assert len(batches) > 3  # traces came out as the stream went
    return canonical(batches), canonical([(traces, tags)]), observed, totals.accounting


def link_accuracy(traces: dict, observed: Observed) -> float:
    """The share of client spans whose parent in ``traces`` is the ground truth's."""
    t = observed.spans
    clients = np.flatnonzero((t.kind == CLIENT) & (t.parent != NONE))
    right = [traces[span_key(t, r)][0] == span_key(t, int(t.parent[r])) for r in clients]
    return float(np.mean(right))
