"""Explaining detected slow traces with root-cause rules (YTrace's third step).

YTrace (Kanuparthy et al., "End-to-end Performance Diagnosis in Large Cloud and Content
Providers") diagnoses in three steps: detection flags a session slower than its baseline
(:mod:`tacit.diagnosis.detect`), localization finds where its time went (the critical path,
:mod:`tacit.diagnosis.critical_path`), and root-cause rules written in its small language
(:mod:`tacit.diagnosis.rules`) are evaluated on the *features of each detected problem*. The
paper models "a performance problem as a boolean-valued expression on one or more
boolean-valued symptoms", in the grammar ``SYMPTOM``, ``PATHOLOGY p DEF (symptom | NOT
symptom)`` with ``AND``/``OR``/parentheses, and ``PROCEDURE symptom funcname``, and evaluates the
matching expressions for each detected problem. Which symptoms to offer is left to operators;
the features below are tacit's.

The features of a flagged trace, from its critical path and its execution graph:

- ``slow``: detection flagged it slower than its key's baseline (``faster`` for the other way);
- ``top_service``, ``top_share``: the largest contributor and its share of end-to-end latency;
  ``network_share``: the share of RPC transit (:data:`tacit.diagnosis.critical_path.NETWORK`);
- ``service_dominant`` (``top_share`` of a service, not the network, at least
  :attr:`ExplainParams.dominant_share`) and ``network_dominant`` (``network_share`` at least
  :attr:`ExplainParams.network_share`);
- ``serial_calls``, ``parallel_calls``, ``redundant_calls``: whether any process of the trace
  called its callees one after another, fanned out and waited for all, or fanned out and went
  on after the first k of n (the execution graph's happens-before patterns).

With a detection, localization also compares a slow trace with its key's baseline, as
detection does: ``grew_service`` is the contributor (the network included) whose time exceeds
its median over the key's history traces by the most, and ``grew_ms`` that excess
(:func:`baseline_contributions`); when that is the network, ``grew_edge`` names the RPC edge
(``caller → callee``) whose transit grew most
(:func:`~tacit.diagnosis.critical_path.transit_by_edge`): transit holds the RPC stacks of both
ends, so a starved caller or callee shows there rather than as its own time. The largest
contributor of a slow trace is often the one that dominates every trace of its kind (a front
end's own work); the one that grew is where the slowness came from.

Numbers are reported beside the verdict; rules refer only to the true/false features. The
packaged ``rules/traces.rules`` names the pathologies those features can tell apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from tacit.diagnosis.critical_path import NETWORK, CriticalPaths, transit_by_edge
from tacit.diagnosis.detect import FASTER, SLOWER, Detection
from tacit.diagnosis.execution_graph import PARALLEL, REDUNDANT, SERIAL
from tacit.diagnosis.rules import RuleSet, parse_rules, read_rules
from tacit.errors import ConfigError
from tacit.runs import distinct

TRACE_RULES = "tacit/diagnosis/rules/traces.rules"


@dataclass(frozen=True)
class ExplainParams:
    """Thresholds of the boolean features (ours: the paper gives none).

    ``dominant_share``: a service whose computation is at least this share of the critical path
    dominates it (more than all others together). ``network_share``: the same for RPC transit.
    """

    dominant_share: float = 0.5
    network_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("dominant_share", "network_share"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ConfigError(f"explain: {name} must be in (0, 1], got {v}")


def trace_rules(path: str | Path | None = None) -> RuleSet:
    """The rules in ``path``, or the packaged ``rules/traces.rules``."""
    if path is not None:
        return read_rules(path)
    text = resources.files("tacit.diagnosis").joinpath("rules/traces.rules").read_text("utf-8")
    return parse_rules(text, TRACE_RULES)


def trace_features(
    cp: CriticalPaths,
    i: int,
    detection: Detection | None = None,
    params: ExplainParams | None = None,
) -> dict[str, Any]:
    """The features of trace ``i`` of ``cp`` (see the module docstring); ``slow`` and ``faster``
    come from ``detection`` when given."""
    p = params or ExplainParams()
    lat = max(int(cp.latency[i]), 1)
    row = cp.contribution[i]
    net = cp.services.index(NETWORK) if NETWORK in cp.services else -1
    network = int(row[net]) / lat if net >= 0 else 0.0
    services = row.copy()
    if net >= 0:
        services[net] = -1
    best = int(np.argmax(services))
    top_share = max(int(services[best]), 0) / lat
    g = cp.graph
    mine = (g.root == cp.root[i]) & (g.spans.parent >= 0)
    patterns = set(distinct(g.pattern[mine]).tolist())
    features: dict[str, Any] = {
        "latency_ms": cp.latency[i] / 1e6,
        "top_service": cp.services[best],
        "top_share": top_share,
        "network_share": network,
        "service_dominant": top_share >= p.dominant_share,
        "network_dominant": network >= p.network_share,
        "serial_calls": SERIAL in patterns,
        "parallel_calls": PARALLEL in patterns,
        "redundant_calls": REDUNDANT in patterns,
    }
    if detection is not None:
        features["slow"] = bool(detection.verdict[i] == SLOWER)
        features["faster"] = bool(detection.verdict[i] == FASTER)
    return features


def baseline_contributions(cp: CriticalPaths, detection: Detection) -> np.ndarray:
    """Per key of ``detection`` and contributor of ``cp`` (``cp.services``), the median
    contribution (ns) over the key's history traces; NaN for a key without history."""
    return _key_medians(cp.contribution, detection)


