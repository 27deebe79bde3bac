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

from dataclasses import dataclass

import numba
import numpy as np

from tacit.causal_paths.linking import Links
from tacit.compiled import grown


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


class InstanceBuilder:
    """Path instances of ``n`` messages linked by ``links``, built for any batch of the trees
    (given by their roots), so that a long trace need not hold every instance at once; see the
    module docstring."""

    def __init__(self, links: Links, n: int, params: InstanceParams | None = None) -> None:
        self.links = links
        self.params = params or InstanceParams()
        p = self.params
        self.is_best = links.best[links.effect] == links.cause
        open_ = (links.prob > p.probably_false) & (links.prob < p.probably_true)
        self.usable = open_ | self.is_best
        self.roots = np.flatnonzero(links.best < 0)
        """Root of every tree, ascending."""
        self.forest = _Forest(links.best)
        self.forked = np.zeros(n, dtype=bool)  # trees with a try-both decision
        self.forked[self.forest.top[links.cause[open_]]] = True
        # Each message's chosen link in a simple tree: its most likely cause.
        self.best_p = links.spontaneous.copy()
        self.best_p[links.effect[self.is_best]] = links.prob[self.is_best]
        # The usable links by cause (then as the links are), and the walks' scratch marks.
        k = np.flatnonzero(self.usable)
        by_cause = k[np.argsort(links.cause[k], kind="stable")]
        self.child_start = np.searchsorted(links.cause[by_cause], np.arange(n + 1))
        self.child_e = links.effect[by_cause].astype(np.int64)
        self.child_q = links.prob[by_cause]
        self.child_best = self.is_best[by_cause]
        self.marks = _Marks(
            seen=np.full(n, -1, np.int64),
            placed=np.full(n, -1, np.int64),
            where=np.zeros(n, np.int64),
            fork_of=np.full(len(by_cause), -1, np.int64),
        )

    def build(self, roots: np.ndarray | None = None) -> Instances:
        """The instances of the trees at ``roots`` (ascending; default: every tree)."""
        roots = self.roots if roots is None else roots
        forked = self.forked[roots]
        simple = self.forest.trees(self.best_p, roots[~forked])
        return _join([simple, self._enumerate(roots[forked])])

    def _enumerate(self, roots: np.ndarray) -> tuple:
        """The instances of trees with try-both decisions (compiled, one tree at a time)."""
        p, marks = self.params, self.marks
        *arrays, marks.walks, marks.stamps = _grow_all(
            roots.astype(np.int64),
            self.links.spontaneous[roots],
            self.child_start,
            self.child_e,
            self.child_q,
            self.child_best,
            p.probably_false,
            p.probably_true,
            p.max_try_both,
            marks.seen,
            marks.placed,
            marks.where,
            marks.fork_of,
            marks.walks,
            marks.stamps,
        )
        return tuple(arrays)


def build_instances(links: Links, n: int, params: InstanceParams | None = None) -> Instances:
    """Every path instance of ``n`` messages linked by ``links``."""
    return InstanceBuilder(links, n, params).build()


def instances_from_parents(parent: np.ndarray) -> Instances:
    """One instance of probability 1 per tree of a forest given by parent pointers (-1: root),
    such as a ground truth."""
    parent = np.asarray(parent, dtype=np.int64)
    return _join([_Forest(parent).trees(np.ones(len(parent)), np.flatnonzero(parent < 0))])


class _Forest:
    """A forest given by parent pointers (-1: root), its members grouped by tree."""

    def __init__(self, parent: np.ndarray) -> None:
        self.parent = parent
        self.top = _tops(parent)
        self.by_tree = np.argsort(self.top, kind="stable")  # by tree, then by message
        self.sorted_top = self.top[self.by_tree]

    def trees(self, prob: np.ndarray, roots: np.ndarray) -> tuple:
        """The trees rooted at ``roots`` (ascending) as instance arrays, each instance's
        probability the product of ``prob`` (each message's chosen link) over its tree."""
        lo = np.searchsorted(self.sorted_top, roots, "left")
        size = np.searchsorted(self.sorted_top, roots, "right") - lo
        bounds = np.cumsum(size) - size
        local = np.arange(size.sum()) - np.repeat(bounds, size)
        member = self.by_tree[np.repeat(lo, size) + local]
        pos = np.empty(len(self.parent), dtype=np.int64)
        pos[member] = local
        up = self.parent[member]
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


@dataclass
class _Marks:
    """Scratch of the compiled walks, kept across batches: per message, the last walk that saw
    it and the last instance that placed it (with its position there); per link, its try-both
    decision in the current walk. Walks and instances are numbered on across batches, so the
    marks never need clearing."""

    seen: np.ndarray
    placed: np.ndarray
    where: np.ndarray
    fork_of: np.ndarray
    walks: int = 0
    stamps: int = 0


