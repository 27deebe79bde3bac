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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from tacit.hashing import hash64
from tacit.model.span_details import SpanDetail
from tacit.model.spans import SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.link_probability import (
    alternative_probability,
    link_probability,
    trace_probability,
)
from tacit.reconstruct.result import Reconstruction, known_calls
from tacit.runs import distinct, run_bounds, split_at


def new_seed() -> int:
    """A random seed for :func:`assemble`, drawn once per run: what makes its ids unlike those
    of any other run."""
    return secrets.randbits(64)


EVIDENCE_TAGS = (
    "tacit.algorithm",
    "tacit.score",
    "tacit.probability",
    "tacit.alternatives",
    "tacit.unmapped",
    "tacit.link",
    "tacit.trace_probability",
)
"""The tags of a row's evidence that :class:`Evidence` holds as columns, in the order written
(:data:`FALLBACK_TAG` follows them where there is one)."""
FALLBACK_TAG = "tacit.fallback"
GIVEN = "given"
"""``tacit.link`` of a client span whose parent its sender gave (kept, not inferred)."""
VIRTUAL = "virtual"
"""``tacit.link`` of a span drawn for a service that sent none (:mod:`.hops`)."""


def evidence_tags(
    algorithm: str,
    score: float | None = None,
    probability: float | None = None,
    alternatives: str | None = None,
    unmapped: str | None = None,
    link: str | None = None,
    trace_probability: float | None = None,
    fallback: str | None = None,
) -> dict[str, Any]:
    """One row's evidence as tags (see :func:`assemble`), those that are None left out."""
    values = (algorithm, score, probability, alternatives, unmapped, link, trace_probability)
    keys = (*EVIDENCE_TAGS, FALLBACK_TAG)
    return {k: v for k, v in zip(keys, (*values, fallback), strict=True) if v is not None}


@dataclass
class Evidence(Mapping[int, dict]):
    """The evidence of each row of assembled traces, by column; as a mapping, each row's tags
    (:func:`evidence_tags`), made when asked for. A writer of many rows reads the columns.

    ``score``: the chosen parent's score rounded to 4 places (None: none); ``probability``:
    that a client span's parent (or its having none) is right (:mod:`.link_probability`),
    rounded to 4 places (None: not a client span); ``alternatives``: by row, JSON ``[[parent
    span id, score, share], ...]``, best first (``share``: of the call's alternatives,
    :func:`.link_probability.alternative_probability`); ``unmapped`` and ``fallback``: by row,
    the reasons;
    ``given``: the rows whose parent the input gave; ``virtual``: the rows drawn for a service
    that sent no spans; ``trace_probability``: by root row, that its whole trace is right."""

    algorithm: str
    score: list[float | None]
    probability: list[float | None] = field(default_factory=list)
    alternatives: dict[int, str] = field(default_factory=dict)
    unmapped: dict[int, str] = field(default_factory=dict)
    fallback: dict[int, str] = field(default_factory=dict)
    given: frozenset[int] = frozenset()
    virtual: frozenset[int] = frozenset()
    trace_probability: dict[int, float] = field(default_factory=dict)

    def link(self, row: int) -> str | None:
        """``tacit.link`` of ``row``: :data:`GIVEN`, :data:`VIRTUAL` or None."""
        return GIVEN if row in self.given else VIRTUAL if row in self.virtual else None

    def __getitem__(self, row: int) -> dict[str, Any]:
        if not 0 <= row < len(self.score):
            raise KeyError(row)
        return evidence_tags(
            self.algorithm,
            self.score[row],
            self.probability[row] if self.probability else None,
            self.alternatives.get(row),
            self.unmapped.get(row),
            self.link(row),
            self.trace_probability.get(row),
            self.fallback.get(row),
        )

    def __len__(self) -> int:
        return len(self.score)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.score)))


