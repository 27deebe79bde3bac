"""Problem graphs: syslog events joined by mined rules, per window, and the RPCs they explain.

YTrace (Kanuparthy et al., arXiv 1602.03273, §4) and Log-Prophet (Zhou et al., arXiv
1605.06150, §5) summarize a window of syslog events as *problem graphs*: events are nodes, an
edge joins A on a device to B on the same device when an intra-device rule A→B holds and B
follows A within the rule horizon, and problem graphs on neighbouring devices are then joined
by inter-device rules along the topology's links. A graph's roots (nodes without an incoming
edge) are its root causes. YTrace then attaches to each RPC with significant network queueing
the problem graphs on the devices the RPC could have traversed: every device on a shortest path
between its endpoints (equal-cost multipath), active around the RPC's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from tacit.diagnosis.syslog_causality import INTRA, Rule, directed_links
from tacit.errors import ConfigError
from tacit.model.topology import Topology
from tacit.runs import contained, distinct

S = 1_000_000_000


@dataclass
class ProblemGraph:
    """Nodes (device, template, first time, count), edges (from, to, scope) between node
    positions, roots (node positions) and the time span."""

    id: int
    start_ns: int
    end_ns: int
    nodes: list[tuple[str, int, int, int]]
    edges: list[tuple[int, int, str]]
    roots: list[int] = field(default_factory=list)

    @property
    def devices(self) -> set[str]:
        return {n[0] for n in self.nodes}

    def has_event(self, device: str, time_ns: int, tolerance_ns: int = 1_000) -> bool:
        """Whether a node is on ``device`` at ``time_ns`` (within ``tolerance_ns``: syslog
        timestamps keep microseconds at most)."""
        return any(d == device and abs(t - time_ns) < tolerance_ns for d, _, t, _ in self.nodes)

    def as_dict(self, template_texts: list[str] | None = None) -> dict:
        def name(t: int) -> str | int:
            return template_texts[t] if template_texts else t

        return {
            "id": self.id,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "devices": sorted(self.devices),
            "nodes": [
                {"device": d, "template": name(t), "time_ns": ts, "count": c}
                for d, t, ts, c in self.nodes
            ],
            "edges": [{"from": a, "to": b, "scope": s} for a, b, s in self.edges],
            "roots": self.roots,
        }


@dataclass(frozen=True)
class ProblemParams:
    """``window_ns``: events of a template on a device within one window are one node;
    ``horizon_ns``: how soon the effect of a rule follows its cause (as in mining)."""

    window_ns: int = 300 * S
    horizon_ns: int = 60 * S

    def __post_init__(self) -> None:
        if self.window_ns <= 0 or self.horizon_ns <= 0:
            raise ConfigError("window and horizon must be positive")


def problem_graphs(
    time: np.ndarray,
    device: np.ndarray,
    template: np.ndarray,
    devices: list[str],
    rules: list[Rule],
    topology: Topology,
    params: ProblemParams | None = None,
) -> list[ProblemGraph]:
    """Problem graphs from events (columns; ``device`` codes into ``devices``) and rules.

    Only events of templates in some rule become nodes. Intra-device edges join nodes on one
    device, inter-device edges nodes on linked devices; a problem graph is a connected
    component, ordered by its first event."""
    p = params or ProblemParams()
    in_rule = np.zeros(int(np.max(template, initial=-1)) + 1, dtype=bool)
    for r in rules:
        for t in (r.cause, r.effect):
            if t < len(in_rule):
                in_rule[t] = True
    keep = in_rule[template] if len(in_rule) else np.zeros(len(template), bool)
    t, d, k = (np.asarray(c)[keep] for c in (time, device, template))
    # Nodes: (device, template, window), with the first time and a count.
    w = t // p.window_ns
    order = np.lexsort((t, w, k, d))
    t, d, k, w = t[order], d[order], k[order], w[order]
    head = np.r_[True, (d[1:] != d[:-1]) | (k[1:] != k[:-1]) | (w[1:] != w[:-1])] if len(t) else []
    starts = np.flatnonzero(head)
    nt, nd, nk = t[starts], d[starts], k[starts]
    counts = np.diff(np.r_[starts, len(t)])
    links = directed_links(topology.link_codes(devices))
    neighbor = links[:, 0] * len(devices) + links[:, 1]
    src, dst, scope = _edges(nt, nd, nk, rules, neighbor, len(devices), p.horizon_ns)
    n = len(nt)
    graph = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    _, label = connected_components(graph, directed=True, connection="weak")
    has_in = np.zeros(n, dtype=bool)
    has_in[dst] = True
    out = []
    for comp in distinct(label):
        members = np.flatnonzero(label == comp)
        pos = {int(m): i for i, m in enumerate(members)}
        edges = [
            (pos[int(a)], pos[int(b)], s)
            for a, b, s in zip(src, dst, scope, strict=True)
            if int(a) in pos
        ]
        out.append(
            ProblemGraph(
                id=0,
                start_ns=int(nt[members].min()),
                end_ns=int(nt[members].max()),
                nodes=[
                    (devices[int(nd[m])], int(nk[m]), int(nt[m]), int(counts[m])) for m in members
                ],
                edges=edges,
                roots=[pos[int(m)] for m in members if not has_in[m]],
            )
        )
    out.sort(key=lambda g: g.start_ns)
    for i, g in enumerate(out):
        g.id = i
    return out


def _edges(
    t: np.ndarray,
    d: np.ndarray,
    k: np.ndarray,
    rules: list[Rule],
    neighbor: np.ndarray,
    n_dev: int,
    horizon: int,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Edges between nodes: a rule's effect node following its cause node within the horizon
    on the same device (intra) or on a linked device (inter). Intra-device rules first."""
    src: list[int] = []
    dst: list[int] = []
    scope: list[str] = []
    by_template: dict[int, np.ndarray] = {int(x): np.flatnonzero(k == x) for x in distinct(k)}
    for r in sorted(rules, key=lambda r: r.scope != INTRA):
        ca, eb = by_template.get(r.cause), by_template.get(r.effect)
        if ca is None or eb is None:
            continue
        gap = t[eb][None, :] - t[ca][:, None]
        ok = (gap >= 0) & (gap <= horizon)
        if r.scope == INTRA:
            ok &= d[ca][:, None] == d[eb][None, :]
        else:
            ok &= contained(d[ca][:, None] * n_dev + d[eb][None, :], neighbor)
        i, j = np.nonzero(ok)
        src.extend(ca[i])
        dst.extend(eb[j])
        scope.extend([r.scope] * len(i))
    return np.asarray(src, np.int64), np.asarray(dst, np.int64), scope


def graphs_for_rpcs(
    rpc_time: np.ndarray,
    rpc_src: np.ndarray,
    rpc_dst: np.ndarray,
    graphs: list[ProblemGraph],
    topology: Topology,
    slack_ns: int = 60 * S,
) -> list[list[int]]:
    """For each RPC, the ids of the problem graphs on devices it could have traversed (see the
    module docstring) whose span, widened by ``slack_ns``, contains the RPC's time."""
    path_cache: dict[tuple[str, str], set[str]] = {}
    out = []
    for t, s, dd in zip(rpc_time, rpc_src, rpc_dst, strict=True):
        key = (str(s), str(dd))
        if key not in path_cache:
            path_cache[key] = topology.on_shortest_paths(*key)
        on = path_cache[key]
        out.append(
            [
                g.id
                for g in graphs
                if g.start_ns - slack_ns <= t <= g.end_ns + slack_ns and g.devices & on
            ]
        )
    return out
