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
from sklearn.mixture import GaussianMixture

from tacit.model.spans import SpanTable
from tacit.reconstruct.candidates import CandidateSet

MIN_STD_US = 1.0
"""Floor of a gap's standard deviation: timestamps are rarely finer than a microsecond."""
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def candidate_gaps(spans: SpanTable, cs: CandidateSet) -> np.ndarray:
    """Gaps in µs: a column per slot, then one for last call end -> response (NaN: skipped)."""
    g = cs.graph
    n, m = cs.calls.shape
    in_start = spans.start[cs.incoming]
    ready = np.empty((n, m), dtype=np.int64)
    gaps = np.full((n, m + 1), np.nan)
    for j in g.order:
        t = in_start.copy()
        for p in g.preds[j]:
            np.maximum(t, ready[:, p], out=t)
        rows = cs.calls[:, j]
        present = rows >= 0
        safe = np.where(present, rows, 0)
        gaps[:, j] = np.where(present, (spans.start[safe] - t) / 1000.0, np.nan)
        ready[:, j] = np.where(present, spans.end[safe], t)
    last = ready.max(axis=1) if m else in_start
    gaps[:, m] = (spans.end[cs.incoming] - np.maximum(last, in_start)) / 1000.0
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
    """A Gaussian mixture fitted with scikit-learn, its size chosen by BIC."""

    model: GaussianMixture

    def logpdf(self, x: np.ndarray, window: np.ndarray) -> np.ndarray:
        return self.model.score_samples(x.reshape(-1, 1))


GapModel = Gaussian | Mixture


def seed_gaussian(t1: np.ndarray, t2: np.ndarray, window: int, buckets: int) -> Gaussian:
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
    std = np.maximum(np.nan_to_num(np.array(stds)), MIN_STD_US)
    return Gaussian(np.array(means), std)


def moment_gaussian(values: np.ndarray, weights: np.ndarray) -> Gaussian:
    """A single Gaussian with the weighted mean and variance of ``values``."""
    ok = ~np.isnan(values)
    v, w = values[ok], weights[ok]
    if w.sum() <= 0:
        return Gaussian(np.zeros(1), np.full(1, MIN_STD_US))
    mean = np.average(v, weights=w)
    std = math.sqrt(np.average((v - mean) ** 2, weights=w))
    return Gaussian(np.array([mean]), np.array([max(std, MIN_STD_US)]))


def fit_mixture(
    values: np.ndarray, max_components: int, max_samples: int, seed: int
) -> GapModel | None:
    """The Gaussian mixture with the lowest BIC over 1..max_components components.

    Fits on at most ``max_samples`` values (a seeded subsample) to bound the cost per iteration.
    Returns None when there are fewer than two values to fit.
    """
    v = values[~np.isnan(values)]
    if len(v) < 2:
        return None
    if len(v) > max_samples:
        v = np.random.default_rng(seed).choice(v, max_samples, replace=False)
    distinct = len(np.unique(v))
    if distinct < 2:
        return Gaussian(np.array([v[0]]), np.array([MIN_STD_US]))
    x = v.reshape(-1, 1)
    best, best_bic = None, math.inf
    for k in range(1, min(max_components, distinct) + 1):
        gm = GaussianMixture(k, covariance_type="diag", reg_covar=MIN_STD_US**2, random_state=seed)
        gm.fit(x)
        bic = gm.bic(x)
        if bic < best_bic:
            best, best_bic = gm, bic
    return Mixture(best)


def score_candidates(
    gaps: np.ndarray, models: list[GapModel], window: np.ndarray, slot_prob: np.ndarray
) -> np.ndarray:
    """Log-likelihood of every candidate: Σ log f(gap) over present slots and the response gap,
    plus log p for each call made and log(1 - p) for each optional call skipped.

    The call-probability terms make candidates with different numbers of calls comparable (the
    artifact ignores skipped slots, which favours skipping); p comes from the call graph.
    """
    total = np.zeros(len(gaps))
    p = np.clip(slot_prob, 1e-3, 1 - 1e-3)
    for j, model in enumerate(models):
        col = gaps[:, j]
        present = ~np.isnan(col)
        if j < len(slot_prob):
            total += np.where(
                present, math.log(p[j]) if slot_prob[j] < 1 else 0.0, math.log(1 - p[j])
            )
        if present.any():
            total[present] += model.logpdf(col[present], window[present])
    return total
