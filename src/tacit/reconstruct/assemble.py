"""Assembling reconstructed parent links into traces, with their evidence as span tags."""

from __future__ import annotations

import json

import numpy as np

from tacit.model.spans import SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.result import Reconstruction


def assemble(
    spans: SpanTable, rec: Reconstruction, ids: np.ndarray | None = None
) -> tuple[SpanTable, dict[int, dict]]:
    """``spans`` with ``parent`` from ``rec`` and a trace per root, plus tags per row.

    Row ``r`` is numbered ``ids[r]`` (default: ``r``): its span id is that number plus one, and
    its trace's id the number of the trace's root plus one, so that traces assembled apart (the
    online mode's, one batch at a time, numbered by stream position) keep distinct ids. Entries
    of ``ids`` past the last row number the rows past the table's end that ``rec.alternatives``
    names: candidate parents in other batches.

    Tags: ``tacit.algorithm``; on mapped client spans ``tacit.score`` and
    ``tacit.alternatives`` (JSON list of [parent span id, score], best first); on unmapped
    client spans ``tacit.unmapped`` with the reason; on client spans given a parent by the
    fallback (not by the algorithm), ``tacit.fallback`` with the reason the algorithm gave.
    """
    out = spans.take(np.arange(len(spans)))
    out.parent[:] = rec.parent
    number = np.arange(len(spans)) if ids is None else ids
    n = len(spans)
    root = roots(rec.parent)
    trace_ids = {r: out.strings.code(f"{number[r] + 1:032x}") for r in np.unique(root).tolist()}
    out.trace[:] = [trace_ids[r] for r in root.tolist()]
    out.span_id[:] = [out.strings.code(f"{i + 1:016x}") for i in number[:n].tolist()]
    tags: dict[int, dict] = {}
    for r in range(len(spans)):
        t: dict = {"tacit.algorithm": rec.algorithm}
        if not np.isnan(rec.score[r]):
            t["tacit.score"] = round(float(rec.score[r]), 4)
        if r in rec.alternatives:
            t["tacit.alternatives"] = json.dumps(
                [[f"{number[p] + 1:016x}", round(s, 4)] for p, s in rec.alternatives[r]]
            )
        if r in rec.unmapped:
            t["tacit.unmapped"] = rec.unmapped[r]
        if r in rec.fallback:
            t["tacit.fallback"] = rec.fallback[r]
        tags[r] = t
    return out, tags
