"""How likely each reconstructed link is to be right, from the scores of its call's
alternatives.

TraceWeaver keeps each incoming span's top-K mappings with their log-likelihoods (§4.1) and
reads a service's confidence from how often the chosen one is the best (§6.3.2). A call's
alternatives are the parents those mappings gave it, each with its mapping's log-likelihood:
read as a posterior over them, the chosen parent has probability
``exp(s / T) / Σ_k exp(s_k / T)``, ``T`` the temperature (1: the scores as likelihoods). A link
its sender gave is taken as right (probability 1); a call left unmapped, or given a parent no
alternative lists (a fallback's guess), has no scored parent (0). A trace is right when each of
its links is: its probability is their product.
"""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.result import Reconstruction


def link_probability(spans: SpanTable, rec: Reconstruction, temperature: float = 1.0) -> np.ndarray:
    """Per row of ``spans`` (the blind view ``rec`` was made from), the probability that a
    client span's parent in ``rec`` is right (module docstring); NaN for the other spans."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    out = np.full(len(spans), np.nan)
    client = spans.kind == CLIENT
    out[client] = 0.0
    alt = Alternatives.of(rec.alternatives)
    if len(alt.owner):
        calls, at = np.unique(alt.owner, return_inverse=True)
        best = np.full(len(calls), -np.inf)
        np.maximum.at(best, at, alt.score)
        weight = np.exp((alt.score - best[at]) / temperature)
        total = np.bincount(at, weights=weight, minlength=len(calls))
        chosen = alt.parent == rec.parent[alt.owner]
        mine = np.bincount(at, weights=np.where(chosen, weight, 0.0), minlength=len(calls))
        out[calls] = np.where(rec.parent[calls] != NONE, mine / total, 0.0)
    given = client & (spans.parent != NONE) & (rec.parent == spans.parent)
    out[given] = 1.0
    return out


def trace_probability(probability: np.ndarray, trace: np.ndarray) -> np.ndarray:
    """Per trace (``trace``: a dense trace index per row), the product of its links'
    ``probability`` (NaN rows, which are no links, count as 1)."""
    with np.errstate(divide="ignore"):
        log_p = np.where(np.isnan(probability), 0.0, np.log(probability))
    n = int(trace.max()) + 1 if len(trace) else 0
    return np.exp(np.bincount(trace, weights=log_p, minlength=n))
