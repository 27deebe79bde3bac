"""WAP5 end to end (Reynolds et al., WWW '06, §5): messages → links → instances → patterns.

:func:`analyze_paths` is the Python API behind ``tacit paths link``; :func:`evaluate_paths`
behind ``tacit paths evaluate``: it turns real request traces into message traces (each RPC a
request and a response, each host's clock shifted at random), links them, and scores the result
against the traces' own causal structure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tacit.causal_paths.clocks import ClockOffsets, Statistic, estimate_offsets
from tacit.causal_paths.from_spans import messages_from_spans, shift_clocks
from tacit.causal_paths.instances import (
    InstanceParams,
    Instances,
    build_instances,
    instances_from_parents,
)
from tacit.causal_paths.linking import LinkParams, Links, link_messages
from tacit.causal_paths.patterns import PatternSet, find_patterns
from tacit.model.messages import MISSING, MessageTable, MessageTruth
from tacit.model.spans import SpanTable

COUNT_TOLERANCE = 0.10
"""A found pattern matches a true one when its count is within 10% of the true count."""


@dataclass(frozen=True)
class PathParams:
    """Parameters of the whole analysis."""

    link: LinkParams = field(default_factory=LinkParams)
    instances: InstanceParams = field(default_factory=InstanceParams)
    clock_statistic: Statistic = "min"


@dataclass
class PathAnalysis:
    """The result of :func:`analyze_paths`."""

    messages: MessageTable
    links: Links
    instances: Instances
    offsets: ClockOffsets
    patterns: PatternSet
    accounting: dict[str, int]
    seconds: float


def analyze_paths(messages: MessageTable, params: PathParams | None = None) -> PathAnalysis:
    """Link messages, build path instances and patterns, estimate clock offsets (WAP5 §5)."""
    p = params or PathParams()
    t0 = time.perf_counter()
    links = link_messages(messages, p.link)
    instances = build_instances(links, len(messages), p.instances)
    offsets = estimate_offsets(messages, p.clock_statistic)
    patterns = find_patterns(messages, instances, offsets)
    seconds = time.perf_counter() - t0
    return PathAnalysis(
        messages, links, instances, offsets, patterns, _accounting(messages, links), seconds
    )


def _accounting(messages: MessageTable, links: Links) -> dict[str, int]:
    """Every message by what became of it (each in exactly one of the first three)."""
    has_cause = np.zeros(len(messages), dtype=bool)
    has_cause[links.effect] = True
    spontaneous = links.best < 0
    return {
        "messages": len(messages),
        "linked to their most likely cause": int((~spontaneous).sum()),
        "spontaneous (most likely no cause)": int((spontaneous & has_cause).sum()),
        "spontaneous (no possible cause)": int((spontaneous & ~has_cause).sum()),
        "sender untraced": int((messages.send == MISSING).sum()),
        "receiver untraced": int((messages.recv == MISSING).sum()),
    }


@dataclass
class PathEvaluation:
    """Scores of :func:`evaluate_paths` (see ``as_dict`` for the JSON form)."""

    messages: int
    parent_accuracy: float
    pattern_precision: float
    pattern_recall: float
    patterns_found: float
    true_patterns: int
    found_patterns: int
    clock_offset_error_ms: float | None
    hosts_estimated: int
    seconds: float
    accounting: dict[str, int]

    @property
    def messages_per_second(self) -> float | None:
        return self.messages / self.seconds if self.seconds > 0 else None

    def as_dict(self) -> dict:
        return {
            "messages": self.messages,
            "parent_accuracy": self.parent_accuracy,
            "pattern_precision": self.pattern_precision,
            "pattern_recall": self.pattern_recall,
            "patterns_found": self.patterns_found,
            "true_patterns": self.true_patterns,
            "found_patterns": self.found_patterns,
            "clock_offset_error_ms": self.clock_offset_error_ms,
            "hosts_estimated": self.hosts_estimated,
            "seconds": self.seconds,
            "messages_per_second": self.messages_per_second,
            "accounting": self.accounting,
        }


def evaluate_paths(
    spans: SpanTable,
    clock_offset_max_ns: int = 5_000_000_000,
    params: PathParams | None = None,
    seed: int = 0,
) -> PathEvaluation:
    """Messages from traced spans (roles decided, :func:`tacit.model.roles.infer_roles`), each
    host's clock shifted by up to ``clock_offset_max_ns``, analyzed and scored against truth."""
    t0 = time.perf_counter()
    derived = messages_from_spans(spans)
    assert derived.truth is not None
    messages, offsets = shift_clocks(derived.messages, clock_offset_max_ns, seed)
    derived.truth.host_offset = offsets
    analysis = analyze_paths(messages, params)
    analysis.seconds = time.perf_counter() - t0  # deriving the messages included
    return score_paths(messages, derived.truth, analysis)


def score_paths(
    messages: MessageTable, truth: MessageTruth, analysis: PathAnalysis
) -> PathEvaluation:
    """Score an analysis against ground truth.

    ``parent_accuracy``: the most likely cause is the true parent (spontaneous counted right
    when the message truly has none). Patterns: the true ones are the shapes of the true
    request trees; a found pattern (count ≥ 1) matches when the shape is the same and the counts
    agree within 10%. ``pattern_precision`` is the fraction of found patterns that match,
    ``pattern_recall`` the fraction of true patterns matched, ``patterns_found`` the fraction of
    true shapes found at all (in any instance). Clock offsets: mean absolute error over the
    estimated hosts, each relative to its group's reference host.
    """
    accuracy = float((analysis.links.best == truth.parent).mean()) if len(messages) else 1.0
    true_set = find_patterns(messages, instances_from_parents(truth.parent))
    true_count = {p.key: p.count for p in true_set.patterns}
    found = {p.key: p.count for p in analysis.patterns.patterns if p.count >= 1}
    seen = {p.key for p in analysis.patterns.patterns}
    matched = [
        k
        for k, c in found.items()
        if k in true_count and abs(c - true_count[k]) <= COUNT_TOLERANCE * true_count[k]
    ]
    est = analysis.offsets
    errors = [
        abs(est.offset[h] - (truth.host_offset[h] - truth.host_offset[est.reference[h]]))
        for h in est.offset
        if h in truth.host_offset and est.reference[h] in truth.host_offset
    ]
    return PathEvaluation(
        messages=len(messages),
        parent_accuracy=accuracy,
        pattern_precision=len(matched) / len(found) if found else 0.0,
        pattern_recall=len(matched) / len(true_count) if true_count else 1.0,
        patterns_found=sum(k in seen for k in true_count) / len(true_count) if true_count else 1.0,
        true_patterns=len(true_count),
        found_patterns=len(found),
        clock_offset_error_ms=float(np.mean(errors)) / 1e6 if errors else None,
        hosts_estimated=len(errors),
        seconds=analysis.seconds,
        accounting=analysis.accounting,
    )
