"""What every reconstruction algorithm returns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tacit.model.roles import process_key
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.alternatives import Alternatives, Pairs
from tacit.runs import contained

ROOT_CALL = "a trace root: a call from an instance that serves no requests (a client)"


def known_calls(spans: SpanTable) -> np.ndarray:
    """Client spans whose parent the input gives (their sender's context named it): every
    reconstruction keeps them and maps only the others."""
    return _known(spans.kind, spans.parent)


def open_problem(spans: SpanTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The incoming and outgoing spans among ``rows`` (one instance) that the baselines map:
    the calls without a known parent, and the requests with no known call (a request whose
    context reached one call is taken to have reached them all)."""
    kind, parent = spans.kind[rows], spans.parent[rows]
    known = _known(kind, parent)
    decided = contained(rows, parent[known])
    return rows[(kind == SERVER) & ~decided], rows[(kind == CLIENT) & ~known]


def mapping_problem(spans: SpanTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The incoming and outgoing spans among ``rows`` (one instance) that TraceWeaver maps:
    every request, and every call. Context is often lost for some calls of a request and not
    others (a handler that calls one service itself and fans out to another through a thread
    pool that does not carry the context), so a request with known calls may still have lost
    ones; its known calls are context for it, and no other request may take them (the owner of
    :func:`tacit.reconstruct.beam.search`)."""
    kind = spans.kind[rows]
    return rows[kind == SERVER], rows[kind == CLIENT]


def _known(kind: np.ndarray, parent: np.ndarray) -> np.ndarray:
    return (kind == CLIENT) & (parent != NONE)


SAMPLE_BITS = 56
"""Sampled mappings a sample mask can tell apart (:attr:`Reconstruction.samples`): bits 0-55
say which made the link, bits 56-63 how many there were."""
NOT_SAMPLED = np.uint64(2**64 - 1)
"""The sample mask of a link no sampled mapping measured: every bit set, so that it changes
no intersection of masks."""


@dataclass
class Reconstruction:
    """A parent for every span, with the evidence behind it.

    ``parent[r]``: for a client span, the server span of the same instance chosen as its cause
    (-1: unmapped, reason in ``unmapped``); for a server span, the caller's client span (the
    RPC's other side, known to the collector). ``score``: log-likelihood of the chosen mapping
    (NaN where the algorithm has none). ``alternatives[r]``: top-K (parent row, score) for a
    client span (:class:`~.alternatives.Alternatives`, or any mapping of those lists).
    ``top_candidates[i]``: for an incoming span, the child sets of its top-K candidate mappings
    in rank order. ``confidence``: per service, 0 to 1 (§6.3.2), and ``service_report``
    what lowers it. ``fallback[r]``: why client span ``r`` was given its
    parent by :mod:`.fallback` rather than by the algorithm (a best-effort guess).
    ``probability[r]``: where the algorithm measured it, how likely client span ``r``'s parent
    is right (NaN elsewhere; None: nowhere, :mod:`.link_probability` then reads it from the
    alternatives). ``samples[r]``: where that probability is a share of sampled mappings,
    which of them made the link (:func:`.link_probability.sample_mask`; :data:`NOT_SAMPLED`
    elsewhere; None: nowhere).
    """

    algorithm: str
    parent: np.ndarray
    score: np.ndarray
    unmapped: dict[int, str] = field(default_factory=dict)
    alternatives: Mapping[int, Pairs] = field(default_factory=Alternatives.empty)
    top_candidates: dict[int, list[frozenset[int]]] = field(default_factory=dict)
    confidence: dict[str, float] = field(default_factory=dict)
    service_report: dict[str, dict[str, int]] = field(default_factory=dict)
    fallback: dict[int, str] = field(default_factory=dict)
    info: dict[str, object] = field(default_factory=dict)
    probability: np.ndarray | None = None
    samples: np.ndarray | None = None

    @classmethod
    def start(cls, algorithm: str, spans: SpanTable) -> Reconstruction:
        """An empty result: server spans linked to their callers, client spans unmapped but for
        those whose parent the input already knows (:func:`known_calls`)."""
        parent = np.where(spans.kind == SERVER, spans.link, NONE)
        known = known_calls(spans)
        parent[known] = spans.parent[known]
        return cls(algorithm, parent, np.full(len(spans), np.nan))

    def unmapped_counts(self) -> dict[str, int]:
        """How many client spans were left unmapped, by reason."""
        return dict(Counter(self.unmapped.values()))

    def finish_unmapped(self, spans: SpanTable, reason: str) -> None:
        """Give every client span still without parent or reason the default ``reason``, or
        :data:`ROOT_CALL` when its instance serves no requests at all."""
        proc = process_key(spans)
        serving = contained(proc, proc[spans.kind == SERVER])
        for r in np.flatnonzero((spans.kind == CLIENT) & (self.parent == NONE)):
            self.unmapped.setdefault(int(r), reason if serving[r] else ROOT_CALL)


def instrument_next(confidence: Mapping[str, float | None]) -> str:
    """TraceWeaver §6.3.2: the services to instrument first are those of lowest confidence
    (0 to 1 per service; None or absent: no data); one sentence that names up to three below
    99 %."""
    scored = sorted((c, name) for name, c in confidence.items() if c is not None)
    if not scored:
        return "no data: no service's calls have been reconstructed yet"
    low = [f"{name} ({100 * conf:.1f}%)" for conf, name in scored[:3] if conf < 0.99]
    if not low:
        return "every service's confidence is 99% or more"
    return "instrument these first (lowest confidence): " + ", ".join(low)
