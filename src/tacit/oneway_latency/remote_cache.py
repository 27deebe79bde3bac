"""Reconciliation at a receiving agent, whose sender's cache is on the other side of the
connection (step 4 of :mod:`~tacit.oneway_latency.agent`).

:func:`~tacit.oneway_latency.rda.reconcile` looks the decoded identifiers up in both sides'
caches. The receiver stands in for the sender's with a :class:`RemoteCache`, which answers what
it has been told and records what it was asked and does not know; reconciliation is then rerun
with those answers fetched from the sender, until it needs none it lacks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np

from tacit.oneway_latency.intervals import IntervalCache, IntervalWork
from tacit.oneway_latency.rda import ReconcileResult, reconcile
from tacit.oneway_latency.synopsis import Synopsis
from tacit.runs import contained


class RemoteCache:
    """The sender's cache as far as the receiver has asked: exact for identifiers asked,
    recording the others (``missing``) — which reconciliation is then rerun with."""

    def __init__(self) -> None:
        self.known = IntervalCache.empty()
        self.asked: np.ndarray = np.empty(0, np.uint64)
        self.missing: set[int] = set()

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        query = np.asarray(query, dtype=np.uint64)
        unasked = query[~contained(query, self.asked)]
        self.missing.update(unasked.tolist())
        return self.known.lookup(query)

    def learn(self, ids: np.ndarray, found: np.ndarray, ts: np.ndarray) -> None:
        self.asked = np.union1d(self.asked, ids)
        merged_ids = np.concatenate([self.known.ids, ids[found]])
        merged_ts = np.concatenate([self.known.ts, ts[found]])
        self.known = IntervalCache.build(merged_ids, merged_ts, "sender's answers")
        self.missing.clear()


async def reconcile_remote(
    sender: Synopsis,
    receiver: Synopsis,
    work: IntervalWork[RemoteCache],
    max_peel_rounds: int,
    fetch: Callable[[np.ndarray], Awaitable[tuple[np.ndarray, np.ndarray]]],
) -> ReconcileResult:
    """Reconcile copies of the two synopses on ``work``, whose sender's cache is remote,
    fetching ``(found, timestamps)`` of the identifiers it lacks with ``fetch`` (sorted) and
    rerunning, until a run needs no identifier it lacks."""
    while True:
        result = reconcile(sender.copy(), receiver.copy(), work, max_peel_rounds)
        if not work.sender.missing:
            return result
        ids = np.array(sorted(work.sender.missing), dtype=np.uint64)
        found, ts = await fetch(ids)
        work.sender.learn(ids, found, ts)
