"""WAP5 causal path patterns (Reynolds et al., WWW '06, §5.1–§5.2, §6.6).

Path instances with the same shape — the same tree of (sender → receiver) hops, children in any
order — form one pattern. Per pattern: ``count`` (trees whose most likely instance has this
shape), ``expected`` (the sum of the probabilities of its instances), ``max_probability``; and per
hop of the pattern, the node's processing delay before sending it (send time minus the receive
time of its parent message, both on the node's clock) and the one-way network delay (receive
minus send, with the hosts' clock offsets removed, :mod:`.clocks`): probability-weighted means,
and histograms of the node delays. Untraced nodes show no delay of their own; their hop back
carries the round trip seen from the caller.

Shapes are compared by a 64-bit hash of each subtree (a strong mix of the hop's label plus the
wrapped sum of the children's hashes, so sibling order does not matter), computed level by level
for all instances at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tacit.causal_paths.clocks import ClockOffsets
from tacit.causal_paths.instances import Instances
from tacit.errors import ConfigError
from tacit.hashing import hash64
from tacit.model.messages import MISSING, MessageTable
from tacit.runs import contained, run_starts, split_at

HISTOGRAM_EDGES_NS = np.r_[0, np.logspace(3, 11, 33)]
"""Node-delay histogram bins: 0, then 1 µs to 100 s at four bins per decade."""

RANKINGS = (
    "count",
    "expected",
    "expected_per_count",
    "expected_per_sqrt_count",
    "max_probability",
    "total_time",
    "mean_latency",
)
"""Orders in which patterns can be listed (§6.6): how often a path occurs, how often it is
expected to (the paper's "generally the most useful"), the paper's two composite metrics —
expectation ÷ count (the mean probability of its instances: favours confident paths) and
expectation ÷ √count (frequency raises confidence, but not linearly) — how sure the best
instance is, and time spent (count × mean latency) or latency."""


@dataclass
class Hop:
    """One message position of a pattern."""

    position: int
    parent: int  # position of the parent hop, -1 for the root
    src: str
    dst: str
    src_traced: bool
    dst_traced: bool
    node_delay_ns: float | None  # at ``src``, from receiving the parent message to sending
    network_delay_ns: float | None  # one way, clock offsets removed
    node_delay_histogram: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Pattern:
    """A causal path pattern with its statistics; hops in breadth-first order."""

    key: int
    count: int
    expected: float
    max_probability: float
    mean_latency_ns: float | None
    hops: list[Hop]

    def as_dict(self) -> dict:
        return {
            "key": f"{self.key:016x}",
            "count": self.count,
            "expected": self.expected,
            "max_probability": self.max_probability,
            "mean_latency_ns": self.mean_latency_ns,
            "hops": [h.as_dict() for h in self.hops],
        }

    def text_tree(self) -> str:
        """The pattern as an indented tree, one hop a line, with delays in ms. A chain that
        repeats a unit of hops (a client whose every request follows the last response) is
        shown once with its count, not indented once per hop."""
        kids: dict[int, list[Hop]] = {}
        for h in self.hops:
            kids.setdefault(h.parent, []).append(h)
        lines: list[str] = []

        def walk(h: Hop, depth: int) -> None:
            chain = [h]
            while len(kids.get(chain[-1].position, [])) == 1:
                chain.append(kids[chain[-1].position][0])
            at = 0
            for period, repeats in _repeats([(c.src, c.dst) for c in chain]):
                unit = chain[at : at + period]
                if repeats > 1:
                    hops = ", ".join(f"{c.src} -> {c.dst}" for c in unit)
                    lines.append(f"{'  ' * depth}({hops}) × {repeats}")
                else:
                    lines.append(f"{'  ' * depth}{_hop_line(unit[0])}")
                at += period * repeats
                depth += 1
            for k in kids.get(chain[-1].position, []):
                walk(k, depth)

        for root in kids.get(-1, []):
            walk(root, 0)
        return "\n".join(lines)


def _hop_line(h: Hop) -> str:
    node = "" if h.node_delay_ns is None else f"  [{h.node_delay_ns / 1e6:.3f} ms at {h.src}]"
    net = "" if h.network_delay_ns is None else f"  net {h.network_delay_ns / 1e6:.3f} ms"
    return f"{h.src} -> {h.dst}{node}{net}"


MAX_PERIOD = 4
"""The longest unit of hops :func:`_repeats` looks for."""


def _repeats(labels: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """``labels`` cut into (period, repeats): runs of a unit of up to :data:`MAX_PERIOD`
    labels repeated back to back, the run covering most labels first; single labels else."""
    out = []
    i = 0
    while i < len(labels):
        best = (1, 1)
        for period in range(1, MAX_PERIOD + 1):
            unit = labels[i : i + period]
            if len(unit) < period:
                break
            repeats = 1
            while labels[i + repeats * period : i + (repeats + 1) * period] == unit:
                repeats += 1
            if repeats > 1 and period * repeats > best[0] * best[1]:
                best = (period, repeats)
        out.append(best)
        i += best[0] * best[1]
    return out


def _levels(parent: np.ndarray) -> np.ndarray:
    """Depth of every node of a forest given by parent pointers (list ranking: O(n log depth))."""
    depth = (parent >= 0).astype(np.int64)
    anc = parent.copy()
    while (idx := np.flatnonzero(anc >= 0)).size:
        up = anc[idx]
        depth_up, anc_up = depth[up], anc[up]
        depth[idx] += depth_up
        anc[idx] = anc_up
    return depth


@dataclass
class PatternDetail:
    """What spelling out the hops of some patterns takes, keyed by pattern key (sorted
    ``keys``): each pattern's representative (most probable) instance, as
    ``rep_message[rep_start[j]:rep_start[j+1]]`` with parent positions and position keys; per
    group — a (pattern, position key), named by one hash (:func:`_group_id`) — weighted sums of
    node and network delay; the node-delay histograms sparsely, as (group, bin, weight)."""

    keys: np.ndarray
    rep_prob: np.ndarray
    rep_start: np.ndarray
    rep_message: np.ndarray
    rep_parent: np.ndarray
    rep_where: np.ndarray
    group_id: np.ndarray
    group_sums: np.ndarray
    """Rows: node-delay sum, its weight, network-delay sum, its weight."""
    hist_group: np.ndarray
    hist_bin: np.ndarray
    hist_weight: np.ndarray

    def covers(self, keys: np.ndarray) -> bool:
        return bool(contained(keys, self.keys).all())

    def hops(self, messages: MessageTable, key: int) -> list[Hop]:
        """The hops of pattern ``key`` in breadth-first order, with their mean delays."""
        names = messages.strings.values
        j = int(np.searchsorted(self.keys, key))
        a, b = self.rep_start[j], self.rep_start[j + 1]
        gid = _group_id(np.full(b - a, key, dtype=np.uint64), self.rep_where[a:b])
        g = np.searchsorted(self.group_id, gid)
        h0 = np.searchsorted(self.hist_group, gid, "left")
        h1 = np.searchsorted(self.hist_group, gid, "right")
        nbins = len(HISTOGRAM_EDGES_NS) - 1
        hops = []
        for q in range(a, b):
            m = self.rep_message[q]
            node_sum, node_w, net_sum, net_w = self.group_sums[:, g[q - a]]
            hist = np.zeros(nbins)
            rows = slice(h0[q - a], h1[q - a])
            hist[self.hist_bin[rows]] = self.hist_weight[rows]
            hops.append(
                Hop(
                    position=q - a,
                    parent=int(self.rep_parent[q]),
                    src=names[messages.src[m]],
                    dst=names[messages.dst[m]],
                    src_traced=bool(messages.send[m] != MISSING),
                    dst_traced=bool(messages.recv[m] != MISSING),
                    node_delay_ns=float(node_sum / node_w) if node_w > 0 else None,
                    network_delay_ns=float(net_sum / net_w) if net_w > 0 else None,
                    node_delay_histogram=hist.round(6).tolist() if node_w > 0 else [],
                )
            )
        return _breadth_first(hops)


@dataclass
class PatternSet:
    """Patterns with the sums their statistics come from, so that the pattern sets of separate
    batches of path instances merge into one (:func:`merge_patterns`): per pattern (sorted by
    key) ``count``, ``expected``, ``max_probability``, and the probability-weighted latency sum
    and weight. The hops come from ``detail``, which may cover only some patterns; ``refine``
    computes it for others on demand (for long traces, whose detail is not kept for every
    pattern)."""

    messages: MessageTable
    keys: np.ndarray
    count: np.ndarray
    expected: np.ndarray
    max_probability: np.ndarray
    latency_sum: np.ndarray
    latency_weight: np.ndarray
    detail: PatternDetail
    refine: Callable[[np.ndarray], PatternDetail] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def mean_latency_ns(self) -> np.ndarray:
        """Per pattern; NaN where no instance has a known time."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.latency_weight > 0, self.latency_sum / self.latency_weight, np.nan)

    def counts(self) -> dict[int, int]:
        """Pattern key → count."""
        return dict(zip(self.keys.tolist(), self.count.tolist(), strict=True))

    def ranked(self, ranking: str = "count", top: int | None = None) -> list[Pattern]:
        """The patterns in the order of ``ranking`` (ties by key), the first ``top`` only when
        given, with their hops."""
        if ranking not in RANKINGS:
            raise ConfigError(f"unknown ranking {ranking!r}; one of {', '.join(RANKINGS)}")
        latency = np.nan_to_num(self.mean_latency_ns)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_count = np.nan_to_num(self.expected / self.count)
            per_sqrt = np.nan_to_num(self.expected / np.sqrt(self.count))
        value = {
            "count": self.count,
            "expected": self.expected,
            "expected_per_count": per_count,
            "expected_per_sqrt_count": per_sqrt,
            "max_probability": self.max_probability,
            "total_time": self.count * latency,
            "mean_latency": latency,
        }[ranking]
        chosen = np.lexsort((self.keys, -value))[:top]
        if not self.detail.covers(self.keys[chosen]):
            assert self.refine is not None, "pattern detail missing and no way to compute it"
            self.detail = self.refine(np.sort(self.keys[chosen]))
        return [
            Pattern(
                key=int(self.keys[j]),
                count=int(self.count[j]),
                expected=float(self.expected[j]),
                max_probability=float(self.max_probability[j]),
                mean_latency_ns=None if np.isnan(lat := self.mean_latency_ns[j]) else float(lat),
                hops=self.detail.hops(self.messages, self.keys[j]),
            )
            for j in chosen.tolist()
        ]


def find_patterns(
    messages: MessageTable,
    instances: Instances,
    offsets: ClockOffsets | None = None,
    detail_for: np.ndarray | None = None,
) -> PatternSet:
    """Aggregate path instances into patterns with delays; see the module docstring. The hops
    of every pattern are kept, or only of those whose keys are in ``detail_for`` (sorted)."""
    n_pos = len(instances.message)
    inst_of = np.repeat(np.arange(len(instances)), np.diff(instances.start))
    base = instances.start[inst_of]
    gpar = np.where(instances.parent >= 0, base + instances.parent, -1)
    msg = instances.message
    label = hash64(
        (messages.src[msg].astype(np.uint64) << np.uint64(32)) | messages.dst[msg].astype(np.uint64)
    )
    depth = _levels(gpar)
    by_depth = np.argsort(-depth, kind="stable")
    cuts = run_starts(depth[by_depth])[1:]
    shape = np.zeros(n_pos, dtype=np.uint64)
    acc = np.zeros(n_pos, dtype=np.uint64)
    for level in split_at(by_depth, cuts):  # deepest first
        shape[level] = hash64(label[level] + acc[level])
        up = level[gpar[level] >= 0]
        np.add.at(acc, gpar[up], hash64(shape[up] ^ np.uint64(0x9E3779B97F4A7C15)))
    # Position keys, top down: the parent's position and the hop's own subtree shape.
    where = np.zeros(n_pos, dtype=np.uint64)
    for level in reversed(split_at(by_depth, cuts)):
        has = gpar[level] >= 0
        where[level] = np.where(
            has, hash64(where[gpar[level]] * np.uint64(31) + shape[level]), shape[level]
        )
    root_pos = np.flatnonzero(gpar < 0)
    instance_key = np.empty(len(instances), dtype=np.uint64)
    instance_key[inst_of[root_pos]] = shape[root_pos]

    # Each position's sender and receiver clock offsets (0 where unknown).
    src_off = offsets.of_hosts(messages, "src_host")[msg] if offsets else np.zeros(n_pos)
    dst_off = offsets.of_hosts(messages, "dst_host")[msg] if offsets else np.zeros(n_pos)
    latency = _latency(messages, msg, instances.start, src_off, dst_off)
    keys, inst_pattern = np.unique(instance_key, return_inverse=True)
    k = len(keys)
    lat_ok = ~np.isnan(latency)
    mine = (
        np.ones(len(instances), bool) if detail_for is None else contained(instance_key, detail_for)
    )
    pos = np.flatnonzero(mine[inst_of])
    order = np.lexsort((-instances.prob, inst_pattern))
    rep = order[run_starts(inst_pattern[order])]
    return PatternSet(
        messages=messages,
        keys=keys,
        count=np.bincount(inst_pattern, weights=instances.likeliest, minlength=k).astype(np.int64),
        expected=np.bincount(inst_pattern, weights=instances.prob, minlength=k),
        max_probability=instances.prob[rep],
        latency_sum=np.bincount(
            inst_pattern, weights=np.where(lat_ok, latency, 0) * instances.prob, minlength=k
        ),
        latency_weight=np.bincount(inst_pattern, weights=instances.prob * lat_ok, minlength=k),
        detail=_detail(
            messages,
            instances,
            instance_key,
            inst_of,
            gpar,
            where,
            rep[mine[rep]],
            pos,
            src_off[pos],
            dst_off[pos],
        ),
    )


def _latency(
    messages: MessageTable,
    msg: np.ndarray,
    start: np.ndarray,
    src_off: np.ndarray,
    dst_off: np.ndarray,
) -> np.ndarray:
    """Per instance (positions ``start[i]:start[i+1]``, none empty): from its first to its last
    known event (send or receipt), on the reference host's timeline (each host's estimated
    offset removed); NaN when no time is known."""
    send, recv = messages.send[msg], messages.recv[msg]
    if not len(msg):
        return np.empty(0)
    # Times from a nearby origin first, so that float64 keeps nanoseconds.
    t0 = max(send.max(), recv.max())  # a known time (MISSING is the smallest int64)
    send_t = np.where(send != MISSING, (send - t0) - src_off, np.nan)
    recv_t = np.where(recv != MISSING, (recv - t0) - dst_off, np.nan)
    at = start[:-1]
    first = np.fmin(np.fmin.reduceat(send_t, at), np.fmin.reduceat(recv_t, at))
    last = np.fmax(np.fmax.reduceat(send_t, at), np.fmax.reduceat(recv_t, at))
    return last - first


def _detail(
    messages, instances, instance_key, inst_of, gpar, where, rep, pos, src_off, dst_off
) -> PatternDetail:
    """The detail of the patterns whose representative instances are ``rep`` (in key order),
    from their positions ``pos`` (with those positions' clock offsets)."""
    # The representative instances, flat, with local parent positions.
    size = np.diff(instances.start)[rep]
    rep_start = np.r_[0, np.cumsum(size)]
    rows = np.repeat(instances.start[rep] - rep_start[:-1], size) + np.arange(rep_start[-1])
    rep_parent = np.where(gpar[rows] >= 0, gpar[rows] - np.repeat(instances.start[rep], size), -1)
    # Node delay: send minus the receipt of the parent, on the node's clock.
    msg, par = instances.message[pos], gpar[pos]
    send, recv = messages.send[msg], messages.recv[msg]
    has_par = par >= 0
    pm = np.where(has_par, instances.message[np.maximum(par, 0)], 0)
    node_delay = np.full(len(pos), np.nan)
    ok = has_par & (send != MISSING) & (messages.recv[pm] != MISSING)
    node_delay[ok] = send[ok] - messages.recv[pm[ok]]
    # Network delay: one way with the offsets removed; behind an untraced sender, the round
    # trip from the caller's send of the parent to its receipt.
    net = np.full(len(pos), np.nan)
    rtt = has_par & (send == MISSING) & (recv != MISSING) & (messages.send[pm] != MISSING)
    net[rtt] = recv[rtt] - messages.send[pm[rtt]]
    both = (send != MISSING) & (recv != MISSING)
    net[both] = recv[both] - send[both] - (dst_off - src_off)[both]
    # Per group (pattern, position key): weighted sums of delays, and histograms.
    weight = instances.prob[inst_of[pos]]
    group = _group_id(instance_key[inst_of[pos]], where[pos])
    sums = []
    for values in (node_delay, net):
        known = ~np.isnan(values)
        sums += [np.where(known, values, 0) * weight, np.where(known, weight, 0)]
    known = ~np.isnan(node_delay)
    nbins = len(HISTOGRAM_EDGES_NS) - 1
    bins = np.searchsorted(HISTOGRAM_EDGES_NS, node_delay[known], side="right") - 1
    group_id, group_sums = _sum_by(group, np.array(sums))
    hist = _histogram_cells(group[known], np.clip(bins, 0, nbins - 1), weight[known])
    return PatternDetail(
        keys=instance_key[rep],
        rep_prob=instances.prob[rep],
        rep_start=rep_start,
        rep_message=instances.message[rows],
        rep_parent=rep_parent,
        rep_where=where[rows],
        group_id=group_id,
        group_sums=group_sums,
        hist_group=hist[0],
        hist_bin=hist[1],
        hist_weight=hist[2],
    )


def _group_id(key: np.ndarray, where: np.ndarray) -> np.ndarray:
    """One 64-bit name of the group (pattern ``key``, position key ``where``)."""
    return hash64(hash64(key) ^ where)


def _sum_by(group: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``group`` ids (sorted) and the sums of each row of ``values`` per id."""
    ids, inv = np.unique(group, return_inverse=True)
    sums = [np.bincount(inv, weights=v, minlength=len(ids)) for v in values]
    return ids, np.array(sums).reshape(len(values), len(ids))


def _histogram_cells(
    group: np.ndarray, bins: np.ndarray, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse histograms: ``weight`` summed per (group, bin), sorted by group then bin."""
    nbins = len(HISTOGRAM_EDGES_NS) - 1
    ids, inv = np.unique(group, return_inverse=True)
    cells, at = np.unique(inv * nbins + bins, return_inverse=True)
    weight = np.bincount(at, weights=weight, minlength=len(cells))
    return ids[cells // nbins], cells % nbins, weight


def merge_patterns(parts: list[PatternSet]) -> PatternSet:
    """One pattern set from the sets of separate batches of instances (of the same messages)."""
    if len(parts) == 1:
        return parts[0]
    keys, inv = np.unique(np.concatenate([p.keys for p in parts]), return_inverse=True)
    k = len(keys)

    def total(field: str) -> np.ndarray:
        return np.bincount(
            inv, weights=np.concatenate([getattr(p, field) for p in parts]), minlength=k
        )

    max_p = np.zeros(k)
    np.maximum.at(max_p, inv, np.concatenate([p.max_probability for p in parts]))
    return PatternSet(
        messages=parts[0].messages,
        keys=keys,
        count=total("count").astype(np.int64),
        expected=total("expected"),
        max_probability=max_p,
        latency_sum=total("latency_sum"),
        latency_weight=total("latency_weight"),
        detail=merge_details([p.detail for p in parts]),
        refine=parts[0].refine,
    )


def merge_details(parts: list[PatternDetail]) -> PatternDetail:
    """One detail from those of separate batches: the most probable representative per pattern,
    delay sums and histograms added up."""
    if len(parts) == 1:
        return parts[0]
    cat_keys = np.concatenate([d.keys for d in parts])
    rep_prob = np.concatenate([d.rep_prob for d in parts])
    keys, inv = np.unique(cat_keys, return_inverse=True)
    order = np.lexsort((-rep_prob, inv))
    best = order[run_starts(inv[order])]
    offsets = np.cumsum([0] + [d.rep_start[-1] for d in parts[:-1]])
    starts = np.concatenate([d.rep_start[:-1] + o for d, o in zip(parts, offsets, strict=True)])
    ends = np.concatenate([d.rep_start[1:] + o for d, o in zip(parts, offsets, strict=True)])
    size = (ends - starts)[best]
    rep_start = np.r_[0, np.cumsum(size)]
    rows = np.repeat(starts[best] - rep_start[:-1], size) + np.arange(rep_start[-1])

    def cat(field: str) -> np.ndarray:
        return np.concatenate([getattr(d, field) for d in parts], axis=-1)

    group_id, group_sums = _sum_by(cat("group_id"), cat("group_sums"))
    hist = _histogram_cells(cat("hist_group"), cat("hist_bin"), cat("hist_weight"))
    return PatternDetail(
        keys=keys,
        rep_prob=rep_prob[best],
        rep_start=rep_start,
        rep_message=cat("rep_message")[rows],
        rep_parent=cat("rep_parent")[rows],
        rep_where=cat("rep_where")[rows],
        group_id=group_id,
        group_sums=group_sums,
        hist_group=hist[0],
        hist_bin=hist[1],
        hist_weight=hist[2],
    )


def _breadth_first(hops: list[Hop]) -> list[Hop]:
    """The hops reordered so that each parent precedes its children, positions renumbered."""
    kids: dict[int, list[Hop]] = {}
    for h in hops:
        kids.setdefault(h.parent, []).append(h)
    order: list[Hop] = list(kids.get(-1, []))
    for h in order:
        order.extend(kids.get(h.position, []))
    new = {h.position: i for i, h in enumerate(order)}
    for h in order:
        h.position = new[h.position]
        h.parent = new[h.parent] if h.parent >= 0 else -1
    return order
