"""Fault and version injection into real traces, with every causally later event shifted.

The experiments of TraceWeaver (SIGCOMM '24, §6.4.1 and §6.4.2) take real traces, make one
service slower (a delay added to its server spans in a random fraction of requests) or faster (a
new version B with lower latency), and ask whether diagnosis finds the change. Changing one span
is not enough: its caller receives the response later, the caller's later calls start later,
and so on up to the root. This module propagates a change along the trace tree (``parent``
rows, as :func:`tacit.model.roles.infer_roles` leaves them: a client span's parent is the server
span that made the call, a server span's parent is the caller's client span) under the
happens-before rule YTrace uses for sibling calls (Kanuparthy et al., "YTrace: End-to-end
Performance Diagnosis in Large Cloud and Content Providers", §4, execution graph):

* a call that started after some of its siblings returned waits for the last of them, so it
  moves (with its whole subtree) by as much as the latest return before it moved;
* calls already in flight when the changed call returned are concurrent and do not move;
* a span's remaining work after its last child returned is fixed, so its end moves by as much
  as its last return moved.

The change itself is either a delay at the end of a span (the server works ``delay`` longer
before it responds) or a scaling of the span's self time (the time it is not waiting on a
child: a faster or slower version of the service's own code; its callees are unchanged).
"""

from __future__ import annotations

import numpy as np

from tacit.diagnosis.execution_graph import trace_roots
from tacit.errors import ConfigError
from tacit.model.spans import NONE, SERVER, SpanTable
from tacit.runs import contained, distinct, run_positions


def delay_spans(spans: SpanTable, rows: np.ndarray, delay_ns: int) -> SpanTable:
    """A copy of ``spans`` where each span at ``rows`` responds ``delay_ns`` later, and every
    causally later event of its trace moves accordingly (see the module docstring)."""
    out = spans.take(np.arange(len(spans)))
    tree = _Tree(out)
    for r in np.asarray(rows, dtype=np.int64):
        tree.change(int(r), {}, int(delay_ns))
    return out


def scale_self_time(spans: SpanTable, rows: np.ndarray, factor: float | np.ndarray) -> SpanTable:
    """A copy of ``spans`` where the self time of each span at ``rows`` (its duration minus the
    union of its children) is multiplied by ``factor`` (one for all, or one per row): every gap
    between its children shrinks or grows, its children keep their durations and move, and
    later events move with it."""
    rows = np.asarray(rows, dtype=np.int64)
    factors = np.broadcast_to(np.asarray(factor, dtype=np.float64), rows.shape)
    if (factors < 0).any():
        raise ConfigError(f"a latency scale factor cannot be negative: {factors.min()}")
    out = spans.take(np.arange(len(spans)))
    tree = _Tree(out)
    for r, f in zip(rows.tolist(), factors.tolist(), strict=True):
        kids = tree.children(r)
        order = kids[np.argsort(out.start[kids], kind="stable")]
        shifts: dict[int, int] = {}
        uncovered = 0  # self time before the current point
        covered_to = int(out.start[r])
        for c in order:
            s, e = int(out.start[c]), int(out.end[c])
            uncovered += max(0, s - covered_to)
            shifts[int(c)] = _shift(f, uncovered)
            covered_to = max(covered_to, e)
        uncovered += max(0, int(out.end[r]) - covered_to)
        tree.change(r, shifts, _shift(f, uncovered))
    return out


MAX_SHIFT_NS = 2**62
"""The largest move of a span's events: it keeps every time inside int64 nanoseconds."""


def _shift(factor: float, self_time: int) -> int:
    """How far ``self_time`` scaled by ``factor`` moves what follows it (ns)."""
    shift = (factor - 1) * self_time
    if not abs(shift) <= MAX_SHIFT_NS:
        raise ConfigError(
            f"a latency scale factor of {factor:g} moves spans by {shift:g} ns, beyond "
            f"int64 nanoseconds"
        )
    return round(shift)


def pick_requests(spans: SpanTable, service: str, share: float, seed: int) -> np.ndarray:
    """The server spans of ``service`` in a random ``share`` of the traces that call it (seeded),
    as rows: the requests a fault or a version B is routed to."""
    if not 0 <= share <= 1:
        raise ConfigError(f"share must be between 0 and 1, not {share}")
    rows = np.flatnonzero((spans.service == spans.strings.find(service)) & (spans.kind == SERVER))
    if len(rows) == 0:
        raise ConfigError(f"no server spans of service {service!r} in the traces")
    traces = distinct(spans.trace[rows])
    rng = np.random.default_rng(seed)
    chosen = rng.choice(traces, round(share * len(traces)), replace=False)
    return rows[contained(spans.trace[rows], chosen)]


