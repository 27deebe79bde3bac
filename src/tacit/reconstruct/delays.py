"""Delay distributions and candidate scores.

TraceWeaver (SIGCOMM '24, §4.1): a candidate mapping is scored by the likelihood of the gaps it
implies: from receiving the request to the first call, from the end of each call to the start of
the next one in dependency order, and from the end of the last call to the response. Before any
mapping exists the gap distributions are seeded without one: a Gaussian whose mean is the
difference of the means of the two event series and whose variance comes from the means of small
buckets (the artifact: windows of 100 requests, 10 buckets each, σ = √(bucket size) · sd of
bucket means). Every later iteration refits each gap as a Gaussian mixture chosen by BIC
(1 to 5 components) on the gaps of the previous mapping.

Gaps are in microseconds (float) inside the models, for numerical stability of the fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.model.spans import SpanTable
from tacit.reconstruct.candidates import CandidateSet

MIN_STD_US = 1.0
"""Floor of a gap's standard deviation: timestamps are rarely finer than a microsecond."""
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def slot_ready(spans: SpanTable, cs: CandidateSet) -> np.ndarray:
    """When each slot of each candidate could start (ns): the request's arrival or, when later,
    the end of its predecessor calls in the dependency order (a skipped call passes its own
    ready time on)."""
    g = cs.graph
    n, m = cs.calls.shape
    in_start = spans.start[cs.incoming]
    ready = np.empty((n, m), dtype=np.int64)
    for j in g.order:
        t = in_start.copy()
        for p in g.preds[j]:
            np.maximum(t, _done(spans, cs.calls[:, p], ready[:, p]), out=t)
        ready[:, j] = t
    return ready


def _done(spans: SpanTable, calls: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """When a slot is over: its call's end, or its ready time when skipped."""
    return np.where(calls >= 0, spans.end[np.maximum(calls, 0)], ready)


def candidate_gaps(spans: SpanTable, cs: CandidateSet, ready: np.ndarray) -> np.ndarray:
    """Gaps in µs: a column per slot (call start - :func:`slot_ready`, or - the start or end of
    its anchor's call where the slot has one and the anchor was made:
    :func:`.callgraph._anchors`), then one for last call end -> response; NaN where the call is
    skipped."""
    n, m = cs.calls.shape
    gaps = np.full((n, m + 1), np.nan)
    last = spans.start[cs.incoming]
    for j in range(m):
        calls = cs.calls[:, j]
        made = calls >= 0
        origin = ready[:, j]
        a = cs.graph.anchor(j)
        if a is not None:
            sibling = cs.calls[:, a]
            event = getattr(spans, cs.graph.anchor_event(j))
            origin = np.where(sibling >= 0, event[np.maximum(sibling, 0)], origin)
        gaps[made, j] = (spans.start[calls[made]] - origin[made]) / 1000.0
        last = np.maximum(last, _done(spans, calls, ready[:, j]))
    gaps[:, m] = (spans.end[cs.incoming] - last) / 1000.0
    return gaps


@dataclass
class Gaussian:
    """A normal distribution per window of requests (one window when fitted globally)."""

    mean: np.ndarray
    std: np.ndarray

    def logpdf(self, x: np.ndarray, window: np.ndarray) -> np.ndarray:
        w = np.minimum(window, len(self.mean) - 1)
        z = (x - self.mean[w]) / self.std[w]
        return -0.5 * z * z - np.log(self.std[w]) - _LOG_SQRT_2PI


@dataclass
class Mixture:
    """A one-dimensional Gaussian mixture: weights, means and standard deviations."""

    weight: np.ndarray
    mean: np.ndarray
    std: np.ndarray

    def logpdf(self, x: np.ndarray, window: np.ndarray) -> np.ndarray:
        """Log density at ``x``; one mixture serves every window."""
        return _logsumexp(self._joint(x))

    def _joint(self, x: np.ndarray) -> np.ndarray:
        """log(weight_k) + log N(x; mean_k, std_k), one column per component."""
        z = (x[:, None] - self.mean) / self.std
        return -0.5 * z * z - np.log(self.std) - _LOG_SQRT_2PI + np.log(self.weight)


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=1)
    return top + np.log(np.exp(a - top[:, None]).sum(axis=1))


