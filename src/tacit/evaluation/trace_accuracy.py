"""Scoring reconstructed traces against ground truth.

``accuracy`` is TraceWeaver's end-to-end accuracy (SIGCOMM '24, §6.1): the fraction of traces
whose every parent-child link is right. A trace is wrong when one of its outgoing spans got the
wrong parent, or when a span of another trace was attached to it. Unlike the published artifact
this counts every link of every trace: services with several callers, repeated calls, calls to
databases and caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.result import Reconstruction
from tacit.runs import contained, distinct


@dataclass
class TraceScore:
    """Accuracies are None where nothing was scored (no traces; no links)."""

    traces: int
    spans: int
    accuracy: float | None
    link_accuracy: float | None
    top5_accuracy: float | None
    per_latency_bin: list[dict]
    per_service: dict[str, dict]


def trace_of_rows(truth: SpanTable) -> np.ndarray:
    """Dense trace index per row (from the truth's trace codes)."""
    _, idx = np.unique(truth.trace, return_inverse=True)
    return idx


def wrong_traces(
    truth: SpanTable, rec: Reconstruction, client: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The dense trace index of each row, and per trace whether it is wrong (module docstring):
    one of its ``client`` rows got the wrong parent, or was given to it from another trace."""
    trace = trace_of_rows(truth)
    bad = np.zeros(int(trace.max()) + 1 if len(trace) else 0, dtype=bool)
    wrong_link = client & (rec.parent != truth.parent)
    bad[trace[wrong_link]] = True
    intruder = wrong_link & (rec.parent != NONE)
    bad[trace[rec.parent[intruder]]] = True
    return trace, bad


def score_reconstruction(
    truth: SpanTable,
    rec: Reconstruction,
    latency_bins: int = 10,
    scored: np.ndarray | None = None,
) -> TraceScore:
    """Compare ``rec`` with ``truth`` (the observed spans with true parents), row for row.

    ``scored`` limits which client spans' links count (all by default): to compare with a
    published number that scores fewer links, such as the TraceWeaver artifact's on Media
    Microservices (:func:`artifact_scope`).
    """
    client = truth.kind == CLIENT
    if scored is not None:
        client &= scored
    trace, bad = wrong_traces(truth, rec, client)
    n_traces = len(bad)
    wrong_link = client & (rec.parent != truth.parent)
    n_client = int(client.sum())
    link_acc = 1.0 - wrong_link.sum() / n_client if n_client else None

    # Per incoming span: is its set of children exactly right? (per-service accuracy, top-5)
    servers = np.flatnonzero(truth.kind == SERVER)
    true_kids = _children(truth.parent, client)
    pred_kids = _children(rec.parent, client)
    exact = np.array(
        [true_kids.get(int(i), frozenset()) == pred_kids.get(int(i), frozenset()) for i in servers],
        dtype=bool,
    )
    top5 = None
    if rec.top_candidates:
        ok = exact.copy()
        for idx, i in enumerate(servers):
            cands = rec.top_candidates.get(int(i))
            if cands is not None:
                ok[idx] = true_kids.get(int(i), frozenset()) in cands[:5]
        missed = np.zeros(n_traces, dtype=bool)
        missed[trace[servers[~ok]]] = True
        top5 = 1.0 - missed.mean() if n_traces else None

    per_service: dict[str, dict] = {}
    s = truth.strings
    for svc in distinct(truth.service[servers]):
        m = truth.service[servers] == svc
        name = s[int(svc)] or "?"
        callers = servers[m]
        if not any(true_kids.get(int(i)) for i in callers):
            continue  # leaf services map nothing
        per_service[name] = {
            "incoming": int(m.sum()),
            "accuracy": float(exact[m].mean()),
            "confidence": rec.confidence.get(name),
            "report": rec.service_report.get(name),
        }

    # Accuracy per end-to-end latency percentile bin (Fig. 4b): roots' durations.
    roots = np.flatnonzero(truth.parent == NONE)
    root_of_trace = np.full(n_traces, NONE, dtype=np.int64)
    dur = truth.end[roots] - truth.start[roots]
    for r in roots[np.argsort(dur)]:  # the longest root of a trace stands for the request
        root_of_trace[trace[r]] = r
    has = root_of_trace != NONE
    latency = np.where(has, truth.end[root_of_trace] - truth.start[root_of_trace], 0)
    bins = []
    if has.any():
        edges = np.percentile(latency[has], np.linspace(0, 100, latency_bins + 1))
        which = np.clip(np.searchsorted(edges, latency, side="right") - 1, 0, latency_bins - 1)
        for b in range(latency_bins):
            m = has & (which == b)
            bins.append(
                {
                    "percentile": [100 * b / latency_bins, 100 * (b + 1) / latency_bins],
                    "latency_ms": [float(edges[b]) / 1e6, float(edges[b + 1]) / 1e6],
                    "traces": int(m.sum()),
                    "accuracy": float(1 - bad[m].mean()) if m.any() else None,
                }
            )
    return TraceScore(
        traces=n_traces,
        spans=len(truth),
        accuracy=float(1 - bad.mean()) if n_traces else None,
        link_accuracy=None if link_acc is None else float(link_acc),
        top5_accuracy=None if top5 is None else float(top5),
        per_latency_bin=bins,
        per_service=per_service,
    )


def _children(parent: np.ndarray, client: np.ndarray) -> dict[int, frozenset[int]]:
    rows = np.flatnonzero(client & (parent != NONE))
    out: dict[int, set[int]] = {}
    for r in rows:
        out.setdefault(int(parent[r]), set()).add(int(r))
    return {k: frozenset(v) for k, v in out.items()}


def artifact_scope(truth: SpanTable) -> np.ndarray:
    """The client spans the TraceWeaver artifact scores: calls between traced services (not to
    databases and caches, which it drops when it reads an export), and none made by a service
    whose requests come from more than one calling service (its ``len(in_span_partitions) > 1``
    skip, which on Media Microservices leaves out compose-review-service's fan-out)."""
    called = (truth.kind == SERVER) & (truth.link != NONE)
    callers = truth.service[truth.link[called]]
    pairs = np.unique(np.stack([truth.service[called], callers]), axis=1)
    services, n_callers = np.unique(pairs[0], return_counts=True)
    shared = services[n_callers > 1]
    return (truth.kind == CLIENT) & (truth.link != NONE) & ~contained(truth.service, shared)
