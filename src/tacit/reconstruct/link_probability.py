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
parent (0). A trace is right when each of its links is. Where the links' probabilities are
shares of the same sampled mappings, the trace's is the share of them that make all its links
(the links of one request are not independent: a mapping that takes one call from it often
takes the next too, and the product of their shares would count that twice; across
instances, whose mappings are sampled apart, the same share estimates their product); for
the other links, the product of their probabilities. A service's confidence is the mean
probability of the links of the calls it made (unmapped ones count 0), in percent: where it
is low, the operator learns which services to instrument first (§6.3.2); a service that made
no call has none.
"""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.result import (
    NOT_SAMPLED,
    ROOT_CALL,
    SAMPLE_BITS,
    Reconstruction,
    known_calls,
)


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


def sample_mask(made: np.ndarray, n: int) -> np.ndarray:
    """The masks (:attr:`.result.Reconstruction.samples`) of links whose bit ``k`` in ``made``
    (uint64) says whether sampled mapping ``k`` of ``n`` made them."""
    if not 0 < n <= SAMPLE_BITS:
        raise ValueError(f"sample masks hold 1 to {SAMPLE_BITS} samples, not {n}")
    return (made & np.uint64(2**SAMPLE_BITS - 1)) | (np.uint64(n) << np.uint64(SAMPLE_BITS))


def trace_probability(
    probability: np.ndarray, trace: np.ndarray, samples: np.ndarray | None = None
) -> np.ndarray:
    """Per trace (``trace``: a dense trace index per row), the probability that all its links
    are right (module docstring): the share of sampled mappings that make every link with a
    sample mask in ``samples``, times the product of the other links' ``probability`` (NaN
    rows, which are no links, count as 1). Sampled mappings of different instances are drawn
    apart, so the intersection of their masks estimates the product of their shares."""
    sampled = np.zeros(len(probability), dtype=bool) if samples is None else samples != NOT_SAMPLED
    with np.errstate(divide="ignore"):
        log_p = np.where(np.isnan(probability) | sampled, 0.0, np.log(probability))
    n = int(trace.max()) + 1 if len(trace) else 0
    out = np.exp(np.bincount(trace, weights=log_p, minlength=n))
    if samples is not None and sampled.any():
        joint = np.full(n, NOT_SAMPLED, dtype=np.uint64)
        np.bitwise_and.at(joint, trace[sampled], samples[sampled])
        has = joint != NOT_SAMPLED
        count = (joint[has] >> np.uint64(SAMPLE_BITS)).astype(np.float64)
        made = np.bitwise_count(joint[has] & np.uint64(2**SAMPLE_BITS - 1))
        out[has] *= made / count
    return out


def service_confidence(spans: SpanTable, probability: np.ndarray) -> dict[str, float]:
    """Per service that made calls, the mean ``probability`` of their links, 0 to 1 (module
    docstring)."""
    client = spans.kind == CLIENT
    names = [*spans.strings.values, None]  # the last: calls of no service
    service = spans.service[client]
    service = np.where(service == NONE, len(names) - 1, service)
    calls = np.bincount(service, minlength=len(names))
    total = np.bincount(service, weights=probability[client], minlength=len(names))
    return {names[c] or "?": total[c] / calls[c] for c in np.flatnonzero(calls).tolist()}
