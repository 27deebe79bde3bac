"""Candidate mappings of an incoming span to outgoing spans.

TraceWeaver (SIGCOMM '24, §4.1): a candidate mapping picks one outgoing span for every call slot
of the incoming span's endpoint such that the timing agrees with the call graph: every call lies
within the incoming span, and a call starts only after its predecessors in the dependency order
have ended. Calls of the same instance share one clock, so the constraints are exact. With
dynamism (§4.2) an optional slot may be skipped (a cache hit makes no call); the number of skips a
batch may use is bounded later by the assignment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.model.spans import NONE, SpanTable, StringPool
from tacit.reconstruct.callgraph import EndpointGraph
from tacit.runs import run_starts

SKIP = -2
"""Marks a skipped slot in a candidate (the request made no such call)."""


@dataclass
class CandidateSet:
    """All candidates of the incoming spans of one endpoint at one instance.

    ``incoming[c]`` is the row of candidate ``c``'s incoming span; ``calls[c, j]`` the row of the
    outgoing span in slot ``j`` (:data:`SKIP` when skipped). ``truncated`` counts incoming spans
    whose enumeration stopped at the cap.
    """

    graph: EndpointGraph
    incoming: np.ndarray
    calls: np.ndarray
    truncated: int = 0

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
            for k, r in zip(np.split(keys, cut), np.split(rows, cut), strict=True)
            if len(k)
        }
        self.starts = {k: spans.start[r] for k, r in self.pools.items()}

    def key(self, service: str, endpoint: str) -> int:
        return callee_key(self.spans.strings, service, endpoint)

    def within(self, key: int, lo: int, hi: int) -> np.ndarray:
        """Rows of calls to ``key`` that start and end inside [lo, hi]."""
        rows = self.pools.get(key)
        if rows is None:
            return np.empty(0, np.int64)
        st = self.starts[key]
        a, b = np.searchsorted(st, lo, "left"), np.searchsorted(st, hi, "right")
        rows = rows[a:b]
        return rows[self.spans.end[rows] <= hi]


def enumerate_candidates(
    spans: SpanTable,
    incoming: np.ndarray,
    graph: EndpointGraph,
    pools: CallPools,
    *,
    allow_skip: np.ndarray,
    max_candidates: int,
) -> CandidateSet:
    """Every timing-consistent mapping for each incoming span of ``graph``'s endpoint.

    ``allow_skip[j]`` says whether slot ``j`` may be left empty. Same-callee slots that may run
    in parallel take their spans in row order, so that no mapping is listed twice.
    """
    order = graph.order
    keys = [pools.key(*graph.slots[j].callee) for j in range(len(graph.slots))]
    walk = _Walk(spans, graph, keys, allow_skip, max_candidates)
    for r in incoming:
        walk.run(int(r), [pools.within(k, int(spans.start[r]), int(spans.end[r])) for k in keys])
    n_slots = len(order)
    out_in, out_calls, truncated = walk.found_in, walk.found_calls, walk.truncated
    calls = np.array(out_calls, dtype=np.int64).reshape(len(out_calls), n_slots)
    return CandidateSet(graph, np.array(out_in, dtype=np.int64), calls, truncated)


class _Walk:
    """Depth-first search over slots in topological order, one incoming span at a time."""

    def __init__(
        self,
        spans: SpanTable,
        graph: EndpointGraph,
        keys: list[int],
        allow_skip: np.ndarray,
        max_candidates: int,
    ) -> None:
        self.start, self.end = spans.start, spans.end
        self.order = graph.order
        self.preds = graph.preds
        self.allow_skip = allow_skip
        self.max_candidates = max_candidates
        # Earlier slots calling the same backend, and whether they are ordered before this one.
        self.twins = [
            [i for i in self.order[:pos] if keys[i] == keys[j]] for pos, j in enumerate(self.order)
        ]
        self.found_in: list[int] = []
        self.found_calls: list[list[int]] = []
        self.truncated = 0

    def run(self, row: int, eligible: list[np.ndarray]) -> None:
        n = len(self.order)
        self.row, self.eligible = row, eligible
        self.chosen = [NONE] * n
        self.ready = [int(self.start[row])] * n
        self.count = 0
        if not self._dfs(0):
            self.truncated += 1

    def _dfs(self, pos: int) -> bool:
        """Extend the partial mapping at slot ``order[pos]``; False once the cap is reached."""
        chosen, ready = self.chosen, self.ready
        if pos == len(self.order):
            self.found_in.append(self.row)
            self.found_calls.append(list(chosen))
            self.count += 1
            return self.count < self.max_candidates
        j = self.order[pos]
        t = max((ready[p] for p in self.preds[j]), default=int(self.start[self.row]))
        twins = [chosen[i] for i in self.twins[pos] if chosen[i] >= 0]
        unordered_twin = any(i not in self.preds[j] for i in self.twins[pos])
        floor = max(twins, default=-1)
        for o in self.eligible[j]:
            if self.start[o] < t or o in twins:
                continue
            if unordered_twin and o < floor:
                continue  # parallel twins: row order breaks the symmetry
            chosen[j] = int(o)
            ready[j] = int(self.end[o])
            if not self._dfs(pos + 1):
                return False
        if self.allow_skip[j]:
            chosen[j] = SKIP
            ready[j] = t
            if not self._dfs(pos + 1):
                return False
        chosen[j] = NONE
        return True