def _key_medians(values: np.ndarray, detection: Detection) -> np.ndarray:
    """Per key of ``detection``, the column medians of ``values`` (one row per trace) over the
    key's history traces; NaN for a key without history."""
    n_keys = int(detection.key.max()) + 1 if len(detection.key) else 0
    out = np.full((n_keys, values.shape[1]), np.nan)
    hist = np.flatnonzero(detection.history)
    for k in distinct(detection.key[hist]).tolist():
        out[k] = np.median(values[hist[detection.key[hist] == k]], axis=0)
    return out


def _most_grown(values: np.ndarray, baseline: np.ndarray) -> tuple[int, float] | None:
    """The column of ``values`` (one trace's) furthest above its ``baseline`` and by how much
    (ns); None without a baseline."""
    if not len(baseline) or np.isnan(baseline).all():
        return None
    excess = values - baseline
    j = int(np.nanargmax(excess))
    return j, float(excess[j])


def explain(
    cp: CriticalPaths,
    detection: Detection,
    rules: RuleSet | None = None,
    params: ExplainParams | None = None,
) -> list[dict[str, Any]]:
    """For each trace ``detection`` flagged slower (traces as in ``cp``, slowest first): its
    name, features (with what grew against its key's baseline) and the rules' verdict
    (``holds``, ``undetermined``, ``symptoms``)."""
    rules = rules or trace_rules()
    slow = np.flatnonzero(detection.verdict == SLOWER)
    if not len(slow):
        return []
    slow = slow[np.argsort(-detection.latency[slow], kind="stable")]
    baseline = baseline_contributions(cp, detection)
    edges, transit = transit_by_edge(cp)
    edge_baseline = _key_medians(transit, detection)
    out = []
    for i in slow.tolist():
        name = cp.trace_name(i)
        features = trace_features(cp, i, detection, params)
        k = detection.key[i]
        grown = _most_grown(cp.contribution[i], baseline[k])
        features["grew_service"] = cp.services[grown[0]] if grown else None
        features["grew_ms"] = grown[1] / 1e6 if grown else None
        edge = None
        if features["grew_service"] == NETWORK:
            edge = _most_grown(transit[i], edge_baseline[k])
        features["grew_edge"] = " → ".join(edges[edge[0]]) if edge else None
        out.append(
            {"trace": name, "features": features, **rules.evaluate(features, name).as_dict()}
        )
    return out
