"""One agent's packets grouped by measurement interval as they arrive from its capture, closed
into :class:`~tacit.oneway_latency.intervals.IntervalCache` objects once the capture clock has
passed their end (step 1 of the agent, :mod:`~tacit.oneway_latency.agent`)."""

from __future__ import annotations

import numpy as np

from tacit.model.packets import NO_TIME
from tacit.oneway_latency.intervals import IntervalCache, IntervalParams
from tacit.oneway_latency.rda import RDAParams
from tacit.runs import distinct


class IntervalBook:
    """One side's packets grouped by interval, closed into caches as the clock passes.

    An interval closes once the capture clock is ``grace_ns`` past its end; its cache is
    flow-hash sampled as ``rda`` says, and a packet identifier seen twice in it is kept once
    (the first time) and counted in :attr:`duplicates`. Every packet added is counted:
    ``packets`` in all, and those not kept by reason (``no_timestamp``, ``before_start`` of the
    first interval, ``after_close`` of theirs)."""

    def __init__(self, intervals: IntervalParams, rda: RDAParams, grace_ns: int) -> None:
        self.intervals = intervals
        self.rda = rda
        self.grace_ns = grace_ns
        self._open: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.closed_below: int | None = None
        """Every interval below this is closed (None: none yet)."""
        self.counts = {"packets": 0, "no_timestamp": 0, "before_start": 0, "after_close": 0}
        self.duplicates = 0

    def add(self, ident: np.ndarray, stamp: np.ndarray) -> None:
        self.counts["packets"] += len(ident)
        has_time = stamp != NO_TIME
        self.counts["no_timestamp"] += int(np.count_nonzero(~has_time))
        index = self.intervals.index(stamp)
        self.counts["before_start"] += int(np.count_nonzero(has_time & (index < 0)))
        keep = has_time & (index >= 0)
        if self.closed_below is not None:
            late = keep & (index < self.closed_below)
            self.counts["after_close"] += int(np.count_nonzero(late))
            keep &= ~late
        index, ident, stamp = index[keep], ident[keep], stamp[keep]
        for i in distinct(index).tolist():
            mine = index == i
            self._open.setdefault(i, []).append((ident[mine], stamp[mine]))

    def close(self, clock_ns: int | None) -> list[tuple[int, IntervalCache, int]]:
        """Close every open interval whose end is ``grace_ns`` before ``clock_ns`` (all, when
        None): ``(index, cache, packets before sampling)`` in order."""
        if clock_ns is None:
            limit = max(self._open, default=-1) + 1
        else:
            limit = max(0, int(self.intervals.index(np.asarray(clock_ns - self.grace_ns))))
        if self.closed_below is not None:
            limit = max(limit, self.closed_below)
        out = []
        for i in sorted(j for j in self._open if j < limit):
            parts = self._open.pop(i)
            ident = np.concatenate([p[0] for p in parts])
            stamp = np.concatenate([p[1] for p in parts])
            ident, first = np.unique(ident, return_index=True)
            self.duplicates += len(stamp) - len(first)
            cache = IntervalCache(ident, stamp[first])
            out.append((i, cache.sampled(self.rda.sampling_rate, self.rda.seed), len(first)))
        self.closed_below = limit
        return out