GapModel = Gaussian | Mixture


def seed_gaussian(
    t1: np.ndarray, t2: np.ndarray, window: int, buckets: int, min_std: float = MIN_STD_US
) -> Gaussian:
    """Seed from two event series of equal length (§4.1): difference of means, bucket variance.

    ``t1`` are the reference events (request arrivals or predecessor ends), ``t2`` the events
    that follow them (call starts or responses), both in ns. Sorting both pairs them up in
    order; per window of ``window`` requests the mean gap is the difference of the means and the
    variance is ``bucket size`` times the sample variance of the per-bucket mean differences.
    """
    t1 = np.sort(t1).astype(np.float64) / 1000.0
    t2 = np.sort(t2).astype(np.float64) / 1000.0
    means, stds = [], []
    for a in range(0, len(t1), window):
        d1, d2 = t1[a : a + window], t2[a : a + window]
        size = max(1, math.ceil(len(d1) / buckets))
        bm = [d2[b : b + size].mean() - d1[b : b + size].mean() for b in range(0, len(d1), size)]
        means.append(d2.mean() - d1.mean())
        sd = math.sqrt(size) * float(np.std(bm, ddof=1)) if len(bm) > 1 else 0.0
        stds.append(sd)
    std = np.maximum(np.nan_to_num(np.array(stds)), min_std)
    return Gaussian(np.array(means), std)


def moment_gaussian(
    values: np.ndarray, weights: np.ndarray, min_std: float = MIN_STD_US
) -> Gaussian:
    """A single Gaussian with the weighted mean and variance of ``values``."""
    ok = ~np.isnan(values)
    v, w = values[ok], weights[ok]
    if w.sum() <= 0:
        return Gaussian(np.zeros(1), np.full(1, min_std))
    mean = np.average(v, weights=w)
    std = math.sqrt(np.average((v - mean) ** 2, weights=w))
    return Gaussian(np.array([mean]), np.array([max(std, min_std)]))


def fit_mixture(
    values: np.ndarray,
    max_components: int,
    max_samples: int,
    seed: int,
    min_std: float = MIN_STD_US,
) -> GapModel | None:
    """The Gaussian mixture with the lowest BIC over 1..max_components components (§4.1).

    Fits by expectation-maximisation on at most ``max_samples`` values (a seeded subsample, to
    bound the cost per iteration); equal values are fitted once, weighted by their count. No
    component is narrower than ``min_std``: on coarse timestamps (see :func:`gap_floor`) a
    narrower one would only model the rounding. Returns None with fewer than two values.
    """
    v = values[~np.isnan(values)]
    if len(v) < 2:
        return None
    if len(v) > max_samples:
        v = np.random.default_rng(seed).choice(v, max_samples, replace=False)
    x, count = np.unique(v, return_counts=True)
    if len(x) < 2:
        return Gaussian(x[:1], np.array([min_std]))
    best, best_bic = None, math.inf
    for k in range(1, min(max_components, len(x)) + 1):
        model, loglik = _em(x, count.astype(np.float64), k, min_std)
        bic = -2.0 * loglik + (3 * k - 1) * math.log(len(v))
        if bic < best_bic:
            best, best_bic = model, bic
    return best


def _em(
    x: np.ndarray, count: np.ndarray, k: int, min_std: float, max_iter: int = 100, tol: float = 1e-3
) -> tuple[Mixture, float]:
    """EM for a k-component mixture of sorted distinct ``x`` with multiplicities ``count``.

    Starts from k groups of equal total count (a one-dimensional k-means seed); stops when the
    mean log-likelihood per value improves by less than ``tol`` (scikit-learn's defaults).
    Returns the mixture and its total log-likelihood.
    """
    weight, mean, std, loglik = _em_kernel(x, count, k, min_std * min_std, max_iter, tol)
    return Mixture(weight, mean, std), loglik


