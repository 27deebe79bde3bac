"""Order consistency of candidate mappings: a tacit extension of TraceWeaver's scoring.

Many services make a call in the order its trigger happened: an event loop (the Node.js app), a
worker pool draining a FIFO queue, a lightly loaded server. The trigger of a call is the event
its gap is measured from (:func:`.delays.slot_ready`): the request's arrival, or the end of the
calls it waits for. TraceWeaver (SIGCOMM '24, §4.1) scores each candidate by its own gaps only,
and two overlapping requests whose calls are swapped have the same sum of gaps; under a
multi-modal gap mixture the swapped pair can even score higher. This module gives every call
of every candidate a *rank displacement*:

    d = rank of the call among all calls to its backend
        - calls to that backend that the previous mapping triggers earlier (other requests)
        - earlier calls of the same candidate to that backend

(tied timestamps count one half). When calls keep trigger order the true mapping has d = 0 and
a swap gives d = ±1. The distribution of d is fitted like the gaps, as a BIC-chosen Gaussian
mixture on the previous mapping's chosen candidates, so a service that does not keep order gets
a wide distribution and the term carries little weight. The first iteration has no previous
mapping and scores by gaps alone.
"""

from __future__ import annotations

import math

import numpy as np

from tacit.model.spans import SpanTable
from tacit.reconstruct.candidates import CallPools, CandidateSet

RANK_MIN_STD = 1.0 / math.sqrt(6.0)
"""Floor of the displacement's standard deviation: the rounding noise of a difference of two
integer ranks (variance 2 · 1/12)."""


def _before(sorted_times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many of ``sorted_times`` are earlier than each ``t``, ties counting one half."""
    lo = np.searchsorted(sorted_times, t, "left")
    hi = np.searchsorted(sorted_times, t, "right")
    return lo + 0.5 * (hi - lo)


class ArrivalOrder:
    """Rank displacements of the candidates of one instance (see the module docstring).

    ``ready[s]`` is :func:`.delays.slot_ready` of ``sets[s]``.
    """

    def __init__(
        self,
        spans: SpanTable,
        sets: list[CandidateSet],
        slot_keys: list[list[int]],
        pools: CallPools,
        ready: list[np.ndarray],
    ) -> None:
        self.sets, self.slot_keys, self.ready = sets, slot_keys, ready
        # Static part: the call's rank in its pool minus the candidate's earlier calls there.
        self.rank: list[np.ndarray] = []
        for cs, keys in zip(sets, slot_keys, strict=True):
            rank = np.full(cs.calls.shape, np.nan)
            earlier: dict[int, np.ndarray] = {}
            for j, k in enumerate(keys):
                col = cs.calls[:, j]
                made = col >= 0
                own = earlier.get(k, np.zeros(len(col)))
                if made.any():
                    # The call is in its own pool: it ties with itself, which is not earlier.
                    at = _before(pools.starts[k], spans.start[col[made]]) - 0.5
                    rank[made, j] = at - own[made]
                earlier[k] = own + made
            self.rank.append(rank)

    def displacement(self, chosen: list[np.ndarray]) -> list[np.ndarray]:
        """d for every candidate of every set, given the chosen candidate indices per set."""
        triggers: dict[int, list[np.ndarray]] = {}
        for cs, keys, ready, pick in zip(
            self.sets, self.slot_keys, self.ready, chosen, strict=True
        ):
            for j, k in enumerate(keys):
                triggers.setdefault(k, []).append(ready[pick[cs.calls[pick, j] >= 0], j])
        sorted_triggers = {k: np.sort(np.concatenate(v)) for k, v in triggers.items()}
        out = []
        for cs, keys, ready, rank, pick in zip(
            self.sets, self.slot_keys, self.ready, self.rank, chosen, strict=True
        ):
            # The chosen candidate of each candidate's own request (-1: none), whose triggers
            # are not "other requests".
            own = np.full(len(cs), -1, dtype=np.int64)
            if len(pick):
                by_in = dict(zip(cs.incoming[pick].tolist(), pick.tolist(), strict=True))
                own = np.array([by_in.get(i, -1) for i in cs.incoming.tolist()], dtype=np.int64)
            has_own = own >= 0
            safe = np.maximum(own, 0)
            d = rank.copy()
            for j, k in enumerate(keys):
                t = ready[:, j]
                d[:, j] -= _before(sorted_triggers[k], t)
                for j2, k2 in enumerate(keys):
                    if k2 != k:
                        continue
                    e = ready[safe, j2]
                    counted = has_own & (cs.calls[safe, j2] >= 0)
                    d[:, j] += counted * ((e < t) + 0.5 * (e == t))
            out.append(d)
        return out
