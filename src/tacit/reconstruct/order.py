"""Order consistency of candidate mappings: a tacit extension of TraceWeaver's scoring.

Many services make a call in the order its trigger happened: an event loop (the Node.js app), a
worker pool draining a FIFO queue, a lightly loaded server. The trigger of a call is the event
its gap is measured from (:func:`.delays.slot_ready`): the request's arrival, or the end of the
calls it waits for. TraceWeaver (SIGCOMM '24, §4.1) scores each candidate by its own gaps only,
and two overlapping requests whose calls are swapped have the same sum of gaps; under a
multi-modal gap mixture the swapped pair can even score higher. This module gives every call
of every candidate a *rank displacement* against a previous mapping of the same instance:

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
    """Rank displacements against a previous mapping (see the module docstring).

    :meth:`observe` records the mapping (candidate sets, their :func:`.delays.slot_ready`, and
    the chosen candidate indices per set); :meth:`displacement` then scores any candidate sets.
    """

    def __init__(self, pools: CallPools) -> None:
        self.pools = pools
        self.triggers: dict[int, np.ndarray] = {}
        # Per key: the previous mapping's triggers as (incoming row, time), sorted.
        self.own: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def observe(
        self, sets: list[CandidateSet], ready: list[np.ndarray], chosen: list[np.ndarray]
    ) -> None:
        triggers: dict[int, list[np.ndarray]] = {}
        rows: dict[int, list[np.ndarray]] = {}
        for cs, rd, pick in zip(sets, ready, chosen, strict=True):
            for j, k in enumerate(self._keys(cs)):
                made = pick[cs.calls[pick, j] >= 0]
                triggers.setdefault(k, []).append(rd[made, j])
                rows.setdefault(k, []).append(cs.incoming[made])
        self.triggers, self.own = {}, {}
        for k, parts in triggers.items():
            t, r = np.concatenate(parts), np.concatenate(rows[k])
            self.triggers[k] = np.sort(t)
            by = np.lexsort((t, r))
            self.own[k] = (r[by], t[by])

    def _keys(self, cs: CandidateSet) -> list[int]:
        return [self.pools.key(*sl.callee) for sl in cs.graph.slots]

    def displacements(self, sets: list[CandidateSet], ready: list[np.ndarray]) -> list[np.ndarray]:
        """d for every candidate (rows) and slot (columns) of each set; NaN for skipped slots.
        All sets at once, one backend at a time."""
        spans = self.pools.spans
        out = [np.full(cs.calls.shape, np.nan) for cs in sets]
        parts: dict[int, list[tuple]] = {}
        for s, (cs, rd) in enumerate(zip(sets, ready, strict=True)):
            earlier: dict[int, np.ndarray] = {}
            for j, k in enumerate(self._keys(cs)):
                made = cs.calls[:, j] >= 0
                own_calls = earlier.get(k, np.zeros(len(made)))
                rows = np.flatnonzero(made)
                if len(rows):
                    parts.setdefault(k, []).append(
                        (
                            s,
                            rows,
                            j,
                            cs.calls[rows, j],
                            rd[rows, j],
                            cs.incoming[rows],
                            own_calls[rows],
                        )
                    )
                earlier[k] = own_calls + made
        for k, entries in parts.items():
            calls = np.concatenate([e[3] for e in entries])
            t = np.concatenate([e[4] for e in entries])
            incoming = np.concatenate([e[5] for e in entries])
            # The call is in its own pool: it ties with itself, which is not earlier.
            rank = _before(self.pools.starts[k], spans.start[calls]) - 0.5
            others = _before(self.triggers.get(k, np.empty(0)), t)
            # The previous mapping's triggers of the candidate's own request are not others.
            d = rank - others + self._own_before(k, incoming, t)
            at = 0
            for s, rows, j, _, _, _, own_calls in entries:
                out[s][rows, j] = d[at : at + len(rows)] - own_calls
                at += len(rows)
        return out

    def _own_before(self, key: int, incoming: np.ndarray, t: np.ndarray) -> np.ndarray:
        """How many of each incoming span's own previous triggers for ``key`` precede ``t``
        (ties one half); a request has few calls to one backend, so its run is short."""
        rows, times = self.own.get(key, (np.empty(0, np.int64), np.empty(0, np.int64)))
        lo = np.searchsorted(rows, incoming, "left")
        hi = np.searchsorted(rows, incoming, "right")
        out = np.zeros(len(incoming))
        for offset in range(int((hi - lo).max(initial=0))):
            at = lo + offset
            inside = at < hi
            other = times[np.minimum(at, len(times) - 1)]
            out += inside * ((other < t) + 0.5 * (other == t))
        return out
