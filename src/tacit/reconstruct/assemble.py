"""Assembling reconstructed parent links into traces, with their evidence as span tags."""

from __future__ import annotations

import json

import numpy as np

from tacit.model.spans import NONE, SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.result import Reconstruction


def assemble(spans: SpanTable, rec: Reconstruction) -> tuple[SpanTable, dict[int, dict]]:
    """``spans`` with ``parent`` from ``rec`` and a trace per root, plus tags per row.

    Tags: ``tacit.algorithm``; on mapped client spans ``tacit.score`` and
    ``tacit.alternatives`` (JSON list of [parent span row, score], best first); on unmapped
    client spans ``tacit.unmapped`` with the reason; on client spans given a parent by the
    fallback (not by the algorithm), ``tacit.fallback`` with the reason the algorithm gave.
    """
    out = spans.take(np.arange(len(spans)))
    out.parent[:] = rec.parent
    root = roots(rec.parent)
    ids = np.array([out.strings.code(f"{r + 1:032x}") for r in range(len(spans))], dtype=np.int32)
    out.trace[:] = ids[root]
    out.span_id[:] = NONE
    tags: dict[int, dict] = {}
    for r in range(len(spans)):
        t: dict = {"tacit.algorithm": rec.algorithm}
        if not np.isnan(rec.score[r]):
            t["tacit.score"] = round(float(rec.score[r]), 4)
        if r in rec.alternatives:
            t["tacit.alternatives"] = json.dumps(
                [[f"{p + 1:016x}", round(s, 4)] for p, s in rec.alternatives[r]]
            )
        if r in rec.unmapped:
            t["tacit.unmapped"] = rec.unmapped[r]
        if r in rec.fallback:
            t["tacit.fallback"] = rec.fallback[r]
        tags[r] = t
    return out, tags
