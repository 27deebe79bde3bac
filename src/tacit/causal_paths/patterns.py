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

from dataclasses import dataclass, field

import numpy as np

from tacit.causal_paths.clocks import ClockOffsets
from tacit.causal_paths.instances import Instances
from tacit.model.messages import MISSING, MessageTable

HISTOGRAM_EDGES_NS = np.r_[0, np.logspace(3, 11, 33)]
"""Node-delay histogram bins: 0, then 1 µs to 100 s at four bins per decade."""

RANKINGS = ("count", "expected", "max_probability", "total_time", "mean_latency")
"""Orders in which patterns can be listed (§6.6): how often a path occurs, how often it is
expected to, how sure the best instance is, and time spent (count × mean latency) or latency."""


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

    @property
    def total_time_ns(self) -> float:
        return self.count * (self.mean_latency_ns or 0.0)

    def rank_value(self, ranking: str) -> float:
        return {
            "count": self.count,
            "expected": self.expected,
            "max_probability": self.max_probability,
            "total_time": self.total_time_ns,
            "mean_latency": self.mean_latency_ns or 0.0,
        }[ranking]

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
        """The pattern as an indented tree, one hop a line, with delays in ms."""
        kids: dict[int, list[Hop]] = {}
        for h in self.hops:
            kids.setdefault(h.parent, []).append(h)
        lines: list[str] = []

        def walk(h: Hop, depth: int) -> None:
            node = (
                "" if h.node_delay_ns is None else f"  [{h.node_delay_ns / 1e6:.3f} ms at {h.src}]"
            )
            net = "" if h.network_delay_ns is None else f"  net {h.network_delay_ns / 1e6:.3f} ms"
            lines.append(f"{'  ' * depth}{h.src} -> {h.dst}{node}{net}")
            for k in kids.get(h.position, []):
                walk(k, depth + 1)

        for root in kids.get(-1, []):
            walk(root, 0)
        return "\n".join(lines)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a strong 64-bit mix (wrapping arithmetic)."""
    z = z.astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


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
class PatternSet:
    """Every pattern found, with the hash of each instance's shape."""

    patterns: list[Pattern]
    instance_key: np.ndarray
    """Per instance: its pattern's key."""

    def ranked(self, ranking: str = "count") -> list[Pattern]:
        if ranking not in RANKINGS:
            raise ValueError(f"unknown ranking {ranking!r}; one of {', '.join(RANKINGS)}")
        return sorted(self.patterns, key=lambda p: (-p.rank_value(ranking), p.key))


def find_patterns(
    messages: MessageTable, instances: Instances, offsets: ClockOffsets | None = None
) -> PatternSet:
    """Aggregate path instances into patterns with delays; see the module docstring."""
    n_pos = len(instances.message)
    inst_of = np.repeat(np.arange(len(instances)), np.diff(instances.start))
    base = instances.start[inst_of]
    gpar = np.where(instances.parent >= 0, base + instances.parent, -1)
    msg = instances.message
    label = _mix(
        (messages.src[msg].astype(np.uint64) << np.uint64(32)) | messages.dst[msg].astype(np.uint64)
    )
    depth = _levels(gpar)
    by_depth = np.argsort(-depth, kind="stable")
    cuts = np.flatnonzero(np.diff(depth[by_depth])) + 1
    shape = np.zeros(n_pos, dtype=np.uint64)
    acc = np.zeros(n_pos, dtype=np.uint64)
    for level in np.split(by_depth, cuts):  # deepest first
        shape[level] = _mix(label[level] + acc[level])
        up = level[gpar[level] >= 0]
        np.add.at(acc, gpar[up], _mix(shape[up] ^ np.uint64(0x9E3779B97F4A7C15)))
    # Position keys, top down: the parent's position and the hop's own subtree shape.
    where = np.zeros(n_pos, dtype=np.uint64)
    for level in reversed(np.split(by_depth, cuts)):
        has = gpar[level] >= 0
        where[level] = np.where(
            has, _mix(where[gpar[level]] * np.uint64(31) + shape[level]), shape[level]
        )
    root_pos = np.flatnonzero(gpar < 0)
    instance_key = np.empty(len(instances), dtype=np.uint64)
    instance_key[inst_of[root_pos]] = shape[root_pos]

    weight = instances.prob[inst_of]
    node_delay = np.full(n_pos, np.nan)
    has_par = gpar >= 0
    pm = np.where(has_par, msg[np.maximum(gpar, 0)], 0)
    ok = has_par & (messages.send[msg] != MISSING) & (messages.recv[pm] != MISSING)
    node_delay[ok] = messages.send[msg[ok]] - messages.recv[pm[ok]]
    # Untraced sender: the round trip from the caller's send of the parent to its receipt.
    rtt = has_par & (messages.send[msg] == MISSING) & (messages.recv[msg] != MISSING)
    rtt &= messages.send[pm] != MISSING
    net = np.full(n_pos, np.nan)
    net[rtt] = messages.recv[msg[rtt]] - messages.send[pm[rtt]]
    both = (messages.send[msg] != MISSING) & (messages.recv[msg] != MISSING)
    # Each position's sender and receiver clock offsets (0 where unknown).
    src_off = offsets.of_hosts(messages, "src_host")[msg] if offsets else np.zeros(n_pos)
    dst_off = offsets.of_hosts(messages, "dst_host")[msg] if offsets else np.zeros(n_pos)
    net[both] = messages.recv[msg[both]] - messages.send[msg[both]] - (dst_off - src_off)[both]
    latency = _latency(messages, msg, inst_of, len(instances), src_off, dst_off)
    return PatternSet(
        _aggregate(
            messages,
            instances,
            instance_key,
            inst_of,
            where,
            gpar,
            weight,
            node_delay,
            net,
            latency,
        ),
        instance_key,
    )


