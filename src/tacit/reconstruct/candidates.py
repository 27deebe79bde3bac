"""Candidate mappings of an incoming span to outgoing spans, and the pools they draw from.

TraceWeaver (SIGCOMM '24, §4.1): a candidate mapping picks one outgoing span for every call slot
of a call path such that the timing agrees with it: every call lies within the incoming span
(within the slot's learned tolerances), and a call starts only after its predecessors in the
dependency order have ended. Calls of the same instance share one clock, so the constraints are
exact. With dynamism (§4.2) an optional slot may be skipped (a cache hit makes no call); the
number of skips a batch may use is bounded later by the assignment. :mod:`.beam` builds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.model.spans import SpanTable, StringPool
from tacit.reconstruct.callgraph import CallPath
from tacit.runs import run_starts, split_at

SKIP = -2
"""Marks a skipped slot in a candidate (the request made no such call)."""


@dataclass
class CandidateSet:
    """Candidates of incoming spans along one call path at one instance.

    ``incoming[c]`` is the row of candidate ``c``'s incoming span; ``calls[c, j]`` the row of the
    outgoing span in slot ``j`` of ``graph`` (:data:`SKIP` when skipped).
    """

    graph: CallPath
    incoming: np.ndarray
    calls: np.ndarray

    def __len__(self) -> int:
        return len(self.incoming)


def call_keys(spans: SpanTable, rows: np.ndarray) -> np.ndarray:
    """The callee (peer service, endpoint) of each outgoing span at ``rows``, as one int64."""
    return (spans.peer[rows].astype(np.int64) << 32) | spans.endpoint[rows].astype(np.int64)


def callee_key(strings: StringPool, service: str, endpoint: str) -> int:
    """The :func:`call_keys` value of calls to ``service``'s ``endpoint``."""
    return (strings.find(service) << 32) | strings.find(endpoint)


class CallPools:
    """Outgoing spans of one instance grouped by callee (service, endpoint), sorted by start."""

    def __init__(self, spans: SpanTable, rows: np.ndarray) -> None:
        self.spans = spans
        keys = call_keys(spans, rows)
        order = np.lexsort((spans.start[rows], keys))
        rows, keys = rows[order], keys[order]
        cut = run_starts(keys)[1:]
        self.pools: dict[int, np.ndarray] = {
            int(k[0]): r
            for k, r in zip(split_at(keys, cut), split_at(rows, cut), strict=True)
            if len(k)
        }
        self.starts = {k: spans.start[r] for k, r in self.pools.items()}

    def key(self, service: str, endpoint: str) -> int:
        return callee_key(self.spans.strings, service, endpoint)
