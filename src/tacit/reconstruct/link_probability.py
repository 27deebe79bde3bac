"""How likely each reconstructed link is to be right.

Where the algorithm measured it (:attr:`.result.Reconstruction.probability`: TraceWeaver's
share of perturbed joint assignments that make the link, :attr:`.traceweaver.TraceWeaverParams.
marginal_samples`), that stands. Otherwise it is read from the scores of the call's
alternatives:

TraceWeaver keeps each incoming span's top-K mappings with their log-likelihoods (§4.1) and
reads a service's confidence from how often the chosen one is the best (§6.3.2). A call's
alternatives are the parents those mappings gave it, each with its mapping's log-likelihood:
read as a posterior over them, alternative ``k`` has probability
``exp(s_k / T) / Σ_j exp(s_j / T)``, ``T`` the temperature (1: the scores as likelihoods), and
the chosen parent has its alternative's. A link its sender gave is taken as right (probability
1), as is a call from an instance that serves no requests being a trace's root; a call left
unmapped otherwise, or given a parent no alternative lists (a fallback's guess), has no scored
parent (0). A trace is right when each of its links is: its probability is their
product. A service's confidence is the mean probability of the links of the calls it made
(unmapped ones count 0), in percent: where it is low, the operator learns which services to
instrument first (§6.3.2); a service that made no call has none.
"""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.result import ROOT_CALL, Reconstruction, known_calls


def alternative_probability(alt: Alternatives, temperature: float = 1.0) -> np.ndarray:
    """Per entry of ``alt``, its share of its call's alternatives (module docstring)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not len(alt.owner):
        return np.zeros(0)
    _, at = np.unique(alt.owner, return_inverse=True)
    best = np.full(int(at.max()) + 1, -np.inf)
    np.maximum.at(best, at, alt.score)
    weight = np.exp((alt.score - best[at]) / temperature)
    return weight / np.bincount(at, weights=weight)[at]


def link_probability(spans: SpanTable, rec: Reconstruction, temperature: float = 1.0) -> np.ndarray:
    """Per row of ``spans`` (the blind view ``rec`` was made from), the probability that a
    client span's parent in ``rec`` is right (module docstring); NaN for the other spans."""
    out = np.full(len(spans), np.nan)
    out[spans.kind == CLIENT] = 0.0
    alt = Alternatives.of(rec.alternatives)
    share = alternative_probability(alt, temperature)
    chosen = (alt.parent == rec.parent[alt.owner]) & (rec.parent[alt.owner] != NONE)
    out[alt.owner[chosen]] = share[chosen]
    if rec.probability is not None:  # measured by the algorithm: those stand
        measured = ~np.isnan(rec.probability) & (rec.parent != NONE)
        out[measured] = rec.probability[measured]
    out[known_calls(spans) & (rec.parent == spans.parent)] = 1.0
    out[[r for r, why in rec.unmapped.items() if why == ROOT_CALL and r < len(out)]] = 1.0
    return out


def trace_probability(probability: np.ndarray, trace: np.ndarray) -> np.ndarray:
    """Per trace (``trace``: a dense trace index per row), the product of its links'
    ``probability`` (NaN rows, which are no links, count as 1)."""
    with np.errstate(divide="ignore"):
        log_p = np.where(np.isnan(probability), 0.0, np.log(probability))
    n = int(trace.max()) + 1 if len(trace) else 0
    return np.exp(np.bincount(trace, weights=log_p, minlength=n))


def service_confidence(spans: SpanTable, probability: np.ndarray) -> dict[str, float]:
    """Per service that made calls, the mean ``probability`` of their links, in percent
    (module docstring)."""
    client = spans.kind == CLIENT
    names = [*spans.strings.values, None]  # the last: calls of no service
    service = spans.service[client]
    service = np.where(service == NONE, len(names) - 1, service)
    calls = np.bincount(service, minlength=len(names))
    total = np.bincount(service, weights=probability[client], minlength=len(names))
    return {names[c] or "?": 100.0 * total[c] / calls[c] for c in np.flatnonzero(calls).tolist()}
