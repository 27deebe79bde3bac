"""Simulated spans in the shapes real exports have.

The simulator records what an ideal tracer would: a server span per handled request, a client
span per call, kinds tagged, databases traced like any service. Real exports differ, and
reconstruction must cope with each difference (tested on simulated apps, as the real files
that show them cannot be shipped):

* ``kinds=False``: no ``span.kind`` (OpenTracing-era Jaeger exports, Nezha's span tables);
* ``client_spans=False``: callers record no client span, only the callee its server span
  (DeathStarBench Media Microservices);
* ``handler_spans=True``: an in-process span inside each handled request is the parent of its
  calls (nginx's ``ComposeReview`` span in Media Microservices);
* ``untraced``: services that record nothing (databases, caches): their callers' client spans
  are leaves.

The ground truth (``parent``, ``trace``) follows every change, so that the export can be scored.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTable
from tacit.runs import contained

HANDLER_MARGIN_NS = 1_000
"""How far inside its request a handler span starts and ends."""


def export_shape(
    spans: SpanTable,
    *,
    kinds: bool = True,
    client_spans: bool = True,
    handler_spans: bool = False,
    untraced: Iterable[str] = (),
) -> SpanTable:
    """``spans`` (from :func:`tacit.simulate.simulate`) as an export of the given shape would
    have them; see the module docstring. Links are dropped: an export has none."""
    s = spans.strings
    parent = spans.parent.copy()
    keep = np.ones(len(spans), dtype=bool)
    dark = contained(spans.service, [s.find(name) for name in untraced])
    keep &= ~(dark & (spans.kind == SERVER))
    if not client_spans:
        # A call to a traced service is seen only at the callee, whose server span's parent
        # becomes the caller's request.
        seen_at_callee = (spans.kind == CLIENT) & (spans.link != NONE) & keep[spans.link]
        keep &= ~seen_at_callee
        up = np.flatnonzero((spans.kind == SERVER) & (parent != NONE))
        up = up[seen_at_callee[parent[up]]]
        parent[up] = parent[parent[up]]
    out = spans.take(np.arange(len(spans)))
    out.parent[:] = parent
    out.link[:] = NONE
    out = out.take(keep)
    if handler_spans:
        out = _with_handlers(out)
    if not kinds:
        out.kind[:] = UNKNOWN
    out.record[:] = np.arange(1, len(out) + 1)
    return out


def _with_handlers(spans: SpanTable) -> SpanTable:
    """Insert, inside each server span with children, an in-process span parenting them."""
    n = len(spans)
    has_child = np.zeros(n, dtype=bool)
    has_child[spans.parent[spans.parent != NONE]] = True
    outer = np.flatnonzero((spans.kind == SERVER) & has_child)
    k = len(outer)
    cols = {name: np.concatenate([col, col[outer]]) for name, col in spans.columns().items()}
    new = np.arange(n, n + k)
    handler_of = np.full(n, NONE, dtype=np.int64)
    handler_of[outer] = new
    parent = cols["parent"]
    kids = np.flatnonzero(parent[:n] != NONE)
    moved = kids[handler_of[parent[kids]] != NONE]
    parent[moved] = handler_of[parent[moved]]
    parent[new] = outer
    cols["kind"][new] = INTERNAL
    margin = np.minimum(HANDLER_MARGIN_NS, (spans.end[outer] - spans.start[outer]) // 4)
    cols["start"][new] = spans.start[outer] + margin
    cols["end"][new] = spans.end[outer] - margin
    strings = spans.strings
    cols["endpoint"][new] = [
        strings.code(f"{spans.name('endpoint', int(r))} handler") for r in outer
    ]
    cols["peer"][new] = NONE
    cols["span_id"][new] = [strings.code(f"h{int(r):015x}") for r in outer]
    out = SpanTable(strings, **cols, sources=spans.sources)
    order = np.lexsort((out.end, out.start))
    return out.take(order)