def _latency(
    messages: MessageTable,
    msg: np.ndarray,
    inst_of: np.ndarray,
    n: int,
    src_off: np.ndarray,
    dst_off: np.ndarray,
) -> np.ndarray:
    """Per instance: from its first to its last known event (send or receipt), on the reference
    host's timeline (each host's estimated offset removed); NaN when no time is known."""
    send = messages.send[msg].astype(float) - src_off
    recv = messages.recv[msg].astype(float) - dst_off
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    for t, known in ((send, messages.send[msg] != MISSING), (recv, messages.recv[msg] != MISSING)):
        np.minimum.at(first, inst_of[known], t[known])
        np.maximum.at(last, inst_of[known], t[known])
    out = last - first
    out[~np.isfinite(out)] = np.nan
    return out


def _aggregate(
    messages, instances, instance_key, inst_of, where, gpar, weight, node_delay, net, latency
) -> list[Pattern]:
    keys, inst_pattern = np.unique(instance_key, return_inverse=True)
    k = len(keys)
    count = np.bincount(inst_pattern, weights=instances.likeliest, minlength=k).astype(int)
    expected = np.bincount(inst_pattern, weights=instances.prob, minlength=k)
    max_p = np.zeros(k)
    np.maximum.at(max_p, inst_pattern, instances.prob)
    lat_ok = ~np.isnan(latency)
    w = instances.prob * lat_ok
    lat_sum = np.bincount(
        inst_pattern, weights=np.where(lat_ok, latency * instances.prob, 0), minlength=k
    )
    lat_w = np.bincount(inst_pattern, weights=w, minlength=k)
    # The representative instance of a pattern: its most probable one.
    rep = np.full(k, -1)
    order = np.lexsort((-instances.prob, inst_pattern))
    first = np.flatnonzero(np.r_[True, np.diff(inst_pattern[order]) != 0])
    rep[inst_pattern[order[first]]] = order[first]
    # Per (pattern, position) weighted sums of delays.
    pos_pattern = inst_pattern[inst_of]
    stats = _position_stats(pos_pattern, where, weight, node_delay, net)
    names = messages.strings.values
    out = []
    for j in range(k):
        i = rep[j]
        a, b = instances.start[i], instances.start[i + 1]
        hops = []
        for q in range(a, b):
            m = instances.message[q]
            st = stats.get((j, int(where[q])), {})
            hops.append(
                Hop(
                    position=q - a,
                    parent=int(gpar[q] - a) if gpar[q] >= 0 else -1,
                    src=names[messages.src[m]],
                    dst=names[messages.dst[m]],
                    src_traced=bool(messages.send[m] != MISSING),
                    dst_traced=bool(messages.recv[m] != MISSING),
                    node_delay_ns=st.get("node"),
                    network_delay_ns=st.get("net"),
                    node_delay_histogram=st.get("hist", []),
                )
            )
        out.append(
            Pattern(
                key=int(keys[j]),
                count=int(count[j]),
                expected=float(expected[j]),
                max_probability=float(max_p[j]),
                mean_latency_ns=float(lat_sum[j] / lat_w[j]) if lat_w[j] > 0 else None,
                hops=_breadth_first(hops),
            )
        )
    return out


def _position_stats(
    pattern: np.ndarray, where: np.ndarray, weight: np.ndarray, node: np.ndarray, net: np.ndarray
) -> dict[tuple[int, int], dict]:
    """Probability-weighted mean node and network delay, and node-delay histogram, per
    (pattern, position)."""
    order = np.lexsort((where, pattern))
    pat, wh = pattern[order], where[order]
    start = np.flatnonzero(np.r_[True, (pat[1:] != pat[:-1]) | (wh[1:] != wh[:-1])])
    group = np.repeat(np.arange(len(start)), np.diff(np.r_[start, len(order)]))
    w = weight[order]
    out: dict[tuple[int, int], dict] = {}
    sums = {}
    for name, values in (("node", node[order]), ("net", net[order])):
        ok = ~np.isnan(values)
        num = np.bincount(group, weights=np.where(ok, values * w, 0), minlength=len(start))
        den = np.bincount(group, weights=np.where(ok, w, 0), minlength=len(start))
        sums[name] = (num, den)
    nodes = node[order]
    ok = ~np.isnan(nodes)
    nbins = len(HISTOGRAM_EDGES_NS) - 1
    b = np.clip(np.searchsorted(HISTOGRAM_EDGES_NS, nodes[ok], side="right") - 1, 0, nbins - 1)
    hist = np.bincount(group[ok] * nbins + b, weights=w[ok], minlength=len(start) * nbins)
    hist = hist.reshape(len(start), nbins)
    for g, st in enumerate(start.tolist()):
        entry: dict = {}
        for name, (num, den) in sums.items():
            if den[g] > 0:
                entry[name] = float(num[g] / den[g])
        if "node" in entry:
            entry["hist"] = hist[g].round(6).tolist()
        out[(int(pat[st]), int(wh[st]))] = entry
    return out


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
