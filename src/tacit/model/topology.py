"""Network topologies: named nodes (network devices and hosts) joined by links."""

from __future__ import annotations

from collections import deque

import numpy as np

from tacit.errors import InputError


class Topology:
    """An undirected graph of named nodes (network devices and hosts) joined by links."""

    def __init__(self, links: list[tuple[str, str]]):
        self.names: list[str] = sorted({n for link in links for n in link})
        self.index = {n: i for i, n in enumerate(self.names)}
        self.neighbors: list[set[int]] = [set() for _ in self.names]
        for a, b in links:
            if a != b:
                self.neighbors[self.index[a]].add(self.index[b])
                self.neighbors[self.index[b]].add(self.index[a])

    @classmethod
    def parse(cls, text: str, source: str = "<topology>") -> Topology:
        """Links from text: one ``a b`` (or ``a,b``) pair per line; ``#`` starts a comment."""
        links = []
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].replace(",", " ").split()
            if not line:
                continue
            if len(line) != 2:
                raise InputError(
                    f"expected two node names, found {len(line)}", path=source, record=f"line {n}"
                )
            links.append((line[0], line[1]))
        if not links:
            raise InputError("topology has no links", path=source)
        return cls(links)

    def links(self) -> list[tuple[str, str]]:
        return [
            (self.names[a], self.names[b])
            for a, nb in enumerate(self.neighbors)
            for b in sorted(nb)
            if a < b
        ]

    def neighbors_of(self, name: str) -> set[str]:
        """The nodes linked to ``name``."""
        return {self.names[i] for i in self.neighbors[self.index[name]]}

    def _distances(self, start: int) -> np.ndarray:
        dist = np.full(len(self.names), -1, dtype=np.int64)
        dist[start] = 0
        queue = deque([start])
        while queue:
            u = queue.popleft()
            for v in self.neighbors[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        return dist

    def on_shortest_paths(self, src: str, dst: str) -> set[str]:
        """Every node on some shortest path from ``src`` to ``dst``, endpoints included
        (empty when either is unknown or they are disconnected)."""
        if src not in self.index or dst not in self.index:
            return set()
        ds, dt = self._distances(self.index[src]), self._distances(self.index[dst])
        total = ds[self.index[dst]]
        if total < 0:
            return set()
        on = (ds >= 0) & (dt >= 0) & (ds + dt == total)
        return {self.names[i] for i in np.flatnonzero(on)}

    def link_codes(self, devices: list[str]) -> np.ndarray:
        """The links between ``devices`` (names) as [n, 2] codes into ``devices``; links to
        nodes that log nothing (hosts) are left out."""
        code = {d: i for i, d in enumerate(devices)}
        pairs = [(code[a], code[b]) for a, b in self.links() if a in code and b in code]
        return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
