"""Candidate search for unit tests: one endpoint, one path, exhaustive unless told otherwise."""

from __future__ import annotations

import math

import numpy as np

from tacit.model.spans import CLIENT, SERVER, SpanTable
from tacit.reconstruct.beam import PathSpec, model_table, search
from tacit.reconstruct.callgraph import CallPath
from tacit.reconstruct.candidates import CallPools
from tacit.reconstruct.delays import Gaussian

WIDE = 4096
"""A beam and branch limit no test instance reaches: the search is exhaustive."""


def flat_models(path: CallPath) -> list:
    """Gap models that prefer no mapping over another (one per slot and the response)."""
    return [Gaussian(np.zeros(1), np.full(1, 1e9))] * (len(path.slots) + 1)


def spec(
    spans: SpanTable, path: CallPath, pools: CallPools, skip: list[float]
) -> tuple[PathSpec, list[int]]:
    """The search's view of ``path`` as the one path of endpoint 0, and its pool keys."""
    keys = sorted({pools.key(*sl.callee) for sl in path.slots})
    pool_id = [keys.index(pools.key(*sl.callee)) for sl in path.slots]
    n = len(path.slots)
    skip_logp = np.array(skip, dtype=np.float64)
    made = np.where(np.isfinite(skip_logp), np.log1p(-np.exp(np.minimum(skip_logp, 0))), 0.0)
    return PathSpec(
        0,
        path,
        np.array(pool_id),
        np.arange(n),
        n,
        skip_logp,
        made,
        math.log(0.5),
    ), keys


def run_search(spans, path, models=None, *, skip=None, width=WIDE, branch=WIDE, keep=1000):
    """Candidates (a CandidateSet) and their scores for every incoming span of ``spans``."""
    models = models or flat_models(path)
    incoming = np.flatnonzero(spans.kind == SERVER)
    pools = CallPools(spans, np.flatnonzero(spans.kind == CLIENT))
    sp, keys = spec(spans, path, pools, skip or [-np.inf] * len(path.slots))
    res = search(
        spans,
        incoming,
        np.zeros(len(incoming), np.int64),
        np.zeros(len(incoming), np.int64),
        [sp],
        pools,
        keys,
        model_table(models),
        beam_width=width,
        max_branch=branch,
        keep=keep,
    )
    (cs,) = res.sets
    (scores,) = res.scores
    return cs, scores
