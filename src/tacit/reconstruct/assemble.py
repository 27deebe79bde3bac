"""Assembling reconstructed parent links into traces, with their evidence as span tags.

Identifiers: a span keeps the id its input gave it (its
:class:`~tacit.model.span_details.SpanDetail`), so that a reconstructed trace still names the
spans the tracer recorded; a span without one (blind spans, synthesized callers) or whose id
another span of its new trace already has gets a fresh one. Trace ids and fresh span ids are
drawn from a seeded keyed hash of the row's number (:func:`tacit.hashing.hash64`, a bijection
of 64-bit words): random-looking 128- and 64-bit ids, distinct for distinct numbers within a
run, and unlike across runs unless the caller repeats the seed, so that the traces of two runs
loaded into one backend never share an id (W3C Trace Context asks for random trace ids).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence

import numpy as np
import orjson

from tacit.hashing import hash64
from tacit.model.span_details import SpanDetail
from tacit.model.spans import SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.result import Reconstruction


def new_seed() -> int:
    """A random seed for :func:`assemble`, drawn once per run: what makes its ids unlike those
    of any other run."""
    return secrets.randbits(64)


def assemble(
    spans: SpanTable,
    rec: Reconstruction,
    ids: np.ndarray | None = None,
    seed: int | None = None,
    beyond: Sequence[SpanDetail | None] = (),
) -> tuple[SpanTable, dict[int, dict]]:
    """``spans`` with ``parent`` from ``rec`` and a trace per root, plus tags per row.

    Row ``r`` is numbered ``ids[r]`` (default: ``r``); its trace's id is derived from the number
    of the trace's root and ``seed`` (default: :func:`new_seed`), as is a fresh span id (see the
    module docstring), so that traces assembled apart with one seed (the online mode's, one
    batch at a time, numbered by stream position) keep distinct ids. Entries of ``ids`` past the
    last row number the rows past the table's end that ``rec.alternatives`` names: candidate
    parents in other batches, named by the span id of their detail in ``beyond`` (one per row
    past the end), as their own batch writes them, or else by their fresh span ids.

    Tags: ``tacit.algorithm``; on mapped client spans ``tacit.score`` and
    ``tacit.alternatives`` (JSON list of [parent span id, score], best first); on unmapped
    client spans ``tacit.unmapped`` with the reason; on client spans given a parent by the
    fallback (not by the algorithm), ``tacit.fallback`` with the reason the algorithm gave.
    """
    out = spans.take(np.arange(len(spans)))
    out.parent[:] = rec.parent
    number = np.arange(len(spans)) if ids is None else np.asarray(ids, dtype=np.int64)
    keys = np.random.default_rng(new_seed() if seed is None else seed).integers(
        0, 2**64, size=3, dtype=np.uint64
    )
    fresh = hash64(number + 1, int(keys[2])).tolist()  # formatted as ids where used
    root = roots(rec.parent)
    heads = np.unique(root)
    halves = [hash64(number[heads] + 1, int(k)).tolist() for k in keys[:2]]
    trace_ids = {
        r: out.strings.code(f"{hi:016x}{lo:016x}")
        for r, hi, lo in zip(heads.tolist(), *halves, strict=True)
    }
    out.trace[:] = [trace_ids[r] for r in root.tolist()]
    taken: set[tuple[int, str]] = set()
    span_ids = []
    details = spans.details.tolist() if spans.details is not None else [None] * len(spans)
    for r, (head, d) in enumerate(zip(root.tolist(), details, strict=True)):
        sid = d.span_id if d is not None and d.span_id else f"{fresh[r]:016x}"
        if (head, sid) in taken:
            sid = f"{fresh[r]:016x}"
        taken.add((head, sid))
        span_ids.append(out.strings.code(sid))
    out.span_id[:] = span_ids
    names = out.strings.names(out.span_id)
    tags: dict[int, dict] = {}
    for r, score in enumerate(rec.score.tolist()):
        t: dict = {"tacit.algorithm": rec.algorithm}
        if not math.isnan(score):
            t["tacit.score"] = round(score, 4)
        if r in rec.alternatives:
            t["tacit.alternatives"] = orjson.dumps(
                [[_span_id(names, fresh, beyond, p), round(s, 4)] for p, s in rec.alternatives[r]]
            ).decode()
        if r in rec.unmapped:
            t["tacit.unmapped"] = rec.unmapped[r]
        if r in rec.fallback:
            t["tacit.fallback"] = rec.fallback[r]
        tags[r] = t
    return out, tags


def _span_id(
    names: list[str | None], fresh: list[int], beyond: Sequence[SpanDetail | None], row: int
) -> str | None:
    """The span id of ``row``: its assembled one (``names``), or past the table's end its
    detail's (``beyond``) or its fresh one (``fresh``: as a number)."""
    if row < len(names):
        return names[row]
    d = beyond[row - len(names)] if row - len(names) < len(beyond) else None
    return d.span_id if d is not None and d.span_id else f"{fresh[row]:016x}"