def assemble(
    spans: SpanTable,
    rec: Reconstruction,
    ids: np.ndarray | None = None,
    seed: int | None = None,
    beyond: Sequence[SpanDetail | None] = (),
    virtual: np.ndarray | None = None,
) -> tuple[SpanTable, Evidence]:
    """``spans`` with ``parent`` from ``rec`` and a trace per root, plus the evidence of each
    row (``virtual``: a mask of the rows drawn for services that sent no spans).

    Row ``r`` is numbered ``ids[r]`` (default: ``r``); its trace's id is derived from the number
    of the trace's root and ``seed`` (default: :func:`new_seed`), as is a fresh span id (see the
    module docstring), so that traces assembled apart with one seed (the online mode's, one
    batch at a time, numbered by stream position) keep distinct ids. Entries of ``ids`` past the
    last row number the rows past the table's end that ``rec.alternatives`` names: candidate
    parents in other batches, named by the span id of their detail in ``beyond`` (one per row
    past the end), as their own batch writes them, or else by their fresh span ids.

    Evidence, as tags: ``tacit.algorithm``; on client spans ``tacit.probability``
    (:mod:`.link_probability`); on mapped ones ``tacit.score`` and ``tacit.alternatives`` (JSON
    list of [parent span id, score, share], best first); on unmapped ones
    ``tacit.unmapped`` with the reason; on client spans whose parent the input gave
    (:func:`~.result.known_calls`: kept, not inferred) ``tacit.link`` :data:`GIVEN` and
    probability 1, and on spans drawn for a service that sent none :data:`VIRTUAL`; on each
    trace's root ``tacit.trace_probability``; on client spans given a parent by the fallback
    (not by the algorithm), ``tacit.fallback`` with the reason the algorithm gave.
    """
    out = spans.take(np.arange(len(spans)))
    out.parent[:] = rec.parent
    number = np.arange(len(spans)) if ids is None else np.asarray(ids, dtype=np.int64)
    keys = np.random.default_rng(new_seed() if seed is None else seed).integers(
        0, 2**64, size=3, dtype=np.uint64
    )
    fresh = hash64(number + 1, int(keys[2])).tolist()  # formatted as ids where used
    root = roots(rec.parent)
    heads = distinct(root)
    halves = [hash64(number[heads] + 1, int(k)).tolist() for k in keys[:2]]
    trace_ids = {
        r: out.strings.code(f"{hi:016x}{lo:016x}")
        for r, hi, lo in zip(heads.tolist(), *halves, strict=True)
    }
    out.trace[:] = [trace_ids[r] for r in root.tolist()]
    out.span_id[:] = out.strings.codes(_span_ids(root.tolist(), spans.details, fresh))
    names = out.strings.names(out.span_id)
    p = link_probability(spans, rec)
    per_trace = trace_probability(p, np.searchsorted(heads, root), rec.samples)
    alts = Alternatives.of(rec.alternatives)
    evidence = Evidence(
        rec.algorithm,
        _rounded(rec.score),
        _rounded(p),
        _alternatives_json(alts, alternative_probability(alts), names, fresh, beyond),
        dict(rec.unmapped),
        dict(rec.fallback),
        frozenset(np.flatnonzero(known_calls(spans)).tolist()),
        frozenset(() if virtual is None else np.flatnonzero(virtual).tolist()),
        dict(zip(heads.tolist(), [round(x, 4) for x in per_trace.tolist()], strict=True)),
    )
    return out, evidence


def _rounded(values: np.ndarray) -> list[float | None]:
    """``values`` rounded to 4 places, NaN as None."""
    return [None if math.isnan(x) else round(x, 4) for x in values.tolist()]


def _alternatives_json(
    alts: Alternatives,
    probability: np.ndarray,
    names: list[str | None],
    fresh: list[int],
    beyond: Sequence[SpanDetail | None],
) -> dict[int, str]:
    """Per call listed in ``alts``, JSON ``[[parent span id, score, share], ...]``, best
    first (``probability``: each entry's share)."""
    if not len(alts.owner):
        return {}
    named = names + [_span_id(names, fresh, beyond, r) for r in range(len(names), len(fresh))]
    pairs = list(
        zip(
            map(named.__getitem__, alts.parent.tolist()),
            [round(s, 4) for s in alts.score.tolist()],
            [round(q, 4) for q in probability.tolist()],
            strict=True,
        )
    )
    starts, _ = run_bounds(alts.owner)
    return dict(
        zip(
            alts.owner[starts].tolist(),
            [orjson.dumps(p).decode() for p in split_at(pairs, starts[1:])],
            strict=True,
        )
    )


def _span_ids(root: list[int], details: np.ndarray | None, fresh: list[int]) -> list[str]:
    """Each row's span id: its detail's, or its fresh one (``fresh``: as a number) when it has
    none or an earlier row of its trace (``root``: the trace's root row) took that id."""
    given = [None] * len(root) if details is None else [d and d.span_id for d in details.tolist()]
    ids = [sid or f"{f:016x}" for sid, f in zip(given, fresh, strict=False)]
    if len(set(zip(root, ids, strict=True))) == len(ids):  # as most are: no row takes another's id
        return ids
    taken: set[tuple[int, str]] = set()
    for r, head in enumerate(root):
        if (head, ids[r]) in taken:
            ids[r] = f"{fresh[r]:016x}"
        taken.add((head, ids[r]))
    return ids


def _span_id(
    names: list[str | None], fresh: list[int], beyond: Sequence[SpanDetail | None], row: int
) -> str | None:
    """The span id of ``row``: its assembled one (``names``), or past the table's end its
    detail's (``beyond``) or its fresh one (``fresh``: as a number)."""
    if row < len(names):
        return names[row]
    d = beyond[row - len(names)] if row - len(names) < len(beyond) else None
    return d.span_id if d is not None and d.span_id else f"{fresh[row]:016x}"