def resample_traces(spans: SpanTable, n: int, seed: int) -> SpanTable:
    """A bootstrap workload: ``n`` whole traces drawn with replacement from ``spans`` (a trace is
    a root's subtree), each copy with a fresh trace id (``boot<i>``) and its own start time;
    arrivals are a Poisson process at the source's mean request rate (its traces over the time
    from its first start to its last end), so reconstruction sees as much concurrency as in the
    source. ``record`` still names each span's source record. A cycle of parent links raises
    :class:`tacit.errors.InputError` naming the trace."""
    if n < 1:
        raise ConfigError(f"a resampled workload needs at least one trace, not {n}")
    _, root, _, _ = trace_roots(spans)
    heads = np.flatnonzero(spans.parent == NONE)
    if len(heads) == 0:
        raise ConfigError("no traces to resample")
    order = np.argsort(root, kind="stable")  # the rows of each trace, contiguous
    first = np.searchsorted(root[order], heads)
    size = np.searchsorted(root[order], heads, side="right") - first
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(heads), n)
    copy = np.repeat(np.arange(n), size[pick])
    rows = order[
        np.repeat(first[pick] - np.cumsum(size[pick]) + size[pick], size[pick])
        + np.arange(len(copy))
    ]
    out = spans.take(rows)  # parents outside a copy's first occurrence are fixed below
    base = np.cumsum(size[pick]) - size[pick]  # first new row of each copy
    pos = np.empty(len(spans), dtype=np.int64)  # position of each source row in its trace
    pos[order] = run_positions(root[order])
    has = spans.parent[rows] != NONE
    out.parent[:] = NONE
    out.parent[has] = base[copy[has]] + pos[spans.parent[rows[has]]]
    linked = spans.link[rows] != NONE
    same = linked & (root[np.where(linked, spans.link[rows], 0)] == root[rows])
    out.link[:] = NONE
    out.link[same] = base[copy[same]] + pos[spans.link[rows[same]]]
    rate = len(heads) / max(int(spans.end.max() - spans.start.min()), 1)
    arrival = np.cumsum(rng.exponential(1 / rate, n)).astype(np.int64)
    shift = arrival - spans.start[heads[pick]] + spans.start.min()
    out.start += shift[copy]
    out.end += shift[copy]
    ids = np.array([out.strings.code(f"boot{i}") for i in range(n)], dtype=out.trace.dtype)
    out.trace[:] = ids[copy]
    return out


class _Tree:
    """Children lists over ``parent`` rows, and the propagation of one change to the root."""

    def __init__(self, spans: SpanTable) -> None:
        self.spans = spans
        has = np.flatnonzero(spans.parent != NONE)
        order = has[np.argsort(spans.parent[has], kind="stable")]
        self.kids = order
        self.first = np.searchsorted(spans.parent[order], np.arange(len(spans) + 1))

    def children(self, row: int) -> np.ndarray:
        return self.kids[self.first[row] : self.first[row + 1]]

    def subtree(self, row: int) -> list[int]:
        out, todo = [], [row]
        while todo:
            r = todo.pop()
            out.append(r)
            todo.extend(self.children(r).tolist())
        return out

    def move(self, row: int, by: int) -> None:
        if by:
            rows = self.subtree(row)
            self.spans.start[rows] += by
            self.spans.end[rows] += by

    def change(self, row: int, child_shift: dict[int, int], end_shift: int) -> None:
        """Move ``row``'s children by ``child_shift`` and its end by ``end_shift``, then let the
        change ripple up to the root."""
        for c, by in child_shift.items():
            self.move(c, by)
        self.spans.end[row] += end_shift
        moved = {row: end_shift}
        while end_shift and self.spans.parent[row] != NONE:
            p = int(self.spans.parent[row])
            end_shift = self._reschedule(p, moved)
            row, moved = p, {p: end_shift}

    def _reschedule(self, parent: int, moved: dict[int, int]) -> int:
        """Re-time ``parent``'s children after some of their ends moved (``moved``: how much,
        already applied); returns how much ``parent``'s end moves (and moves it)."""
        s = self.spans
        kids = self.children(parent)
        kids = kids[np.argsort(s.start[kids], kind="stable")]
        old_end = {int(c): int(s.end[c]) - moved.get(int(c), 0) for c in kids}
        for c in kids:
            c = int(c)
            if c in moved:
                continue
            before = [k for k in old_end if k != c and old_end[k] <= s.start[c]]
            if not before:
                continue
            old_ready = max(old_end[k] for k in before)
            new_ready = max(int(s.end[k]) for k in before)
            if new_ready != old_ready:
                self.move(c, new_ready - old_ready)
        shift = max(int(s.end[k]) for k in old_end) - max(old_end.values())
        s.end[parent] += shift
        return shift
