"""WAP5 path instances (Reynolds et al., WWW '06, §5.1): causal trees of messages.

Inverting the links of :mod:`.linking` gives each message its possible children. A path
instance grows from a root message (one whose most likely alternative is to be spontaneous)
through its possible children: a link whose probability is at least ``probably_true`` is taken,
one at most ``probably_false`` is dropped, and one in between is a *try-both* decision: the
instance forks into one copy with the link and one without. A tree makes at most
``max_try_both`` such forks (the rest are decided by the likelier side), so it yields at most
2^k instances. An instance's probability is the product over its decisions: ``p`` for every link
taken (the root's spontaneity included), ``1 − p`` for every try-both link dropped.

Most trees have no try-both decision; they are built for all roots at once with numpy, and only
the trees with forks are enumerated one by one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import product

import numpy as np

from tacit.causal_paths.linking import Links


@dataclass(frozen=True)
class InstanceParams:
    """Thresholds of path building (tacit's values; see :class:`.linking.LinkParams`)."""

    probably_true: float = 0.9
    """A link at least this probable is taken without forking."""
    probably_false: float = 0.1
    """A link at most this probable is dropped without forking."""
    max_try_both: int = 4
    """k: forks per tree at most (2^k instances)."""


@dataclass
class Instances:
    """Path instances as flat arrays: instance ``i`` holds the messages
    ``message[start[i]:start[i+1]]`` with ``parent`` giving each one's position (within the
    instance's slice, -1 for the root). ``root`` is the root message of each instance's tree and
    ``prob`` its probability; ``likeliest`` marks, in each tree, the instance that follows every
    message's most likely cause."""

    message: np.ndarray
    parent: np.ndarray
    start: np.ndarray
    root: np.ndarray
    prob: np.ndarray
    likeliest: np.ndarray

    def __len__(self) -> int:
        return len(self.root)

    def members(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.start[i], self.start[i + 1]
        return self.message[a:b], self.parent[a:b]


def build_instances(links: Links, n: int, params: InstanceParams | None = None) -> Instances:
    """Path instances of ``n`` messages linked by ``links``; see the module docstring."""
    p = params or InstanceParams()
    is_best = links.best[links.effect] == links.cause
    open_ = (links.prob > p.probably_false) & (links.prob < p.probably_true)
    top = _tops(links.best)
    roots = np.flatnonzero(links.best < 0)
    forked = np.zeros(n, dtype=bool)
    forked[top[links.cause[open_]]] = True  # trees with a try-both decision

    # Simple trees: one instance each, every message under its most likely cause.
    best_p = links.spontaneous.copy()
    best_p[links.effect[is_best]] = links.prob[is_best]
    parts = [_forest(links.best, best_p, roots[~forked[roots]], top)]
    parts.append(_enumerate(links, roots[forked[roots]], open_ | is_best, is_best, p))
    return _join(parts)


def instances_from_parents(parent: np.ndarray) -> Instances:
    """One instance of probability 1 per tree of a forest given by parent pointers (-1: root),
    such as a ground truth."""
    parent = np.asarray(parent, dtype=np.int64)
    return _join([_forest(parent, np.ones(len(parent)), np.flatnonzero(parent < 0))])


def _forest(parent: np.ndarray, prob: np.ndarray, roots: np.ndarray, top=None) -> tuple:
    """The trees of the forest ``parent`` rooted at ``roots`` (sorted), as instance arrays whose
    probability is the product of ``prob`` (each message's chosen link) over the tree."""
    top = _tops(parent) if top is None else top
    member = np.flatnonzero(np.isin(top, roots))
    tree = top[member]
    order = np.lexsort((member, tree))
    member, tree = member[order], tree[order]
    bounds = np.searchsorted(tree, roots)
    pos = np.empty(len(parent), dtype=np.int64)
    pos[member] = np.arange(len(member)) - np.repeat(bounds, np.diff(np.r_[bounds, len(member)]))
    up = parent[member]
    par = np.where(up >= 0, pos[np.maximum(up, 0)], -1)
    log_p = np.log(np.maximum(prob[member], 1e-300))
    tree_log = np.add.reduceat(log_p, bounds) if len(member) else np.empty(0)
    return member, par, bounds, roots, np.exp(tree_log), np.ones(len(roots), dtype=bool)


def _tops(parent: np.ndarray) -> np.ndarray:
    """Per node of a forest given by parent pointers: the root of its tree (pointer jumping)."""
    top = np.where(parent >= 0, parent, np.arange(len(parent)))
    while True:
        nxt = top[top]
        if np.array_equal(nxt, top):
            return top
        top = nxt


def _enumerate(
    links: Links, roots: np.ndarray, usable: np.ndarray, is_best: np.ndarray, p: InstanceParams
) -> tuple:
    """The instances of trees with try-both decisions, one tree at a time."""
    children: dict[int, list[tuple[int, float, bool]]] = {}
    for k in np.flatnonzero(usable).tolist():
        children.setdefault(int(links.cause[k]), []).append(
            (int(links.effect[k]), float(links.prob[k]), bool(is_best[k]))
        )
    members, parents, starts, tree_root, probs, first = [], [], [], [], [], []
    for r in roots.tolist():
        found = _grow(r, float(links.spontaneous[r]), children, p)
        for i, (msgs, pars, prob) in enumerate(found):
            starts.append(len(members))
            members.extend(msgs)
            parents.extend(pars)
            tree_root.append(r)
            probs.append(prob)
            first.append(i == 0)
    return (
        np.array(members, dtype=np.int64),
        np.array(parents, dtype=np.int64),
        np.array(starts, dtype=np.int64),
        np.array(tree_root, dtype=np.int64),
        np.array(probs),
        np.array(first, dtype=bool),
    )


def _grow(
    root: int,
    root_prob: float,
    children: dict[int, list[tuple[int, float, bool]]],
    p: InstanceParams,
) -> list[tuple[list[int], list[int], float]]:
    """Every instance of the tree at ``root``: (messages, parent positions, probability).

    The try-both decisions are the first ``max_try_both`` open links met breadth first from the
    root; every other link is taken when it is its message's most likely cause. The first
    instance returned is the one that follows every most likely cause.
    """
    links: list[tuple[int, int, float, bool]] = []  # reachable links, breadth first
    by_cause: dict[int, list[int]] = {}
    seen, queue = {root}, deque([root])
    while queue:
        c = queue.popleft()
        for e, q, best in children.get(c, ()):
            by_cause.setdefault(c, []).append(len(links))
            links.append((c, e, q, best))
            if e not in seen:
                seen.add(e)
                queue.append(e)
    forks = [i for i, (_, _, q, _) in enumerate(links) if p.probably_false < q < p.probably_true]
    forks = forks[: p.max_try_both]
    likely = tuple(links[i][3] for i in forks)
    choices = sorted(product((True, False), repeat=len(forks)), key=lambda b: b != likely)
    out = []
    for bits in choices:
        take = dict(zip(forks, bits, strict=True))
        msgs, pars, pos, prob = [root], [-1], {root: 0}, root_prob
        queue = deque([root])
        while queue:
            c = queue.popleft()
            for i in by_cause.get(c, ()):
                _, e, q, best = links[i]
                if not take.get(i, best):
                    prob *= 1 - q
                elif e not in pos:  # equal timestamps can link two messages both ways
                    pos[e] = len(msgs)
                    msgs.append(e)
                    pars.append(pos[c])
                    prob *= q
                    queue.append(e)
        out.append((msgs, pars, prob))
    return out


def _join(parts: list[tuple]) -> Instances:
    members, parents, starts, roots, probs, likeliest = [], [], [], [], [], []
    offset = 0
    for m, par, st, r, pr, lk in parts:
        members.append(m)
        parents.append(par)
        starts.append(st + offset)
        roots.append(r)
        probs.append(pr)
        likeliest.append(lk)
        offset += len(m)
    message = np.concatenate(members)
    start = np.r_[np.concatenate(starts), len(message)].astype(np.int64)
    likely = np.concatenate(likeliest)
    inst = Instances(
        message=message,
        parent=np.concatenate(parents),
        start=start,
        root=np.concatenate(roots),
        prob=np.concatenate(probs),
        likeliest=likely,
    )
    return inst