@njit(cache=True)
def _em_kernel(x, count, k, min_var, max_iter, tol):  # pragma: no cover - compiled  # noqa: C901
    """The loop of :func:`_em`, compiled: it runs for every gap of every iteration."""
    m = len(x)
    n = count.sum()
    resp = np.zeros((m, k))
    below = 0.0
    for i in range(m):
        g = int(below * k // n)
        resp[i, min(g, k - 1)] = 1.0
        below += count[i]
    weight = np.empty(k)
    mean = np.empty(k)
    std = np.empty(k)
    joint = np.empty(k)
    norm = np.empty(k)
    inv = np.empty(k)
    loglik = -np.inf
    half_log_2pi = 0.5 * np.log(2 * np.pi)
    for _ in range(max_iter):
        for c in range(k):
            nk = 1e-12
            s1 = 0.0
            for i in range(m):
                w = resp[i, c] * count[i]
                nk += w
                s1 += w * x[i]
            mu = s1 / nk
            s2 = 0.0
            for i in range(m):
                d = x[i] - mu
                s2 += resp[i, c] * count[i] * d * d
            var = s2 / nk
            weight[c] = nk / n
            mean[c] = mu
            std[c] = np.sqrt(var if var > min_var else min_var)
        for c in range(k):
            norm[c] = np.log(weight[c]) - np.log(std[c]) - half_log_2pi
            inv[c] = 1.0 / std[c]
        new = 0.0
        for i in range(m):
            top = -np.inf
            best = 0
            for c in range(k):
                z = (x[i] - mean[c]) * inv[c]
                joint[c] = norm[c] - 0.5 * z * z
                if joint[c] > top:
                    top = joint[c]
                    best = c
            total = 0.0
            for c in range(k):
                # each exponential taken once, and the top one's, exp(0), not at all: the
                # exponentials are most of the kernel's time
                joint[c] = 1.0 if c == best else np.exp(joint[c] - top)
                total += joint[c]
            new += (top + np.log(total)) * count[i]
            for c in range(k):
                resp[i, c] = joint[c] / total
        if new - loglik < tol * n:
            loglik = new
            break
        loglik = new
    return weight, mean, std, loglik


def gap_floor(times: np.ndarray) -> float:
    """Smallest standard deviation (µs) a gap between two of these timestamps (ns) can have.

    Timestamps recorded at a resolution q carry rounding noise of variance q²/12 each, so a
    difference of two carries q²/6: q is the coarsest power of ten (from 1 µs to 1 s) that
    divides every timestamp. The floor is never below :data:`MIN_STD_US`.
    """
    q = 1000
    while q < 10**9 and len(times) and not np.any(times % (q * 10)):
        q *= 10
    return max(MIN_STD_US, q / 1000.0 / math.sqrt(6.0))


def log_densities(
    values: np.ndarray, models: list[GapModel | None], window: np.ndarray
) -> np.ndarray:
    """log f_j(values[:, j]) per row and column; NaN for NaN entries (skipped calls) and
    columns without a model (None: too few values to fit)."""
    out = np.full(values.shape, np.nan)
    for j, model in enumerate(models):
        col = values[:, j]
        present = ~np.isnan(col)
        if model is not None and present.any():
            out[present, j] = model.logpdf(col[present], window[present])
    return out


def log_likelihood(
    values: np.ndarray, models: list[GapModel | None], window: np.ndarray
) -> np.ndarray:
    """Σ over columns j of log f_j(values[:, j]) per row (:func:`log_densities`); NaN entries
    add nothing."""
    return np.nansum(log_densities(values, models, window), axis=1)
