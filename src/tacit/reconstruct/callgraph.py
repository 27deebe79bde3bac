"""Call graphs with dependency order, learned from isolated test traces or read from YAML.

TraceWeaver (SIGCOMM '24, §4.1 and §5.2.2): for every (service, endpoint), the backend calls a
request makes and the order between them. A call *slot* is one backend endpoint and its
occurrence number (a request may call the same backend twice). The dependency order is learned by
*eliminating violated orderings*: start from "every slot precedes every other" and remove
``a -> b`` as soon as one request shows ``b`` starting before ``a`` ended. What survives is the
"always sequential" relation; slots unordered either way run in parallel. Gaps are modelled along
the immediate predecessors (the transitive reduction).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import yaml

from tacit.errors import ConfigError
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, StringPool


@dataclass(frozen=True)
class Slot:
    """One backend call position: callee service and endpoint, and which occurrence."""

    service: str
    endpoint: str
    occurrence: int
    probability: float = 1.0

    @property
    def callee(self) -> tuple[str, str]:
        return (self.service, self.endpoint)


@dataclass
class EndpointGraph:
    """The calls one (service, endpoint) makes and their dependency order.

    ``preds[j]`` lists the immediate predecessors of slot ``j``: calls that always finish before
    ``j`` starts, with implied (transitive) orderings removed. ``order`` is a topological order.
    """

    service: str
    endpoint: str
    slots: list[Slot]
    preds: list[list[int]]
    requests: int = 0

    @property
    def order(self) -> list[int]:
        done: list[int] = []
        seen: set[int] = set()
        while len(done) < len(self.slots):
            progressed = False
            for j in range(len(self.slots)):
                if j not in seen and all(p in seen for p in self.preds[j]):
                    done.append(j)
                    seen.add(j)
                    progressed = True
            if not progressed:
                raise ConfigError(f"call graph of {self.service} {self.endpoint} has a cycle")
        return done

    def is_sequential(self) -> bool:
        """True when the calls form one chain (no two run in parallel)."""
        order = self.order
        return all(self.preds[b] == [a] for a, b in pairwise(order))


@dataclass
class CallGraph:
    """Endpoint graphs keyed by (service, endpoint)."""

    endpoints: dict[tuple[str, str], EndpointGraph]

    def get(self, service: str, endpoint: str) -> EndpointGraph | None:
        return self.endpoints.get((service, endpoint))

    def to_yaml(self) -> str:
        doc: dict = {}
        for (svc, ep), g in sorted(self.endpoints.items()):
            doc.setdefault(svc, {})[ep] = {
                "requests": g.requests,
                "calls": [
                    {
                        "id": j,
                        "service": s.service,
                        "endpoint": s.endpoint,
                        "after": list(g.preds[j]),
                        "probability": round(s.probability, 6),
                    }
                    for j, s in enumerate(g.slots)
                ],
            }
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_yaml())

    @classmethod
    def load(cls, path: str | Path) -> CallGraph:
        """Read a call graph file (the form :meth:`to_yaml` writes)."""
        try:
            doc = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: cannot read call graph: {e}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{path}: a call graph is a mapping service -> endpoint -> calls")
        graphs = {}
        for svc, eps in doc.items():
            if not isinstance(eps or {}, dict):
                raise ConfigError(f"{path}: {svc}: expected a mapping endpoint -> calls")
            for ep, spec in (eps or {}).items():
                where = f"{path}: {svc} {ep}"
                spec = spec or {}
                calls = spec.get("calls", []) if isinstance(spec, dict) else None
                if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                    raise ConfigError(f"{where}: 'calls' must be a list of mappings")
                ids = [c.get("id", j) for j, c in enumerate(calls)]
                slots, preds = [], []
                seen: dict[tuple[str, str], int] = {}
                for c in calls:
                    if "service" not in c or "endpoint" not in c:
                        raise ConfigError(f"{where}: every call needs service and endpoint")
                    key = (str(c["service"]), str(c["endpoint"]))
                    occ = seen.get(key, 0)
                    seen[key] = occ + 1
                    slots.append(Slot(*key, occ, float(c.get("probability", 1.0))))
                    after = c.get("after", [])
                    if not isinstance(after, list):
                        raise ConfigError(f"{where}: 'after' must be a list of call ids")
                    try:
                        preds.append([ids.index(a) for a in after])
                    except ValueError:
                        raise ConfigError(f"{where}: 'after' names an unknown call id") from None
                g = EndpointGraph(str(svc), str(ep), slots, preds, int(spec.get("requests", 0)))
                g.order  # noqa: B018 - validates acyclicity
                graphs[(str(svc), str(ep))] = g
        return cls(graphs)


def learn_callgraph(spans: SpanTable) -> CallGraph:
    """Learn call graphs from observed spans with ground truth (``parent`` of client spans).

    Each server span is one request of its (service, endpoint); its true children are its calls.
    Occurrences of the same backend are numbered in start order. §5.2.2: orderings violated by
    any request that makes both calls are eliminated.
    """
    s = spans.strings
    servers = np.flatnonzero(spans.kind == SERVER)
    clients = np.flatnonzero((spans.kind == CLIENT) & (spans.parent != NONE))
    clients = clients[np.lexsort((spans.end[clients], spans.start[clients]))]
    children: dict[int, list[int]] = {}
    for c in clients:
        children.setdefault(int(spans.parent[c]), []).append(int(c))
    by_endpoint: dict[tuple[int, int], list[int]] = {}
    for r in servers:
        by_endpoint.setdefault((int(spans.service[r]), int(spans.endpoint[r])), []).append(int(r))
    graphs = {}
    for (svc, ep), reqs in by_endpoint.items():
        g = _learn_endpoint(spans, s, reqs, children)
        g.service, g.endpoint = s[svc], s[ep]
        graphs[(g.service, g.endpoint)] = g
    return CallGraph(graphs)


def _learn_endpoint(
    spans: SpanTable, s: StringPool, reqs: list[int], children: dict[int, list[int]]
) -> EndpointGraph:
    slot_ids: dict[tuple[int, int, int], int] = {}
    rows_per_req: list[dict[int, int]] = []
    for r in reqs:
        occ: dict[tuple[int, int], int] = {}
        placed = {}
        for c in children.get(r, []):
            key = (int(spans.peer[c]), int(spans.endpoint[c]))
            k = occ.get(key, 0)
            occ[key] = k + 1
            j = slot_ids.setdefault((*key, k), len(slot_ids))
            placed[j] = c
        rows_per_req.append(placed)
    n = len(slot_ids)
    start = np.full((len(reqs), n), np.nan)
    end = np.full((len(reqs), n), np.nan)
    for i, placed in enumerate(rows_per_req):
        for j, c in placed.items():
            start[i, j] = spans.start[c]
            end[i, j] = spans.end[c]
    present = ~np.isnan(start)
    both = present[:, :, None] & present[:, None, :]
    violated = (end[:, :, None] > start[:, None, :]) & both
    before = ~violated.any(axis=0) & both.any(axis=0)
    np.fill_diagonal(before, False)
    before &= ~before.T  # zero-length calls at one instant order both ways: keep neither
    # Transitive reduction: drop a -> b when a -> m -> b for some m.
    implied = (before.astype(np.int64) @ before.astype(np.int64)) > 0
    immediate = before & ~implied
    probability = present.mean(axis=0) if len(reqs) else np.ones(n)
    slots = [
        Slot(s[peer] or "?", s[ep] or "?", k, float(probability[j]))
        for (peer, ep, k), j in sorted(slot_ids.items(), key=lambda kv: kv[1])
    ]
    preds = [sorted(np.flatnonzero(immediate[:, j]).tolist()) for j in range(n)]
    return EndpointGraph("", "", slots, preds, len(reqs))
