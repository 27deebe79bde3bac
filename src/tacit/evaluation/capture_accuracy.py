"""How well traces are reconstructed from a packet capture, against the app's own truth.

The spans of a capture (:mod:`tacit.formats.capture_spans`) carry no trace identity. To score
their reconstruction, the app under test labels every request with an id of its own (a request
header the capture keeps, :attr:`~tacit.formats.exchanges.ExchangeParams.keep_headers`) and
logs, per id, the id of the request it was made for. :func:`label_capture` turns that log into
ground truth on the captured spans (parents and traces), which
:func:`tacit.evaluation.reconstruction.evaluate` then blinds, reconstructs and scores as it
scores any traced input (TraceWeaver §6). Reconstruction never sees the ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tacit.evaluation.reconstruction import evaluate
from tacit.formats.capture_spans import CapturedSpans, ServiceMap, read_capture_spans
from tacit.formats.exchanges import ExchangeParams
from tacit.model.columns import NONE
from tacit.model.spans import CLIENT, SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.isolated import callgraph_from_test_capture


@dataclass
class LabelAccounting:
    """What became of the captured RPCs: ``labelled`` + the values of ``unlabelled`` = the
    span pairs of the capture; ``parents_missing``: calls whose parent request the capture did
    not hold (left roots)."""

    labelled: int = 0
    unlabelled: dict[str, int] = field(default_factory=dict)
    parents_missing: int = 0


def label_capture(
    captured: CapturedSpans, header: str, parent_of: Mapping[str, str | None]
) -> tuple[SpanTable, LabelAccounting]:
    """The captured spans with ground truth from the app's log: ``parent_of`` maps each
    request id (the value of request header ``header``) to the id of the request it was made
    for (None for requests from outside the app). A server span's parent is its caller's client
    span; a client span's parent is the server span of the request it was made for. The spans
    of RPCs without an id, or with an id the log lacks, are left out (counted)."""
    ex, spans = captured.exchanges, captured.spans
    codes = ex.kept[header.lower()][captured.exchange]
    ids = ex.strings.names(codes)
    acc = LabelAccounting()
    keep = np.array([i is not None and i in parent_of for i in ids], dtype=bool)
    for reason, mask in (
        ("no request id", codes == NONE),
        ("request id not in the app's log", (codes != NONE) & ~keep),
    ):
        if mask.any():
            acc.unlabelled[reason] = int(mask.sum()) // 2
    rows = np.flatnonzero(keep)
    out = spans.take(rows)
    kept_ids = [ids[r] or "" for r in rows.tolist()]
    server_of = {rid: k for k, rid in enumerate(kept_ids) if out.kind[k] != CLIENT}
    parent = np.full(len(out), NONE, dtype=np.int64)
    for k, rid in enumerate(kept_ids):
        if out.kind[k] != CLIENT:
            parent[k] = out.link[k]
            continue
        up = parent_of[rid]
        if up is not None:
            if up in server_of:
                parent[k] = server_of[up]
            else:
                acc.parents_missing += 1
    out.parent[:] = parent
    root = roots(parent)
    out.trace[:] = [out.strings.code(f"trace-{kept_ids[r]}") for r in root.tolist()]
    out.span_id[:] = [
        out.strings.code(f"{rid}/{'c' if out.kind[k] == CLIENT else 's'}")
        for k, rid in enumerate(kept_ids)
    ]
    acc.labelled = len(rows) // 2
    return out, acc


def evaluate_capture(
    capture: str | Path,
    test_capture: str | Path,
    header: str,
    parent_of: Mapping[str, str | None],
    services: ServiceMap | None = None,
    algorithms: tuple[str, ...] = ("traceweaver", "fcfs"),
) -> dict:
    """The instrumentation-free path scored end to end: spans from ``capture``, the call graph
    learned from ``test_capture`` (requests sent one at a time, TraceWeaver §5.2), each of
    ``algorithms`` reconstructing the traces, scored against the app's log ``parent_of`` (see
    :func:`label_capture`). Returns the accounting of every step and each algorithm's
    accuracy."""
    callgraph, learned = callgraph_from_test_capture(test_capture, services)
    got = read_capture_spans(capture, services, params=ExchangeParams(keep_headers=(header,)))
    truth, labels = label_capture(got, header, parent_of)
    ev = evaluate(truth, list(algorithms), callgraph=callgraph)
    return {
        "packets": got.exchanges.accounting.as_dict(),
        "exchanges": got.accounting.as_dict(),
        "labels": asdict(labels),
        "test_capture": learned,
        "traces": ev.traces,
        "spans": ev.spans,
        "accuracy": {r["algorithm"]: r["accuracy"] for r in ev.results},
        "link_accuracy": {r["algorithm"]: r["link_accuracy"] for r in ev.results},
    }


StoredSpan = tuple[str, str, int, int, str, "str | None"]
"""A span as ``tacit serve`` stores it: service, kind ("client" or "server"), start and
duration (ns), span id, and the span id of the parent reconstruction gave it (None for
none)."""


def stored_parents(truth: SpanTable, stored: Iterable[StoredSpan]) -> np.ndarray:
    """Per span of ``truth`` (from :func:`label_capture`), the row of the parent ``tacit serve``
    stored for it (NONE for none). A stored span is matched to its truth by service, kind and
    times (a capture gives each exchange's times to the nanosecond); every span of ``truth``
    must be stored."""
    s = truth.strings
    key_row = {
        (s[int(svc)], "client" if kind == CLIENT else "server", int(start), int(end - start)): r
        for r, (svc, kind, start, end) in enumerate(
            zip(truth.service, truth.kind, truth.start, truth.end, strict=True)
        )
    }
    row_of: dict[str, int] = {}
    parent_id: dict[int, str | None] = {}
    for service, kind, start, duration, span_id, parent in stored:
        row = key_row.get((service, kind, start, duration))
        if row is not None:
            row_of[span_id], parent_id[row] = row, parent
    if len(parent_id) != len(truth):
        raise ValueError(f"{len(truth) - len(parent_id)} spans of the truth are not stored")
    return np.array(
        [row_of.get(parent_id[r] or "", NONE) for r in range(len(truth))], dtype=np.int64
    )


def call_accuracy(truth: SpanTable, parent: np.ndarray) -> float:
    """The share of the calls of ``truth`` (client spans with a parent) whose ``parent`` (a row
    per span) is the true one."""
    calls = np.flatnonzero((truth.kind == CLIENT) & (truth.parent != NONE))
    return float((parent[calls] == truth.parent[calls]).mean()) if len(calls) else float("nan")
