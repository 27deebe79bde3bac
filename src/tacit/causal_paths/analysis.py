"""WAP5 end to end (Reynolds et al., WWW '06, §5): messages → links → instances → patterns.

:func:`analyze_paths` is the Python API behind ``tacit paths link``; :func:`evaluate_paths`
behind ``tacit paths evaluate``: it turns real request traces into message traces (each RPC a
request and a response, each host's clock shifted at random), links them, and scores the result
against the traces' own causal structure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numba
import numpy as np

from tacit.causal_paths.clocks import ClockOffsets, Statistic, estimate_offsets
from tacit.causal_paths.from_spans import messages_from_spans, shift_clocks
from tacit.causal_paths.instances import InstanceBuilder, InstanceParams, instances_from_parents
from tacit.causal_paths.linking import LinkParams, Links, latest_links, link_messages
from tacit.causal_paths.nesting import CALL, nest_calls
from tacit.causal_paths.patterns import (
    PatternDetail,
    PatternSet,
    find_patterns,
    merge_details,
    merge_patterns,
)
from tacit.errors import ConfigError
from tacit.model.messages import MISSING, MessageTable, MessageTruth
from tacit.model.spans import SpanTable

RULES = ("wap5", "latest")
COUNT_TOLERANCE = 0.10
"""A found pattern matches a true one when its count is within 10% of the true count."""


@dataclass(frozen=True)
class PathParams:
    """Parameters of the whole analysis."""

    link: LinkParams = field(default_factory=LinkParams)
    rule: str = "wap5"
    """How causes are found: WAP5's linking (``wap5``) or the trivial baseline ``latest``
    (:func:`~.linking.latest_links`: the latest message the sender received)."""
    instances: InstanceParams = field(default_factory=InstanceParams)
    clock_statistic: Statistic = "min"
    batch_trees: int = 20_000
    """Path trees whose instances are built and aggregated at a time: bounds the memory that
    instances take on long traces (patterns from every batch are merged)."""

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ConfigError(f"rule must be one of {RULES}, got {self.rule!r}")
        if self.link.keep_probability > self.instances.probably_false:
            raise ConfigError(
                f"keep_probability {self.link.keep_probability} is above probably_false "
                f"{self.instances.probably_false}: links path building may fork on are dropped"
            )


@dataclass
class PathAnalysis:
    """The result of :func:`analyze_paths`."""

    messages: MessageTable
    links: Links
    offsets: ClockOffsets
    patterns: PatternSet
    accounting: dict[str, int]
    seconds: float


def analyze_paths(messages: MessageTable, params: PathParams | None = None) -> PathAnalysis:
    """Link messages, build path instances and patterns, estimate clock offsets (WAP5 §5)."""
    p = params or PathParams()
    t0 = time.perf_counter()
    links = (latest_links if p.rule == "latest" else link_messages)(messages, p.link)
    offsets = estimate_offsets(messages, p.clock_statistic)
    patterns = _patterns(messages, InstanceBuilder(links, len(messages), p.instances), offsets, p)
    seconds = time.perf_counter() - t0
    return PathAnalysis(messages, links, offsets, patterns, _accounting(messages, links), seconds)


def _patterns(
    messages: MessageTable, builder: InstanceBuilder, offsets: ClockOffsets, p: PathParams
) -> PatternSet:
    """Patterns of every tree, built ``batch_trees`` trees at a time. With more than one
    batch, the hops of a pattern are spelled out only when asked for (a second pass over the
    batches, for the patterns asked for), so that memory stays bounded on long traces."""
    batches = np.array_split(builder.roots, max(1, -(-len(builder.roots) // p.batch_trees)))
    if len(batches) == 1:
        return find_patterns(messages, builder.build(), offsets)
    nothing = np.empty(0, np.uint64)
    patterns = merge_patterns(
        [find_patterns(messages, builder.build(roots), offsets, nothing) for roots in batches]
    )

    def refine(keys: np.ndarray) -> PatternDetail:
        return merge_details(
            [find_patterns(messages, builder.build(r), offsets, keys).detail for r in batches]
        )

    patterns.refine = refine
    return patterns


def _accounting(messages: MessageTable, links: Links) -> dict[str, int]:
    """Every message by what became of it (each in exactly one of the first three)."""
    has_cause = links.candidates > 0
    spontaneous = links.best < 0
    return {
        "messages": len(messages),
        "linked": int((~spontaneous).sum()),
        "spontaneous_likeliest": int((spontaneous & has_cause).sum()),
        "spontaneous_no_cause": int((spontaneous & ~has_cause).sum()),
        "sender_untraced": int((messages.send == MISSING).sum()),
        "receiver_untraced": int((messages.recv == MISSING).sum()),
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
    call_parent_accuracy: float | None = None
    """Over the calls of call-return pairs: the enclosing call found by following the most
    likely causes is the true one (the measure Project 5's nesting is scored by too)."""
    nesting: dict | None = None
    """Project 5's nesting algorithm on the same messages: its call parent accuracy and
    time."""

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
            "call_parent_accuracy": self.call_parent_accuracy,
            "nesting": self.nesting,
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
    evaluation = score_paths(messages, derived.truth, analysis)
    t0 = time.perf_counter()
    nested = nest_calls(messages)
    nesting_seconds = time.perf_counter() - t0
    is_call = nested.role == CALL
    truth = enclosing_calls(derived.truth.parent, messages, is_call)
    if is_call.any():
        evaluation.call_parent_accuracy = float(
            (enclosing_calls(analysis.links.best, messages, is_call) == truth)[is_call].mean()
        )
        evaluation.nesting = {
            "call_parent_accuracy": float((nested.parent_call == truth)[is_call].mean()),
            "calls": int(is_call.sum()),
            "seconds": nesting_seconds,
        }
    return evaluation


def enclosing_calls(parent: np.ndarray, messages: MessageTable, is_call: np.ndarray) -> np.ndarray:
    """Per call B→C: the call A→B it runs inside, found by following ``parent`` (each
    message's cause) up to the first call into B; -1 when there is none (and for non-calls).
    This turns message-level causes (WAP5) into the call nesting of Project 5."""
    return _enclosing(parent.astype(np.int64), messages.src, messages.dst, is_call)


@numba.njit(cache=True)
def _enclosing(parent, src, dst, is_call):  # pragma: no cover - compiled
    out = np.full(len(parent), -1, np.int64)
    for c in range(len(parent)):
        if not is_call[c]:
            continue
        a, steps = parent[c], 0
        while a >= 0 and steps <= len(parent):  # the step bound guards against a cycle
            if is_call[a] and dst[a] == src[c]:
                out[c] = a
                break
            a, steps = parent[a], steps + 1
    return out


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
    true_count = true_set.counts()
    found = {k: c for k, c in analysis.patterns.counts().items() if c >= 1}
    seen = set(analysis.patterns.keys.tolist())
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
