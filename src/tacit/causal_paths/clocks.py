"""Pairwise clock offsets under the symmetric-delay assumption (WAP5, WWW '06, §5.2).

A message from host H1 to H2 with both timestamps shows ``recv − send = delay + θ2 − θ1``, where
θ is how far a host's clock is off. If the network delay is the same in both directions, the
forward and backward measurements of a pair give ``θ2 − θ1 = (f − b) / 2``. WAP5 removes these
offsets before reporting one-way network delays. tacit summarizes each direction by its
minimum (the sample least inflated by queueing, as NTP's clock filter does; ``statistic``
chooses the median or mean instead) and, where hosts form a connected graph of such pairs,
makes the pairwise estimates consistent by weighted least squares, with one reference host per
connected group at offset 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.linalg import spsolve

from tacit.model.messages import MISSING, MessageTable
from tacit.runs import run_bounds

Statistic = Literal["min", "median", "mean"]


@dataclass
class ClockOffsets:
    """Estimated clock offset (ns) of every host that exchanged messages both ways with a traced
    peer, relative to the reference host of its group (offset 0)."""

    offset: dict[str, float]
    reference: dict[str, str]
    """Each host's reference host."""
    pairs: int
    """Host pairs with messages in both directions (the equations)."""

    def of_hosts(self, messages: MessageTable, column: str) -> np.ndarray:
        """Per message: the offset of the host in ``column`` (``src_host``/``dst_host``), 0
        where unknown."""
        table = np.zeros(len(messages.strings) + 1)  # the last slot is for host -1
        for h, off in self.offset.items():
            code = messages.strings.find(h)
            if code >= 0:
                table[code] = off
        return table[getattr(messages, column)]


def estimate_offsets(
    messages: MessageTable, statistic: Statistic = "min", reference: str | None = None
) -> ClockOffsets:
    """Estimate host clock offsets from two-way traffic; see the module docstring.

    ``reference`` names the host held at 0 in its group (default: the first by name).
    """
    both = (messages.send != MISSING) & (messages.recv != MISSING)
    both &= messages.src_host != messages.dst_host
    a = messages.src_host[both].astype(np.int64)
    b = messages.dst_host[both].astype(np.int64)
    d = (messages.recv[both] - messages.send[both]).astype(np.float64)
    if not len(d):
        return ClockOffsets({}, {}, 0)
    summary = {"min": _group_min, "median": _group_median, "mean": _group_mean}[statistic]
    (ka, kb), forward, n_f = summary(a, b, d)
    lookup = {(x, y): (v, c) for x, y, v, c in zip(ka, kb, forward, n_f, strict=True)}
    names = messages.strings.values
    equations = []  # (host1, host2, θ2 − θ1, weight)
    for (x, y), (f, cf) in lookup.items():
        if x < y and (y, x) in lookup:
            bk, cb = lookup[(y, x)]
            equations.append((names[x], names[y], (f - bk) / 2, min(cf, cb)))
    return _solve(equations, reference)


def _grouped(a: np.ndarray, b: np.ndarray, d: np.ndarray):
    order = np.lexsort((d, b, a))
    a, b, d = a[order], b[order], d[order]
    start, count = run_bounds(a, b)
    return (a[start].tolist(), b[start].tolist()), d, start, count


def _group_min(a, b, d):
    keys, d, start, count = _grouped(a, b, d)
    return keys, d[start].tolist(), count.tolist()


def _group_median(a, b, d):
    keys, d, start, count = _grouped(a, b, d)
    lo, hi = start + (count - 1) // 2, start + count // 2
    return keys, ((d[lo] + d[hi]) / 2).tolist(), count.tolist()


def _group_mean(a, b, d):
    keys, d, start, count = _grouped(a, b, d)
    return keys, (np.add.reduceat(d, start) / count).tolist() if len(d) else [], count.tolist()


def _least_squares(rows: list[tuple[str, str, float, int]], index: dict[str, int]) -> np.ndarray:
    """θ (per host of ``index``) minimising Σ w · (θ_y − θ_x − v)² over ``rows`` ``(x, y, v,
    w)``, the group's reference (not in ``index``) at 0. Its normal equations are the weighted
    Laplacian of the hosts' message graph without the reference's row and column: sparse (a
    host pair that exchanged messages is one entry), positive definite for a connected group,
    and solved directly, so memory follows the pairs, not pairs × hosts as a dense system
    would."""
    n = len(index)
    if not n:
        return np.empty(0)
    i: list[int] = []
    j: list[int] = []
    val: list[float] = []
    b = np.zeros(n)
    for x, y, v, w in rows:
        ends = [(index[h], sign) for h, sign in ((x, -1.0), (y, 1.0)) if h in index]
        for p, sp in ends:
            b[p] += sp * w * v
            for q, sq in ends:
                i.append(p)
                j.append(q)
                val.append(sp * sq * w)
    laplacian = coo_matrix((val, (i, j)), shape=(n, n)).tocsc()
    return np.atleast_1d(spsolve(laplacian, b))


def _solve(equations: list[tuple[str, str, float, int]], reference: str | None) -> ClockOffsets:
    """Weighted least squares for θ per connected group of hosts, the reference fixed at 0."""
    hosts = sorted({h for e in equations for h in e[:2]})
    parent = {h: h for h in hosts}

    def find(h: str) -> str:
        while parent[h] != h:
            parent[h] = parent[parent[h]]
            h = parent[h]
        return h

    for x, y, _, _ in equations:
        parent[find(x)] = find(y)
    groups: dict[str, list[str]] = {}
    for h in hosts:
        groups.setdefault(find(h), []).append(h)
    rows: dict[str, list[tuple[str, str, float, int]]] = {}
    for e in equations:
        rows.setdefault(find(e[0]), []).append(e)
    offset: dict[str, float] = {}
    ref_of: dict[str, str] = {}
    for root, members in groups.items():
        ref = reference if reference in members else members[0]
        free = [h for h in members if h != ref]
        index = {h: i for i, h in enumerate(free)}
        theta = _least_squares(rows[root], index)
        offset[ref] = 0.0
        ref_of[ref] = ref
        for h, i in index.items():
            offset[h] = float(theta[i])
            ref_of[h] = ref
    return ClockOffsets(offset, ref_of, len(equations))