@numba.njit(cache=True)
def _grow_all(
    roots, root_prob, child_start, child_e, child_q, child_best, pf, pt, max_forks,
    seen, placed, where, fork_of, walk0, stamp0,
):  # pragma: no cover - compiled  # fmt: skip
    """Every instance of the tree at each of ``roots`` (children of message ``c`` are
    ``child_*[child_start[c]:child_start[c+1]]``): flat members, parent positions, starts,
    roots, probabilities, and whether each instance is its tree's likeliest.

    The try-both decisions are the first ``max_forks`` open links met breadth first from the
    root; every other link is taken when it is its message's most likely cause. An instance
    grows breadth first through the links it takes; a message reached twice (equal timestamps
    can link two messages both ways) keeps its first parent.
    """
    children = (child_start, child_e, child_q, child_best)
    queue = np.empty(len(child_start), np.int64)
    forks = np.empty(max_forks, np.int64)
    bits = np.empty(max_forks, np.bool_)
    members = np.empty(16 * max(len(roots), 1), np.int64)
    parents = np.empty(len(members), np.int64)
    icap = max(len(roots), 16)
    starts = np.empty(icap, np.int64)
    tree_root = np.empty(icap, np.int64)
    probs = np.empty(icap, np.float64)
    first = np.empty(icap, np.bool_)
    out = 0
    stamp = 0
    for r in range(len(roots)):
        root = roots[r]
        f, reached = _find_forks(root, walk0 + r, children, pf, pt, seen, fork_of, queue, forks)
        likely = _likeliest(forks, f, child_best)
        for x in range(-1, 1 << f):  # the likeliest instance first
            if x == likely:
                continue
            if out + reached > len(members):
                members = grown(members, 2 * (out + reached))
                parents = grown(parents, len(members))
            if stamp == len(starts):
                starts, tree_root = grown(starts, 2 * stamp), grown(tree_root, 2 * stamp)
                probs, first = grown(probs, 2 * stamp), grown(first, 2 * stamp)
            _decide(likely if x < 0 else x, f, bits)
            starts[stamp], tree_root[stamp], first[stamp] = out, root, x < 0
            size, probs[stamp] = _grow_one(
                root, stamp0 + stamp, root_prob[r], out, children, fork_of, bits,
                placed, where, queue, members, parents,
            )  # fmt: skip
            out += size
            stamp += 1
        for j in range(f):
            fork_of[forks[j]] = -1
    return (
        members[:out],
        parents[:out],
        starts[:stamp],
        tree_root[:stamp],
        probs[:stamp],
        first[:stamp],
        walk0 + len(roots),
        stamp0 + stamp,
    )


@numba.njit(cache=True)
def _find_forks(root, walk, children, pf, pt, seen, fork_of, queue, forks):  # pragma: no cover
    """Walk 1 of the tree at ``root`` (walk number ``walk`` in ``seen``): the messages its
    usable links reach, and its try-both decisions, the first ``len(forks)`` links strictly
    between ``pf`` and ``pt`` met breadth first, numbered in ``fork_of`` and listed in
    ``forks``. Returns how many decisions and how many messages."""
    child_start, child_e, child_q, _ = children
    seen[root] = walk
    queue[0], head, tail, f = root, 0, 1, 0
    while head < tail:
        c = queue[head]
        head += 1
        for li in range(child_start[c], child_start[c + 1]):
            q = child_q[li]
            if f < len(forks) and pf < q < pt:
                fork_of[li] = f
                forks[f] = li
                f += 1
            e = child_e[li]
            if seen[e] != walk:
                seen[e] = walk
                queue[tail] = e
                tail += 1
    return f, tail


@numba.njit(cache=True)
def _likeliest(forks, f, child_best):  # pragma: no cover - compiled
    """The combination of the ``f`` decisions that the likeliest instance makes: bit
    ``f - 1 - j`` set where decision ``j`` drops its link, as the link is not its message's
    most likely cause."""
    likely = 0
    for j in range(f):
        if not child_best[forks[j]]:
            likely |= 1 << (f - 1 - j)
    return likely


@numba.njit(cache=True)
def _decide(combo, f, bits):  # pragma: no cover - compiled
    """``bits[j]``: whether combination ``combo`` of ``f`` decisions takes decision j's link."""
    for j in range(f):
        bits[j] = ((combo >> (f - 1 - j)) & 1) == 0


@numba.njit(cache=True)
def _grow_one(
    root, stamp, prob, at, children, fork_of, bits, placed, where, queue, members, parents
):  # pragma: no cover - compiled
    """Walk 2: the instance (number ``stamp`` in ``placed``) that grows breadth first from
    ``root`` through the links it takes, a decision's link where ``bits`` says so and any other
    link where it is its message's most likely cause, written to ``members`` and ``parents``
    from ``at`` on (``where``: each message's position). Returns its size and probability,
    ``prob`` (the root's) times ``p`` per link taken and ``1 − p`` per link dropped."""
    child_start, child_e, child_q, child_best = children
    placed[root] = stamp
    where[root] = 0
    members[at], parents[at] = root, -1
    size = 1
    queue[0], head, tail = root, 0, 1
    while head < tail:
        c = queue[head]
        head += 1
        for li in range(child_start[c], child_start[c + 1]):
            q = child_q[li]
            fj = fork_of[li]
            take = bits[fj] if fj >= 0 else child_best[li]
            e = child_e[li]
            if not take:
                prob *= 1 - q
            elif placed[e] != stamp:
                placed[e] = stamp
                where[e] = size
                members[at + size] = e
                parents[at + size] = where[c]
                size += 1
                prob *= q
                queue[tail] = e
                tail += 1
    return size, prob


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
